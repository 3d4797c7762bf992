package gdrl_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/eval"
	"github.com/tokenmesh/tokenmesh/sim"
	"github.com/tokenmesh/tokenmesh/sim/simtest"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/gdrl"
	"github.com/tokenmesh/tokenmesh/strategy/static"
	"github.com/tokenmesh/tokenmesh/workload"
)

func newGDRL(cfg strategy.Config) (strategy.Strategy, error)   { return gdrl.New(cfg) }
func newStatic(cfg strategy.Config) (strategy.Strategy, error) { return static.New(cfg) }

// compare runs central, static and gdrl on spec, checks that gdrl stays in
// the (r, b) envelope, and returns both strategies' counts against central.
func compare(t *testing.T, spec string, o simtest.Options) (st, gd eval.Counts) {
	t.Helper()
	tr := simtest.Gen(t, spec, 3)
	co := o
	co.Scenario = nil // central runs on one node that nothing happens to
	co.Params = nil   // gdrl's parameters are for gdrl only
	central := simtest.Allowed(simtest.Run(t, tr, "central", nil, co))
	so := o
	so.Params = nil
	stAllowed := simtest.Allowed(simtest.Run(t, tr, "static", newStatic, so))
	res := simtest.Run(t, tr, "gdrl", newGDRL, o)
	gdAllowed := simtest.Allowed(res)
	if v := eval.EnvelopeViolation(tr.Requests, gdAllowed, o.Rate.PerSec(), o.Burst); v != 0 {
		t.Fatalf("%s: gdrl exceeded the (r, b) envelope by %v tokens", spec, v)
	}
	st = eval.Compare(tr.Requests, stAllowed, central)
	gd = eval.Compare(tr.Requests, gdAllowed, central)
	t.Logf("%s, %d nodes, assign %s: %d requests; false rejections static %d, gdrl %d; excess admitted static %d, gdrl %d; gdrl %d messages, %d bytes, state peak %d B",
		spec, o.Nodes, o.Assign, len(tr.Requests), st.FalseRejections, gd.FalseRejections, st.ExcessAdmitted, gd.ExcessAdmitted,
		res.Messages, res.Bytes, res.StateBytesPeak)
	return st, gd
}

var unit = bucket.Rate{Tokens: 1, Per: time.Second}

// With every key sticky to one node (workload.NewAssigner("key")), static
// wastes the other nodes' shares; gdrl moves them to where the demand is,
// once the evidence says so (parameter evidence: by default a key
// requested in 6 intervals at a node that its neighbour has not seen; a
// node cannot tell sticky from hash-spread demand earlier, and moving on
// less costs hash-spread traffic more than static, see
// TestSimHashAtLeastStatic). The mix's 100 sparse Poisson keys rarely
// reach that in 30 s, hence the looser bound for it; with evidence=0.8
// gdrl falsely rejects about a quarter of static's there. It never exceeds
// the envelope.
func TestSimSkewedBeatsStatic(t *testing.T) {
	for _, c := range []struct {
		spec     string
		num, den int // bound: gdrl < num/den of static's false rejections
		params   []string
	}{
		{"poisson:users=20,rate=0.8,duration=30s", 1, 3, nil},
		{"mix:duration=30s", 3, 5, nil},
		{"mix:duration=30s", 3, 10, []string{"evidence=0.8"}},
	} {
		st, gd := compare(t, c.spec, simtest.Options{Nodes: 5, Assign: "key", Rate: unit, Burst: 5, Params: c.params})
		if gd.FalseRejections*c.den >= st.FalseRejections*c.num {
			t.Errorf("%s %v: gdrl falsely rejected %d requests, static %d: want below %d/%d", c.spec, c.params, gd.FalseRejections, st.FalseRejections, c.num, c.den)
		}
	}
}

func TestSimSkewedLossyNetwork(t *testing.T) {
	net := sim.Network{Latency: sim.Latency{Kind: "exponential", Min: time.Millisecond, Mean: 3 * time.Millisecond}, Loss: 0.1, Duplicate: 0.05, Reorder: 0.1}
	st, gd := compare(t, "mix:duration=30s", simtest.Options{Nodes: 5, Assign: "key", Rate: bucket.Rate{Tokens: 2, Per: time.Second}, Burst: 5, Net: net})
	if gd.FalseRejections*5 >= st.FalseRejections*3 {
		t.Fatalf("gdrl falsely rejected %d requests, static %d: want below 3/5", gd.FalseRejections, st.FalseRejections)
	}
}

// With every key spread evenly over the nodes (hash), static's 1/N split is
// what a perfect exchange would converge to, and per-node demand is mostly
// noise: gdrl conforms and stays near static (the bound catches
// regressions; the numbers are in the log).
func TestSimUniformNearStatic(t *testing.T) {
	for _, spec := range []string{"poisson:users=20,rate=0.8,duration=30s", "heavy:users=20,rate=100,duration=30s"} {
		st, gd := compare(t, spec, simtest.Options{Nodes: 5, Assign: "hash", Rate: unit, Burst: 5})
		if gd.FalseRejections*4 > st.FalseRejections*5 {
			t.Errorf("%s: gdrl falsely rejected %d requests, static %d: want at most 1.25 times", spec, gd.FalseRejections, st.FalseRejections)
		}
	}
}

// Crashes and restarts (no partition) never let the cluster exceed the
// envelope: the heir inherits shares, not tokens, and a restarted node
// joins with none.
func TestSimCrashRestartConforms(t *testing.T) {
	sc, err := sim.ParseScenario([]byte("detection: 500ms\nevents:\n  - at: 8s\n    crash: [n1]\n  - at: 12s\n    restart: [n1]\n  - at: 18s\n    crash_owner_of_hottest: 1\n"))
	if err != nil {
		t.Fatal(err)
	}
	compare(t, "heavy:users=10,rate=100,duration=30s", simtest.Options{Nodes: 5, Assign: "key", Rate: bucket.Rate{Tokens: 5, Per: time.Second},
		Burst: 10, Net: simtest.Fixed(2 * time.Millisecond), Scenario: sc})
}

func TestSimDeterministic(t *testing.T) {
	tr := simtest.Gen(t, "mix:duration=10s", 1)
	o := simtest.Options{Nodes: 4, Rate: bucket.Rate{Tokens: 3, Per: time.Second}, Burst: 4,
		Net: sim.Network{Latency: sim.Latency{Kind: "exponential", Min: 0, Mean: 3 * time.Millisecond}, Loss: 0.1, Duplicate: 0.05, Reorder: 0.1}}
	if a, b := simtest.Run(t, tr, "gdrl", newGDRL, o), simtest.Run(t, tr, "gdrl", newGDRL, o); !reflect.DeepEqual(a, b) {
		t.Fatal("two runs with the same seed differ")
	}
}

// Edge configurations: one node, two nodes, no burst, a burst too large
// for micro-token resolution, a zero rate. gdrl conforms and no node
// refuses a peer's message. (sim.Run directly: simtest's defaults would
// replace a zero rate or burst.)
func TestSimConfigs(t *testing.T) {
	tr := simtest.Gen(t, "mix:duration=10s", 9)
	lossy := sim.Network{Latency: sim.Latency{Kind: "uniform", Min: time.Millisecond, Max: 4 * time.Millisecond}, Loss: 0.2, Duplicate: 0.1, Reorder: 0.1}
	for _, c := range []struct {
		nodes int
		rate  bucket.Rate
		burst int64
	}{
		{1, unit, 5},
		{2, bucket.Rate{Tokens: 1, Per: 2 * time.Second}, 1},
		{3, bucket.Rate{Tokens: 1000, Per: time.Second}, 0},
		{3, bucket.Rate{Tokens: 1000, Per: time.Second}, 1_000_000},
		{4, bucket.Rate{}, 3},
	} {
		assign, _ := workload.NewAssigner("random", 9)
		res, err := sim.Run(tr, sim.Config{Name: "gdrl", New: newGDRL, Nodes: c.nodes, Rate: c.rate, Burst: c.burst, Network: lossy,
			Assign: assign, Seed: 9})
		if err != nil {
			t.Fatal(err)
		}
		if v := eval.EnvelopeViolation(tr.Requests, simtest.Allowed(res), c.rate.PerSec(), c.burst); v != 0 {
			t.Errorf("%d nodes, rate %v, burst %d: envelope exceeded by %v", c.nodes, c.rate, c.burst, v)
		}
		if res.Undecided != 0 || res.ReceiveErrors != 0 {
			t.Errorf("%d nodes: %d undecided, %d payloads refused", c.nodes, res.Undecided, res.ReceiveErrors)
		}
	}
}
