package adaptive_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/eval"
	"github.com/tokenmesh/tokenmesh/sim"
	"github.com/tokenmesh/tokenmesh/sim/simtest"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/adaptive"
	"github.com/tokenmesh/tokenmesh/strategy/static"
	"github.com/tokenmesh/tokenmesh/workload"
)

var (
	rate  = bucket.Rate{Tokens: 1, Per: time.Second}
	burst = int64(5)
)

func run(t testing.TB, tr *workload.Trace, name string, o simtest.Options) *sim.Result {
	t.Helper()
	o.Rate, o.Burst = rate, burst
	f := func(cfg strategy.Config) (strategy.Strategy, error) { return adaptive.New(cfg) }
	if name == "static" {
		f = func(cfg strategy.Config) (strategy.Strategy, error) { return static.New(cfg) }
	}
	return simtest.Run(t, tr, name, f, o)
}

type outcome struct {
	c         eval.Counts
	violation float64
	res       *sim.Result
}

func compare(t *testing.T, tr *workload.Trace, o simtest.Options) (central, st, ad outcome) {
	t.Helper()
	plain := o
	plain.Params = nil
	cen := simtest.Allowed(run(t, tr, "central", plain))
	measure := func(name string) outcome {
		oo := plain
		if name == "adaptive" {
			oo = o
		}
		res := run(t, tr, name, oo)
		al := simtest.Allowed(res)
		return outcome{eval.Compare(tr.Requests, al, cen), eval.EnvelopeViolation(tr.Requests, al, rate.PerSec(), burst), res}
	}
	central = outcome{c: eval.Compare(tr.Requests, cen, cen)}
	return central, measure("static"), measure("adaptive")
}

// Sticky assignment: every key's traffic is at one node, where static
// holds only (r/N, b/N). Adaptive moves the key's share there and admits
// far more, within the (r, b) envelope.
func TestSkewedBeatsStatic(t *testing.T) {
	tr := simtest.Gen(t, "heavy:users=20,rate=200,duration=30s", 5)
	o := simtest.Options{Nodes: 4, Assign: "key"}
	cen, st, ad := compare(t, tr, o)
	t.Logf("sticky, 4 nodes, %d requests: admitted central %d, static %d, adaptive %d (false rejections %d, excess %d = %.2f%%); envelope violation static %.2f, adaptive %.2f tokens; adaptive %d messages, %d bytes, peak state %d B",
		len(tr.Requests), cen.c.Admitted, st.c.Admitted, ad.c.Admitted, ad.c.FalseRejections, ad.c.ExcessAdmitted, ad.c.ExcessPct,
		st.violation, ad.violation, ad.res.Messages, ad.res.Bytes, ad.res.StateBytesPeak)
	if gain := ad.c.Admitted - st.c.Admitted; gain*2 < cen.c.Admitted-st.c.Admitted {
		t.Fatalf("adaptive admitted %d: does not close half the gap between static %d and central %d", ad.c.Admitted, st.c.Admitted, cen.c.Admitted)
	}
	if ad.violation > 1 {
		t.Fatalf("envelope violation %.2f tokens", ad.violation)
	}
	if ad.res.Messages == 0 {
		t.Fatal("no messages")
	}
}

// Hash assignment spreads every key over all nodes: adaptive should stay
// close to static.
func TestSpreadNoWorseThanStatic(t *testing.T) {
	tr := simtest.Gen(t, "mix:duration=30s", 3)
	o := simtest.Options{Nodes: 4}
	cen, st, ad := compare(t, tr, o)
	t.Logf("hash, 4 nodes, %d requests: admitted central %d, static %d, adaptive %d; envelope violation static %.2f, adaptive %.2f",
		len(tr.Requests), cen.c.Admitted, st.c.Admitted, ad.c.Admitted, st.violation, ad.violation)
	if ad.c.Admitted*100 < st.c.Admitted*97 {
		t.Fatalf("adaptive admitted %d, more than 3%% below static's %d", ad.c.Admitted, st.c.Admitted)
	}
	if ad.violation > 1 {
		t.Fatalf("envelope violation %.2f tokens", ad.violation)
	}
}

// The adaptor (n0) crashes and comes back; the others keep their shares,
// n1 takes over, and the envelope holds.
func TestAdaptorFailover(t *testing.T) {
	tr := simtest.Gen(t, "heavy:users=10,rate=100,duration=30s", 2)
	sc, err := sim.ParseScenario([]byte("detection: 1s\nevents:\n  - at: 10s\n    crash: [n0]\n  - at: 18s\n    restart: [n0]\n"))
	if err != nil {
		t.Fatal(err)
	}
	o := simtest.Options{Nodes: 4, Assign: "key", Scenario: sc}
	cen, st, ad := compare(t, tr, o)
	t.Logf("adaptor crash: admitted central %d, static %d, adaptive %d; violation static %.2f, adaptive %.2f",
		cen.c.Admitted, st.c.Admitted, ad.c.Admitted, st.violation, ad.violation)
	if ad.c.Admitted <= st.c.Admitted {
		t.Fatalf("adaptive %d not above static %d", ad.c.Admitted, st.c.Admitted)
	}
	if ad.violation > float64(burst) {
		t.Fatalf("envelope violation %.2f tokens", ad.violation)
	}
}

func TestParams(t *testing.T) {
	for _, bad := range [][]string{{"window=0s"}, {"step=0s"}, {"window=10s", "step=3s"}, {"floor=-1"}, {"floor=2"}, {"significance=-1"}, {"min_mean=-1"}, {"units=0"}, {"raise_after=x"}, {"gossip=1s"}} {
		p, _ := strategy.ParseParams(bad)
		_, err := adaptive.New(strategy.Config{Self: "a", Members: []strategy.NodeID{"a"}, Rate: rate, Burst: burst, Rand: rand.New(rand.NewPCG(1, 1)), Params: p})
		if err == nil {
			t.Errorf("%v accepted", bad)
		} else {
			t.Log(err)
		}
	}
	p, _ := strategy.ParseParams([]string{"window=5s", "step=500ms", "floor=0.2", "significance=2", "units=100", "raise_after=5ms"})
	if _, err := adaptive.New(strategy.Config{Self: "a", Members: []strategy.NodeID{"a"}, Rate: rate, Burst: burst, Rand: rand.New(rand.NewPCG(1, 1)), Params: p}); err != nil {
		t.Fatal(err)
	}
}

// shifting sends each key to one node, a different one every 10 s: the
// traffic moves and the shares follow, epoch after epoch.
type shifting struct{}

func (shifting) Assign(r *workload.Request, _ int, n int) int {
	h := 0
	for _, c := range []byte(r.Key) {
		h = h*31 + int(c)
	}
	return (h + int(r.Arrival/(10*time.Second))) % n
}

// Moving traffic under jittered latency: measure the envelope violation
// with the two-phase switch (decreases at once, increases after
// raise_after) and without it.
func TestShiftingEnvelope(t *testing.T) {
	tr := simtest.Gen(t, "heavy:users=10,rate=100,duration=40s", 4)
	net := sim.Network{Latency: sim.Latency{Kind: "uniform", Min: time.Millisecond, Max: 20 * time.Millisecond}}
	o := simtest.Options{Nodes: 4, Assigner: shifting{}, Net: net, Params: []string{"raise_after=25ms"}}
	cen, st, ad := compare(t, tr, o)
	o.Params = []string{"raise_after=0s"}
	_, _, ad0 := compare(t, tr, o)
	t.Logf("shifting, latency 1-20ms: admitted central %d, static %d, adaptive %d (raise_after=0: %d); envelope violation adaptive %.2f, raise_after=0 %.2f tokens",
		cen.c.Admitted, st.c.Admitted, ad.c.Admitted, ad0.c.Admitted, ad.violation, ad0.violation)
	if ad.c.Admitted <= st.c.Admitted {
		t.Fatalf("adaptive %d not above static %d", ad.c.Admitted, st.c.Admitted)
	}
	if ad.violation > 1 {
		t.Fatalf("envelope violation %.2f tokens", ad.violation)
	}
}

// 10% message loss with moving traffic: a node that misses an epoch keeps
// its old shares until the next one; measure what that costs the envelope.
func TestLossEnvelope(t *testing.T) {
	tr := simtest.Gen(t, "heavy:users=10,rate=100,duration=40s", 4)
	net := sim.Network{Latency: sim.Latency{Kind: "uniform", Min: time.Millisecond, Max: 5 * time.Millisecond}, Loss: 0.1}
	cen, st, ad := compare(t, tr, simtest.Options{Nodes: 4, Assigner: shifting{}, Net: net})
	t.Logf("shifting, 10%% loss: admitted central %d, static %d, adaptive %d; envelope violation adaptive %.2f tokens; %d of %d messages lost",
		cen.c.Admitted, st.c.Admitted, ad.c.Admitted, ad.violation, ad.res.MessagesLost, ad.res.Messages)
	if ad.res.MessagesLost == 0 {
		t.Fatal("no message lost")
	}
	if ad.violation > float64(burst) {
		t.Fatalf("envelope violation %.2f tokens above b", ad.violation)
	}
}
