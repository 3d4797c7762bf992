package config

import (
	"strings"
	"testing"
	"time"
)

func TestLatencyHintField(t *testing.T) {
	for _, c := range []struct {
		yaml string
		want LatencyHint
	}{
		{"", LatencyHint{}}, // 0s by default
		{"  latency_hint: auto\n", LatencyHint{Auto: true}},
		{"  latency_hint: 2ms\n", LatencyHint{Value: 2 * time.Millisecond}},
		{"  latency_hint: 0s\n", LatencyHint{}},
	} {
		f, err := Parse([]byte("node:\n  name: n\n"+c.yaml+"rules: [{name: a, rate: 1/s}]\n"), "n.yaml")
		if err != nil {
			t.Fatalf("%q: %v", c.yaml, err)
		}
		if f.Node.LatencyHint != c.want {
			t.Errorf("%q: LatencyHint %+v (%s), want %+v", c.yaml, f.Node.LatencyHint, f.Node.LatencyHint, c.want)
		}
	}
	for _, c := range []struct{ value, want string }{
		{"soon", `n.yaml:3: node.latency_hint: "soon" is neither auto nor a duration`},
		{"-1ms", "node.latency_hint: -1ms is outside [0, 500ms]"},
		{"2s", "node.latency_hint: 2s is outside [0, 500ms]"},
	} {
		_, err := Parse([]byte("node:\n  name: n\n  latency_hint: "+c.value+"\nrules: [{name: a, rate: 1/s}]\n"), "n.yaml")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("latency_hint %s: error %v, want one containing %q", c.value, err, c.want)
		}
	}
	f := Default()
	f.Node.LatencyHint = LatencyHint{Value: time.Hour}
	if err := f.Validate(); err == nil || !strings.Contains(err.Error(), "node.latency_hint") {
		t.Errorf("Validate with a 1h hint: %v, want a node.latency_hint error", err)
	}
}
