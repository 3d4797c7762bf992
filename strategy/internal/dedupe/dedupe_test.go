package dedupe

import (
	"slices"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/strategy"
)

// TestExpiryFIFO: an entry is remembered for exactly its TTL after Add;
// the first Add asks for a wake-up at its expiry, later ones do not, and
// Expire asks for the next expiry only when it forgot something and
// something is left.
func TestExpiryFIFO(t *testing.T) {
	const ttl = 10 * time.Second
	tb := New[string, int](ttl)
	var fx strategy.Effects
	tb.Add(0, "a", 1, &fx)
	tb.Add(3*time.Second, "b", 2, &fx)
	if !slices.Equal(fx.Wakeups, []time.Duration{ttl}) {
		t.Fatalf("wake-ups after two adds: %v, want [%v] (the first expiry only)", fx.Wakeups, ttl)
	}
	if v, ok := tb.Get("b"); !ok || v != 2 || tb.Len() != 2 {
		t.Fatalf("Get(b) = %d, %v with %d entries; want 2, true, 2", v, ok, tb.Len())
	}
	fx.Reset()
	tb.Expire(ttl-1, &fx)
	if tb.Len() != 2 || len(fx.Wakeups) != 0 {
		t.Fatalf("1 ns before the first expiry: %d entries, wake-ups %v; want 2 and none", tb.Len(), fx.Wakeups)
	}
	tb.Expire(ttl, &fx)
	if _, ok := tb.Get("a"); ok || tb.Len() != 1 || !slices.Equal(fx.Wakeups, []time.Duration{3*time.Second + ttl}) {
		t.Fatalf("at the first expiry: a kept %v, %d entries, wake-ups %v; want a gone, 1, [%v]", ok, tb.Len(), fx.Wakeups, 3*time.Second+ttl)
	}
	if ids := slices.Collect(tb.IDs()); !slices.Equal(ids, []string{"b"}) {
		t.Fatalf("IDs = %v, want [b]", ids)
	}
	fx.Reset()
	tb.Expire(time.Hour, &fx)
	if tb.Len() != 0 || len(fx.Wakeups) != 0 {
		t.Fatalf("after every expiry: %d entries, wake-ups %v; want none", tb.Len(), fx.Wakeups)
	}
	tb.Add(time.Hour, "a", 3, &fx)
	if v, ok := tb.Get("a"); !ok || v != 3 || !slices.Equal(fx.Wakeups, []time.Duration{time.Hour + ttl}) {
		t.Fatalf("a added again: %d, %v, wake-ups %v", v, ok, fx.Wakeups)
	}
}
