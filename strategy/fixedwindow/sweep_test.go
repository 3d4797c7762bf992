package fixedwindow

import (
	"fmt"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/internal/keyorder"
)

// TestSweepInStepsDropsEndedWindows: 5,000 keys counted in the first
// window of 1 s, one of them counted again in the second and a new key
// counted while the sweep's pass at 1 s is under way; the node
// ticked every keyorder.StepEvery as the loop would: no counter of the
// current window is dropped, and every counter of an ended window is gone
// within one pass (ceil(5000/Budget) steps) after its window's end.
func TestSweepInStepsDropsEndedWindows(t *testing.T) {
	const keys = 5000
	f := newFW(t, "a", []strategy.NodeID{"a"}, 10, time.Second)
	fx := &strategy.Effects{}
	f.Start(0, fx)
	for i := range keys {
		f.Request(0, strategy.Request{ID: uint64(i + 1), Key: fmt.Sprint("k", i), Tokens: 1}, fx)
	}
	pass := time.Duration(keys/keyorder.Budget+2) * keyorder.StepEvery
	for now := keyorder.StepEvery; now <= 3*time.Second; now += keyorder.StepEvery {
		if now == 1500*time.Millisecond {
			f.Request(now, strategy.Request{ID: keys + 1, Key: "k7", Tokens: 1, Arrival: now}, fx)
		}
		if now == time.Second+2*keyorder.StepEvery { // while the pass at 1 s is under way
			f.Request(now, strategy.Request{ID: keys + 2, Key: "new", Tokens: 1, Arrival: now}, fx)
		}
		f.Tick(now, fx)
		fx.Reset()
		switch {
		case now < time.Second && len(f.counts) != keys:
			t.Fatalf("at %v: %d counters, want %d: dropped within their window", now, len(f.counts), keys)
		case now >= 1500*time.Millisecond && now < 2*time.Second && f.counts["k7"] == nil:
			t.Fatalf("at %v: k7's counter of the current window dropped", now)
		case now > time.Second+2*keyorder.StepEvery && now < 2*time.Second && f.counts["new"] == nil:
			t.Fatalf("at %v: the counter of the current window made during a pass dropped", now)
		case now >= time.Second+pass && now < 1500*time.Millisecond && len(f.counts) != 1:
			t.Fatalf("at %v: %d counters, want only new's: ended ones kept beyond one pass", now, len(f.counts))
		case now >= 1500*time.Millisecond && now < 2*time.Second && len(f.counts) != 2:
			t.Fatalf("at %v: %d counters, want new's and k7's", now, len(f.counts))
		}
	}
	if len(f.counts) != 0 || f.order.Len() != 0 {
		t.Fatalf("%d counters (%d in the order) left at 3 s", len(f.counts), f.order.Len())
	}
}
