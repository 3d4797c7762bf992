package cluster

import (
	"context"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/rendezvous"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// TestOwnerLeaveHandsOver: with replicas=1 nothing but the leave hand-over
// carries a key's level. n2 owns a key drained to 1 of 5 tokens; Leave
// returns once the next owner acknowledged the level; after membership
// drops n2 the next owner continues from 1 token, not a fresh burst.
func TestOwnerLeaveHandsOver(t *testing.T) {
	c := newCluster(t, 3, false, ownerRule("timeout=2s", "replicas=1"))
	key := keyOwnedBy(t, "n2", c.ids)
	for i := range 4 {
		if d := check(t, c.nodes["n0"], "api", key, 1); !d.Allowed {
			t.Fatalf("request %d refused before the leave", i)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	start := time.Now()
	if err := c.nodes["n2"].Leave(ctx); err != nil {
		t.Fatalf("Leave: %v", err)
	}
	t.Logf("n2 left in %v", time.Since(start).Round(time.Microsecond))
	if err := c.nodes["n2"].Close(); err != nil {
		t.Fatal(err)
	}
	live := []strategy.NodeID{"n0", "n1"}
	for _, id := range live {
		if err := c.nodes[id].SetMembers(live); err != nil {
			t.Fatal(err)
		}
	}
	next := c.nodes[rendezvous.Owner(key, live)]
	for i, want := range []bool{true, false} {
		if d := check(t, next, "api", key, 1); d.Allowed != want {
			t.Fatalf("request %d at the next owner %s: %+v, want allowed=%v (1 token handed over)", i, next.Self(), d, want)
		}
	}
}
