package adaptive_test

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/eval"
	"github.com/tokenmesh/tokenmesh/sim"
	"github.com/tokenmesh/tokenmesh/sim/simtest"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/adaptive"
	"github.com/tokenmesh/tokenmesh/workload"
)

// driven is an Adaptive node with the live driver's fast path emulated
// (cluster/fastpath.go): after a plain request it asks for an allowance
// of the key at random (half of the time), admits the key's later plain
// requests from it while it covers them and the clock reads before its
// until (the simulator records them as the node's decisions), returns it
// before any other call about the key and before SetMembers and
// SetExpected, and returns open ones at random ticks (the idle sweep). It
// plays the refusal windows too (strategy.Refuser): after a plain request
// refused it asks RefusedUntil and, until then (capped at a random 1-50
// ms) or an Effects.EndRefusal of the key, refuses the key's plain
// requests itself, counting them, or, at random, hands them to the
// strategy and fails the run when it does not refuse them (the window's
// promise); the counts go back with Refused before any other call about
// the key, before SetMembers and SetExpected, and at random ticks once
// the window is over.
type driven struct {
	*adaptive.Adaptive
	rnd     *rand.Rand
	open    map[string]*openAllowance
	windows map[string]*refusalWindow
	fast    *int
	stats   *windowStats
	fail    func(format string, args ...any)
	// returnOnReceive returns every open allowance before each peer
	// message (so before every re-split), which the live driver does not.
	returnOnReceive bool
}

func (d driven) Receive(now time.Duration, from strategy.NodeID, payload []byte, fx *strategy.Effects) error {
	if d.returnOnReceive {
		d.returnAll(now, fx)
	}
	err := d.Adaptive.Receive(now, from, payload, fx)
	d.ended(fx)
	return err
}

// refusalWindow is a key's refusal window and the requests refused in it,
// not reported yet.
type refusalWindow struct {
	until            time.Duration
	requests, tokens int64
}

// windowStats counts the requests refused in windows by the driver and
// those the strategy refused in them as promised.
type windowStats struct{ refused, kept int }

// report ends key's window, if any, and reports its refusals.
func (d driven) report(now time.Duration, key string, fx *strategy.Effects) {
	if w := d.windows[key]; w != nil {
		delete(d.windows, key)
		if w.requests > 0 {
			d.Adaptive.Refused(now, key, w.requests, w.tokens, fx)
		}
	}
}

// ended stops refusing the keys whose windows the strategy ended.
func (d driven) ended(fx *strategy.Effects) {
	for _, k := range fx.RefusalsEnded {
		if w := d.windows[k]; w != nil {
			w.until = 0
		}
	}
}

type openAllowance struct {
	tokens int64
	until  time.Duration
}

func (d driven) giveBack(now time.Duration, key string, fx *strategy.Effects) {
	if a := d.open[key]; a != nil {
		delete(d.open, key)
		d.Adaptive.Return(now, key, a.tokens, fx)
	}
}

func (d driven) Request(now time.Duration, req strategy.Request, fx *strategy.Effects) (strategy.Decision, bool) {
	if a := d.open[req.Key]; a != nil && a.tokens >= req.Tokens && now < a.until {
		a.tokens -= req.Tokens
		*d.fast++
		return strategy.Decision{RequestID: req.ID, Allowed: true}, true
	}
	inWindow := false
	if w := d.windows[req.Key]; w != nil && now < w.until {
		if d.rnd.IntN(2) == 0 {
			w.requests++
			w.tokens += req.Tokens
			d.stats.refused++
			return strategy.Decision{RequestID: req.ID}, true
		}
		inWindow = true
	}
	d.report(now, req.Key, fx)
	d.giveBack(now, req.Key, fx)
	dec, ok := d.Adaptive.Request(now, req, fx)
	if inWindow {
		if !ok || dec.Allowed {
			d.fail("key %q at %v: in a refusal window, but Request decided (done %v, allowed %v)", req.Key, now, ok, dec.Allowed)
		}
		d.stats.kept++
	}
	d.ended(fx)
	if ok && !dec.Allowed {
		if until := min(d.Adaptive.RefusedUntil(now, req.Key), now+time.Duration(1+d.rnd.IntN(50))*time.Millisecond); until > now {
			d.windows[req.Key] = &refusalWindow{until: until}
		}
	}
	if d.rnd.IntN(2) == 0 {
		if g, until := d.Adaptive.Grant(now, req.Key, int64(1+d.rnd.IntN(16)), fx); g > 0 {
			d.open[req.Key] = &openAllowance{tokens: g, until: until}
		}
	}
	return dec, ok
}

func (d driven) RequestWait(now time.Duration, req strategy.Request, maxWait time.Duration, fx *strategy.Effects) (strategy.Decision, bool) {
	if maxWait <= 0 {
		return d.Request(now, req, fx)
	}
	d.report(now, req.Key, fx)
	d.giveBack(now, req.Key, fx)
	return d.Adaptive.RequestWait(now, req, maxWait, fx)
}

func (d driven) Tick(now time.Duration, fx *strategy.Effects) {
	for _, k := range slices.Sorted(maps.Keys(d.open)) {
		if d.rnd.IntN(4) == 0 {
			d.giveBack(now, k, fx)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(d.windows)) {
		if now >= d.windows[k].until && d.rnd.IntN(4) == 0 {
			d.report(now, k, fx)
		}
	}
	d.Adaptive.Tick(now, fx)
	d.ended(fx)
}

func (d driven) returnAll(now time.Duration, fx *strategy.Effects) {
	for _, k := range slices.Sorted(maps.Keys(d.open)) {
		d.giveBack(now, k, fx)
	}
	for _, k := range slices.Sorted(maps.Keys(d.windows)) {
		d.report(now, k, fx)
	}
}

func (d driven) SetMembers(now time.Duration, members []strategy.NodeID, fx *strategy.Effects) {
	d.returnAll(now, fx)
	d.Adaptive.SetMembers(now, members, fx)
}

func (d driven) SetExpected(now time.Duration, expected []strategy.NodeID, fx *strategy.Effects) {
	d.returnAll(now, fx)
	d.Adaptive.SetExpected(now, expected, fx)
}

// sticky sends each key's requests to one node, which moves every period.
type sticky struct{ period time.Duration }

func (s sticky) Assign(r *workload.Request, _ int, n int) int {
	h := 0
	for _, c := range []byte(r.Key) {
		h = h*31 + int(c)
	}
	return (h + int(r.Arrival/s.period)) % n
}

// allowanceAdmits counts the requests admitted from allowances over the
// runs of TestEnvelopeWithAllowances.
var allowanceAdmits atomic.Int64

// windowRefusals and windowKept count the requests refused in refusal
// windows by the emulated driver and by the strategy, over the runs.
var windowRefusals, windowKept atomic.Int64

// TestEnvelopeWithAllowances: adaptive with the driver's allowances
// emulated at every node (driven), on keys whose traffic comes in bursts
// of 20 ms at one node, which moves (so that the TB Adaptor re-splits
// shares under open allowances, and allowances sit unused while their
// buckets refill), at rates where an allowance holds tokens. When the driver
// returns its allowances before every peer message (so no re-split
// finds tokens held), the admitted tokens stay within b + r*T plus the one
// token adaptive allows itself (its other envelope tests): the
// allowances cost nothing. As the live driver does, with allowances open
// across re-splits: plus, per node, one allowance above a lowered share
// (allowance.go: the tokens held when a re-split lowers the share, at
// most strategy.AllowanceCap of the share they came from). The emulated
// refusal windows hold their promise (driven). It fails when no run
// admitted anything from an allowance, or no window was tested. It fails
// within ~10 runs when Return gives back the used tokens, and finds a raise of a
// share that does not end the key's window within ~30 runs (that fail
// file is kept).
func TestEnvelopeWithAllowances(t *testing.T) {
	before, refusedBefore, keptBefore := allowanceAdmits.Load(), windowRefusals.Load(), windowKept.Load()
	rapid.Check(t, func(t *rapid.T) {
		nodes := rapid.IntRange(2, 5).Draw(t, "nodes")
		keys := rapid.IntRange(1, 3).Draw(t, "keys")
		ratePerSec := rapid.IntRange(1000, 8000).Draw(t, "rate")
		burst := int64(rapid.IntRange(20, 400).Draw(t, "burst"))
		spanMs := rapid.IntRange(300, 3000).Draw(t, "span_ms")
		n := min(keys*ratePerSec*spanMs/1000*rapid.IntRange(1, 3).Draw(t, "overload"), 20000)
		period := time.Duration(rapid.IntRange(100, 1000).Draw(t, "period_ms")) * time.Millisecond
		// In bursts of 20 ms with gaps between them, so that allowances
		// sit unused while their buckets refill.
		bursts := rapid.IntRange(1, 10).Draw(t, "bursts")
		reqs := make([]workload.Request, 0, n)
		for range n {
			k := rapid.IntRange(0, bursts-1).Draw(t, "burst")
			at := time.Duration(k*spanMs/bursts)*time.Millisecond + time.Duration(rapid.IntRange(0, 20_000).Draw(t, "at_us"))*time.Microsecond
			reqs = append(reqs, workload.Request{
				Arrival: at,
				Key:     fmt.Sprintf("k%d", rapid.IntRange(0, keys-1).Draw(t, "key")),
				Tokens:  int64(rapid.IntRange(1, 2).Draw(t, "tokens")),
			})
		}
		slices.SortStableFunc(reqs, func(a, b workload.Request) int { return int(a.Arrival - b.Arrival) })
		drvSeed := rapid.Uint64().Draw(t, "driver_seed")
		returnOnReceive := rapid.Bool().Draw(t, "return_on_receive")
		rate, err := bucket.PerSecond(float64(ratePerSec))
		if err != nil {
			t.Fatal(err)
		}
		params, err := strategy.ParseParams([]string{"window=1s", "step=100ms", "raise_after=20ms", "min_mean=1"})
		if err != nil {
			t.Fatal(err)
		}
		fast, built := 0, 0
		var stats windowStats
		res, err := sim.Run(&workload.Trace{Name: "rapid-allow", Requests: reqs}, sim.Config{
			Name: "adaptive", Nodes: nodes, Rate: rate, Burst: burst, Params: params, Seed: 7,
			Network: sim.Network{Latency: sim.Latency{Kind: "uniform", Min: time.Millisecond, Max: 5 * time.Millisecond}},
			Assign:  sticky{period: period},
			New: func(cfg strategy.Config) (strategy.Strategy, error) {
				a, err := adaptive.New(cfg)
				if err != nil {
					return nil, err
				}
				built++
				return driven{Adaptive: a, rnd: rand.New(rand.NewPCG(drvSeed, uint64(built))), open: map[string]*openAllowance{},
					windows: map[string]*refusalWindow{}, fast: &fast, stats: &stats, fail: t.Fatalf, returnOnReceive: returnOnReceive}, nil
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		allowanceAdmits.Add(int64(fast))
		windowRefusals.Add(int64(stats.refused))
		windowKept.Add(int64(stats.kept))
		served := simtest.Served(reqs, res.Outcomes)
		all := make([]bool, len(served))
		for i := range all {
			all[i] = true
		}
		bound := 1.0
		if !returnOnReceive {
			bound += float64(nodes) * float64(strategy.AllowanceCap(rate, burst))
		}
		if v := eval.EnvelopeViolation(served, all, rate.PerSec(), burst); v > bound+1e-9 {
			t.Fatalf("%d nodes, (%v, %d), allowances returned before re-splits %v: admitted tokens exceed b + r*T by %.3f (bound %.0f; %d admitted from allowances)",
				nodes, rate, burst, returnOnReceive, v, bound, fast)
		}
	})
	if allowanceAdmits.Load() == before {
		t.Error("no request was admitted from an allowance in any run: the fast path went untested")
	}
	if windowRefusals.Load() == refusedBefore || windowKept.Load() == keptBefore {
		t.Error("no request was refused in a refusal window by the driver, or none handed to the strategy in one: the windows went untested")
	}
	t.Logf("%d requests admitted from allowances; in refusal windows %d refused by the driver, %d refused by the strategy as promised",
		allowanceAdmits.Load()-before, windowRefusals.Load()-refusedBefore, windowKept.Load()-keptBefore)
}
