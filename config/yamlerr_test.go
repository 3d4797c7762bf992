package config

import (
	"errors"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// goSyntax matches what a Go type name looks like in a message.
var goSyntax = regexp.MustCompile(`config\.|raw[A-Z]|\[\]|map\[|\*(string|bool)|\bint64\b|\buint\b`)

// section is a mapping of the file (a struct rawFile decodes into), by
// its path of YAML keys; list marks keys whose value is a list of them.
type section struct {
	keys []string
	list []bool
	t    reflect.Type
}

// sections walks rawFile by reflection: every struct the file decodes
// into, so that a section added later is tested without editing this.
func sections() []section {
	var out []section
	var walk func(s section)
	walk = func(s section) {
		out = append(out, s)
		for i := range s.t.NumField() {
			f := s.t.Field(i)
			ft, list := f.Type, false
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct {
				ft, list = ft.Elem(), true
			}
			if ft.Kind() == reflect.Struct {
				walk(section{keys: append(slices.Clone(s.keys), yamlName(f)), list: append(slices.Clone(s.list), list), t: ft})
			}
		}
	}
	walk(section{t: reflect.TypeOf(rawFile{})})
	return out
}

// doc is YAML that puts value at the path keys (one-element lists where
// list says so) and a valid rule elsewhere when rules is not on the path.
func doc(t *testing.T, keys []string, list []bool, value any) []byte {
	t.Helper()
	v := value
	for i := len(keys) - 1; i >= 0; i-- {
		if list[i] {
			v = []any{v}
		}
		v = map[string]any{keys[i]: v}
	}
	m, ok := v.(map[string]any)
	if !ok {
		m = map[string]any{}
	}
	if _, ok := m["rules"]; !ok && len(keys) > 0 {
		m["rules"] = []any{map[string]any{"name": "a", "rate": "1/s"}}
	}
	out, err := yaml.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func parseErr(t *testing.T, data []byte) *Error {
	t.Helper()
	_, err := Parse(data, "t.yaml")
	var ce *Error
	if !errors.As(err, &ce) {
		t.Fatalf("%s: error %v, want an *Error", data, err)
	}
	if goSyntax.MatchString(ce.Error()) {
		t.Errorf("%s: the error shows a Go type: %s", data, ce)
	}
	return ce
}

// Bad YAML in every section of the file (each struct it decodes into):
// an unknown field, a scalar where the section's mapping goes, and a list
// in every scalar, list and mapping field. No message names a Go type
// (config.rawAPITLS, []string, map[string]string, ...); an unknown field's
// lists the section's known fields, all of them.
func TestYAMLErrorsNameNoGoType(t *testing.T) {
	n := 0
	for _, s := range sections() {
		where := strings.Join(s.keys, ".")
		// An unknown field.
		e := parseErr(t, doc(t, s.keys, s.list, map[string]any{"bogus_field": "x"}))
		n++
		if !strings.Contains(e.Msg, "unknown field") && !strings.Contains(e.Msg, "bogus_field") {
			t.Errorf("%s: unknown field: %s", where, e)
		}
		for _, f := range yamlFieldNames(s.t) {
			if !strings.Contains(e.Msg, f) {
				t.Errorf("%s: unknown field: %q does not list known field %s", where, e.Msg, f)
			}
		}
		// A scalar where the mapping goes.
		if len(s.keys) > 0 {
			e := parseErr(t, doc(t, s.keys, s.list, "just-a-string"))
			n++
			if !strings.Contains(e.Msg, "a mapping with") {
				t.Errorf("%s given a string: %s does not say a mapping is wanted", where, e)
			}
		}
		// A wrong kind in every field that is not a section.
		for i := range s.t.NumField() {
			f := s.t.Field(i)
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct || ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct {
				continue
			}
			var bad any = []any{"x", "y"}
			if ft.Kind() == reflect.Slice {
				bad = map[string]any{"x": "y"}
			}
			e := parseErr(t, doc(t, append(slices.Clone(s.keys), yamlName(f)), append(slices.Clone(s.list), false), bad))
			n++
			if e.Msg == "" {
				t.Errorf("%s.%s: empty message", where, yamlName(f))
			}
		}
	}
	if n < 30 {
		t.Fatalf("only %d bad documents: the walk over rawFile found too little", n)
	}
}

// The case that leaked a Go type before: api_tls given a scalar.
func TestYAMLErrorAPITLS(t *testing.T) {
	e := parseErr(t, []byte("node:\n  api_tls: yes\nrules: [{name: a, rate: 1/s}]\n"))
	if e.Line != 2 || !strings.Contains(e.Msg, "a mapping with cert_file, key_file, client_ca_file") {
		t.Fatalf("got %s; want line 2 and the api_tls fields", e)
	}
	e = parseErr(t, []byte("rules:\n  - name: a\n    rate: 1/s\n    partiton: conserve\n"))
	if e.Field != "rules[0].partiton" || !strings.Contains(e.Msg, "partition") {
		t.Fatalf("got %s; want rules[0].partiton and the known fields with partition", e)
	}
}
