// Package simtest has the helpers strategy tests share to drive a strategy
// through the simulator and compare its decisions with central's.
package simtest

import (
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/sim"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/local"
	"github.com/tokenmesh/tokenmesh/workload"
)

// Options is one simulated run; zero fields take the defaults noted.
type Options struct {
	Nodes    int               // cluster size; central always runs on 1
	Net      sim.Network       // default Fixed(time.Millisecond)
	Scenario *sim.Scenario     // nil: nothing happens
	Assign   string            // assignment policy, default "hash"
	Assigner workload.Assigner // overrides Assign
	Params   []string          // the strategy's own name=value parameters
	Rate     bucket.Rate       // default 1 token/s
	Burst    int64             // default 5
	Seed     uint64            // default 7
}

// Gen generates the workload of spec (see workload.ParseGenerator).
func Gen(t testing.TB, spec string, seed uint64) *workload.Trace {
	t.Helper()
	g, err := workload.ParseGenerator(spec)
	if err != nil {
		t.Fatal(err)
	}
	return g.Generate(seed)
}

// Fixed is a network with a fixed one-way latency and no faults.
func Fixed(d time.Duration) sim.Network {
	return sim.Network{Latency: sim.Latency{Kind: "fixed", Min: d, Max: d, Mean: d}}
}

// Run simulates the strategy name over tr. "central" and "local" are built
// here (f is ignored for them); any other name uses f. The run fails the
// test on a setup error or when a node refused a peer message.
func Run(t testing.TB, tr *workload.Trace, name string, f sim.Factory, o Options) *sim.Result {
	t.Helper()
	switch name {
	case "central", "local":
		f = func(cfg strategy.Config) (strategy.Strategy, error) { return local.New(name, cfg) }
	}
	if name == "central" || o.Nodes == 0 {
		o.Nodes = 1
	}
	if o.Net.Latency.Kind == "" {
		o.Net = Fixed(time.Millisecond)
	}
	if o.Rate == (bucket.Rate{}) {
		o.Rate = bucket.Rate{Tokens: 1, Per: time.Second}
	}
	if o.Burst == 0 {
		o.Burst = 5
	}
	if o.Seed == 0 {
		o.Seed = 7
	}
	if o.Assign == "" {
		o.Assign = "hash"
	}
	p, err := strategy.ParseParams(o.Params)
	if err != nil {
		t.Fatal(err)
	}
	assign := o.Assigner
	if assign == nil {
		if assign, err = workload.NewAssigner(o.Assign, o.Seed); err != nil {
			t.Fatal(err)
		}
	}
	res, err := sim.Run(tr, sim.Config{Name: name, New: f, Nodes: o.Nodes, Rate: o.Rate, Burst: o.Burst, Params: p,
		Network: o.Net, Scenario: o.Scenario, Assign: assign, Seed: o.Seed})
	if err != nil {
		t.Fatal(err)
	}
	if res.ReceiveErrors != 0 {
		t.Fatalf("%s: %d peer messages refused", name, res.ReceiveErrors)
	}
	return res
}

// Allowed is the per-request admitted flags of a run (undecided = rejected).
func Allowed(r *sim.Result) []bool {
	out := make([]bool, len(r.Outcomes))
	for i, o := range r.Outcomes {
		out[i] = o.Decided && o.Allowed
	}
	return out
}
