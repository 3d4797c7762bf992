package strategy

import (
	"strings"
	"testing"
	"time"
)

func TestParams(t *testing.T) {
	p, err := ParseParams([]string{"owner.hold=5ms,owner.fail_open=false", "gcounter.gossip=300ms"})
	if err != nil {
		t.Fatal(err)
	}
	o := p.For("owner")
	if got := o.Names(); len(got) != 2 {
		t.Fatalf("owner params %v", got)
	}
	// The old getters (Params.Duration, Bool, Check) are gone; the same
	// facts read through declarations (ReadParams).
	if _, err := ReadParams("owner", testSpecs[:1], o); err == nil || !strings.Contains(err.Error(), "fail_open") {
		t.Fatalf("undeclared fail_open not reported: %v", err)
	}
	v, err := ReadParams("owner", []ParamSpec{testSpecs[0], testSpecs[6]}, o)
	if err != nil {
		t.Fatal(err)
	}
	if d := v.Duration("hold"); d != 5*time.Millisecond {
		t.Fatalf("hold = %v", d)
	}
	if b := v.Bool("fail_open"); b {
		t.Fatalf("fail_open = %v", b)
	}
	if _, err := ParseParams([]string{"novalue"}); err == nil {
		t.Fatal("a pair without = accepted")
	}
	bad, _ := ParseParams([]string{"x=abc"})
	if _, err := ReadParams("demo", []ParamSpec{{Name: "x", Type: ParamDuration}}, bad); err == nil || !strings.Contains(err.Error(), "x=") {
		t.Fatalf("bad duration: %v", err)
	}
	if un, _ := ParseParams([]string{"hold=1s,owner.x=1"}); len(un.Unprefixed()) != 1 {
		t.Fatal("unprefixed names not found")
	}
}

func FuzzParseParams(f *testing.F) {
	f.Add("owner.hold=5ms,a=b")
	f.Add("=,,x")
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParseParams([]string{s})
		if err != nil {
			return
		}
		for _, n := range p.Names() {
			if n == "" || strings.ContainsAny(n, "=,") {
				t.Fatalf("bad name %q from %q", n, s)
			}
		}
	})
}
