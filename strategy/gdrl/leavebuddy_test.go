package gdrl_test

import (
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"
	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/strategy/gdrl"
)

// isTransfer reports whether payload is a gdrl transfer (not an
// acknowledgement, record or probe).
func isTransfer(payload []byte) bool {
	var m peerv1.GdrlMessage
	return proto.Unmarshal(payload, &m) == nil && m.GetTransfer() != nil
}

// TestLeaveWaitsForLiveBuddy: a leaver that holds nothing (a joiner
// whose payments have not reached it), whose buddy acknowledged its
// latest record and then crashed just before the leave, while every view
// still holds the buddy, does not report Left until a live buddy (the
// one it chooses once its view drops the crashed one) holds a record
// made after the leave began. Before, it reported Left at once, and its
// record (the duplicate filter and tombstone that its heir settles late
// payments with) was at the dead buddy only: the payments to it stayed
// in flight for good (the fail file of TestLeaveConservesProperty of
// 2026-12-06, seed 0x42). Afterwards every transfer settles and the
// survivors hold (C, B) of every key exactly, with sum C_i + in flight
// <= C at every event.
func TestLeaveWaitsForLiveBuddy(t *testing.T) {
	rate, burst := bucket.Rate{Tokens: 30, Per: time.Second}, int64(9)
	C, _ := rateUnits(rate)
	B := burst * gdrl.UnitsPerToken
	keys := []string{"a", "never"}
	const leaver, buddy = 3, 0
	// n0..n2 found the cluster; n3 joins at 1 s with a zero default share
	// and its ring successor n0 as buddy. No transfer ever reaches n3:
	// what the others pay it (its default split, key a towards its
	// demand) stays in their outboxes, so it holds nothing when it leaves.
	h := newJoinHarness(4, 3, 1, hnet{minDelay: time.Millisecond, maxDelay: 2 * time.Millisecond}, rate, burst, []string{"idle=1s"}, t.Fatalf)
	h.at(time.Second, func() { h.join(leaver) })
	h.poisson(leaver, "a", 30, 1, 3*time.Second)
	h.dropMsg = func(_, to int, payload []byte) bool { return to == leaver && isTransfer(payload) }
	h.afterEvent = func() {
		for _, key := range keys {
			held, heldB, inflight, inflightB, _ := h.audit(key)
			if held+inflight > C || heldB+inflightB > B {
				t.Fatalf("t=%v key %s: created capacity: %d + %d in flight > C %d or %d + %d > B %d\n%s",
					h.now, key, held, inflight, C, heldB, inflightB, B, h.describe(key))
			}
		}
	}
	h.runUntil(2 * time.Second)
	g := h.nodes[leaver].g
	if g.Buddy() != h.nodes[buddy].id || !g.Replicated() {
		t.Fatalf("setup: n3's buddy is %q (replicated %v), want n0", g.Buddy(), g.Replicated())
	}
	pending := 0
	for _, n := range h.nodes[:leaver] {
		pending += len(n.g.Pending("never"))
	}
	if c, b := g.DefaultShare(); c != 0 || b != 0 || g.CapacityShare("a") > 0 || pending == 0 {
		t.Fatalf("setup: n3 holds default (%d, %d), a %d, with %d transfers to it pending; want nothing, some pending",
			c, b, g.CapacityShare("a"), pending)
	}
	// The buddy crashes; 50 ms later, before any view drops it, n3
	// leaves.
	crashAt := h.now
	h.crash(buddy)
	h.runUntil(crashAt + 50*time.Millisecond)
	leftAt := time.Duration(-1)
	h.leave(leaver, &leftAt)
	if leftAt >= 0 {
		t.Fatalf("n3 reported Left at once, its record at the crashed n0 only")
	}
	h.runUntil(10 * time.Second)
	if leftAt < 0 {
		t.Fatalf("n3 never reported Left:\n%s", h.describe("a"))
	}
	if leftAt < crashAt+h.detection {
		t.Fatalf("n3 reported Left at %v, before its view dropped the crashed buddy", leftAt)
	}
	deadline := h.now + 60*time.Second
	for h.anyPending(keys) && h.now < deadline && h.step() {
	}
	for _, key := range keys {
		if h.anyPending([]string{key}) {
			t.Fatalf("key %s: transfers still pending at %v:\n%s", key, h.now, h.describe(key))
		}
		held, heldB, _, _, _ := h.audit(key)
		if held != C || heldB != B {
			t.Fatalf("key %s: survivors hold (%d, %d), want (%d, %d)\n%s", key, held, heldB, C, B, h.describe(key))
		}
	}
}
