package strategy

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Values are one strategy's parameters read against its declarations
// (ReadParams): every given value parsed as its declared type, the
// declared default for the others. Constructors read them with the typed
// getters below, so the declarations are the parser: a parameter cannot be
// declared with one type and parsed as another. Ours (the seeds have no
// configuration syntax).
//
// The getters panic when a constructor asks for a name it did not declare,
// or with the wrong type, or for the declared default of a parameter whose
// default is a formula ("3*latency_hint + 100ms"; use the Or getters with
// the computed default): such a constructor is wrong for every input, and
// the test in strategy/registry that builds each strategy with its defaults
// finds it.
type Values struct {
	strategy string
	specs    []ParamSpec
	given    map[string]any // parsed given values, by name
	read     map[string]bool
	track    map[string]bool // Params.read when TrackReads made it: shared with the caller
}

// ReadParams checks p (unprefixed name=value pairs, as Params.For returns
// them) against specs, the strategy's declarations, and returns the
// parsed values. Errors, in name order, the first one: a name that is not
// declared (naming the ones that are; the generic PartitionParam too, which
// the runtime takes out with TakePartition before a constructor sees the
// params), and a value that does not parse as its type (naming the
// strategy, parameter, value and expected type; see ParamSpec.CheckValue).
// Bounds beyond the type are the constructor's.
func ReadParams(strategy string, specs []ParamSpec, p Params) (*Values, error) {
	v := &Values{strategy: strategy, specs: specs, given: map[string]any{}, read: map[string]bool{}, track: p.read}
	for _, name := range p.Names() {
		s, ok := FindParam(specs, name)
		if !ok {
			if isOverdraftParam(name) {
				return nil, OverdraftUnsupported(strategy, name)
			}
			if len(specs) == 0 {
				return nil, fmt.Errorf("strategy %s takes no parameters, got %s", strategy, name)
			}
			names := make([]string, len(specs))
			for i, s := range specs {
				names[i] = s.Name
			}
			return nil, fmt.Errorf("strategy %s: unknown parameter %s (it knows %s)", strategy, name, strings.Join(names, ", "))
		}
		x, err := s.parse(p.values[name])
		if err != nil {
			return nil, fmt.Errorf("strategy %s: %w", strategy, err)
		}
		v.given[name] = x
	}
	return v, nil
}

// parse parses value as s's type: time.Duration, int, float64, bool or
// string (ParamString, ParamEnum). The error names the parameter, the value
// and the expected type.
func (s ParamSpec) parse(value string) (any, error) {
	bad := func(want string) error {
		return fmt.Errorf("parameter %s=%q: want %s", s.Name, value, want)
	}
	switch s.Type {
	case ParamDuration:
		d, err := time.ParseDuration(value)
		if err != nil {
			return nil, bad("a duration (like 300ms or 2s)")
		}
		if d < 0 {
			return nil, bad("a duration that is not negative")
		}
		return d, nil
	case ParamInt:
		i, err := strconv.Atoi(value)
		if err != nil {
			return nil, bad("a whole number (int)")
		}
		return i, nil
	case ParamFloat:
		f, err := strconv.ParseFloat(value, 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, bad("a finite number (float)")
		}
		return f, nil
	case ParamBool:
		b, err := strconv.ParseBool(value)
		if err != nil {
			return nil, bad("true or false (bool)")
		}
		return b, nil
	case ParamString:
		return value, nil
	case ParamEnum:
		if !slices.Contains(s.Enum, value) {
			return nil, bad("one of " + strings.Join(s.Enum, ", "))
		}
		return value, nil
	}
	return nil, fmt.Errorf("parameter %s: declared with unknown type %q", s.Name, s.Type)
}

// get returns the value of name (given, or the declared default when
// useDefault is true), after checking the declaration has type t, and
// marks name read.
func (v *Values) get(name string, t ParamType, useDefault bool) (any, bool) {
	s, ok := FindParam(v.specs, name)
	if !ok {
		panic(fmt.Sprintf("strategy %s: the constructor reads parameter %s, which it does not declare", v.strategy, name))
	}
	if s.Type != t && !(t == ParamString && s.Type == ParamEnum) {
		panic(fmt.Sprintf("strategy %s: the constructor reads parameter %s as %s; it is declared %s", v.strategy, name, t, s.Type))
	}
	v.read[name] = true
	if v.track != nil {
		v.track[name] = true
	}
	if x, ok := v.given[name]; ok {
		return x, true
	}
	if !useDefault {
		return nil, false
	}
	x, err := s.parse(s.Default)
	if err != nil {
		panic(fmt.Sprintf("strategy %s: parameter %s: the declared default %q is not a %s (a formula: read it with an Or getter)", v.strategy, name, s.Default, s.Type))
	}
	return x, true
}

// Has reports whether name was given (not defaulted); it counts as a read.
func (v *Values) Has(name string) bool {
	s, ok := FindParam(v.specs, name)
	if !ok {
		panic(fmt.Sprintf("strategy %s: the constructor asks for parameter %s, which it does not declare", v.strategy, name))
	}
	_, given := v.get(name, s.Type, false)
	return given
}

// Duration is the duration parameter name: given, or its declared default.
func (v *Values) Duration(name string) time.Duration {
	x, _ := v.get(name, ParamDuration, true)
	return x.(time.Duration)
}

// DurationOr is the duration parameter name, or def when not given (for a
// default computed from the latency hint or other parameters).
func (v *Values) DurationOr(name string, def time.Duration) time.Duration {
	if x, ok := v.get(name, ParamDuration, false); ok {
		return x.(time.Duration)
	}
	return def
}

// Int is the int parameter name: given, or its declared default.
func (v *Values) Int(name string) int {
	x, _ := v.get(name, ParamInt, true)
	return x.(int)
}

// Float is the float parameter name: given, or its declared default.
func (v *Values) Float(name string) float64 {
	x, _ := v.get(name, ParamFloat, true)
	return x.(float64)
}

// Bool is the bool parameter name: given, or its declared default.
func (v *Values) Bool(name string) bool {
	x, _ := v.get(name, ParamBool, true)
	return x.(bool)
}

// BoolOr is the bool parameter name, or def when not given (a deprecated
// alias without a default of its own).
func (v *Values) BoolOr(name string, def bool) bool {
	if x, ok := v.get(name, ParamBool, false); ok {
		return x.(bool)
	}
	return def
}

// Enum is the enum parameter name, one of its declared values: given, or
// its declared default.
func (v *Values) Enum(name string) string {
	x, _ := v.get(name, ParamEnum, true)
	return x.(string)
}

// String is the string parameter name: given, or its declared default.
func (v *Values) String(name string) string {
	x, _ := v.get(name, ParamString, true)
	return x.(string)
}

// Unread returns the declared names that no getter (or Has) read, sorted.
func (v *Values) Unread() []string {
	var out []string
	for _, s := range v.specs {
		if !v.read[s.Name] {
			out = append(out, s.Name)
		}
	}
	sort.Strings(out)
	return out
}

// TrackReads returns p with a fresh record of reads, shared by every copy
// of the result: the Values a constructor reads from it (ReadParams) mark
// the names they read there, and Read lists them. For tests (the check
// that every declared parameter is read); the record is not safe for
// concurrent use.
func TrackReads(p Params) Params {
	p.read = map[string]bool{}
	return p
}

// Read returns the names marked read in p's record (TrackReads), sorted.
func (p Params) Read() []string {
	var out []string
	for k, ok := range p.read {
		if ok {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// IntOr is the int parameter name, or def when not given (a default
// computed from the rule, such as tbqueue's window).
func (v *Values) IntOr(name string, def int) int {
	if x, ok := v.get(name, ParamInt, false); ok {
		return x.(int)
	}
	return def
}

// FloatOr is the float parameter name, or def when not given (a default
// computed from other parameters, such as gdrl's eta from the degree).
func (v *Values) FloatOr(name string, def float64) float64 {
	if x, ok := v.get(name, ParamFloat, false); ok {
		return x.(float64)
	}
	return def
}
