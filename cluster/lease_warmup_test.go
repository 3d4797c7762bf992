package cluster

import (
	"fmt"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/rule"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// TestLeaseLiveStartAdmitsBurst: a live cluster whose nodes all join
// (Join: their strategies start after time 0, as every node of a real
// cluster does) admits a key's burst at once, from any node, as one
// central bucket would: lease's warm-up asks the other nodes, which hold
// nothing of the key, instead of starting the key empty for takeover
// (before it, every check here was refused, the rate refilling
// one token per hour).
func TestLeaseLiveStartAdmitsBurst(t *testing.T) {
	net := NewMemNetwork()
	epoch := time.Now().Add(-time.Second) // the nodes start at t = 1s
	ids := []strategy.NodeID{"n0", "n1", "n2"}
	r := rule.Rule{Name: "api", Rate: slow, Burst: 5, Strategy: "lease", Params: []string{"hold=0s", "timeout=2s"}}
	eps := map[strategy.NodeID]Transport{}
	for _, id := range ids {
		ep, err := net.Endpoint(id)
		if err != nil {
			t.Fatal(err)
		}
		eps[id] = ep
	}
	nodes := map[strategy.NodeID]*Node{}
	for _, id := range ids {
		n, err := New(Config{Self: id, Members: ids, Rules: []rule.Rule{r}, Transport: eps[id], Seed: 7, Epoch: epoch, Join: true})
		if err != nil {
			t.Fatal(err)
		}
		nodes[id] = n
		t.Cleanup(func() { n.Close() })
	}
	for k := range 3 {
		key := fmt.Sprintf("key-%d", k)
		var allowed int
		for i := range 7 {
			if d := check(t, nodes[ids[i%3]], "api", key, 1); d.Allowed {
				allowed++
			}
		}
		if allowed != 5 {
			t.Fatalf("%s: %d of 7 checks admitted right after the start, want 5 (the burst)", key, allowed)
		}
	}
}
