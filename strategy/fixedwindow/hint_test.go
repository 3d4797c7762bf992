package fixedwindow

import (
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/rendezvous"
	"github.com/tokenmesh/tokenmesh/strategy"
)

var _ strategy.LatencyHinter = (*FixedWindow)(nil)

// timeout follows the hint with New's formula unless the parameter set
// it; a shrinking timeout keeps the deadlines in order, so every forward
// is answered by its deadline's Tick (fail_open) exactly once.
func TestSetLatencyHintTimeout(t *testing.T) {
	members := []strategy.NodeID{"n0", "n1"}
	f := newFW(t, "n0", members, 10, time.Minute)
	f.SetLatencyHint(0, 50*time.Millisecond, &strategy.Effects{})
	if f.timeout != 250*time.Millisecond {
		t.Fatalf("timeout after SetLatencyHint(50ms) = %v, want 3*50ms + 100ms", f.timeout)
	}
	g := newFW(t, "n0", members, 10, time.Minute, "timeout=2s")
	g.SetLatencyHint(0, 50*time.Millisecond, &strategy.Effects{})
	if g.timeout != 2*time.Second {
		t.Fatalf("parameter timeout=2s after SetLatencyHint(50ms): %v; the parameter must win", g.timeout)
	}

	var key string
	for i := 0; ; i++ {
		if key = string(rune('a' + i)); rendezvous.Owner(key, members) == "n1" {
			break
		}
	}
	var fx strategy.Effects
	f.Request(0, strategy.Request{ID: 1, Key: key, Tokens: 1}, &fx) // deadline 250ms
	f.SetLatencyHint(10*time.Millisecond, 0, &fx)                   // timeout 100ms
	f.Request(20*time.Millisecond, strategy.Request{ID: 2, Key: key, Tokens: 1, Arrival: 20 * time.Millisecond}, &fx)
	if d1, d2 := f.pending[1].Deadline, f.pending[2].Deadline; d2 < d1 {
		t.Fatalf("deadlines out of order after the timeout shrank: %v then %v", d1, d2)
	}
	fx.Reset()
	f.Tick(250*time.Millisecond, &fx)
	if len(fx.Decisions) != 2 {
		t.Fatalf("at 250ms: %d forwards answered by the timeout, want both", len(fx.Decisions))
	}
	fx.Reset()
	f.Tick(time.Second, &fx)
	if len(fx.Decisions) != 0 || len(f.pending) != 0 {
		t.Fatalf("forwards answered twice (%d) or left pending (%d)", len(fx.Decisions), len(f.pending))
	}
}
