package regionlease_test

import (
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/eval"
	"github.com/tokenmesh/tokenmesh/sim"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/regionlease"
	"github.com/tokenmesh/tokenmesh/topology"
	"github.com/tokenmesh/tokenmesh/workload"
)

// The float on issue 24's tenant workload across regions (3 regions of 10
// nodes, 1 ms inside, exp:60ms+20ms between, 1% loss, 20 keys each
// offered 2,000/s against r = 1,000/s, b = 1,000, round-robin; 10 s here
// where docs/EVALUATION.md runs 20 s): the tokens per key held at steady
// state (from 2 s on, sampled every 100 ms) in the global owner's bucket,
// in the regional owners' stocks and in the nodes' leases, while central's
// bucket is empty. Every token of it at the end of the first second is
// shortfall against central, which has spent its burst by then. It was
// about 207 per key (98 in the bucket, 31 in stocks, 78 in leases) before
// grants lent the refill of the ask's crossing and a region asked once per
// round trip; the bound, 150, fails on that. It logs the decomposition
// and the shortfall per 1 s window (eval.Shortfall).
func TestFloatTenants(t *testing.T) {
	if testing.Short() {
		t.Skip("a 10 s simulation of 30 nodes")
	}
	g, err := workload.ParseGenerator("tenants:users=20,rate=2000,duration=10s")
	if err != nil {
		t.Fatal(err)
	}
	tr := g.Generate(1)
	rate, _ := bucket.PerSecond(1000)
	lat, _ := sim.ParseLatency("1ms")
	wan, _ := sim.ParseLatency("exp:60ms+20ms")
	assign, err := workload.NewAssigner("roundrobin", 1)
	if err != nil {
		t.Fatal(err)
	}
	var sum regionlease.FloatParts
	samples := 0
	keys := map[string]bool{}
	for _, r := range tr.Requests {
		keys[r.Key] = true
	}
	res, err := sim.Run(tr, sim.Config{Name: "regionlease", Nodes: 30,
		Regions: []topology.Region{{Name: "eu", Nodes: 10}, {Name: "us", Nodes: 10}, {Name: "ap", Nodes: 10}},
		Rate:    rate, Burst: 1000, Network: sim.Network{Latency: lat, WANLatency: wan, Loss: 0.01, WANLoss: 0.01},
		Assign: assign, Seed: 1, SampleEvery: 100 * time.Millisecond,
		Observe: func(now time.Duration, live []strategy.Strategy) {
			if now < 2*time.Second || now >= 10*time.Second {
				return
			}
			samples++
			for _, s := range live {
				for _, f := range s.(*regionlease.RegionLease).FloatByKey(now) {
					sum.Level += f.Level
					sum.Stock += f.Stock
					sum.Node += f.Node
				}
			}
		},
		New: func(cfg strategy.Config) (strategy.Strategy, error) { return regionlease.New(cfg) }})
	if err != nil {
		t.Fatal(err)
	}
	central, err := eval.Central(tr, rate, 1000)
	if err != nil {
		t.Fatal(err)
	}
	short, admitted := eval.Shortfall(tr.Requests, admittedOf(res), central, time.Second)
	per := float64(samples * len(keys))
	level, stock, node := float64(sum.Level)/per, float64(sum.Stock)/per, float64(sum.Node)/per
	t.Logf("float per key from 2 s: %.1f tokens (global level %.1f, stocks %.1f, node leases %.1f); shortfall per 1 s window %.2f%% (%d of central's %d)",
		level+stock+node, level, stock, node, 100*float64(short)/float64(admitted), short, admitted)
	if samples == 0 || level+stock+node > 150 {
		t.Errorf("float %.1f tokens per key over %d samples, want at most 150", level+stock+node, samples)
	}
}
