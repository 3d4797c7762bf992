package lease_test

import (
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/eval"
	"github.com/tokenmesh/tokenmesh/sim"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/lease"
	"github.com/tokenmesh/tokenmesh/workload"
)

// contendedRun runs tenants offered twice their limit (1000/s, burst
// 1000) over 30 nodes, round-robin, and returns lease's shortfall per 1 s
// window in % of central's admitted tokens, its admitted tokens beyond
// central's, its envelope violation and its share of local decisions.
func contendedRun(t *testing.T, settings ...string) (shortfallPct float64, excess int, envelope, localPct float64) {
	t.Helper()
	g, err := workload.ParseGenerator("tenants:users=4,rate=2000,duration=20s")
	if err != nil {
		t.Fatal(err)
	}
	tr := g.Generate(1)
	rate := bucket.Rate{Tokens: 1000, Per: time.Second}
	central, err := eval.Central(tr, rate, 1000)
	if err != nil {
		t.Fatal(err)
	}
	lat, err := sim.ParseLatency("exp:1ms+4ms")
	if err != nil {
		t.Fatal(err)
	}
	assign, err := workload.NewAssigner("roundrobin", 1)
	if err != nil {
		t.Fatal(err)
	}
	params, err := strategy.ParseParams(settings)
	if err != nil {
		t.Fatal(err)
	}
	res, err := sim.Run(tr, sim.Config{Name: "lease", New: func(c strategy.Config) (strategy.Strategy, error) { return lease.New(c) },
		Nodes: 30, Rate: rate, Burst: 1000, Params: params, Network: sim.Network{Latency: lat, Loss: 0.01}, Assign: assign, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	allowed := make([]bool, len(tr.Requests))
	var local int
	for i, o := range res.Outcomes {
		allowed[i] = o.Decided && o.Allowed
		if o.Local {
			local++
		}
		if allowed[i] && !central[i] {
			excess++
		}
		if central[i] && !allowed[i] {
			excess--
		}
	}
	sf, ct := eval.Shortfall(tr.Requests, allowed, central, time.Second)
	return 100 * float64(sf) / float64(ct), max(excess, 0), eval.EnvelopeViolation(tr.Requests, allowed, 1000, 1000),
		100 * float64(local) / float64(len(tr.Requests))
}

// TestContendedKeyFloat: on 4 keys offered twice their limit from 30 nodes
// for 20 s, the tokens left in leases while other holders refuse (the
// float) cost lease 1.8% of central's tokens per 1 s window when
// contended keys are not shared (quantum=0 here); with the fair shares
// (quantum period/5), the partly used leases' reports and untilDry the
// shortfall is 0.43% (most of it the first window's, in so short a run;
// 0.77% with the shares alone, at the earlier quantum of period/4), with
// no excess, the envelope kept and the decisions still local. The run is
// deterministic (seeded): the bound of 0.5% guards the changes.
func TestContendedKeyFloat(t *testing.T) {
	if testing.Short() {
		t.Skip("two 30-node simulations (a few seconds)")
	}
	off, _, _, _ := contendedRun(t, "quantum=0")
	on, excess, env, local := contendedRun(t)
	t.Logf("shortfall per 1 s window: %.3f%% without sharing, %.3f%% with; local %.2f%%", off, on, local)
	if on > off/2 || on > 0.5 {
		t.Errorf("shortfall %.3f%% with sharing, %.3f%% without: want at most half, and 0.5%%", on, off)
	}
	if excess > 0 || env > 0 {
		t.Errorf("admitted %d tokens beyond central's, envelope violated by %.2f tokens", excess, env)
	}
	if local < 97 {
		t.Errorf("%.2f%% local decisions, want >= 97%%", local)
	}
}
