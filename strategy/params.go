package strategy

import (
	"fmt"
	"sort"
	"strings"
	"unicode"
)

// Params holds strategy-specific settings as name=value strings, as given on
// the command line (`--param owner.hold=5ms`) or in a rule's YAML.
// Constructors read them through their declarations (ReadParams, Values).
type Params struct {
	values map[string]string
	read   map[string]bool // names read, when TrackReads made the record (values.go)
}

// ParseParams parses "name=value" pairs. An item may hold several pairs
// separated by commas ("hold=5ms,retries=3"); a comma separates pairs only
// when the text after it starts a new pair (a name of letters, digits, '_',
// '.' or '-', then '='), otherwise it belongs to the value: "names=a,b,c" is
// one pair with value "a,b,c", and a value can hold any comma not followed
// by NAME=. Spaces around names and values and commas at the end of a
// value are dropped ("a=1," is a=1), so a value neither starts nor ends
// with a space nor ends with a comma. A pair without '=' or with an empty
// name is an error naming it.
func ParseParams(pairs []string) (Params, error) {
	p := Params{values: map[string]string{}}
	for _, item := range pairs {
		for _, kv := range splitPairs(item) {
			kv = strings.TrimSpace(kv)
			if kv == "" {
				continue
			}
			name, value, ok := strings.Cut(kv, "=")
			if !ok || strings.TrimSpace(name) == "" {
				return Params{}, fmt.Errorf("parameter %q: want name=value", kv)
			}
			p.values[strings.TrimSpace(name)] = strings.TrimSpace(strings.TrimRightFunc(value, func(r rune) bool { return r == ',' || unicode.IsSpace(r) }))
		}
	}
	return p, nil
}

// splitPairs splits item at the commas that start a new pair (see
// ParseParams), or that follow a piece without '=' (an error then).
func splitPairs(item string) []string {
	var out []string
	for _, piece := range strings.Split(item, ",") {
		if len(out) == 0 || startsPair(piece) || !strings.Contains(out[len(out)-1], "=") {
			out = append(out, piece)
			continue
		}
		out[len(out)-1] += "," + piece
	}
	return out
}

// startsPair reports whether s (after leading spaces) is NAME=...
func startsPair(s string) bool {
	s = strings.TrimLeft(s, " \t")
	name, _, ok := strings.Cut(s, "=")
	if !ok || strings.TrimSpace(name) == "" {
		return false
	}
	for _, c := range strings.TrimRight(name, " \t") {
		if !(c == '_' || c == '.' || c == '-' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			return false
		}
	}
	return true
}

// For returns the parameters addressed to one strategy: "owner.hold=5ms"
// becomes "hold=5ms" for "owner". Names without a strategy prefix are left
// out (see Unprefixed).
func (p Params) For(strategy string) Params {
	out := Params{values: map[string]string{}}
	for k, v := range p.values {
		if s, name, ok := strings.Cut(k, "."); ok {
			if s == strategy {
				out.values[name] = v
			}
		}
	}
	return out
}

// Unprefixed returns the names that carry no "strategy." prefix, sorted: on
// a command line that runs several strategies they address none.
func (p Params) Unprefixed() []string {
	var out []string
	for _, k := range p.Names() {
		if !strings.Contains(k, ".") {
			out = append(out, k)
		}
	}
	return out
}

// Names returns the parameter names, sorted.
func (p Params) Names() []string {
	out := make([]string, 0, len(p.values))
	for k := range p.values {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Values returns a copy of the name=value pairs (names as given).
func (p Params) Values() map[string]string {
	out := make(map[string]string, len(p.values))
	for k, v := range p.values {
		out[k] = v
	}
	return out
}
