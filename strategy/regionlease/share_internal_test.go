package regionlease

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"pgregory.net/rapid"

	peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"
	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// sizeShare's three outcomes on worked numbers (quantum 50 ms, period 100
// ms, lead 10 ms), and its bounds on any input: a grant of 1 to ask
// tokens; a turn of 0, or a share of at most max(whole, 1) tokens with a
// turn of at least lead and below maxTurn.
func TestSizeShare(t *testing.T) {
	const q, per, lead = 50 * time.Millisecond, 100 * time.Millisecond, 10 * time.Millisecond
	for _, c := range []struct {
		name                   string
		ask                    int64
		demand, inflow         float64
		whole                  int64
		maxTurn                time.Duration
		wantN                  int64
		wantTurnLo, wantTurnHi time.Duration
	}{
		// supply 60 + 30*0.05 = 61.5 against 2,000*0.05 = 100: the
		// rate is 61.5% of the ask's 1,000/s, 30.75 -> 31 tokens for a
		// quantum, its turn 31/615 s + lead = 60.41 ms.
		{"share", 100, 2000, 30, 60, per, 31, 60_400 * time.Microsecond, 60_420 * time.Microsecond},
		// the same share's turn would not end before maxTurn: untilDry,
		// 60 tokens last 60/1,970 s = 30.5 ms of a 100 ms ask: 31.
		{"share beyond maxTurn", 100, 2000, 30, 60, 50 * time.Millisecond, 31, 0, 0},
		// supply 200 + 1.5 >= 100: untilDry, 200/1,970 s = 101.5 ms is
		// more than a period: the ask.
		{"enough", 100, 2000, 30, 200, per, 100, 0, 0},
		// untilDry: supply 150 + 25 >= 100, 150 tokens last 150/1,500 s
		// = 100 ms: not less than a period, the ask; 100 last 66.7 ms:
		// ceil(66.7) = 67.
		{"until dry, 150", 100, 2000, 500, 150, per, 100, 0, 0},
		{"until dry, 100", 100, 2000, 500, 100, per, 67, 0, 0},
		// demand below the inflow: the ask, whatever the stock.
		{"no drain", 100, 900, 1000, 0, per, 100, 0, 0},
	} {
		n, turn := sizeShare(c.ask, c.demand, c.inflow, c.whole, q, per, lead, c.maxTurn)
		if n != c.wantN || turn < c.wantTurnLo || turn > c.wantTurnHi {
			t.Errorf("%s: sizeShare = %d, %v; want %d, turn in [%v, %v]", c.name, n, turn, c.wantN, c.wantTurnLo, c.wantTurnHi)
		}
	}
	rapid.Check(t, func(t *rapid.T) {
		ask := rapid.Int64Range(1, 1_000_000).Draw(t, "ask")
		demand := rapid.Float64Range(0, 1e13).Draw(t, "demand")
		inflow := rapid.Float64Range(0, 1e13).Draw(t, "inflow")
		whole := rapid.Int64Range(0, 1_000_000).Draw(t, "whole")
		quantum := time.Duration(rapid.Int64Range(1, int64(time.Second)).Draw(t, "quantum"))
		period := time.Duration(rapid.Int64Range(1, int64(time.Second)).Draw(t, "period"))
		ld := time.Duration(rapid.Int64Range(0, int64(time.Second)).Draw(t, "lead"))
		maxTurn := time.Duration(rapid.Int64Range(1, int64(time.Second)).Draw(t, "maxTurn"))
		n, turn := sizeShare(ask, demand, inflow, whole, quantum, period, ld, maxTurn)
		if n < 1 || n > ask {
			t.Fatalf("granted %d of an ask of %d", n, ask)
		}
		if turn != 0 && (n > max(whole, 1) || turn < ld || turn >= maxTurn+time.Microsecond) {
			t.Fatalf("share of %d tokens (whole %d), turn %v: want at most max(whole, 1), a turn of at least lead %v and below maxTurn %v", n, whole, turn, ld, maxTurn)
		}
	})
}

// A stock's inflow counts each token 1/window and decays by
// exp(-age/window).
func TestInflowDecays(t *testing.T) {
	var h holding
	if got := h.inflow(time.Second, time.Second); got != 0 {
		t.Fatalf("no token taken: inflow %g, want 0", got)
	}
	h.noteIn(0, 30, time.Second)
	h.noteIn(0, 30, time.Second)
	if got := h.inflow(0, time.Second); got != 60 {
		t.Errorf("60 tokens at 0, window 1 s: inflow %g/s at 0, want 60", got)
	}
	if got, want := h.inflow(500*time.Millisecond, time.Second), 60*math.Exp(-0.5); math.Abs(got-want) > 1e-9 {
		t.Errorf("inflow %g/s at 500 ms, want %g", got, want)
	}
}

// A regional owner whose stock is short of its region's demand lends a
// node its share of the stock and what comes in, with a dry hint to its
// next turn (stockGrant): the stock holds 60 tokens, 30 came in at 0, and
// two nodes ask for 1,000/s each; at 10 ms the inflow is 30*e^-0.01 =
// 29.7/s, the supply over a quantum (the default, 2*period/5: 40 ms)
// 61.19 against a demand of 80: the node's rate 764.9/s, 31 tokens, its
// turn 31/764.9 s + lead (10 ms) = 50.53 ms. With quantum=0 (the build
// before) it gets all 60 and no hint.
func TestStockGrantShares(t *testing.T) {
	for _, c := range []struct {
		param     string
		wantN     int64
		wantUntil time.Duration // 0: no hint
	}{{"", 31, 10*time.Millisecond + 50_531*time.Microsecond}, {"quantum=0", 60, 0}} {
		var raw []string
		if c.param != "" {
			raw = append(raw, c.param)
		}
		ps, err := strategy.ParseParams(append([]string{"replicas=0"}, raw...))
		if err != nil {
			t.Fatal(err)
		}
		members := []strategy.NodeID{"eu.n0", "us.n1", "us.n2", "us.n3"}
		l, err := New(strategy.Config{Self: "us.n1", Members: members, Rate: bucket.Rate{Tokens: 1, Per: time.Millisecond},
			Burst: 1000, Params: ps, Rand: rand.New(rand.NewPCG(1, 1)), LatencyHint: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		var fx strategy.Effects
		l.Start(0, &fx)
		const key = "k"
		h := l.holding(key)
		h.leases = append(h.leases, held{seq: 1, from: "eu.n0", tokens: 60, expires: time.Second, region: true, granted: 60})
		h.noteIn(0, 30, l.window)
		now := 10 * time.Millisecond
		h.reports["us.n3"] = report{mtps: 1_000_000, at: now}
		g := l.grantStock(now, now, "us.n2", &peerv1.RegionLeaseAsk{Key: key, Seq: 1, Tokens: 100, DemandMtps: 1_000_000}, &fx)
		if d := g.emptyUntil - c.wantUntil; g.tokens != c.wantN || d < -20*time.Microsecond || d > 20*time.Microsecond {
			t.Errorf("%q: granted %d, dry to %v; want %d, dry to %v", c.param, g.tokens, g.emptyUntil, c.wantN, c.wantUntil)
		}
	}
}
