package gcounter

import (
	"fmt"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/internal/keyorder"
)

// TestSweepInStepsDropsIdleKeys: 5,000 keys on one node (idle 20 s), one
// of them used again at 15 s, the node ticked every keyorder.StepEvery as
// the loop would (the sweep's steps ask for it): no key is dropped before
// it has been idle for 20 s, and every idle key is gone within a sweep
// interval (idle/10) and one pass (ceil(5000/Budget) steps) after that.
func TestSweepInStepsDropsIdleKeys(t *testing.T) {
	const keys, idle = 5000, 20 * time.Second
	g := newNode(t, "a", []string{"a"}, fmt.Sprint("idle=", idle))
	fx := &strategy.Effects{}
	g.Start(0, fx)
	for i := range keys {
		g.Request(0, strategy.Request{ID: uint64(i + 1), Key: fmt.Sprint("k", i), Tokens: 1}, fx)
	}
	pass := time.Duration(keys/keyorder.Budget+2) * keyorder.StepEvery
	late := idle + idle/10 + pass
	for now := keyorder.StepEvery; now <= 2*idle; now += keyorder.StepEvery {
		if now == 15*time.Second {
			g.Request(now, strategy.Request{ID: keys + 1, Key: "k7", Tokens: 1, Arrival: now}, fx)
		}
		g.Tick(now, fx)
		fx.Reset()
		switch {
		case now < idle && len(g.state) != keys:
			t.Fatalf("at %v: %d keys held, want all %d: dropped before idle", now, len(g.state), keys)
		case now < 15*time.Second+idle && g.state["k7"] == nil:
			t.Fatalf("at %v: k7, used at 15 s, dropped before idle", now)
		case now >= late && now < 15*time.Second+idle && len(g.state) != 1:
			t.Fatalf("at %v: %d keys held, want only k7: idle keys kept beyond %v", now, len(g.state), late)
		}
	}
	if len(g.state) != 0 || g.order.Len() != 0 {
		t.Fatalf("%d keys (%d in the order) left at %v", len(g.state), g.order.Len(), 2*idle)
	}
}
