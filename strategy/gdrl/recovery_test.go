package gdrl_test

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/gdrl"
)

// After a single crash the capacity is all back once the heir has inherited:
// the test measures, over seeds, the update intervals (100 ms) from the
// crash until sum C_i + in flight = C again (the failure detector's delay,
// 300 ms here, plus the inheritance) and until sum C_i = C (the transfers
// the dead node had in flight settled by heirs too).
func TestCrashRecovery(t *testing.T) {
	C := int64(10_000_000)
	var toInherit, toSettle []int
	for seed := uint64(1); seed <= 30; seed++ {
		r := rand.New(rand.NewPCG(seed, 5))
		net := hnet{loss: 0.1, dup: 0.05, reorder: 0.1, minDelay: time.Millisecond, maxDelay: 5 * time.Millisecond}
		h := newHarness(6, seed, net, bucket.Rate{Tokens: 10, Per: time.Second}, 10, nil, t.Fatalf)
		for i := range 6 {
			h.poisson(i, "a", float64(1+r.IntN(20)), 1, 20*time.Second)
		}
		victim := r.IntN(6)
		crashAt := time.Duration(3000+r.IntN(3000)) * time.Millisecond
		h.at(crashAt, func() { h.crash(victim) })
		inherited, settled := time.Duration(-1), time.Duration(-1)
		h.afterEvent = func() {
			if h.now <= crashAt || settled >= 0 {
				return
			}
			held, _, inflight, _, _ := h.audit("a")
			if held+inflight > C {
				t.Fatalf("seed %d: created capacity", seed)
			}
			if inherited < 0 && held+inflight == C {
				inherited = h.now
			}
			if inherited >= 0 && held == C {
				settled = h.now
			}
		}
		h.runUntil(crashAt + 10*time.Second)
		if inherited < 0 || settled < 0 {
			held, _, inflight, _, _ := h.audit("a")
			t.Fatalf("seed %d: not recovered 10 s after the crash of n%d: sum C_i %d + in flight %d, C %d", seed, victim, held, inflight, C)
		}
		iv := func(d time.Duration) int { return int((d - crashAt + 99*time.Millisecond) / (100 * time.Millisecond)) }
		toInherit = append(toInherit, iv(inherited))
		toSettle = append(toSettle, iv(settled))
	}
	slices.Sort(toInherit)
	slices.Sort(toSettle)
	t.Logf("30 single crashes (10%% loss): intervals until sum C_i + in flight = C: median %d, max %d; until sum C_i = C: median %d, max %d",
		toInherit[len(toInherit)/2], toInherit[len(toInherit)-1], toSettle[len(toSettle)/2], toSettle[len(toSettle)-1])
}

// Keys that go idle relax back to the default shares, are dropped, and the
// cluster falls silent.
func TestIdleKeysGoImplicit(t *testing.T) {
	h := newHarness(5, 2, hnet{loss: 0.05, minDelay: time.Millisecond, maxDelay: 3 * time.Millisecond},
		bucket.Rate{Tokens: 7, Per: time.Second}, 9, []string{"idle=2s"}, t.Fatalf)
	for i, key := range []string{"a", "b", "c", "a", "d"} {
		h.poisson(i, key, 20, 1, 5*time.Second)
	}
	h.runUntil(60 * time.Second)
	for _, n := range h.nodes {
		if keys := n.g.Keys(); len(keys) != 0 {
			t.Errorf("%s still holds explicit shares of %v", n.id, keys)
		}
	}
	before := h.messages
	h.runUntil(70 * time.Second)
	if h.messages != before {
		t.Errorf("an idle cluster sent %d messages in 10 s", h.messages-before)
	}
	for _, key := range []string{"a", "b", "c", "d"} {
		if held, heldB, _, _, _ := h.audit(key); held != 7_000_000 || heldB != 9_000_000 {
			t.Errorf("key %s: sum C_i %d, sum B_i %d", key, held, heldB)
		}
	}
}

func TestNewErrors(t *testing.T) {
	base := func() strategy.Config {
		return strategy.Config{Self: "n0", Members: []strategy.NodeID{"n0", "n1", "n2"}, Rate: bucket.Rate{Tokens: 1, Per: time.Second},
			Burst: 5, Rand: rand.New(rand.NewPCG(1, 1))}
	}
	for _, params := range [][]string{
		{"interval=0s"}, {"interval=x"}, {"indicator=latency"}, {"eta=0"}, {"eta=2"}, {"alpha=0"}, {"alpha=1.5"},
		{"graph=star"}, {"graph=regular", "degree=3"}, {"graph=regular", "degree=0"}, {"max_keys=0"}, {"noise_band=-1"},
		{"retransmit=0s"}, {"bogus=1"},
	} {
		cfg := base()
		p, err := strategy.ParseParams(params)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Params = p
		if _, err := gdrl.New(cfg); err == nil {
			t.Errorf("params %v accepted", params)
		}
	}
	cfg := base()
	cfg.Self = "n9"
	if _, err := gdrl.New(cfg); err == nil {
		t.Error("a node outside its members accepted")
	}
	cfg = base()
	cfg.Burst = 1 << 60
	if _, err := gdrl.New(cfg); err == nil {
		t.Error("a burst of 2^60 tokens accepted")
	}
	cfg = base()
	cfg.Rate = bucket.Rate{Tokens: 1e12, Per: time.Second}
	if _, err := gdrl.New(cfg); err == nil {
		t.Error("a rate of 1e12 tokens/s accepted")
	}
	cfg = base()
	p, _ := strategy.ParseParams([]string{"interval=50ms", "indicator=spare", "eta=0.25", "alpha=0.1", "graph=regular", "degree=2",
		"idle=1s", "retransmit=20ms", "max_keys=10", "noise_band=0"})
	cfg.Params = p
	g, err := gdrl.New(cfg)
	if err != nil {
		t.Fatalf("valid params refused: %v", err)
	}
	if g.Gain() != 0.25 {
		t.Errorf("gain %v, want 0.25", g.Gain())
	}
	// Above the stability bound 1/(2d) of a degree-2 graph: refused, naming it.
	p, _ = strategy.ParseParams([]string{"eta=0.3", "graph=ring"})
	cfg.Params = p
	if _, err := gdrl.New(cfg); err == nil || !strings.Contains(err.Error(), "stability bound 1/(2d) = 0.25") {
		t.Errorf("eta=0.3 on a ring: %v, want a refusal naming the bound 0.25", err)
	}
}

func TestUnits(t *testing.T) {
	for _, c := range []struct {
		r    bucket.Rate
		want int64
	}{
		{bucket.Rate{Tokens: 1, Per: time.Second}, 1_000_000},
		{bucket.Rate{Tokens: 1, Per: 3 * time.Second}, 333_333},
		{bucket.Rate{Tokens: 5, Per: 2 * time.Millisecond}, 2_500_000_000},
		{bucket.Rate{}, 0},
	} {
		if got, err := gdrl.RateUnits(c.r); err != nil || got != c.want {
			t.Errorf("RateUnits(%v) = %d, %v; want %d", c.r, got, err, c.want)
		}
	}
	// The 1/N rule in whole units: shares sum to (C, B) exactly.
	members := []strategy.NodeID{"a", "b", "c", "d", "e", "f", "g"}
	var sumC, sumB int64
	for _, m := range members {
		g, err := gdrl.New(strategy.Config{Self: m, Members: members, Rate: bucket.Rate{Tokens: 10, Per: 3 * time.Second}, Burst: 11,
			Rand: rand.New(rand.NewPCG(1, 1))})
		if err != nil {
			t.Fatal(err)
		}
		var fx strategy.Effects
		g.Start(0, &fx)
		sumC += g.CapacityShare("any")
		sumB += g.BurstShare("any")
		if g.BurstShare("any")%gdrl.UnitsPerToken != 0 {
			t.Errorf("%s: burst share %d is not whole tokens", m, g.BurstShare("any"))
		}
	}
	if sumC != 3_333_333 || sumB != 11_000_000 {
		t.Errorf("1/N shares sum to (%d, %d), want (3333333, 11000000)", sumC, sumB)
	}
	// A joiner (started after time 0) holds nothing.
	g, _ := gdrl.New(strategy.Config{Self: "a", Members: members, Rate: bucket.Rate{Tokens: 1, Per: time.Second}, Burst: 1, Rand: rand.New(rand.NewPCG(1, 1))})
	var fx strategy.Effects
	g.Start(time.Second, &fx)
	if g.CapacityShare("x") != 0 || g.BurstShare("x") != 0 {
		t.Error("a joiner holds a share")
	}
	if d, _ := g.Request(time.Second, strategy.Request{ID: 1, Key: "x", Tokens: 1, Arrival: time.Second}, &fx); d.Allowed {
		t.Error("a joiner with no share admitted a request")
	}
}
