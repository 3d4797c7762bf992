package cluster

import (
	"testing"
	"time"
)

// TestRestartedForwarderIsCharged : a forwarding node
// that restarts mid-traffic issues request ids its previous life never
// used, so the owner, which still remembers the previous life's forwards,
// decides and charges every new request instead of answering it with an
// old verdict. Before the fix ids restarted from 1 and the restarted
// node's first request got the verdict of its previous life's request 1
// without taking a token: 6 admissions from a burst of 5.
func TestRestartedForwarderIsCharged(t *testing.T) {
	c := newCluster(t, 2, false, ownerRule("timeout=2s", "replicas=1"))
	key := keyOwnedBy(t, "n1", c.ids)
	n0 := c.nodes["n0"]
	admitted := 0
	if d := check(t, n0, "api", key, 1); d.Allowed {
		admitted++
	}
	first := n0.Incarnation()
	if err := n0.Close(); err != nil {
		t.Fatal(err)
	}
	ep, err := c.net.Endpoint("n0")
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Millisecond) // a restart takes longer than this
	n0, err = New(Config{Self: "n0", Members: c.ids, Rules: c.rules, Transport: ep, Epoch: c.epoch, Join: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n0.Close() })
	if n0.Incarnation() <= first {
		t.Fatalf("restarted incarnation %d is not above the first %d", n0.Incarnation(), first)
	}
	for range 6 {
		if d := check(t, n0, "api", key, 1); d.Allowed {
			admitted++
		}
	}
	if admitted != 5 {
		t.Fatalf("admitted %d of 7 requests through a restarted forwarder, want the burst of 5", admitted)
	}
}
