package lease

import (
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/workload"
)

// TestReserveWholeCapacityRounding replays, in numbers, the owner's pool
// of the waiting-mode run that exceeded b + r*T by 1.352e-6 tokens
// (TestEnvelopeAllowancesUnderFaults at 1,688/s, burst 4: 211 ticks a ns,
// 125e6 ticks a token). Two tokens leased, so the capacity is 2 tokens; at
// 248 ms the level is 137,928,168 ticks and a request reserves 2 tokens,
// the whole capacity. The pool is full at 531,146.12 ns, the wait rounds
// up to 531,147 ns: at that time a bucket of that capacity is empty after
// the request, not 185 ticks above (the refill of 0.88 ns beyond full),
// and the next 2 tokens proceed no earlier than 1,184,835 ns later.
func TestReserveWholeCapacityRounding(t *testing.T) {
	sh := shape{tokensPerNs: 211, per: 125_000_000, burst: 4}
	p := &pool{}
	p.Last, p.Leased = 247_346_312*time.Nanosecond, 2
	at := 248 * time.Millisecond
	sh.advance(p, at)
	if p.Level != 137_928_168 {
		t.Fatalf("level at %v: %d ticks, want 137928168", at, p.Level)
	}
	wait, ok := sh.reserve(p, at, 2, 7*time.Millisecond)
	if !ok || wait != 531_147 {
		t.Fatalf("reserve: wait %v, ok %v; want 531.147µs, true", wait, ok)
	}
	proceed := at + wait
	cp := *p
	sh.advance(&cp, proceed)
	if cp.Level != 0 {
		t.Errorf("level when the request proceeds (%v): %d ticks; a bucket capped at its capacity of 2 tokens holds 0", proceed, cp.Level)
	}
	next, ok := sh.reserve(p, at, 2, 7*time.Millisecond)
	if !ok || at+next < proceed+1_184_835 {
		t.Errorf("next reservation proceeds at %v (ok %v), before %v + 1.184835ms (2 tokens' refill from empty)", at+next, ok, proceed)
	}
}

// TestReserveEnvelope checks shape.reserve and take against the (r, b)
// envelope exactly (ExactEnvelopeExcess: to the tick, where the float
// check rounds 1e-6 tokens away): random rates (mostly ones that do not
// divide a second into whole nanoseconds per token), requests decided in
// arrival order, some late (the pool advanced past their arrival first),
// some taking the whole capacity, and leases lent and returned unused in
// between (the capacity moving). Every admitted request is counted when it
// proceeds (arrival + wait); the tokens so counted stay within b + r*T.
func TestReserveEnvelope(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		rate, err := bucket.PerSecond(float64(rapid.IntRange(1, 5000).Draw(t, "rate")))
		if err != nil {
			t.Fatal(err)
		}
		burst := int64(rapid.IntRange(1, 8).Draw(t, "burst"))
		maxWait := time.Duration(rapid.IntRange(0, 50).Draw(t, "max_wait_ms")) * time.Millisecond
		sh := shape{tokensPerNs: rate.Tokens, per: int64(rate.Per), burst: burst}
		p := &pool{}
		p.Level = burst * sh.per
		var admitted []workload.Request
		var lent []int64 // leases out, returned unused later
		var arrival time.Duration
		for range rapid.IntRange(1, 60).Draw(t, "ops") {
			arrival += time.Duration(rapid.Int64Range(0, 2*int64(rate.Per/time.Duration(rate.Tokens))).Draw(t, "gap_ns"))
			late := time.Duration(rapid.Int64Range(0, 200_000).Draw(t, "late_ns")) * rapid.SampledFrom([]time.Duration{0, 1}).Draw(t, "is_late")
			sh.advance(p, max(arrival+late, p.Last))
			switch rapid.IntRange(0, 4).Draw(t, "op") {
			case 0: // a lease of whole tokens, returned unused by a later op
				if n := min(sh.whole(p, arrival), int64(rapid.IntRange(1, 4).Draw(t, "lend"))); n > 0 {
					sh.lend(p, n)
					lent = append(lent, n)
				}
			case 1:
				if len(lent) > 0 {
					sh.release(p, lent[0], lent[0])
					lent = lent[1:]
				}
			case 2: // drop mode
				n := int64(rapid.IntRange(1, int(burst)).Draw(t, "take"))
				if sh.take(p, arrival, n) {
					admitted = append(admitted, workload.Request{Key: "k", Arrival: arrival, Tokens: n})
				}
			default: // waiting mode, often the whole capacity
				n := int64(rapid.IntRange(1, int(burst)).Draw(t, "reserve"))
				if rapid.Bool().Draw(t, "whole_capacity") {
					n = max(sh.capacity(p)/sh.per, 1)
				}
				if wait, ok := sh.reserve(p, arrival, n, maxWait); ok {
					if wait < 0 || wait > maxWait {
						t.Fatalf("wait %v outside [0, %v]", wait, maxWait)
					}
					admitted = append(admitted, workload.Request{Key: "k", Arrival: arrival + wait, Tokens: n})
				}
			}
		}
		slices.SortStableFunc(admitted, func(a, b workload.Request) int { return int(a.Arrival - b.Arrival) })
		if v, _, at := ExactEnvelopeExcess(admitted, rate, burst); v > 0 {
			t.Fatalf("admitted tokens exceed b + r*T by %d ticks (%.3g tokens) at %v (rate %v = %d per %v)", v, float64(v)/float64(sh.per), at, rate, rate.Tokens, rate.Per)
		}
	})
}
