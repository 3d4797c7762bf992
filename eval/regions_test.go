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
	if c == nil || c.NodePct != 100 || c.WANBytes != 0 {
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
	for _, s := range []string{"regions eu:3,us:3 (between regions: latency 30ms, loss 0%)", "region %", "WAN %", "p999 ms", "WAN B/req",
		"note: regions eu:3, us:3: central, the reference"} {
		if !strings.Contains(table.String(), s) {
			t.Errorf("table lacks %q:\n%s", s, table.String())
		}
	}
}
