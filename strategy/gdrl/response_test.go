package gdrl_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/eval"
	"github.com/tokenmesh/tokenmesh/sim/simtest"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/gdrl"
)

// responseAfter runs the requests (arrival, tokens) of key k in waiting
// mode on a node alone in its cluster with rate r tokens/s and burst b,
// and returns its response indicator for k at the end (seconds).
func responseAfter(t *rapid.T, r, b int64, at []time.Duration, tokens []int64) float64 {
	params, err := strategy.ParseParams([]string{"indicator=response"})
	if err != nil {
		t.Fatal(err)
	}
	g, err := gdrl.New(strategy.Config{Self: "n0", Members: []strategy.NodeID{"n0"},
		Rate: bucket.Rate{Tokens: r, Per: time.Second}, Burst: b, Rand: rand.New(rand.NewPCG(1, 1)), Params: params})
	if err != nil {
		t.Fatal(err)
	}
	var fx strategy.Effects
	g.Start(0, &fx)
	for i := range at {
		fx.Reset()
		d, _ := g.RequestWait(at[i], strategy.Request{ID: uint64(i), Key: "k", Tokens: tokens[i], Arrival: at[i]}, time.Hour, &fx)
		if !d.Allowed {
			t.Fatalf("rate %d: request %d refused with an hour's max wait", r, i)
		}
	}
	fx.Reset()
	g.Tick(at[len(at)-1]+time.Second, &fx) // closes the last interval
	return g.Indicator("k")
}

// TestResponseDecreasingInShare: 001 Assumption 1 for the response
// indicator (IndicatorResponse) in waiting mode without refusals: the
// same requests at a node with a larger capacity share (here the whole
// rule on one node, the rate drawn larger) never give a larger mean
// response time, and a share that cannot keep up gives a positive one.
func TestResponseDecreasingInShare(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		b := rapid.Int64Range(1, 5).Draw(t, "burst")
		r1 := rapid.Int64Range(1, 20).Draw(t, "rate")
		r2 := r1 + rapid.Int64Range(1, 20).Draw(t, "more")
		n := rapid.IntRange(1, 200).Draw(t, "requests")
		at, tokens := make([]time.Duration, n), make([]int64, n)
		now := time.Duration(0)
		for i := range n {
			now += time.Duration(rapid.Int64Range(0, int64(300*time.Millisecond)).Draw(t, "gap"))
			at[i], tokens[i] = now, rapid.Int64Range(1, b).Draw(t, "tokens")
		}
		q1, q2 := responseAfter(t, r1, b, at, tokens), responseAfter(t, r2, b, at, tokens)
		if q2 > q1*(1+1e-12) {
			t.Fatalf("rate %d: response %.6f s; rate %d: %.6f s (want at most)", r1, q1, r2, q2)
		}
		if q1 < 0 || q2 < 0 {
			t.Fatalf("negative response: %v, %v", q1, q2)
		}
	})
}

// TestResponseWaitingEnvelope: with the response indicator, capacity
// moving between nodes in waiting mode keeps the admitted tokens within
// b + r*T, as TestWaitingEnvelope checks for fill.
func TestResponseWaitingEnvelope(t *testing.T) {
	f := func(cfg strategy.Config) (strategy.Strategy, error) { return gdrl.New(cfg) }
	rapid.Check(t, func(t *rapid.T) {
		w := simtest.WaitingEnvelope(t, "gdrl", f, func(time.Duration) []string {
			return []string{"interval=50ms", "graph=full", "alpha=0.5", "indicator=response"}
		})
		if w.Violation(eval.EnvelopeViolation) > 1e-9 {
			t.Fatalf("%d nodes, (%v, %d), max wait %v: admitted tokens when they proceed exceed b + r*T by %.4f (%d waited)", w.Nodes, w.Rate, w.Burst, w.MaxWait, w.Violation(eval.EnvelopeViolation), w.Waited)
		}
	})
}

// TestResponseMeasuresWait: three one-token reservations at 0 with
// (1/s, 1) wait 0, 1 and 2 s: the interval's mean wait is 1 s, and the
// filter (alpha 0.02) makes the indicator 0.02 s after that interval.
func TestResponseMeasuresWait(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		if q := responseAfter(t, 1, 1, make([]time.Duration, 3), []int64{1, 1, 1}); q < 0.02-1e-12 || q > 0.02+1e-12 {
			t.Fatalf("response %v s, want 0.02", q)
		}
	})
}

// TestResponsePlainCheck: for plain checks the response indicator counts
// the wait a reservation would have had: with (1/s, 1) alone, two
// one-token checks at 0 are admitted (0 s) and refused (1 s to the next
// token): a mean of 0.5 s, 0.01 s after the filter (alpha 0.02).
func TestResponsePlainCheck(t *testing.T) {
	params, err := strategy.ParseParams([]string{"indicator=response"})
	if err != nil {
		t.Fatal(err)
	}
	g, err := gdrl.New(strategy.Config{Self: "n0", Members: []strategy.NodeID{"n0"},
		Rate: bucket.Rate{Tokens: 1, Per: time.Second}, Burst: 1, Rand: rand.New(rand.NewPCG(1, 1)), Params: params})
	if err != nil {
		t.Fatal(err)
	}
	var fx strategy.Effects
	g.Start(0, &fx)
	for i, want := range []bool{true, false} {
		if d, _ := g.Request(0, strategy.Request{ID: uint64(i), Key: "k", Tokens: 1}, &fx); d.Allowed != want {
			t.Fatalf("check %d: allowed %v, want %v", i, d.Allowed, want)
		}
	}
	g.Tick(time.Second, &fx)
	if q := g.Indicator("k"); q < 0.01-1e-12 || q > 0.01+1e-12 {
		t.Fatalf("response %v s, want 0.01", q)
	}
}
