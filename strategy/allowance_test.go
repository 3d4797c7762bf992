package strategy_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/rendezvous"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/local"
	"github.com/tokenmesh/tokenmesh/strategy/owner"
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
// (local: (r, b); static: its share (r/N, b_i); owner: (r, b) for the
// keys this node owns, with its replica syncs going out as messages). The allowance tokens are
// admissions at the time the driver consumes them, not at the grant.
func TestAllowanceEnvelope(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		rate := bucket.Rate{Tokens: int64(rapid.IntRange(1, 20).Draw(t, "rate_tokens")),
			Per: []time.Duration{time.Millisecond, 3 * time.Millisecond, 7 * time.Millisecond}[rapid.IntRange(0, 2).Draw(t, "rate_per")]}
		burst := int64(rapid.IntRange(1, 120).Draw(t, "burst"))
		kind := rapid.SampledFrom([]string{"local", "static", "owner"}).Draw(t, "strategy")
		nodes := 1
		if kind != "local" {
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
		keys := []string{"a", "b"}
		switch kind {
		case "local":
			s, err = local.New("local", cfg)
		case "owner":
			// hold 0 (LatencyHint 0): the owner decides its own keys at
			// once; the keys are ones this node owns.
			s, err = owner.New(cfg)
			keys = keys[:0]
			for i := 0; len(keys) < 2; i++ {
				if k := fmt.Sprintf("k%d", i); rendezvous.Owner(k, members) == cfg.Self {
					keys = append(keys, k)
				}
			}
		default:
			if s, err = static.New(cfg); err != nil {
				t.Fatal(err)
			}
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
			switch op := rapid.IntRange(0, 8).Draw(t, "op"); op {
			case 0, 1:
				now += time.Duration(rapid.Int64Range(0, int64(4*time.Millisecond)).Draw(t, "dt_ns"))
			case 2, 8:
				// A decision on the strategy: the driver returns first (2);
				// or it does not (8: a request forwarded to owner by a peer
				// while this node's driver holds an allowance of the key).
				if op == 2 {
					returnOpen(k)
				}
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

// TestOwnerGrantEligibility: owner grants only for keys it owns, with no
// ordering buffer, out of warm-up; the tokens granted leave the level it
// reports.
func TestOwnerGrantEligibility(t *testing.T) {
	rate := bucket.Rate{Tokens: 1000, Per: time.Second} // cap 5
	members := []strategy.NodeID{"n0", "n1", "n2"}
	var mine, theirs string
	for i := 0; mine == "" || theirs == ""; i++ {
		k := fmt.Sprintf("k%d", i)
		if rendezvous.Owner(k, members) == "n0" {
			mine = k
		} else {
			theirs = k
		}
	}
	mk := func(params ...string) *owner.Owner {
		p, err := strategy.ParseParams(params)
		if err != nil {
			t.Fatal(err)
		}
		o, err := owner.New(strategy.Config{Self: "n0", Members: members, Rate: rate, Burst: 100, Rand: rand.New(rand.NewPCG(1, 2)), Params: p})
		if err != nil {
			t.Fatal(err)
		}
		var fx strategy.Effects
		o.Start(0, &fx)
		return o
	}
	var fx strategy.Effects
	o := mk()
	if g, _ := o.Grant(0, theirs, 10, &fx); g != 0 {
		t.Fatalf("Grant of a key n1 or n2 owns = %d, want 0", g)
	}
	if g, _ := o.Grant(0, mine, 10, &fx); g != 5 {
		t.Fatalf("Grant of an owned key = %d, want the cap 5", g)
	}
	if r, ok := o.Remaining(0, mine); !ok || r != 95 {
		t.Fatalf("Remaining with 5 granted = %d, %v; want 95", r, ok)
	}
	o.Return(0, mine, 5, &fx)
	if r, _ := o.Remaining(0, mine); r != 100 {
		t.Fatalf("Remaining after the return = %d, want 100", r)
	}
	if g, _ := mk("hold=1ms").Grant(0, mine, 10, &fx); g != 0 {
		t.Fatalf("Grant with an ordering buffer = %d, want 0", g)
	}
	// A membership change starts a warm-up (1 s by default): no grants.
	o.SetMembers(time.Second, members[:2], &fx)
	k := ""
	for i := 0; k == ""; i++ {
		if c := fmt.Sprintf("w%d", i); rendezvous.Owner(c, members[:2]) == "n0" {
			k = c
		}
	}
	if g, _ := o.Grant(time.Second+time.Millisecond, k, 10, &fx); g != 0 {
		t.Fatalf("Grant during the warm-up = %d, want 0", g)
	}
	if g, _ := o.Grant(3*time.Second, k, 10, &fx); g != 5 {
		t.Fatalf("Grant after the warm-up = %d, want 5", g)
	}
}

// TestLedgerWholeHold: a key held by Hold (its whole bucket lent) is
// Whole with its tokens counted positive in Held, is never granted an
// allowance on top, clamps the bucket to no token, and is forgotten by
// Drop; an allowance's key is not Whole. MemoryBytes counts the keys
// held and falls back when they go (one map for both kinds).
func TestLedgerWholeHold(t *testing.T) {
	var l strategy.AllowanceLedger
	if l.MemoryBytes() != 0 {
		t.Fatalf("empty ledger MemoryBytes = %d, want 0", l.MemoryBytes())
	}
	rate := bucket.Rate{Tokens: 1000, Per: time.Second}
	b := bucket.MustNew(rate, 100, 0)
	l.Hold("w", 100)
	if !l.Whole("w") || l.Held("w") != 100 || l.Len() != 1 {
		t.Fatalf("after Hold: Whole %v, Held %d, Len %d; want true, 100, 1", l.Whole("w"), l.Held("w"), l.Len())
	}
	if g := l.Grant(&b, 0, "w", 5, 5); g != 0 || l.Held("w") != 100 || !l.Whole("w") {
		t.Fatalf("Grant on a whole-held key gave %d (Held %d, Whole %v); want 0, 100, true", g, l.Held("w"), l.Whole("w"))
	}
	l.Clamp(&b, time.Second, "w")
	if lv, _, per := b.LevelAt(time.Second); lv/per != 0 {
		t.Fatalf("a whole-held bucket holds %d tokens, want 0", lv/per)
	}
	c := bucket.MustNew(rate, 100, 0)
	if g := l.Grant(&c, 0, "a", 5, 5); g != 5 || l.Whole("a") || l.Held("a") != 5 {
		t.Fatalf("Grant: %d tokens, Whole %v, Held %d; want 5, false, 5", g, l.Whole("a"), l.Held("a"))
	}
	if m := l.MemoryBytes(); m <= 0 {
		t.Fatalf("MemoryBytes with 2 keys held = %d, want > 0", m)
	}
	l.Drop("w")
	l.Return(&c, 0, "a", 5)
	if l.Len() != 0 || l.Whole("w") || l.Held("w") != 0 {
		t.Fatalf("after Drop and Return: Len %d, Whole %v, Held %d", l.Len(), l.Whole("w"), l.Held("w"))
	}
}
