package strategy

import (
	"maps"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// TestParseParamsCommaInValue: a comma separates pairs only before NAME=;
// otherwise it belongs to the value.
func TestParseParamsCommaInValue(t *testing.T) {
	for _, c := range []struct {
		in   []string
		want map[string]string
	}{
		{[]string{"a=1,b=2"}, map[string]string{"a": "1", "b": "2"}},
		{[]string{"owner.hold=5ms, owner.retries=3,"}, map[string]string{"owner.hold": "5ms", "owner.retries": "3"}},
		{[]string{"names=x,y,z"}, map[string]string{"names": "x,y,z"}},
		{[]string{"names=x,y,z,b=2"}, map[string]string{"names": "x,y,z", "b": "2"}},
		{[]string{"expr=f(a, b)=c"}, map[string]string{"expr": "f(a, b)=c"}},
		{[]string{"a=,b=1"}, map[string]string{"a": "", "b": "1"}},
		{[]string{",a=1"}, map[string]string{"a": "1"}},
	} {
		p, err := ParseParams(c.in)
		if err != nil {
			t.Fatalf("%q: %v", c.in, err)
		}
		if !maps.Equal(p.Values(), c.want) {
			t.Errorf("%q: got %v, want %v", c.in, p.Values(), c.want)
		}
	}
}

// TestParseParamsRoundTrip: every value without ",NAME=" inside survives
// name=value joined with other pairs by commas.
func TestParseParamsRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		vals := rapid.SliceOfN(rapid.StringMatching(`[a-z0-9,(). ]{0,8}`), 1, 4).Draw(t, "values")
		var items []string
		want := map[string]string{}
		for i, v := range vals {
			v = strings.Trim(v, ", ")
			name := string(rune('a' + i))
			items = append(items, name+"="+v)
			want[name] = v
		}
		p, err := ParseParams([]string{strings.Join(items, ",")})
		if err != nil {
			t.Fatal(err)
		}
		if !maps.Equal(p.Values(), want) {
			t.Fatalf("%q: got %v, want %v", items, p.Values(), want)
		}
	})
}

func TestParamSpecCheckValue(t *testing.T) {
	specs := []ParamSpec{
		{Name: "d", Type: ParamDuration}, {Name: "i", Type: ParamInt}, {Name: "f", Type: ParamFloat},
		{Name: "b", Type: ParamBool}, {Name: "s", Type: ParamString}, {Name: "e", Type: ParamEnum, Enum: []string{"x", "y"}},
	}
	good := map[string][]string{"d": {"0", "5ms", "2h"}, "i": {"0", "-3", "12"}, "f": {"0.5", "1e-3", "-2"},
		"b": {"true", "false"}, "s": {"", "a,b"}, "e": {"x", "y"}}
	bad := map[string][]string{"d": {"", "5", "-1s", "ms"}, "i": {"", "1.5", "x"}, "f": {"", "NaN", "Inf", "x"},
		"b": {"", "yes"}, "e": {"", "z", "X"}}
	for name, vs := range good {
		for _, v := range vs {
			if err := CheckParam("st", specs, name, v); err != nil {
				t.Errorf("%s=%q refused: %v", name, v, err)
			}
		}
	}
	for name, vs := range bad {
		for _, v := range vs {
			err := CheckParam("st", specs, name, v)
			if err == nil || !strings.Contains(err.Error(), "strategy st") || !strings.Contains(err.Error(), "parameter "+name+"=") {
				t.Errorf("%s=%q: got %v, want an error naming strategy and parameter", name, v, err)
			}
		}
	}
	if err := CheckParam("st", specs, "zz", "1"); err == nil || !strings.Contains(err.Error(), "unknown parameter zz") || !strings.Contains(err.Error(), "it knows d, i") {
		t.Errorf("unknown name: %v", err)
	}
	if err := CheckParam("st", nil, "zz", "1"); err == nil || !strings.Contains(err.Error(), "takes no parameters") {
		t.Errorf("no parameters: %v", err)
	}
	if err := CheckParam("st", nil, PartitionParam, "conserve"); err != nil {
		t.Errorf("partition refused: %v", err)
	}
	if err := CheckParam("st", nil, PartitionParam, "nope"); err == nil {
		t.Error("bad partition accepted")
	}
}

func TestParamDocWraps(t *testing.T) {
	doc := ParamDoc([]ParamSpec{{Name: "hold", Type: ParamDuration, Unit: "", Default: "latency_hint",
		Doc: strings.Repeat("word ", 40)}, {Name: "mode", Type: ParamEnum, Enum: []string{"a", "b"}, Doc: "x"}})
	for _, line := range strings.Split(doc, "\n") {
		if len(line) > 76 {
			t.Errorf("line longer than 76: %q", line)
		}
	}
	for _, want := range []string{"# Parameters", "  - hold (duration, default latency_hint): word", "  - mode (a | b): x"} {
		if !strings.Contains(doc, want) {
			t.Errorf("doc lacks %q:\n%s", want, doc)
		}
	}
}

// FuzzParseParamsRoundTrip: ParseParams never panics, and what it returns, given
// back one name=value item per pair, parses to the same pairs (a value
// never holds ",NAME=" nor ends with a comma or space).
func FuzzParseParamsRoundTrip(f *testing.F) {
	for _, s := range []string{"a=1,b=2", "owner.hold=5ms", "names=x,y,z", "a=1,,b=2", ",=", "a=b=c,d", " x y =1, z=2 ,"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, item string) {
		p, err := ParseParams([]string{item})
		if err != nil {
			return
		}
		var items []string
		for name, v := range p.Values() {
			if strings.TrimSpace(v) != v || strings.HasSuffix(v, ",") {
				t.Fatalf("%q: value %q of %s not trimmed", item, v, name)
			}
			items = append(items, name+"="+v)
		}
		q, err := ParseParams(items)
		if err != nil {
			t.Fatalf("%q: re-parsing %q: %v", item, items, err)
		}
		if !maps.Equal(p.Values(), q.Values()) {
			t.Fatalf("%q: %v re-parses to %v", item, p.Values(), q.Values())
		}
	})
}
