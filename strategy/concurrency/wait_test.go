package concurrency

import (
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/strategy"
)

// TestWaitingAcquire: limit 1 on two nodes. The owner's permit is held; an
// acquire at the other node waits (max 1s) and is granted by the release,
// with an expiry counted from its arrival plus its wait; a second waiter
// is refused when its wait is over.
func TestWaitingAcquire(t *testing.T) {
	p := newPair(t, "limit=1", "permit_ttl=2s")
	key := keyOwnedBy(t, "n0", []strategy.NodeID{"n0", "n1"})
	now := 3 * time.Second
	first := p.acquire(now, "n0", 1, key)
	if !first.Allowed {
		t.Fatal("first acquire refused")
	}
	var fx strategy.Effects
	if _, ok := p.nodes["n1"].RequestWait(now, strategy.Request{ID: 2, Key: key, Tokens: 1, Arrival: now}, time.Second, &fx); ok {
		t.Fatal("decided at once with the key full; want it to wait")
	}
	p.dec = nil
	p.run(now, "n1", &fx)
	if len(p.dec) != 0 {
		t.Fatalf("decided %+v while the key is full", p.dec)
	}
	fx.Reset()
	if _, ok := p.nodes["n0"].RequestWait(now, strategy.Request{ID: 3, Key: key, Tokens: 1, Arrival: now}, 100*time.Millisecond, &fx); ok {
		t.Fatal("the owner's waiter decided at once")
	}
	// The release, 300 ms later, goes to the head of the queue: request 2.
	later := now + 300*time.Millisecond
	fx.Reset()
	p.nodes["n0"].Tick(now+100*time.Millisecond, &fx) // request 3's wait is over
	if len(fx.Decisions) != 1 || fx.Decisions[0].RequestID != 3 || fx.Decisions[0].Allowed {
		t.Fatalf("at the end of its wait: %+v, want request 3 refused", fx.Decisions)
	}
	fx.Reset()
	p.nodes["n0"].Release(later, key, first.Permit, &fx)
	p.dec = nil
	p.run(later, "n0", &fx)
	if len(p.dec) != 1 || p.dec[0].RequestID != 2 || !p.dec[0].Allowed {
		t.Fatalf("after the release: %+v, want request 2 granted", p.dec)
	}
	if got, want := p.dec[0].Expires, later+2*time.Second; got != want {
		t.Fatalf("expiry %v, want arrival + wait + permit_ttl = %v", got, want)
	}
}
