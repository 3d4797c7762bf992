package forwarding

import (
	"slices"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/strategy"
)

// TestSendToRetriesUntilDeadline: each attempt is due again retryEvery
// later, never after the deadline; every node tried may answer, no other.
func TestSendToRetriesUntilDeadline(t *testing.T) {
	p := &Pending{Req: strategy.Request{ID: 7}, Deadline: 90 * time.Millisecond}
	if next := p.SendTo(0, "n1", 40*time.Millisecond); next != 40*time.Millisecond || p.Next != next {
		t.Fatalf("first attempt: next %v (Next %v), want 40ms", next, p.Next)
	}
	if next := p.SendTo(80*time.Millisecond, "n2", 40*time.Millisecond); next != 90*time.Millisecond {
		t.Fatalf("attempt at 80ms: next %v, want the deadline 90ms", next)
	}
	p.SendTo(85*time.Millisecond, "n1", 40*time.Millisecond)
	if p.Owner != "n1" || !slices.Equal(p.SentTo, []strategy.NodeID{"n1", "n2"}) {
		t.Fatalf("Owner %s, SentTo %v; want n1 and [n1 n2] (each node once)", p.Owner, p.SentTo)
	}
	if p.CheckFrom("n2") != nil || p.CheckFrom("n3") == nil {
		t.Fatal("CheckFrom: want n2 accepted (tried before) and n3 refused")
	}
}

// TestCheckDelay: a wait in [0, MaxWait] on an admission is accepted; a
// negative one, one above MaxWait, or any wait on a refusal is not.
func TestCheckDelay(t *testing.T) {
	p := &Pending{Req: strategy.Request{ID: 7}, MaxWait: time.Second}
	for _, c := range []struct {
		allowed bool
		delay   int64
		ok      bool
	}{{true, 0, true}, {true, int64(time.Second), true}, {false, 0, true},
		{true, -1, false}, {true, int64(time.Second) + 1, false}, {false, 1, false}} {
		if err := p.CheckDelay("n1", c.allowed, c.delay); (err == nil) != c.ok {
			t.Errorf("allowed %v delay %d: err %v, want ok %v", c.allowed, c.delay, err, c.ok)
		}
	}
}

// TestOrphanedSorted: the requests whose last attempt went to a node no
// longer a member, in ID order whatever the map's order.
func TestOrphanedSorted(t *testing.T) {
	pending := map[uint64]*Pending{}
	for id, owner := range map[uint64]strategy.NodeID{9: "n2", 3: "n2", 5: "n1", 1: "n0", 7: "n2"} {
		pending[id] = &Pending{Req: strategy.Request{ID: id}, Owner: owner}
	}
	if got := Orphaned(pending, []strategy.NodeID{"n0", "n1"}); !slices.Equal(got, []uint64{3, 7, 9}) {
		t.Fatalf("Orphaned = %v, want [3 7 9]", got)
	}
	if got := Orphaned(pending, []strategy.NodeID{"n0", "n1", "n2"}); len(got) != 0 {
		t.Fatalf("Orphaned with every owner live = %v, want none", got)
	}
}
