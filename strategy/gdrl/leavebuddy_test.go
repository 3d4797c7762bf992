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
	h.afterEvent = func() { neverCreated(t, h, keys, C, B) }
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
	settledExactly(t, h, keys, C, B, deadline)
}

// TestLateFrameAfterInheritance: a frame of a node that crashed, delayed
// in the network until after its heir inherited it, makes the heir fence
// that incarnation (it may be alive after all); the fence is never
// answered (the node is dead and out of view), and is withdrawn after
// heirGrace, so that the heir settles the transfers paid to the node
// again. Before, the tombstone settled nothing while its fence was
// unanswered, and the transfers paid to the node stayed in flight for good
// (found by TestLeaveConservesProperty with a leaver's ask delivered
// after its heir inherited it). Capacity is conserved throughout: sum
// C_i + in flight <= C at every event, and = C once nothing is pending.
func TestLateFrameAfterInheritance(t *testing.T) {
	rate, burst := bucket.Rate{Tokens: 30, Per: time.Second}, int64(9)
	C, _ := rateUnits(rate)
	B := burst * gdrl.UnitsPerToken
	keys := []string{"a", "never"}
	const dead, heir = 2, 0 // n2's buddy is its ring successor n0
	h := newHarness(3, 1, hnet{minDelay: time.Millisecond, maxDelay: 2 * time.Millisecond}, rate, burst, []string{"idle=1s"}, t.Fatalf)
	h.poisson(dead, "a", 30, 1, 3*time.Second) // flows of key a towards n2
	var late []byte
	fenced := false
	h.dropMsg = func(from, to int, payload []byte) bool {
		var m peerv1.GdrlMessage
		if proto.Unmarshal(payload, &m) != nil {
			return false
		}
		if from == dead && to == heir && h.nodes[dead].alive && m.GetTransfer() == nil && m.GetTransferAck() == nil {
			late = payload // the last frame n2 sent n0 before it crashed
		}
		if from == heir && to == dead && m.GetFenced() != nil && !h.nodes[dead].alive {
			fenced = true
		}
		// No transfer reaches n2: what is paid to it stays pending.
		return to == dead && m.GetTransfer() != nil
	}
	h.afterEvent = func() { neverCreated(t, h, keys, C, B) }
	h.runUntil(2 * time.Second)
	if h.nodes[dead].g.Buddy() != h.nodes[heir].id || late == nil {
		t.Fatalf("setup: n2's buddy is %q, frame to n0 captured %v", h.nodes[dead].g.Buddy(), late != nil)
	}
	pending := 0
	for _, n := range h.nodes[:dead] {
		pending += len(n.g.Pending("a"))
	}
	if pending == 0 {
		t.Fatalf("setup: no transfer to n2 pending:\n%s", h.describe("a"))
	}
	h.crash(dead)
	// The views drop n2 after the detection delay and n0 inherits it;
	// then the frame arrives, before the payers' transfers to n2 sent to
	// n0 as its heir at that view change (a message takes 1 ms at least).
	h.push(hevent{at: h.now + h.detection + 500*time.Microsecond, kind: evDeliver, from: dead, to: heir, payload: late})
	deadline := h.now + 60*time.Second
	h.runUntil(h.now + h.detection + 100*time.Millisecond)
	if !fenced {
		t.Fatalf("the late frame made n0 send no fence to n2: the test does not exercise the mechanism")
	}
	settledExactly(t, h, keys, C, B, deadline)
}

// neverCreated fails t when, for a key of keys, the shares held plus the
// transfers in flight exceed (C, B) (units): capacity created.
func neverCreated(t *testing.T, h *harness, keys []string, C, B int64) {
	for _, key := range keys {
		held, heldB, inflight, inflightB, _ := h.audit(key)
		if held+inflight > C || heldB+inflightB > B {
			t.Fatalf("t=%v key %s: created capacity: %d + %d in flight > C %d or %d + %d > B %d\n%s",
				h.now, key, held, inflight, C, heldB, inflightB, B, h.describe(key))
		}
	}
}

// settledExactly runs h until no transfer of keys is pending or deadline,
// then fails t unless every transfer settled and the survivors hold
// exactly (C, B) of every key (units).
func settledExactly(t *testing.T, h *harness, keys []string, C, B int64, deadline time.Duration) {
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
