package eval

import (
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/sim"
	"github.com/tokenmesh/tokenmesh/sim/simtest"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/registry"
	"github.com/tokenmesh/tokenmesh/workload"
)

// A known distribution: 6, 2, 2 and 0 decisions over four nodes, mean 2.5,
// so max/mean = 6/2.5 = 2.4; undecided outcomes, those at a proxy (-1) and
// at an unknown index are not counted. Equal counts give 1, the first node.
func TestHotServerKnownDistribution(t *testing.T) {
	names := []string{"n0", "n1", "n2", "n3"}
	var outs []sim.Outcome
	add := func(node int32, n int, decided bool) {
		for range n {
			outs = append(outs, sim.Outcome{Decided: decided, Allowed: true, Node: node})
		}
	}
	add(1, 6, true)
	add(0, 2, true)
	add(2, 2, true)
	add(3, 5, false) // undecided: not n3's
	add(-1, 4, true) // at a proxy
	add(9, 4, true)  // no such node
	got := HotServer(outs, names)
	want := HotServerStats{MaxOverMean: 2.4, Node: "n1", MaxDecisions: 6, MeanDecisions: 2.5}
	if got != want {
		t.Fatalf("HotServer = %+v, want %+v", got, want)
	}
	even := HotServer([]sim.Outcome{{Decided: true, Node: 1}, {Decided: true, Node: 0}}, names[:2])
	if even.MaxOverMean != 1 || even.Node != "n0" {
		t.Fatalf("even: %+v, want max/mean 1 at n0", even)
	}
	if none := HotServer(nil, names); none.MaxOverMean != 0 {
		t.Fatalf("no decisions: %+v", none)
	}
}

// One key on four nodes, spread round-robin: owner decides every request
// at the key's owner, so the measure is N = 4; with split=4 and
// split_placement=distinct the key's four sub-buckets are on the four
// nodes and each decides a quarter (request IDs mod 4), so it is 1.
func TestHotServerOwnerOneKey(t *testing.T) {
	g, err := workload.ParseGenerator("poisson:users=1,rate=200,duration=5s")
	if err != nil {
		t.Fatal(err)
	}
	tr := g.Generate(1)
	info, err := registry.Lookup("owner")
	if err != nil {
		t.Fatal(err)
	}
	measure := func(params ...string) float64 {
		p, err := strategy.ParseParams(params)
		if err != nil {
			t.Fatal(err)
		}
		assign, err := workload.NewAssigner("roundrobin", 1)
		if err != nil {
			t.Fatal(err)
		}
		res, err := sim.Run(tr, sim.Config{Name: "owner", New: info.New, Nodes: 4, Rate: bucket.Rate{Tokens: 100, Per: time.Second},
			Burst: 100, Params: p, Network: simtest.Fixed(time.Millisecond), Assign: assign, Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		return HotServer(res.Outcomes, res.NodeNames).MaxOverMean
	}
	if one := measure(); one != 4 {
		t.Fatalf("split=1: hot-server measure %v, want 4 (one owner decides everything)", one)
	}
	if spread := measure("split=4", "split_placement=distinct"); spread > 1.01 {
		t.Fatalf("split=4 distinct: hot-server measure %v, want 1", spread)
	}
}
