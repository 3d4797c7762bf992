package strategy_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/local"
	"github.com/tokenmesh/tokenmesh/strategy/static"
)

// allowancer is a strategy with allowances (local, static).
type allowancer interface {
	strategy.Strategy
	strategy.Allowancer
	strategy.Remainer
}

// admission is tokens admitted at a time, by a decision or from an
// allowance.
type admission struct {
	at     time.Duration
	tokens int64
}

// envelopeExcess is the largest excess, in ticks (per ticks per token), of
// the tokens admitted in a window [t_i, t_j] over b + r*(t_j - t_i): exact
// integers, every pair of admissions (admissions sorted by time).
func envelopeExcess(adm []admission, rate bucket.Rate, burst int64) (excess int64, from, to int) {
	per := int64(rate.Per)
	for i := range adm {
		var sum int64
		for j := i; j < len(adm); j++ {
			sum += adm[j].tokens
			if v := sum*per - burst*per - rate.Tokens*int64(adm[j].at-adm[i].at); v > excess {
				excess, from, to = v, i, j
			}
		}
	}
	return excess, from, to
}

// TestAllowanceEnvelope: whatever the driver does with allowances within
// the contract (grant, consume any part, return exactly what is left
// before deciding the key on the strategy), the admissions of every key
// in every window of length T stay within b + r*T of the node's bucket
// (local: (r, b); static: its share (r/N, b_i)). The allowance tokens are
// admissions at the time the driver consumes them, not at the grant.
func TestAllowanceEnvelope(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		rate := bucket.Rate{Tokens: int64(rapid.IntRange(1, 20).Draw(t, "rate_tokens")),
			Per: []time.Duration{time.Millisecond, 3 * time.Millisecond, 7 * time.Millisecond}[rapid.IntRange(0, 2).Draw(t, "rate_per")]}
		burst := int64(rapid.IntRange(1, 120).Draw(t, "burst"))
		kind := rapid.SampledFrom([]string{"local", "static"}).Draw(t, "strategy")
		nodes := 1
		if kind == "static" {
			nodes = rapid.IntRange(1, 3).Draw(t, "nodes")
		}
		members := make([]strategy.NodeID, nodes)
		for i := range members {
			members[i] = strategy.NodeID(fmt.Sprintf("n%d", i))
		}
		selfIdx := rapid.IntRange(0, nodes-1).Draw(t, "self")
		cfg := strategy.Config{Self: members[selfIdx], Members: members, Rate: rate, Burst: burst, Rand: rand.New(rand.NewPCG(1, 2))}
		var s allowancer
		shareRate, shareBurst := rate, burst
		var err error
		if kind == "local" {
			s, err = local.New("local", cfg)
		} else {
			s, err = static.New(cfg)
			if shareRate, err = rate.Div(int64(nodes)); err != nil {
				t.Fatal(err)
			}
			if shareBurst, err = bucket.SplitBurst(burst, nodes, selfIdx); err != nil {
				t.Fatal(err)
			}
		}
		if err != nil {
			t.Fatal(err)
		}
		var fx strategy.Effects
		now := time.Duration(0)
		s.Start(now, &fx)
		keys := []string{"a", "b"}
		rem := map[string]int64{} // the driver's allowance left, per key
		open := map[string]bool{} // the driver holds an allowance of key
		adm := map[string][]admission{}
		returnOpen := func(k string) {
			if open[k] {
				s.Return(now, k, rem[k], &fx)
				rem[k], open[k] = 0, false
			}
		}
		var id uint64
		steps := rapid.IntRange(1, 300).Draw(t, "steps")
		for range steps {
			k := rapid.SampledFrom(keys).Draw(t, "key")
			switch rapid.IntRange(0, 7).Draw(t, "op") {
			case 0, 1:
				now += time.Duration(rapid.Int64Range(0, int64(4*time.Millisecond)).Draw(t, "dt_ns"))
			case 2: // a decision on the strategy: the driver returns first
				returnOpen(k)
				id++
				n := int64(rapid.IntRange(1, 4).Draw(t, "tokens"))
				fx.Reset()
				d, ok := s.Request(now, strategy.Request{ID: id, Key: k, Tokens: n, Arrival: now}, &fx)
				if !ok {
					t.Fatalf("%s decided asynchronously", kind)
				}
				if d.Allowed {
					adm[k] = append(adm[k], admission{now, n})
				}
			case 3:
				want := int64(rapid.IntRange(1, 60).Draw(t, "want"))
				g, until := s.Grant(now, k, want, &fx)
				if g < 0 || g > want || g > shareBurst {
					t.Fatalf("Grant(want %d) = %d tokens (burst %d)", want, g, shareBurst)
				}
				if g > 0 && until <= now {
					t.Fatalf("Grant: until %v is not after now %v", until, now)
				}
				rem[k] += g
				open[k] = open[k] || g > 0
			case 4: // the driver admits from its allowance
				if rem[k] > 0 {
					n := rapid.Int64Range(1, rem[k]).Draw(t, "consume")
					rem[k] -= n
					adm[k] = append(adm[k], admission{now, n})
				}
			case 5:
				returnOpen(k)
			case 6:
				fx.Reset()
				s.Tick(now, &fx)
			case 7:
				r1, _ := s.Remaining(now, k)
				r2, _ := s.Remaining(now, k)
				if r1 != r2 || r1 < 0 || r1 > shareBurst {
					t.Fatalf("Remaining = %d then %d (burst %d)", r1, r2, shareBurst)
				}
				s.(strategy.Snapshotter).Snapshot(now, func(strategy.KeyState) {})
			}
		}
		for _, k := range keys {
			if ex, i, j := envelopeExcess(adm[k], shareRate, shareBurst); ex > 0 {
				t.Fatalf("key %s: admitted %.9f tokens above b + r*T in [%v, %v] (share (%v, %d))",
					k, float64(ex)/float64(shareRate.Per), adm[k][i].at, adm[k][j].at, shareRate, shareBurst)
			}
		}
	})
}

// TestAllowanceReturnedWhole: a grant returned unused changes nothing (the
// bucket has its tokens back, exactly); a grant consumed is spent, and
// while its tokens are held the bucket refills only to the burst less
// them.
func TestAllowanceReturnedWhole(t *testing.T) {
	rate := bucket.Rate{Tokens: 1000, Per: time.Second} // 5 tokens per AllowanceWindow
	l, err := local.New("local", strategy.Config{Self: "n0", Members: []strategy.NodeID{"n0"}, Rate: rate, Burst: 100, Rand: rand.New(rand.NewPCG(1, 2))})
	if err != nil {
		t.Fatal(err)
	}
	var fx strategy.Effects
	l.Start(0, &fx)
	if got := strategy.AllowanceCap(rate, 100); got != 5 {
		t.Fatalf("AllowanceCap = %d, want 5 (1000/s for 5 ms)", got)
	}
	g, _ := l.Grant(0, "k", 50, &fx)
	if g != 5 {
		t.Fatalf("Grant(50) = %d, want the cap 5", g)
	}
	if r, _ := l.Remaining(0, "k"); r != 95 {
		t.Fatalf("Remaining with 5 held = %d, want 95", r)
	}
	// A second later the bucket would be full; 5 are still held.
	if r, _ := l.Remaining(time.Second, "k"); r != 95 {
		t.Fatalf("Remaining 1 s later with 5 held = %d, want 95 (burst less the held)", r)
	}
	l.Return(time.Second, "k", 5, &fx)
	if r, _ := l.Remaining(time.Second, "k"); r != 100 {
		t.Fatalf("Remaining after returning all = %d, want 100", r)
	}
	g, _ = l.Grant(time.Second, "k", 3, &fx)
	if g != 3 {
		t.Fatalf("Grant(3) = %d", g)
	}
	l.Return(time.Second, "k", 1, &fx) // 2 consumed
	if r, _ := l.Remaining(time.Second, "k"); r != 98 {
		t.Fatalf("Remaining after 2 of 3 consumed = %d, want 98", r)
	}
	l.Return(time.Second, "k", 7, &fx) // nothing open: ignored
	if r, _ := l.Remaining(time.Second, "k"); r != 98 {
		t.Fatalf("Remaining after a stray Return = %d, want 98 (ignored)", r)
	}
	if strategy.AllowanceCap(bucket.Rate{Tokens: 100, Per: time.Second}, 100) != 0 {
		t.Fatal("AllowanceCap of 100/s is not 0 (half a token per window)")
	}
}
