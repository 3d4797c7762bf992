package strategy_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/local"
	"github.com/tokenmesh/tokenmesh/strategy/static"
)

// lender is a strategy that lends whole buckets (local, static).
type lender interface {
	allowancer
	strategy.BucketLender
	strategy.Snapshotter
	strategy.KeyLeveler
}

// TestLentBucketEnvelope: whatever the driver does with a lent bucket
// within the contract (lend; refill and decide from it with its own clock,
// which may run ahead of the loop's; consume any part of the allowance
// its counters hold, the allowance split over two counters as the
// driver's per-P counters are, each settled on its own (Settle, Decide)
// or with the other; close it and give it back before deciding the key on
// the strategy, closing it at its clock; drop it), the admissions of every key in every window of
// length T stay within b + r*T of the node's bucket (local: (r, b);
// static: its share). Admissions are counted at the time they were
// decided: the loop's decisions at the loop's now, the driver's at its
// clock, an allowance's tokens when the counter gives them out. While a
// key is lent the strategy holds none of its tokens (Remaining 0), and
// Lend refuses a key lent already.
func TestLentBucketEnvelope(t *testing.T) {
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
		var s lender
		shareRate, shareBurst := rate, burst
		var err error
		if kind == "local" {
			s, err = local.New("local", cfg)
		} else {
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
		clock := time.Duration(0) // the driver's clock: the true time
		now := time.Duration(0)   // the loop's: never ahead of clock, never backwards
		s.Start(now, &fx)
		keys := []string{"a", "b"}
		lent := map[string]*strategy.LentBucket{} // the driver's lent buckets
		// Each one's allowance is split over two counters (the driver's
		// per-P counters): the tokens each holds, and the tokens handed to
		// it at its last fill (not settled yet).
		counter := map[string]*[2]int64{}
		handed := map[string]*[2]int64{}
		dropped := map[string]bool{} // lent and dropped: lent for good
		adm := map[string][]admission{}
		closeLent := func(k string, give bool) {
			if lb := lent[k]; lb != nil {
				// Closed at the driver's clock, read once the counter is
				// taken (no token of it is consumed later), and given
				// back at the loop's now, which may be earlier.
				c := counter[k]
				b := lb.Close(clock, c[0]+c[1])
				if give {
					s.Reclaim(now, k, b, &fx)
				} else {
					dropped[k] = true
				}
				delete(lent, k)
				counter[k], handed[k] = &[2]int64{}, &[2]int64{}
			}
		}
		var id uint64
		steps := rapid.IntRange(1, 300).Draw(t, "steps")
		for range steps {
			k := rapid.SampledFrom(keys).Draw(t, "key")
			switch op := rapid.IntRange(0, 9).Draw(t, "op"); op {
			case 0, 1: // time passes; the loop's now catches up, or not
				clock += time.Duration(rapid.Int64Range(0, int64(4*time.Millisecond)).Draw(t, "dt_ns"))
				now = max(now, clock-time.Duration(rapid.Int64Range(0, int64(time.Millisecond)).Draw(t, "lag_ns")))
			case 2: // a decision on the strategy, the bucket given back first
				closeLent(k, true)
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
			case 3: // lend, and open an allowance at once (the loop's fastGrant)
				b, ok := s.Lend(now, k, &fx)
				if lent[k] != nil || dropped[k] {
					if ok {
						t.Fatalf("Lend of a key lent already succeeded")
					}
					break
				}
				if !ok {
					t.Fatalf("Lend of a key not lent refused")
				}
				if r, _ := s.Remaining(now, k); r != 0 {
					t.Fatalf("Remaining of a lent key = %d, want 0", r)
				}
				lb := strategy.NewLentBucket(b)
				want := int64(rapid.IntRange(0, 30).Draw(t, "want"))
				g, _ := lb.Grant(now, 0, want, int64(rapid.IntRange(0, 30).Draw(t, "most")))
				lent[k], counter[k], handed[k] = &lb, &[2]int64{g, 0}, &[2]int64{g, 0}
			case 4: // a check one counter covers
				if c := counter[k]; c != nil {
					i := rapid.IntRange(0, 1).Draw(t, "counter")
					if c[i] > 0 {
						n := rapid.Int64Range(1, c[i]).Draw(t, "consume")
						c[i] -= n
						adm[k] = append(adm[k], admission{clock, n})
					}
				}
			case 5, 6: // a check a counter does not cover: the driver refills it (and maybe the other) and decides
				lb := lent[k]
				if lb == nil {
					break
				}
				c, h := counter[k], handed[k]
				i := rapid.IntRange(0, 1).Draw(t, "counter")
				n := c[i] + int64(rapid.IntRange(1, 4).Draw(t, "tokens"))
				var allowed bool
				var g, left int64
				want, most := int64(rapid.IntRange(0, 30).Draw(t, "want")), int64(rapid.IntRange(0, 30).Draw(t, "most"))
				if h[1-i] == 0 && rapid.Bool().Draw(t, "whole") {
					// One counter: Refill settles all that is held.
					allowed, g, left = lb.Refill(clock, c[i], n, want, most)
				} else {
					lb.Settle(clock, h[i], c[i])
					if rapid.Bool().Draw(t, "settle_other") { // the other counter too (fastPath.settleOthers)
						lb.Settle(clock, h[1-i], c[1-i])
						c[1-i], h[1-i] = 0, 0
					}
					allowed, g, left = lb.Decide(clock, n, want, most)
				}
				c[i], h[i] = g, g
				if g < 0 || left < 0 || left+h[0]+h[1] > shareBurst || lb.Held() != h[0]+h[1] {
					t.Fatalf("refill = %v, %d, %d (held %d, counters handed %v, burst %d)", allowed, g, left, lb.Held(), *h, shareBurst)
				}
				if allowed {
					adm[k] = append(adm[k], admission{clock, n})
				}
			case 7:
				closeLent(k, rapid.Bool().Draw(t, "give"))
			case 8:
				fx.Reset()
				s.Tick(now, &fx)
			case 9:
				r1, _ := s.Remaining(now, k)
				if r1 < 0 || r1 > shareBurst || ((lent[k] != nil || dropped[k]) && r1 != 0) {
					t.Fatalf("Remaining = %d (burst %d, lent %v)", r1, shareBurst, lent[k] != nil)
				}
				if lb := lent[k]; lb != nil {
					st, ok := lb.KeyState(clock, k)
					if ok && (st.Level < 0 || st.Level >= st.Capacity) {
						t.Fatalf("KeyState = %+v", st)
					}
				}
				s.Snapshot(now, func(strategy.KeyState) {})
			}
		}
		for _, k := range keys {
			a := adm[k]
			slices.SortStableFunc(a, func(x, y admission) int { return int(x.at - y.at) })
			if ex, i, j := envelopeExcess(a, shareRate, shareBurst); ex > 0 {
				t.Fatalf("key %s: admitted %.9f tokens above b + r*T in [%v, %v] (share (%v, %d))",
					k, float64(ex)/float64(shareRate.Per), a[i].at, a[j].at, shareRate, shareBurst)
			}
		}
	})
}

// TestLentBucketExact: a bucket lent and given back unused changes
// nothing; the driver's decisions are the strategy's own (the same
// admissions and refusals at the same times as a bucket never lent), and
// while an allowance is handed out the bucket refills only to the burst
// less it.
func TestLentBucketExact(t *testing.T) {
	rate := bucket.Rate{Tokens: 10, Per: time.Second}
	mk := func() *local.Local {
		l, err := local.New("local", strategy.Config{Self: "n0", Members: []strategy.NodeID{"n0"}, Rate: rate, Burst: 20, Rand: rand.New(rand.NewPCG(1, 2))})
		if err != nil {
			t.Fatal(err)
		}
		var fx strategy.Effects
		l.Start(0, &fx)
		return l
	}
	var fx strategy.Effects
	l := mk()
	b, ok := l.Lend(0, "k", &fx)
	if !ok {
		t.Fatal("Lend refused")
	}
	if _, ok := l.Lend(0, "k", &fx); ok {
		t.Fatal("a second Lend succeeded")
	}
	if g, _ := l.Grant(0, "k", 5, &fx); g != 0 {
		t.Fatalf("Grant of a lent key = %d, want 0", g)
	}
	lb := strategy.NewLentBucket(b)
	l.Reclaim(time.Second, "k", lb.Close(time.Second, 0), &fx)
	if r, _ := l.Remaining(time.Second, "k"); r != 20 {
		t.Fatalf("Remaining after an unused lend = %d, want 20", r)
	}

	// The same requests on a bucket never lent and on a lent one.
	ref := mk()
	l = mk()
	b, _ = l.Lend(0, "k", &fx)
	lb = strategy.NewLentBucket(b)
	for i := range 200 {
		at := time.Duration(i) * 37 * time.Millisecond
		n := int64(1 + i%3)
		d, _ := ref.Request(at, strategy.Request{ID: uint64(i + 1), Key: "k", Tokens: n, Arrival: at}, &fx)
		allowed, g, left := lb.Refill(at, 0, n, 0, 0)
		if allowed != d.Allowed || g != 0 {
			t.Fatalf("request %d at %v: lent bucket %v (grant %d), strategy %v", i, at, allowed, g, d.Allowed)
		}
		if r, _ := ref.Remaining(at, "k"); r != left {
			t.Fatalf("request %d: %d left in the lent bucket, %d in the strategy's", i, left, r)
		}
	}

	// An allowance of 5 handed out: the bucket refills to 15 only.
	lb = strategy.NewLentBucket(bucket.MustNew(rate, 20, 0))
	if g, left := lb.Grant(0, 0, 5, 10); g != 5 || left != 15 {
		t.Fatalf("Grant = %d, %d left; want 5, 15", g, left)
	}
	if st, ok := lb.KeyState(10*time.Second, "k"); !ok || st.Level/st.TicksPerToken != 15 {
		t.Fatalf("KeyState 10 s later = %+v, %v; want 15 tokens", st, ok)
	}
	// 3 of the 5 consumed: 2 go back, a request of 4 is decided, 3 more handed out.
	allowed, g, left := lb.Refill(10*time.Second, 2, 4, 3, 10)
	if !allowed || g != 3 || left != 10 {
		t.Fatalf("Refill = %v, %d, %d; want true, 3, 10 (15 + 2 - 4 - 3)", allowed, g, left)
	}
}
