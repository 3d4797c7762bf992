package strategy

import (
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"
)

var testSpecs = []ParamSpec{
	{Name: "hold", Type: ParamDuration, Default: "latency_hint"},
	{Name: "suspect", Type: ParamDuration, Default: "1s"},
	{Name: "retries", Type: ParamInt, Default: "2"},
	{Name: "floor", Type: ParamFloat, Default: "0.1"},
	{Name: "catch_up", Type: ParamBool, Default: "false"},
	{Name: "on_timeout", Type: ParamEnum, Enum: []string{"admit", "reject", "local"}, Default: "local"},
	{Name: "fail_open", Type: ParamBool},
	{Name: "label", Type: ParamString, Default: "x,y"},
}

func read(t *testing.T, pairs ...string) (*Values, error) {
	t.Helper()
	p, err := ParseParams(pairs)
	if err != nil {
		t.Fatal(err)
	}
	return ReadParams("demo", testSpecs, p)
}

func TestValuesDefaultsAndGiven(t *testing.T) {
	v, err := read(t)
	if err != nil {
		t.Fatal(err)
	}
	if v.Duration("suspect") != time.Second || v.Int("retries") != 2 || v.Float("floor") != 0.1 || v.Bool("catch_up") ||
		v.Enum("on_timeout") != "local" || v.String("label") != "x,y" || v.DurationOr("hold", 7) != 7 || v.BoolOr("fail_open", true) != true ||
		v.FloatOr("floor", -1) != -1 || v.IntOr("retries", -1) != -1 {
		t.Fatal("declared defaults not applied")
	}
	if v.Has("hold") || len(v.Unread()) != 0 {
		t.Fatalf("Has(hold) without it, or unread %v", v.Unread())
	}
	v, err = read(t, "hold=5ms,suspect=2s,retries=0,floor=1e-3,catch_up=true,on_timeout=admit,label=a,b")
	if err != nil {
		t.Fatal(err)
	}
	if v.DurationOr("hold", 7) != 5*time.Millisecond || v.Duration("suspect") != 2*time.Second || v.Int("retries") != 0 ||
		v.Float("floor") != 1e-3 || !v.Bool("catch_up") || v.Enum("on_timeout") != "admit" || v.String("label") != "a,b" || !v.Has("hold") ||
		v.FloatOr("floor", -1) != 1e-3 || v.IntOr("retries", -1) != 0 {
		t.Fatal("given values not read")
	}
	if got := v.Unread(); strings.Join(got, " ") != "fail_open" {
		t.Fatalf("Unread: %v, want [fail_open]", got)
	}
}

// TestReadParamsErrors: an undeclared name and every value not of its
// declared type are refused, naming strategy, parameter and value.
func TestReadParamsErrors(t *testing.T) {
	for _, bad := range []string{"nope=1", "hold=fast", "suspect=-1s", "retries=1.5", "floor=NaN", "floor=lots", "catch_up=maybe", "on_timeout=later", "partition=conserve"} {
		_, err := read(t, bad)
		name, value, _ := strings.Cut(bad, "=")
		if err == nil || !strings.Contains(err.Error(), "demo") || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: %v, want an error naming the strategy and parameter", bad, err)
		}
		if err != nil && name != "nope" && name != "partition" && !strings.Contains(err.Error(), value) {
			t.Errorf("%s: %v, want the value named", bad, err)
		}
	}
	if _, err := ReadParams("none", nil, mustParse(t, "a=1")); err == nil || !strings.Contains(err.Error(), "takes no parameters") {
		t.Errorf("a strategy without parameters: %v", err)
	}
}

func mustParse(t *testing.T, pairs ...string) Params {
	p, err := ParseParams(pairs)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestValuesMisusePanics: reading an undeclared name, a declared one as
// another type, or a formula default without an Or getter is a
// constructor bug, for every input.
func TestValuesMisusePanics(t *testing.T) {
	v, err := read(t)
	if err != nil {
		t.Fatal(err)
	}
	for name, f := range map[string]func(){
		"undeclared":     func() { v.Int("nope") },
		"wrong type":     func() { v.Int("hold") },
		"formula":        func() { v.Duration("hold") },
		"no default":     func() { v.Bool("fail_open") },
		"has undeclared": func() { v.Has("nope") },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f()
		}()
	}
}

// TestReadParamsAgreesWithCheckValue: for any text, ReadParams accepts a
// value exactly when CheckValue (config validation, --param) does.
func TestReadParamsAgreesWithCheckValue(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := rapid.SampledFrom(testSpecs).Draw(t, "spec")
		value := rapid.OneOf(rapid.StringMatching(`[0-9a-z.\-]{1,8}`), rapid.SampledFrom([]string{"1s", "-1s", "2", "1e3", "true", "admit", "Inf"})).Draw(t, "value")
		_, err := s.parse(value)
		if (err == nil) != (s.CheckValue(value) == nil) {
			t.Fatalf("%s=%q: parse %v, CheckValue %v", s.Name, value, err, s.CheckValue(value))
		}
		p := Params{values: map[string]string{s.Name: value}}
		if _, rerr := ReadParams("demo", testSpecs, p); (rerr == nil) != (err == nil) {
			t.Fatalf("%s=%q: ReadParams %v, parse %v", s.Name, value, rerr, err)
		}
	})
}

func TestReadOnTimeout(t *testing.T) {
	for pairs, want := range map[string]OnTimeout{"": TimeoutLocal, "on_timeout=local": TimeoutLocal, "on_timeout=admit": TimeoutAdmit,
		"on_timeout=reject": TimeoutReject, "fail_open=true": TimeoutAdmit, "fail_open=false": TimeoutReject} {
		v, err := read(t, pairs)
		if err != nil {
			t.Fatal(err)
		}
		got, err := ReadOnTimeout(v)
		if err != nil || got != want {
			t.Errorf("%q: %v, %v; want %v", pairs, got, err, want)
		}
	}
	v, err := read(t, "on_timeout=local,fail_open=true")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ReadOnTimeout(v); err == nil || !strings.Contains(err.Error(), "both") {
		t.Errorf("on_timeout with fail_open: %v", err)
	}
}

// TestTrackReads: the record is shared by the copies of the tracked
// Params, so a caller sees what a constructor read from its copy.
func TestTrackReads(t *testing.T) {
	p := TrackReads(mustParse(t, "retries=3"))
	cp := p
	v, err := ReadParams("demo", testSpecs, cp)
	if err != nil {
		t.Fatal(err)
	}
	_ = v.Int("retries")
	_ = v.Enum("on_timeout")
	if got := strings.Join(p.Read(), " "); got != "on_timeout retries" {
		t.Fatalf("Read: %q", got)
	}
	if got := mustParse(t, "a=1").Read(); got != nil {
		t.Fatalf("untracked Read: %v", got)
	}
}
