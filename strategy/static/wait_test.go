package static_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/eval"
	"github.com/tokenmesh/tokenmesh/sim/simtest"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/static"
)

// TestRequestWaitReserves: in waiting mode (SRTM §5.2) node n0 of 2 holds
// the sub-token bucket (r/2, b/2) = (1 token/s, 2) of (2/s, 4): it admits
// its burst at once, then one token per second of wait (the DRL penalty of
// SRTM §2.1: the wait is at r/N, twice central's), first come first
// served, and refuses a request whose wait would exceed maxWait without
// reserving anything. A re-split to one member keeps the reservation due
// when promised.
func TestRequestWaitReserves(t *testing.T) {
	s, err := static.New(strategy.Config{Self: "n0", Members: []strategy.NodeID{"n0", "n1"},
		Rate: bucket.Rate{Tokens: 2, Per: time.Second}, Burst: 4, Rand: rand.New(rand.NewPCG(1, 1))})
	if err != nil {
		t.Fatal(err)
	}
	var fx strategy.Effects
	const maxWait = 1500 * time.Millisecond
	for i, want := range []struct {
		allowed bool
		delay   time.Duration
	}{
		{true, 0}, {true, 0}, // b/2
		{true, time.Second}, // 1 token at r/2 = 1/s
		{false, 0},          // 2 s is above maxWait
		{false, 0},          // nothing was reserved for the refusal
	} {
		d, decided := s.RequestWait(0, strategy.Request{ID: uint64(i), Key: "k", Tokens: 1}, maxWait, &fx)
		if !decided || d.Allowed != want.allowed || d.Delay != want.delay {
			t.Fatalf("request %d: decided %v, allowed %v after %v; want allowed %v after %v", i, decided, d.Allowed, d.Delay, want.allowed, want.delay)
		}
	}
	// n1 leaves at 0: n0 holds (2/s, 4). The reservation is still due at
	// 1 s (bucket.Bucket.SetRateKeepingDue: the debt becomes 2 tokens at
	// 2/s; SetRate's 1 token would let a request proceed at 0.5 s, before
	// the reserved one), and the next token comes 0.5 s after that.
	s.SetMembers(0, []strategy.NodeID{"n0"}, &fx)
	if d, _ := s.RequestWait(0, strategy.Request{ID: 9, Key: "k", Tokens: 1}, maxWait, &fx); !d.Allowed || d.Delay != 1500*time.Millisecond {
		t.Fatalf("after the re-split: allowed %v after %v, want allowed after 1.5s (the reservation still due at 1 s)", d.Allowed, d.Delay)
	}
	// maxWait 0 is Request: refused, no wait.
	if d, _ := s.RequestWait(0, strategy.Request{ID: 10, Key: "k", Tokens: 1}, 0, &fx); d.Allowed || d.Delay != 0 {
		t.Fatalf("maxWait 0: allowed %v after %v, want a plain refusal", d.Allowed, d.Delay)
	}
}

// TestWaitingEnvelope: in waiting mode on a fixed membership, the tokens
// static's nodes admit, counted when they proceed (arrival + delay), stay
// within b + r*T (SRTM §1.1, §5.2): each sub-token bucket's reservations
// conform to (r/N, b_i), and these sum to (r, b).
func TestWaitingEnvelope(t *testing.T) {
	f := func(cfg strategy.Config) (strategy.Strategy, error) { return static.New(cfg) }
	rapid.Check(t, func(t *rapid.T) {
		w := simtest.WaitingEnvelope(t, "static", f, nil)
		if w.Violation(eval.EnvelopeViolation) > 1e-9 {
			t.Fatalf("%d nodes, (%v, %d), max wait %v: admitted tokens when they proceed exceed b + r*T by %.4f (%d waited)", w.Nodes, w.Rate, w.Burst, w.MaxWait, w.Violation(eval.EnvelopeViolation), w.Waited)
		}
	})
}
