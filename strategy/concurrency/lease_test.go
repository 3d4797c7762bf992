package concurrency

import (
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/strategy"
)

// pair is two nodes n0, n1 whose messages are delivered at once, in order.
type pair struct {
	t     *testing.T
	nodes map[strategy.NodeID]*Concurrency
	dec   []strategy.Decision
	sent  int // messages delivered
}

func newPair(t *testing.T, params ...string) *pair {
	p := &pair{t: t, nodes: map[strategy.NodeID]*Concurrency{}}
	members := []strategy.NodeID{"n0", "n1"}
	for _, id := range members {
		p.nodes[id] = newNode(t, id, members, params...)
		var fx strategy.Effects
		p.nodes[id].Start(0, &fx)
	}
	return p
}

// run delivers fx's messages from node from, and what they cause, at now.
func (p *pair) run(now time.Duration, from strategy.NodeID, fx *strategy.Effects) {
	p.dec = append(p.dec, fx.Decisions...)
	for _, m := range fx.Messages {
		p.sent++
		var out strategy.Effects
		if err := p.nodes[m.To].Receive(now, from, m.Payload, &out); err != nil {
			p.t.Fatal(err)
		}
		p.run(now, m.To, &out)
	}
}

func (p *pair) acquire(now time.Duration, at strategy.NodeID, id uint64, key string) strategy.Decision {
	var fx strategy.Effects
	d, ok := p.nodes[at].Request(now, strategy.Request{ID: id, Key: key, Tokens: 1, Arrival: now}, &fx)
	p.dec = nil
	p.run(now, at, &fx)
	if ok {
		return d
	}
	for _, d := range p.dec {
		if d.RequestID == id {
			return d
		}
	}
	p.t.Fatalf("request %d not decided", id)
	return strategy.Decision{}
}

// TestLeaseGrantsLocallyAndReturns: limit 4, lease=2 (lease_ttl 1s): after
// two forwarded acquires at n1 of a key n0 owns, n1 holds a lease of 2
// and grants the next two with no message; the owner counts the lease's
// slots, so with its own 2 permits the key is full everywhere. A permit
// of the lease released at n0 reaches n1 through the owner. At the
// lease's end n1 returns its unused slots, and n0 grants them again.
func TestLeaseGrantsLocallyAndReturns(t *testing.T) {
	p := newPair(t, "limit=4", "permit_ttl=2s", "lease=2", "lease_ttl=1s", "timeout=100ms")
	key := keyOwnedBy(t, "n0", []strategy.NodeID{"n0", "n1"})
	now := 3 * time.Second // the start's wait (permit_ttl + lease_ttl) is over
	var ids []uint64
	for i := range 2 {
		d := p.acquire(now, "n1", uint64(1+i), key)
		if !d.Allowed {
			t.Fatalf("forwarded acquire %d refused", i)
		}
		ids = append(ids, d.Permit)
	}
	if got := p.nodes["n0"].InFlight(now, key); got != 4 {
		t.Fatalf("owner counts %d in flight, want 2 permits + a lease of 2", got)
	}
	before := p.sent
	for i := range 2 {
		if d := p.acquire(now, "n1", uint64(3+i), key); !d.Allowed {
			t.Fatalf("acquire %d from the lease refused", i)
		} else if i == 0 {
			ids = append(ids, d.Permit)
		}
	}
	if p.sent != before {
		t.Fatalf("%d messages for acquires served from the lease, want 0", p.sent-before)
	}
	if d := p.acquire(now, "n0", 5, key); d.Allowed {
		t.Fatal("owner granted a fifth permit of limit 4")
	}
	// ids[2] came from the lease: released at n0, it must free n1's slot.
	var fx strategy.Effects
	p.nodes["n0"].Release(now, key, ids[2], &fx)
	p.run(now, "n0", &fx)
	if d := p.acquire(now, "n1", 6, key); !d.Allowed {
		t.Fatal("the lease's slot released at the owner was not freed at the lessee")
	}
	// The lease ends at 4s (asked at 3s): its 2 slots stay in use until
	// their permits are released or lapse (5s).
	later := now + time.Second
	fx.Reset()
	p.nodes["n1"].Tick(later, &fx)
	p.run(later, "n1", &fx)
	if d := p.acquire(later, "n1", 7, key); d.Allowed {
		t.Fatal("granted with the key full (2 permits at the owner, 2 in the ended lease)")
	}
	if got := p.nodes["n0"].InFlight(later, key); got != 4 {
		t.Fatalf("owner counts %d, want 4 (the lease's slots are in use)", got)
	}
	// Every permit lapses at 5s (granted at 3s): the lessee returns the
	// lease's slots at its next sweep, well before the owner would free
	// them by itself (6s).
	end := now + 2*time.Second + time.Millisecond
	fx.Reset()
	p.nodes["n1"].Tick(end, &fx)
	p.run(end, "n1", &fx)
	if got := p.nodes["n0"].InFlight(end, key); got != 0 {
		t.Fatalf("owner counts %d after everything lapsed and the lease returned, want 0", got)
	}
}

// TestDuplicateVerdictKeepsPermit: a verdict delivered twice (the network
// duplicates) must not release the permit it granted (the first grant is
// in use); a grant after the forwarder gave up is released. Found by
// TestPropertyInFlightBound: a duplicate used to be taken for a late grant.
func TestDuplicateVerdictKeepsPermit(t *testing.T) {
	members := []strategy.NodeID{"n0", "n1"}
	n0, n1 := newNode(t, "n0", members, "limit=1", "permit_ttl=1s"), newNode(t, "n1", members, "limit=1", "permit_ttl=1s")
	var fx strategy.Effects
	n0.Start(0, &fx)
	n1.Start(0, &fx)
	key := keyOwnedBy(t, "n0", members)
	now := 2 * time.Second
	fx.Reset()
	if _, ok := n1.Request(now, strategy.Request{ID: 1, Key: key, Tokens: 1, Arrival: now}, &fx); ok {
		t.Fatal("decided at a node that does not own the key")
	}
	acquire := fx.Messages[0].Payload
	var ofx strategy.Effects
	if err := n0.Receive(now, "n1", acquire, &ofx); err != nil {
		t.Fatal(err)
	}
	verdict := ofx.Messages[0].Payload
	for i := range 2 {
		fx.Reset()
		if err := n1.Receive(now, "n0", verdict, &fx); err != nil {
			t.Fatal(err)
		}
		if i == 1 && len(fx.Messages) != 0 {
			t.Fatalf("a duplicate verdict sent %d messages (a release of the permit in use)", len(fx.Messages))
		}
	}
	// A second acquire, given up on (timeout), then granted: released.
	fx.Reset()
	n1.Request(now, strategy.Request{ID: 2, Key: key, Tokens: 1, Arrival: now}, &fx)
	second := fx.Messages[0].Payload
	fx.Reset()
	n1.Tick(now+time.Second, &fx) // the timeout passed: refused
	if len(fx.Decisions) != 1 || fx.Decisions[0].Allowed {
		t.Fatalf("after the timeout: %+v, want request 2 refused", fx.Decisions)
	}
	ofx.Reset()
	if err := n0.Receive(now, "n1", second, &ofx); err != nil {
		t.Fatal(err)
	}
	if got := n0.InFlight(now, key); got != 1 {
		t.Fatalf("owner holds %d, want 1 (the limit is full: the late acquire is refused)", got)
	}
}
