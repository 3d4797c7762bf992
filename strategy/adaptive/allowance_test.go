package adaptive_test

import (
	"fmt"
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
// (simtest.FastPath: allowances, refusal windows); it fails the run
// (fail) when a request handed to the strategy in a refusal window is not
// refused at once.
type driven struct {
	*adaptive.Adaptive
	drv  *simtest.FastPath
	fail func(format string, args ...any)
	// returnOnReceive returns every open allowance (and reports every
	// window) before each peer message, so before every re-split, which
	// the live driver does not.
	returnOnReceive bool
}

func (d driven) Request(now time.Duration, req strategy.Request, fx *strategy.Effects) (strategy.Decision, bool) {
	return d.RequestWait(now, req, 0, fx)
}

func (d driven) RequestWait(now time.Duration, req strategy.Request, maxWait time.Duration, fx *strategy.Effects) (strategy.Decision, bool) {
	dec, done, inWindow := d.drv.Before(now, req, maxWait, fx)
	if done {
		return dec, true
	}
	dec, ok := d.Adaptive.RequestWait(now, req, maxWait, fx)
	if err := d.drv.After(now, req, maxWait, dec, ok, inWindow, fx); err != nil {
		d.fail("%v", err)
	}
	return dec, ok
}

func (d driven) Receive(now time.Duration, from strategy.NodeID, payload []byte, fx *strategy.Effects) error {
	if d.returnOnReceive {
		d.drv.CloseAll(now, fx)
	}
	err := d.Adaptive.Receive(now, from, payload, fx)
	d.drv.Ended(fx)
	return err
}

func (d driven) Tick(now time.Duration, fx *strategy.Effects) {
	d.drv.Sweep(now, fx)
	d.Adaptive.Tick(now, fx)
	d.drv.Ended(fx)
}

func (d driven) SetMembers(now time.Duration, members []strategy.NodeID, fx *strategy.Effects) {
	d.drv.CloseAll(now, fx)
	d.Adaptive.SetMembers(now, members, fx)
}

func (d driven) SetExpected(now time.Duration, expected []strategy.NodeID, fx *strategy.Effects) {
	d.drv.CloseAll(now, fx)
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
		var drivers []*simtest.FastPath
		res, err := sim.Run(&workload.Trace{Name: "rapid-allow", Requests: reqs}, sim.Config{
			Name: "adaptive", Nodes: nodes, Rate: rate, Burst: burst, Params: params, Seed: 7,
			Network: sim.Network{Latency: sim.Latency{Kind: "uniform", Min: time.Millisecond, Max: 5 * time.Millisecond}},
			Assign:  sticky{period: period},
			New: func(cfg strategy.Config) (strategy.Strategy, error) {
				a, err := adaptive.New(cfg)
				if err != nil {
					return nil, err
				}
				drv := simtest.NewFastPath(a, rand.New(rand.NewPCG(drvSeed, uint64(len(drivers)+1))), 16)
				drivers = append(drivers, drv)
				return driven{Adaptive: a, drv: drv, fail: t.Fatalf, returnOnReceive: returnOnReceive}, nil
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		fast := 0
		for _, d := range drivers {
			fast += d.Admitted
			windowRefusals.Add(int64(d.Refused))
			windowKept.Add(int64(d.Kept))
		}
		allowanceAdmits.Add(int64(fast))
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
