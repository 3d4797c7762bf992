package gcounter_test

import (
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/eval"
	"github.com/tokenmesh/tokenmesh/sim"
	"github.com/tokenmesh/tokenmesh/sim/simtest"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/gcounter"
	"github.com/tokenmesh/tokenmesh/workload"
)

var (
	rate  = bucket.Rate{Tokens: 1, Per: time.Second}
	burst = int64(5)
)

var (
	gen     = simtest.Gen
	fixed   = simtest.Fixed
	allowed = simtest.Allowed
)

type runOpts = simtest.Options

func run(t testing.TB, tr *workload.Trace, name string, o runOpts) *sim.Result {
	t.Helper()
	o.Rate, o.Burst = rate, burst
	return simtest.Run(t, tr, name, func(cfg strategy.Config) (strategy.Strategy, error) { return gcounter.New(cfg) }, o)
}

// With gossip and no loss, gcounter admits strictly less beyond central
// than local does, on heavy hitters spread over 4 nodes, and sends messages.
func TestGossipBeatsLocal(t *testing.T) {
	tr := gen(t, "heavy:users=20,rate=200,duration=20s", 5)
	net := fixed(time.Millisecond)
	central := allowed(run(t, tr, "central", runOpts{Net: net}))
	loc := eval.Compare(tr.Requests, allowed(run(t, tr, "local", runOpts{Nodes: 4, Net: net})), central)
	res := run(t, tr, "gcounter", runOpts{Nodes: 4, Net: net})
	gc := eval.Compare(tr.Requests, allowed(res), central)
	t.Logf("excess over central: local %d (%.1f%%), gcounter %d (%.1f%%); gcounter false rejections %d, %d messages, %d bytes",
		loc.ExcessAdmitted, loc.ExcessPct, gc.ExcessAdmitted, gc.ExcessPct, gc.FalseRejections, res.Messages, res.Bytes)
	cen := eval.Compare(tr.Requests, central, central)
	t.Logf("admitted: central %d, local %d, gcounter %d", cen.Admitted, loc.Admitted, gc.Admitted)
	if gc.Admitted > loc.Admitted || gc.Admitted*100 < cen.Admitted*95 {
		t.Fatalf("gcounter admitted %d: not between 95%% of central's %d and local's %d", gc.Admitted, cen.Admitted, loc.Admitted)
	}
	if gc.ExcessAdmitted >= loc.ExcessAdmitted {
		t.Fatalf("gcounter excess %d is not below local's %d", gc.ExcessAdmitted, loc.ExcessAdmitted)
	}
	if gc.ExcessAdmitted*2 >= loc.ExcessAdmitted {
		t.Fatalf("gcounter excess %d is not below half of local's %d", gc.ExcessAdmitted, loc.ExcessAdmitted)
	}
	if res.Messages == 0 {
		t.Fatal("no gossip")
	}
	// A shorter gossip interval converges faster: less excess.
	fast := eval.Compare(tr.Requests, allowed(run(t, tr, "gcounter", runOpts{Nodes: 4, Net: net, Params: []string{"gossip=50ms"}})), central)
	t.Logf("gossip=50ms: excess %d", fast.ExcessAdmitted)
	if fast.ExcessAdmitted >= gc.ExcessAdmitted {
		t.Fatalf("gossip 50ms excess %d not below 300ms's %d", fast.ExcessAdmitted, gc.ExcessAdmitted)
	}
}

// Determinism with catch_up (the conformance suite checks the defaults).
func TestDeterministic(t *testing.T) {
	tr := gen(t, "mix:duration=20s", 1)
	net := sim.Network{Latency: sim.Latency{Kind: "exponential", Min: 0, Mean: 3 * time.Millisecond}, Loss: 0.1, Duplicate: 0.05, Reorder: 0.1}
	a := run(t, tr, "gcounter", runOpts{Nodes: 5, Net: net, Params: []string{"catch_up=true"}})
	b := run(t, tr, "gcounter", runOpts{Nodes: 5, Net: net, Params: []string{"catch_up=true"}})
	if !reflect.DeepEqual(a, b) {
		t.Fatal("two runs with the same seed differ")
	}
	if a.MessagesLost == 0 {
		t.Fatal("10% loss lost no message")
	}
}

// A node that crashes and restarts comes back with an empty state. Without
// catch_up it counts again from 0 in its old G-Counter slot, and max()
// swallows its new admissions until they pass its old count; with catch_up
// its new instance has a slot of its own and is sent the full state.
func TestCatchUpAfterRestart(t *testing.T) {
	tr := gen(t, "heavy:users=5,rate=50,duration=40s", 2)
	sc, err := sim.ParseScenario([]byte("detection: 1s\nevents:\n  - at: 10s\n    crash: [n1]\n  - at: 14s\n    restart: [n1]\n"))
	if err != nil {
		t.Fatal(err)
	}
	net := fixed(time.Millisecond)
	central := allowed(run(t, tr, "central", runOpts{Net: net}))
	plain := eval.Compare(tr.Requests, allowed(run(t, tr, "gcounter", runOpts{Nodes: 4, Net: net, Scenario: sc})), central)
	res := run(t, tr, "gcounter", runOpts{Nodes: 4, Net: net, Scenario: sc, Params: []string{"catch_up=true"}})
	caught := eval.Compare(tr.Requests, allowed(res), central)
	t.Logf("excess with restart: plain %d (%.1f%%), catch_up %d (%.1f%%)", plain.ExcessAdmitted, plain.ExcessPct, caught.ExcessAdmitted, caught.ExcessPct)
	if caught.ExcessAdmitted >= plain.ExcessAdmitted {
		t.Fatalf("catch_up excess %d not below plain %d", caught.ExcessAdmitted, plain.ExcessAdmitted)
	}
	if len(res.Crashed) != 1 {
		t.Fatalf("crashed %v", res.Crashed)
	}
}

func TestParams(t *testing.T) {
	for _, bad := range [][]string{{"gossip=0s"}, {"gossip=-1s"}, {"gossip=x"}, {"catch_up=maybe"}, {"linf=true"}, {"idle=-1s"}, {"idle=x"}, {"idle=2s"}, {"gossip=2m"}} {
		p, _ := strategy.ParseParams(bad)
		_, err := gcounter.New(strategy.Config{Self: "a", Members: []strategy.NodeID{"a"}, Rate: rate, Burst: burst, Rand: rand.New(rand.NewPCG(1, 1)), Params: p})
		if err == nil {
			t.Errorf("%v accepted", bad)
		} else {
			t.Log(err)
		}
	}
	for _, ok := range [][]string{{"idle=0"}, {"idle=3s"}, {"gossip=2m", "idle=0"}, {"gossip=1m", "idle=1h"}} {
		p, _ := strategy.ParseParams(ok)
		if _, err := gcounter.New(strategy.Config{Self: "a", Members: []strategy.NodeID{"a"}, Rate: rate, Burst: burst, Rand: rand.New(rand.NewPCG(1, 1)), Params: p}); err != nil {
			t.Errorf("%v: %v", ok, err)
		}
	}
}

// byIndex sends requests before index split to node 0 and the rest to node 1.
type byIndex struct{ split int }

func (a byIndex) Assign(_ *workload.Request, i, n int) int {
	if i < a.split {
		return 0
	}
	return 1
}

// §5.5: n0 admits a burst of 5 that empties the bucket at 0 s; n1 crashes
// before it hears of it and restarts at 1 s, then gets 5 requests at 1.5 s,
// when central has refilled 1 token. Without catch_up it starts from a new
// full bucket and admits all 5; with catch_up its buddy (n2) sends it the
// full state when membership shows it again, and it admits 1.
func TestCatchUpCrafted(t *testing.T) {
	tr := &workload.Trace{Name: "restart"}
	for i := 0; i < 5; i++ {
		tr.Requests = append(tr.Requests, workload.Request{Arrival: time.Duration(i) * time.Millisecond, Key: "k", Tokens: 1})
	}
	for i := 0; i < 5; i++ {
		tr.Requests = append(tr.Requests, workload.Request{Arrival: 1500*time.Millisecond + time.Duration(i)*time.Millisecond, Key: "k", Tokens: 1})
	}
	sc, err := sim.ParseScenario([]byte("detection: 100ms\nevents:\n  - at: 100ms\n    crash: [n1]\n  - at: 1s\n    restart: [n1]\n"))
	if err != nil {
		t.Fatal(err)
	}
	net := fixed(time.Millisecond)
	central := allowed(run(t, tr, "central", runOpts{Net: net}))
	o := runOpts{Nodes: 4, Net: net, Scenario: sc, Assigner: byIndex{split: 5}, Params: []string{"gossip=50ms"}}
	plain := eval.Compare(tr.Requests, allowed(run(t, tr, "gcounter", o)), central)
	o.Params = append(o.Params, "catch_up=true")
	caught := eval.Compare(tr.Requests, allowed(run(t, tr, "gcounter", o)), central)
	if plain.ExcessAdmitted != 4 || caught.ExcessAdmitted != 0 {
		t.Fatalf("excess: plain %d (want 4), catch_up %d (want 0)", plain.ExcessAdmitted, caught.ExcessAdmitted)
	}
}
