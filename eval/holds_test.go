package eval

import (
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/tokenmesh/tokenmesh/sim"
	"github.com/tokenmesh/tokenmesh/workload"
)

// holdStats counts permits, the most held at once per key (a release at
// the instant of another grant frees first: intervals are half-open), the
// mean in flight per key over the run's span and the mean hold; requests
// without a permit (refused, or a rate limit's) count nowhere.
func TestHoldStats(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	reqs := []workload.Request{
		{Key: "a", Arrival: 0}, {Key: "a", Arrival: ms(10)}, {Key: "a", Arrival: ms(100)},
		{Key: "b", Arrival: ms(20)}, {Key: "b", Arrival: ms(30)},
	}
	outs := []sim.Outcome{
		{Allowed: true, HeldFrom: 0, HeldUntil: ms(100)},       // a: [0, 100)
		{Allowed: true, HeldFrom: ms(10), HeldUntil: ms(60)},   // a: [10, 60): 2 at once
		{Allowed: true, HeldFrom: ms(100), HeldUntil: ms(200)}, // a: [100, 200): starts as the first ends
		{Allowed: true, HeldFrom: ms(20), HeldUntil: ms(120)},  // b
		{Allowed: false}, // b: refused, no permit
	}
	h := holdStats(reqs, outs)
	if h.Permits != 4 || h.MaxInFlight != 2 || h.MaxInFlightKey != "a" {
		t.Errorf("permits %d, max in flight %d (%q); want 4, 2 (a)", h.Permits, h.MaxInFlight, h.MaxInFlightKey)
	}
	// held 100 + 50 + 100 + 100 = 350 ms over a span of 200 ms and 2 keys
	if h.MeanInFlight != 0.875 || h.MeanHoldMs != 87.5 {
		t.Errorf("mean in flight %v, mean hold %v ms; want 0.875, 87.5", h.MeanInFlight, h.MeanHoldMs)
	}
	if z := holdStats(reqs, make([]sim.Outcome, len(reqs))); z.Permits != 0 || z.MaxInFlight != 0 || z.MeanInFlight != 0 {
		t.Errorf("no permits: %+v, want zeros", *z)
	}
}

// TestSemaphore: the exact reference of a concurrency limit, by hand
// (N = 2, one key; b's requests are another key's) and as a property
// (rapid): at no arrival are more than N requests of a key in flight, and
// a request is refused only when N are (the semaphore is exact: it
// admits whatever fits).
func TestSemaphore(t *testing.T) {
	ms := time.Millisecond
	reqs := []workload.Request{{Arrival: 0, Key: "a"}, {Arrival: 1 * ms, Key: "a"}, {Arrival: 2 * ms, Key: "a"},
		{Arrival: 2 * ms, Key: "b"}, {Arrival: 10 * ms, Key: "a"}, {Arrival: 11 * ms, Key: "a"}}
	holds := []time.Duration{10 * ms, 20 * ms, 5 * ms, 1 * ms, 1 * ms, 1 * ms}
	// a@0 until 10, a@1 until 21, a@2 refused, b@2 admitted, a@10: the
	// first hold ended at 10 (it frees first), admitted until 11; a@11
	// admitted likewise.
	want := []bool{true, true, false, true, true, true}
	if got := semaphore(reqs, holds, 2); !slices.Equal(got, want) {
		t.Errorf("semaphore = %v, want %v", got, want)
	}
	h := &HoldStats{Permits: 4}
	compareSemaphore(h, reqs, holds, 2, []bool{true, false, true, true, true, false})
	if h.Limit != 2 || h.ReferencePermits != 5 || h.Missed != 2 || h.Extra != 1 || h.UsedPct != 80 {
		t.Errorf("compareSemaphore: %+v, want N 2, 5 reference permits, 2 missed, 1 extra, 80%% used", *h)
	}

	rapid.Check(t, func(t *rapid.T) {
		n := int64(rapid.IntRange(1, 4).Draw(t, "n"))
		count := rapid.IntRange(0, 60).Draw(t, "requests")
		reqs := make([]workload.Request, count)
		holds := make([]time.Duration, count)
		var at time.Duration
		for i := range reqs {
			at += time.Duration(rapid.IntRange(0, 5).Draw(t, "gap_ms")) * ms
			reqs[i] = workload.Request{Arrival: at, Key: rapid.SampledFrom([]string{"a", "b"}).Draw(t, "key")}
			holds[i] = time.Duration(rapid.IntRange(0, 20).Draw(t, "hold_ms")) * ms
		}
		adm := semaphore(reqs, holds, n)
		for i, q := range reqs {
			var inFlight int64 // admitted before i, same key, still held at i's arrival
			for j := range i {
				if adm[j] && reqs[j].Key == q.Key && reqs[j].Arrival+holds[j] > q.Arrival {
					inFlight++
				}
			}
			if adm[i] && inFlight >= n {
				t.Fatalf("request %d admitted with %d of %d in flight", i, inFlight, n)
			}
			if !adm[i] && inFlight < n {
				t.Fatalf("request %d refused with %d of %d in flight", i, inFlight, n)
			}
		}
	})
}
