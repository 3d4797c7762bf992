package registry

import (
	"flag"
	"fmt"
	"go/parser"
	"go/token"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"

	"github.com/tokenmesh/tokenmesh/strategy"
)

var updateParamDoc = flag.Bool("update", false, "rewrite the package comment of every strategy's params.go from its declarations")

// paramDir is the package directory (under strategy/) declaring each
// strategy's Params.
func paramDir(name string) string {
	switch name {
	case "central":
		return "local"
	case "grd", "fps":
		return "drlest"
	}
	return name
}

// build constructs info's strategy as node n1 of three at 10 tokens/s,
// burst 10, latency hint 5ms, with the unprefixed params pairs.
func build(t *testing.T, info Info, pairs ...string) error {
	t.Helper()
	_, err := newStrategy(t, info, pairs...)
	return err
}

// newStrategy is build's strategy.
func newStrategy(t *testing.T, info Info, pairs ...string) (strategy.Strategy, error) {
	t.Helper()
	p, err := strategy.ParseParams(pairs)
	if err != nil {
		t.Fatalf("%s: ParseParams(%q): %v", info.Name, pairs, err)
	}
	return info.New(strategy.Config{Self: "n1", Members: []strategy.NodeID{"n1", "n2", "n3"},
		Rate: bucket.Rate{Tokens: 10, Per: time.Second}, Burst: 10, LatencyHint: 5 * time.Millisecond,
		Rand: rand.New(rand.NewPCG(1, 2)), Params: p})
}

// badValue is a value that is not of type typ ("" for a string, which
// takes any value).
func badValue(typ strategy.ParamType) string {
	switch typ {
	case strategy.ParamDuration:
		return "5 parsecs"
	case strategy.ParamInt:
		return "1.5"
	case strategy.ParamFloat:
		return "lots"
	case strategy.ParamBool:
		return "maybe"
	case strategy.ParamEnum:
		return "no_such_choice"
	}
	return ""
}

// TestParamDeclarationsAgreeWithConstructors: for every strategy, every
// declared parameter is accepted by the constructor with its default (when
// the default is a value, not a formula) and with its example; a value
// not of the declared type is refused by both the declarations and the
// constructor with an error naming the parameter; an undeclared name is
// refused by both; and the names the constructor reads are exactly the
// declared ones (strategy.TrackReads).
func TestParamDeclarationsAgreeWithConstructors(t *testing.T) {
	for _, info := range List() {
		t.Run(info.Name, func(t *testing.T) {
			if err := build(t, info); err != nil {
				t.Fatalf("no parameters: %v", err)
			}
			var declared []string
			for _, s := range info.Params {
				declared = append(declared, s.Name)
				if s.Doc == "" || s.Example == "" {
					t.Errorf("%s: declared without Doc or Example", s.Name)
				}
				if (s.Type == strategy.ParamEnum) != (len(s.Enum) > 0) {
					t.Errorf("%s: Enum values must be given exactly for an enum", s.Name)
				}
				if err := s.CheckValue(s.Example); err != nil {
					t.Errorf("example: %v", err)
				} else if err := build(t, info, s.Name+"="+s.Example); err != nil {
					t.Errorf("constructor refuses the declared example %s=%s: %v", s.Name, s.Example, err)
				}
				if s.CheckValue(s.Default) == nil {
					if err := build(t, info, s.Name+"="+s.Default); err != nil {
						t.Errorf("constructor refuses the declared default %s=%s: %v", s.Name, s.Default, err)
					}
				}
				bad := badValue(s.Type)
				if bad == "" {
					continue
				}
				err := strategy.CheckParam(info.Name, info.Params, s.Name, bad)
				if err == nil || !strings.Contains(err.Error(), s.Name) || !strings.Contains(err.Error(), info.Name) || !strings.Contains(err.Error(), bad) {
					t.Errorf("declarations: %s=%q: got %v, want an error naming strategy, parameter and value", s.Name, bad, err)
				}
				if err := build(t, info, s.Name+"="+bad); err == nil || !strings.Contains(err.Error(), s.Name) {
					t.Errorf("constructor: %s=%q: got %v, want an error naming the parameter", s.Name, bad, err)
				}
			}
			if len(slices.Compact(slices.Sorted(slices.Values(declared)))) != len(declared) {
				t.Errorf("a name is declared twice: %v", declared)
			}
			const unknown = "no_such_param"
			if err := strategy.CheckParam(info.Name, info.Params, unknown, "1"); err == nil || !strings.Contains(err.Error(), unknown) {
				t.Errorf("declarations accept %s: %v", unknown, err)
			}
			err := build(t, info, unknown+"=1")
			if err == nil || !strings.Contains(err.Error(), unknown) {
				t.Fatalf("constructor: %s=1: got %v, want an error naming it", unknown, err)
			}
			// Every declared parameter is read by the constructor (built
			// with none given: the reads that apply the defaults), and
			// nothing else: the Values getters (strategy.ReadParams) mark
			// their reads in the record TrackReads makes.
			p, err := strategy.ParseParams(nil)
			if err != nil {
				t.Fatal(err)
			}
			p = strategy.TrackReads(p)
			if _, err := info.New(strategy.Config{Self: "n1", Members: []strategy.NodeID{"n1", "n2", "n3"},
				Rate: bucket.Rate{Tokens: 10, Per: time.Second}, Burst: 10, LatencyHint: 5 * time.Millisecond,
				Rand: rand.New(rand.NewPCG(1, 2)), Params: p}); err != nil {
				t.Fatal(err)
			}
			if reads, want := p.Read(), slices.Sorted(slices.Values(declared)); !slices.Equal(reads, want) {
				t.Errorf("the constructor reads %v, the declarations are %v (read every declared parameter, or remove it)", reads, want)
			}
		})
	}
}

// TestParamDocMatchesDeclarations: the package comment of every strategy
// package's params.go (the "# Parameters" section of go doc) is exactly
// strategy.ParamDoc of its declarations. go test -run ParamDoc -update
// rewrites it.
func TestParamDocMatchesDeclarations(t *testing.T) {
	done := map[string]bool{}
	for _, info := range List() {
		dir := paramDir(info.Name)
		if done[dir] {
			continue
		}
		done[dir] = true
		path := filepath.Join("..", dir, "params.go")
		want := strategy.ParamDoc(info.Params)
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ParseComments|parser.PackageClauseOnly)
		if err != nil {
			t.Fatal(err)
		}
		got := ""
		if f.Doc != nil {
			got = f.Doc.Text()
		}
		if got == want {
			continue
		}
		if !*updateParamDoc {
			t.Errorf("%s: package comment\n%s\nwant (go test -run ParamDoc -update)\n%s", path, got, want)
			continue
		}
		src, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		i := strings.Index(string(src), "\npackage ")
		if i < 0 && strings.HasPrefix(string(src), "package ") {
			i = -1
		} else if i < 0 {
			t.Fatalf("%s: no package clause", path)
		}
		var c strings.Builder
		for _, line := range strings.Split(strings.TrimSuffix(want, "\n"), "\n") {
			c.WriteString(strings.TrimRight("// "+line, " ") + "\n")
		}
		if err := os.WriteFile(path, []byte(c.String()+string(src[i+1:])), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestParamDeclaredDefaultsAreTheConstructors: for every parameter whose
// declared default is a value (not a formula), the strategy built with
// name=default is the same (reflect.DeepEqual) as the one built without
// it, so the declared default is the one the constructor applies.
func TestParamDeclaredDefaultsAreTheConstructors(t *testing.T) {
	for _, info := range List() {
		for _, s := range info.Params {
			if s.Default == "" || s.CheckValue(s.Default) != nil {
				continue
			}
			plain, err := newStrategy(t, info)
			if err != nil {
				t.Fatal(err)
			}
			set, err := newStrategy(t, info, s.Name+"="+s.Default)
			if err != nil {
				t.Fatalf("%s %s=%s: %v", info.Name, s.Name, s.Default, err)
			}
			if path := differs(reflect.ValueOf(plain), reflect.ValueOf(set), info.Name, map[[2]uintptr]bool{}); path != "" {
				t.Errorf("%s: at %s", info.Name, path)
				t.Errorf("%s: %s=%s builds another strategy than without it: the declared default is not the constructor's", info.Name, s.Name, s.Default)
			}
		}
	}
}

var paramsType = reflect.TypeFor[strategy.Params]()

// differs is reflect.DeepEqual that skips strategy.Params values (a
// constructor may keep its Config, whose Params list what was given) and
// compares funcs by nil-ness; it returns the path of the first difference,
// or "".
func differs(a, b reflect.Value, path string, seen map[[2]uintptr]bool) string {
	if a.IsValid() != b.IsValid() {
		return path
	}
	if !a.IsValid() || a.Type() == paramsType {
		return ""
	}
	if a.Type() != b.Type() {
		return path + " (type)"
	}
	switch a.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice:
		if a.IsNil() != b.IsNil() {
			return path + " (nil)"
		}
		if a.IsNil() {
			return ""
		}
		k := [2]uintptr{a.Pointer(), b.Pointer()}
		if a.Kind() != reflect.Slice && seen[k] {
			return ""
		}
		seen[k] = true
	}
	switch a.Kind() {
	case reflect.Pointer, reflect.Interface:
		return differs(a.Elem(), b.Elem(), path, seen)
	case reflect.Struct:
		for i := range a.NumField() {
			if d := differs(a.Field(i), b.Field(i), path+"."+a.Type().Field(i).Name, seen); d != "" {
				return d
			}
		}
	case reflect.Slice, reflect.Array:
		if a.Len() != b.Len() {
			return path + " (len)"
		}
		for i := range a.Len() {
			if d := differs(a.Index(i), b.Index(i), fmt.Sprintf("%s[%d]", path, i), seen); d != "" {
				return d
			}
		}
	case reflect.Map:
		if a.Len() != b.Len() {
			return path + " (len)"
		}
		for _, k := range a.MapKeys() {
			if d := differs(a.MapIndex(k), b.MapIndex(k), fmt.Sprintf("%s[%v]", path, k), seen); d != "" {
				return d
			}
		}
	case reflect.Func:
		if a.IsNil() != b.IsNil() {
			return path
		}
	case reflect.Chan, reflect.UnsafePointer:
		if a.Pointer() != b.Pointer() {
			return path
		}
	case reflect.Bool:
		if a.Bool() != b.Bool() {
			return path
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if a.Int() != b.Int() {
			return path
		}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		if a.Uint() != b.Uint() {
			return path
		}
	case reflect.Float32, reflect.Float64:
		if fa, fb := a.Float(), b.Float(); fa != fb && !(fa != fa && fb != fb) {
			return path
		}
	case reflect.String:
		if a.String() != b.String() {
			return path
		}
	default:
		return path + " (kind " + a.Kind().String() + ")"
	}
	return ""
}
