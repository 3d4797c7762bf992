package simtest

import (
	"fmt"
	"slices"
	"time"

	"pgregory.net/rapid"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/sim"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/workload"
)

// WaitRun is one random run in waiting mode drawn by WaitingEnvelope.
type WaitRun struct {
	Nodes   int
	Rate    bucket.Rate
	Burst   int64
	MaxWait time.Duration
	Result  *sim.Result
	// Waited is the admitted requests given a delay > 0.
	Waited int
	// Served is the admitted requests at the times they proceed
	// (Served), for eval.EnvelopeViolation (with every one allowed).
	Served []workload.Request
}

// Served is the admitted requests of outs (decided and allowed) at the
// times they proceed, arrival + delay (SRTM §5.2: a request admitted in
// waiting mode takes its tokens then), sorted by that time.
func Served(reqs []workload.Request, outs []sim.Outcome) []workload.Request {
	var served []workload.Request
	for i, r := range reqs {
		if o := outs[i]; o.Decided && o.Allowed {
			r.Arrival += o.Delay
			served = append(served, r)
		}
	}
	slices.SortStableFunc(served, func(a, b workload.Request) int { return int(a.Arrival - b.Arrival) })
	return served
}

// WaitingEnvelope draws a cluster (2-8 nodes, rate 1-100 tokens/s, burst
// 1-40, 1-4 keys offered up to 10 times their rate, 1-2 tokens per
// request, a random assignment and a fixed membership) and a max wait
// (1 ms to 2 s), runs the strategy name (built by f, with the parameters
// params(maxWait) returns) in waiting mode (sim.Config.MaxWait), fails t
// when a decision's delay is outside [0, maxWait] or a refusal carries
// one, and returns the run with the admitted requests when they proceed
// (Served; the caller measures their envelope). Property tests of SRTM §5.2's waiting mode
// (000 §1.1: the aggregate conforms to the (r, b) envelope).
func WaitingEnvelope(t *rapid.T, name string, f sim.Factory, params func(maxWait time.Duration) []string) WaitRun {
	nodes := rapid.IntRange(2, 8).Draw(t, "nodes")
	keys := rapid.IntRange(1, 4).Draw(t, "keys")
	ratePerSec := rapid.IntRange(1, 100).Draw(t, "rate")
	burst := int64(rapid.IntRange(1, 40).Draw(t, "burst"))
	spanMs := rapid.IntRange(200, 6000).Draw(t, "span_ms")
	overload := rapid.Float64Range(0.2, 10).Draw(t, "overload")
	n := min(int(float64(keys*ratePerSec*spanMs)/1000*overload)+1, 3000)
	reqs := make([]workload.Request, 0, n)
	for range n {
		reqs = append(reqs, workload.Request{
			Arrival: time.Duration(rapid.IntRange(0, spanMs).Draw(t, "at")) * time.Millisecond,
			Key:     fmt.Sprintf("k%d", rapid.IntRange(0, keys-1).Draw(t, "key")),
			Tokens:  int64(rapid.IntRange(1, 2).Draw(t, "tokens")),
		})
	}
	slices.SortStableFunc(reqs, func(a, b workload.Request) int { return int(a.Arrival - b.Arrival) })
	tr := &workload.Trace{Name: "rapid-wait", Requests: reqs}
	maxWait := time.Duration(rapid.IntRange(1, 2000).Draw(t, "max_wait_ms")) * time.Millisecond
	rate, err := bucket.PerSecond(float64(ratePerSec))
	if err != nil {
		t.Fatal(err)
	}
	var ps []string
	if params != nil {
		ps = params(maxWait)
	}
	p, err := strategy.ParseParams(ps)
	if err != nil {
		t.Fatal(err)
	}
	assign, err := workload.NewAssigner(rapid.SampledFrom([]string{"roundrobin", "random", "hash", "key"}).Draw(t, "assign"), 1)
	if err != nil {
		t.Fatal(err)
	}
	lat := time.Duration(rapid.IntRange(0, 5).Draw(t, "latency_ms")) * time.Millisecond
	res, err := sim.Run(tr, sim.Config{Name: name, New: f, Nodes: nodes, Rate: rate, Burst: burst, Params: p,
		Network: Fixed(lat), Assign: assign, Seed: rapid.Uint64().Draw(t, "seed"), MaxWait: maxWait})
	if err != nil {
		t.Fatal(err)
	}
	if !res.WaitingMode {
		t.Fatalf("%s: the run was not in waiting mode (strategy.Waiter)", name)
	}
	w := WaitRun{Nodes: nodes, Rate: rate, Burst: burst, MaxWait: maxWait, Result: res}
	for i, o := range res.Outcomes {
		ok := o.Decided && o.Allowed
		if o.Delay < 0 || o.Delay > maxWait || (o.Delay > 0 && !ok) {
			t.Fatalf("request %d: delay %v outside [0, %v] (allowed %v)", i, o.Delay, maxWait, ok)
		}
		if ok && o.Delay > 0 {
			w.Waited++
		}
	}
	w.Served = Served(reqs, res.Outcomes)
	return w
}

// Violation is eval.EnvelopeViolation of the served requests (every one
// admitted) at w's (r, b): how far the tokens admitted, counted when they
// proceed, exceed b + r*T in any interval, in tokens. violation is
// eval.EnvelopeViolation itself, passed in because eval sits above
// simtest on the package map (docs/ARCHITECTURE.md).
func (w WaitRun) Violation(violation func(reqs []workload.Request, allowed []bool, ratePerSec float64, burst int64) float64) float64 {
	all := make([]bool, len(w.Served))
	for i := range all {
		all[i] = true
	}
	return violation(w.Served, all, w.Rate.PerSec(), w.Burst)
}
