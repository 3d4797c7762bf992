package gdrl_test

import (
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// Under partition: conserve a crashed ward's share is frozen while it is
// expected (doc.go, "Split brain": its buddy does not inherit it, so the
// live nodes hold C - C/3), and inherited once SetExpected drops it (a
// leave, or reconnect_timeout passed): the live nodes hold C again. Under
// available the buddy inherits at the view change.
func TestConserveInheritsOnceNotExpected(t *testing.T) {
	rate := bucket.Rate{Tokens: 9, Per: time.Second}
	C, _ := rateUnits(rate)
	for _, mode := range []string{"available", "conserve"} {
		h := newHarness(3, 1, hnet{minDelay: time.Millisecond, maxDelay: 3 * time.Millisecond}, rate, 9,
			[]string{"idle=2s", "partition=" + mode}, t.Fatalf)
		h.at(time.Second, func() { h.crash(2) })
		h.runUntil(3 * time.Second)
		held, _, _, _, _ := h.audit("a")
		switch {
		case mode == "available" && abs(held-C) > 1:
			t.Fatalf("available: the live nodes hold %d after the crash, want C = %d (inherited)", held, C)
		case mode == "conserve" && abs(held-(C-C/3)) > 1:
			t.Fatalf("conserve: the live nodes hold %d while n2 is expected, want C - C/3 = %d (frozen)", held, C-C/3)
		}
		h.at(4*time.Second, func() {
			for i := range 2 {
				h.nodes[i].host.SetExpected(h.now, 0, []strategy.NodeID{"n0", "n1"})
			}
		})
		h.runUntil(6 * time.Second)
		if held, _, _, _, _ := h.audit("a"); abs(held-C) > 1 {
			t.Fatalf("%s: the live nodes hold %d once n2 is no longer expected, want C = %d", mode, held, C)
		}
	}
}
