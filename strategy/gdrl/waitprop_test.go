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

// TestRequestWaitReserves: in waiting mode (SRTM §5.2) node n0 of 2
// reserves in its bucket (C/2, B/2) = (1/s, 2) of (2/s, 4): its burst
// at once, then one token per second of wait, first come first served,
// and refuses without reserving when the wait would pass maxWait; a
// request above the rule's burst is refused; maxWait 0 is Request.
func TestRequestWaitReserves(t *testing.T) {
	g, err := gdrl.New(strategy.Config{Self: "n0", Members: []strategy.NodeID{"n0", "n1"},
		Rate: bucket.Rate{Tokens: 2, Per: time.Second}, Burst: 4, Rand: rand.New(rand.NewPCG(1, 1))})
	if err != nil {
		t.Fatal(err)
	}
	var fx strategy.Effects
	g.Start(0, &fx)
	const maxWait = 1500 * time.Millisecond
	for i, want := range []struct {
		tokens  int64
		allowed bool
		delay   time.Duration
	}{
		{1, true, 0}, {1, true, 0}, // B/2
		{1, true, time.Second}, // one token at C/2 = 1/s
		{1, false, 0},          // 2 s: above maxWait
		{5, false, 0},          // above the rule's burst: no wait is enough
	} {
		fx.Reset()
		d, decided := g.RequestWait(0, strategy.Request{ID: uint64(i), Key: "k", Tokens: want.tokens}, maxWait, &fx)
		if !decided || d.Allowed != want.allowed || d.Delay != want.delay {
			t.Fatalf("request %d: decided %v, allowed %v after %v; want allowed %v after %v", i, decided, d.Allowed, d.Delay, want.allowed, want.delay)
		}
	}
	if d, _ := g.RequestWait(time.Second, strategy.Request{ID: 9, Key: "k", Tokens: 1, Arrival: time.Second}, 0, &fx); d.Allowed || d.Delay != 0 {
		t.Fatalf("maxWait 0 at 1 s (level 0): allowed %v after %v, want a plain refusal", d.Allowed, d.Delay)
	}
}

// TestWaitingEnvelope: in waiting mode, with capacity moving between
// nodes (sticky and skewed assignments, a 50 ms interval, a full graph
// and little evidence needed), the tokens the nodes admit, counted when
// they proceed (arrival + delay), stay within b + r*T (SRTM §1.1, §5.2;
// GDRL's sum C_i = C): a node in reservation debt pays none of the key's
// capacity (RequestWait).
func TestWaitingEnvelope(t *testing.T) {
	f := func(cfg strategy.Config) (strategy.Strategy, error) { return gdrl.New(cfg) }
	rapid.Check(t, func(t *rapid.T) {
		w := simtest.WaitingEnvelope(t, "gdrl", f, func(time.Duration) []string {
			return []string{"interval=50ms", "graph=full", "evidence=0", "alpha=0.5"}
		})
		if w.Violation(eval.EnvelopeViolation) > 1e-9 {
			t.Fatalf("%d nodes, (%v, %d), max wait %v: admitted tokens when they proceed exceed b + r*T by %.4f (%d waited)", w.Nodes, w.Rate, w.Burst, w.MaxWait, w.Violation(eval.EnvelopeViolation), w.Waited)
		}
	})
}

// TestDebtPaysNothing: a node whose bucket for a key holds reservations
// not yet due (waiting mode) pays none of the key's capacity or burst
// (its reservations count on that refill until they are due), and drops
// tokens a transfer brings instead of repaying the debt early; once the
// refill has repaid the debt it pays as before.
func TestDebtPaysNothing(t *testing.T) {
	g, err := gdrl.New(strategy.Config{Self: "n0", Members: []strategy.NodeID{"n0", "n1"},
		Rate: bucket.Rate{Tokens: 2, Per: time.Second}, Burst: 4, Rand: rand.New(rand.NewPCG(1, 1))})
	if err != nil {
		t.Fatal(err)
	}
	var fx strategy.Effects
	g.Start(0, &fx)
	for i := range 3 { // B/2 = 2 at once, the third due at 1 s
		g.RequestWait(0, strategy.Request{ID: uint64(i), Key: "k", Tokens: 1}, time.Second, &fx)
	}
	c0 := g.CapacityShare("k")
	if n := g.PayForTest(0, "n1", "k", c0/2, 0); n != 0 || g.CapacityShare("k") != c0 {
		t.Fatalf("in debt: %d transfers queued, share %d (was %d); want none paid", n, g.CapacityShare("k"), c0)
	}
	g.AddTokensForTest("k", 2*g.UnitForTest(), 0)
	if d, _ := g.RequestWait(0, strategy.Request{ID: 9, Key: "k", Tokens: 1}, 5*time.Second, &fx); !d.Allowed || d.Delay != 2*time.Second {
		t.Fatalf("after tokens arrived in debt: allowed %v after %v, want after 2s (the tokens dropped, the reservation at 1 s first)", d.Allowed, d.Delay)
	}
	// At 3 s the debt (2 tokens at 1/s) is repaid: it pays again.
	if n := g.PayForTest(3*time.Second, "n1", "k", c0/2, 0); n != 1 || g.CapacityShare("k") != c0-c0/2 {
		t.Fatalf("debt repaid: %d transfers queued, share %d; want one paying %d of %d", n, g.CapacityShare("k"), c0/2, c0)
	}
}
