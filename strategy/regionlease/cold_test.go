package regionlease_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/eval"
	"github.com/tokenmesh/tokenmesh/rendezvous"
	"github.com/tokenmesh/tokenmesh/sim"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/regionlease"
	"github.com/tokenmesh/tokenmesh/topology"
	"github.com/tokenmesh/tokenmesh/workload"
)

// A cold key across regions (a rule whose rate is too low for a region to
// hold a stock: r * 2*latency_hint below min_lease) is decided like
// owner's: every request is relayed to the key's global owner G, which
// decides it in arrival order. Two cases central admits and the previous
// rule refused (the test fails on it):
//   - a region whose relay G refused refused every request of the key on
//     its regional owner for region_ttl (it "lived on what it held": no
//     stock), so a request after G's bucket had refilled a token was
//     refused there;
//   - G decided at receipt, so a request of its own region that arrived
//     later than another region's relay took the token the relay, which
//     arrived first, would have had.
//
// eu.n0 is the key's global owner; in us the requests go to the node that
// is not the regional owner (so that they are relayed); 1 token/s, burst
// 1, 1 ms inside a region, 50 ms between, no loss.
func TestColdKeyDecidedInArrivalOrder(t *testing.T) {
	members := []strategy.NodeID{"eu.n0", "us.n1", "us.n2"}
	var key string
	var far int // the us node that is not the key's regional owner
	for i := 0; key == ""; i++ {
		k := fmt.Sprintf("cold-%d", i)
		if rendezvous.Owner(k, members) != "eu.n0" {
			continue
		}
		key, far = k, 2
		if rendezvous.Owner(k, members[1:]) == "us.n2" {
			far = 1
		}
	}
	type req struct {
		at   time.Duration
		node int
	}
	// central: admit (full), refuse (empty), admit (refilled at 1 s),
	// refuse, admit (refilled), refuse (the relay, which arrived first,
	// took the token).
	reqs := []req{{0, far}, {100 * time.Millisecond, far}, {1010 * time.Millisecond, far}, {1050 * time.Millisecond, far},
		{3000 * time.Millisecond, far}, {3010 * time.Millisecond, 0}}
	tr := &workload.Trace{Name: "cold"}
	nodeOf := map[int]int{}
	for i, r := range reqs {
		tr.Requests = append(tr.Requests, workload.Request{Arrival: r.at, Key: key, Tokens: 1})
		nodeOf[i] = r.node
	}
	rate := bucket.Rate{Tokens: 1, Per: time.Second}
	central, err := eval.Central(tr, rate, 1)
	if err != nil {
		t.Fatal(err)
	}
	lat, _ := sim.ParseLatency("1ms")
	wan, _ := sim.ParseLatency("50ms")
	res, err := sim.Run(tr, sim.Config{Name: "regionlease", Nodes: 3, Regions: []topology.Region{{Name: "eu", Nodes: 1}, {Name: "us", Nodes: 2}},
		Rate: rate, Burst: 1, Network: sim.Network{Latency: lat, WANLatency: wan}, Assign: fixedAssign(nodeOf),
		New: func(cfg strategy.Config) (strategy.Strategy, error) { return regionlease.New(cfg) }})
	if err != nil {
		t.Fatal(err)
	}
	allowed := admittedOf(res)
	for i := range reqs {
		if allowed[i] != central[i] {
			t.Errorf("request %d (at %v on %s): admitted %v, central %v", i, reqs[i].at, res.NodeNames[nodeOf[i]], allowed[i], central[i])
		}
	}
	if v := eval.EnvelopeViolation(tr.Requests, allowed, 1, 1); v > 0 {
		t.Fatalf("%.3f tokens beyond b + r*T", v)
	}
}

// fixedAssign sends request i to node m[i].
type fixedAssign map[int]int

func (m fixedAssign) Assign(_ *workload.Request, i, _ int) int { return m[i] }
