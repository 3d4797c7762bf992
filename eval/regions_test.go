package eval

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/sim"
	"github.com/tokenmesh/tokenmesh/strategy/registry"
	"github.com/tokenmesh/tokenmesh/topology"
	"github.com/tokenmesh/tokenmesh/workload"
)

// regionCosts on a hand-computable case: 10 requests, 4 decided on the
// node, 3 within the region, 2 across the WAN, 1 undecided.
func TestRegionCosts(t *testing.T) {
	ms := time.Millisecond
	outs := []sim.Outcome{
		{Decided: true, Local: true}, {Decided: true, Local: true}, {Decided: true, Local: true}, {Decided: true, Local: true},
		{Decided: true, Latency: 2 * ms}, {Decided: true, Latency: 2 * ms}, {Decided: true, Latency: 3 * ms},
		{Decided: true, WAN: true, Latency: 100 * ms}, {Decided: true, WAN: true, Latency: 120 * ms},
		{},
	}
	var lat []time.Duration
	for _, o := range outs {
		if o.Decided {
			lat = append(lat, o.Latency)
		}
	}
	got := regionCosts(outs, &sim.Result{WANMessages: 5, WANBytes: 500}, lat)
	want := RegionCosts{NodePct: 40, RegionPct: 30, WANPct: 20, DecisionLatencyP999Ms: 120, WANMessages: 5, WANBytes: 500, WANBytesPerRequest: 50}
	if *got != want {
		t.Fatalf("got %+v\nwant %+v", *got, want)
	}
}

// regionShortfall on a hand-computable case: one key offered 4 tokens in
// eu (node 0) and 4 in us (node 1), central admitting 2 in each; a
// strategy that admits all of eu's and none of us's admits as many tokens
// of it as central (windowed shortfall 0) but refuses us's 2 in eu's
// stead: 2 tokens. A second key, served as central serves it, adds 4 of
// central's tokens and nothing short (25% in all); a request that reached
// no node (-1) counts in a region of its own.
func TestRegionShortfall(t *testing.T) {
	names := []string{"eu.n0", "us.n1"}
	var reqs []workload.Request
	var allowed, central []bool
	var received []int32
	add := func(key string, node int32, c, a bool) {
		reqs = append(reqs, workload.Request{Key: key, Tokens: 1})
		central, allowed, received = append(central, c), append(allowed, a), append(received, node)
	}
	for i := range 4 {
		add("k", 0, i < 2, true)
		add("k", 1, i < 2, false)
		add("j", int32(i%2), true, true)
	}
	if n, pct := regionShortfall(reqs, allowed, central, received, names); n != 2 || pct != 25 {
		t.Fatalf("got %d tokens, %v%%; want 2 tokens, 25%% (of central's 8)", n, pct)
	}
	if short, _ := Shortfall(reqs, allowed, central, time.Hour); short != 0 {
		t.Fatalf("windowed shortfall %d, want 0 (the same tokens per key)", short)
	}
	// The same in the other direction, and one request of j that reached
	// no node: admitted by central, refused by the strategy.
	add("j", -1, true, false)
	for i := range allowed {
		if reqs[i].Key == "k" {
			allowed[i] = received[i] == 1
		}
	}
	if n, pct := regionShortfall(reqs, allowed, central, received, names); n != 3 || pct != round(100*3.0/9, 4) {
		t.Fatalf("got %d tokens, %v%%; want 3 tokens of central's 9", n, pct)
	}
	if n, pct := regionShortfall(reqs, central, central, received, names); n != 0 || pct != 0 {
		t.Fatalf("central against itself: %d tokens, %v%%", n, pct)
	}
}

// The report of a run with regions has the topology in its setup, each
// strategy's region costs, and the region columns; a run without keeps
// the bytes it had (no topology, no regions in the JSON).
func TestRunWithRegions(t *testing.T) {
	g, err := workload.ParseGenerator("tenants:users=4,rate=50,duration=3s")
	if err != nil {
		t.Fatal(err)
	}
	central, _ := registry.Lookup("central")
	owner, _ := registry.Lookup("owner")
	lat := sim.Latency{Kind: "fixed", Min: time.Millisecond, Max: time.Millisecond, Mean: time.Millisecond}
	wan := sim.Latency{Kind: "fixed", Min: 30 * time.Millisecond, Max: 30 * time.Millisecond, Mean: 30 * time.Millisecond}
	opts := Options{Trace: g.Generate(1), Strategies: []registry.Info{central, owner}, Nodes: 6, Rate: bucket.Rate{Tokens: 20, Per: time.Second},
		Burst: 20, Network: sim.Network{Latency: lat}, AssignPolicy: "roundrobin", Seed: 1}
	plain, err := Run(opts)
	if err != nil {
		t.Fatal(err)
	}
	var js bytes.Buffer
	if err := WriteJSON(&js, plain); err != nil {
		t.Fatal(err)
	}
	if s := js.String(); strings.Contains(s, `"regions"`) || strings.Contains(s, `"topology"`) {
		t.Fatalf("a run without regions has region fields:\n%s", s)
	}
	opts.Regions = []topology.Region{{Name: "eu", Nodes: 3}, {Name: "us", Nodes: 3}}
	opts.Network.WANLatency, opts.Network.WANLoss = wan, 0
	rep, err := Run(opts)
	if err != nil {
		t.Fatal(err)
	}
	want := TopologySetup{Regions: "eu:3,us:3", WANLatency: "30ms"}
	if rep.Setup.Topology == nil || rep.Setup.Topology.Regions != want.Regions || rep.Setup.Topology.WANLatency != want.WANLatency {
		t.Fatalf("topology %+v", rep.Setup.Topology)
	}
	c, o := rep.Results[0].Regions, rep.Results[1].Regions
	if c == nil || c.NodePct != 100 || c.WANBytes != 0 || c.RegionShortfallTokens != 0 {
		t.Fatalf("central: %+v", c)
	}
	// Owner over two regions of 3: a key's owner is the receiving node for
	// ~1/6 of its requests, in its region for ~2/6, across the WAN for ~3/6.
	if o == nil || math.Abs(o.NodePct+o.RegionPct+o.WANPct-100) > 0.02 || o.WANPct < 35 || o.WANPct > 65 || o.RegionPct < 20 || o.NodePct < 8 {
		t.Fatalf("owner: %+v", o)
	}
	if o.NodePct != rep.Results[1].LocalDecisionPct || o.WANBytes <= 0 || o.WANBytes >= rep.Results[1].Bytes {
		t.Fatalf("owner: %+v, local %v, bytes %d", o, rep.Results[1].LocalDecisionPct, rep.Results[1].Bytes)
	}
	if o.DecisionLatencyP999Ms < 60 || rep.Results[1].DecisionLatencyP99Ms > o.DecisionLatencyP999Ms {
		t.Fatalf("owner: p999 %v (a WAN round trip is 60 ms), p99 %v", o.DecisionLatencyP999Ms, rep.Results[1].DecisionLatencyP99Ms)
	}
	var table bytes.Buffer
	if err := WriteTableWidth(&table, rep, 0); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"regions eu:3,us:3 (between regions: latency 30ms, loss 0%)", "region %", "WAN %", "p999 ms", "WAN B/req", "region short %",
		"note: regions eu:3, us:3: central, the reference"} {
		if !strings.Contains(table.String(), s) {
			t.Errorf("table lacks %q:\n%s", s, table.String())
		}
	}
}
