package adaptive

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/strategy"
)

var _ strategy.LatencyHinter = (*Adaptive)(nil)

// raise_after follows the hint with New's formula, unless the parameter
// set it.
func TestSetLatencyHintRaiseAfter(t *testing.T) {
	for _, h := range []time.Duration{0, time.Millisecond, 7 * time.Millisecond, 100 * time.Millisecond} {
		want := newHintedNode(t, h).raiseAfter
		a := newHintedNode(t, 0)
		a.SetLatencyHint(time.Second, h, &strategy.Effects{})
		if a.raiseAfter != want {
			t.Errorf("New(hint 0) + SetLatencyHint(%v): raise_after %v, New(hint %v): %v", h, a.raiseAfter, h, want)
		}
	}
	a := newHintedNode(t, 0, "raise_after=3ms")
	a.SetLatencyHint(0, 50*time.Millisecond, &strategy.Effects{})
	if a.raiseAfter != 3*time.Millisecond {
		t.Errorf("parameter raise_after=3ms after SetLatencyHint(50ms): %v; the parameter must win", a.raiseAfter)
	}
}

func newHintedNode(t *testing.T, hint time.Duration, params ...string) *Adaptive {
	t.Helper()
	p, err := strategy.ParseParams(params)
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(strategy.Config{Self: "n0", Members: []strategy.NodeID{"n0", "n1"}, Rate: testRate, Burst: 10,
		Rand: rand.New(rand.NewPCG(1, 1)), Params: p, LatencyHint: hint})
	if err != nil {
		t.Fatal(err)
	}
	return a
}
