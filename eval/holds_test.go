package eval

import (
	"testing"
	"time"

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
