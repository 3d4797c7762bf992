package gdrl_test

import (
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
)

// A node that crashes and restarts faster than the failure detector never
// leaves its heir's view, so the heir learns that the old incarnation is
// dead only from the new one. The new incarnation announces itself to
// every member with a hello at start; that hello, like any message, can be
// lost, and the new incarnation need not otherwise talk to its old heir
// (the heir is not its buddy and, with no demand, nothing is probed). The
// hello must be repeated until the member acknowledges it, or the old
// incarnation's share has no heir and is lost for good. The scenario is
// the rapid failure of TestConservationProperty that found this (ring of
// five, one default share lost): n0 crashes and restarts, so n3's buddy
// moves from n0 to n1; n3 then crashes and restarts at once with n0 as its
// new buddy, and its hello to n1 (the holder of its old record) is lost.
func TestQuickRestartHelloLost(t *testing.T) {
	const n = 4
	rate, burst := bucket.Rate{Tokens: 4, Per: time.Second}, int64(4)
	net := hnet{minDelay: time.Millisecond, maxDelay: 5 * time.Millisecond}
	h := newHarness(n, 1, net, rate, burst, []string{"idle=1s"}, t.Fatalf)
	C, _ := rateUnits(rate)
	B := burst * 1_000_000
	for i := range n {
		h.poisson(i, "a", 10, 1, 3*time.Second)
	}
	h.at(4*time.Second, func() { h.crash(0) })
	h.at(5*time.Second, func() { h.restart(0) })
	h.at(7*time.Second, func() {
		if b := h.nodes[3].g.Buddy(); b != "n1" {
			t.Fatalf("n3's buddy is %s before its crash, want n1 (the scenario needs it)", b)
		}
		h.crash(3)
	})
	// n3 is back 50 ms later, before the failure detector (300 ms) has told
	// anyone, and everything it sends to n1 in its first 10 ms is lost.
	restartAt := 7*time.Second + 50*time.Millisecond
	h.at(restartAt, func() { h.restart(3) })
	h.drop = func(from, to int) bool {
		return from == 3 && to == 1 && h.now >= restartAt && h.now < restartAt+10*time.Millisecond
	}
	h.afterEvent = func() {
		held, heldB, inflight, inflightB, _ := h.audit("a")
		if held+inflight > C || heldB+inflightB > B {
			t.Fatalf("at %v: created capacity: sum C_i + in flight %d (C %d), sum B_i + in flight %d (B %d)", h.now, held+inflight, C, heldB+inflightB, B)
		}
	}
	h.runUntil(20 * time.Second)
	if h.anyPending([]string{"a"}) {
		t.Fatalf("transfers still pending at %v: %s", h.now, h.describe("a"))
	}
	for _, key := range []string{"a", "other"} {
		held, heldB, _, _, _ := h.audit(key)
		if held != C || heldB != B {
			t.Errorf("key %q at %v: sum C_i = %d, want %d; sum B_i = %d, want %d\n%s", key, h.now, held, C, heldB, B, h.describe(key))
		}
	}
}
