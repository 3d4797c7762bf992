package dedupe

import (
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/strategy"
)

// Grow only lengthens the window, and entries keep expiring in order.
func TestGrowOnlyLengthens(t *testing.T) {
	tb := New[string, int](10 * time.Second)
	var fx strategy.Effects
	tb.Add(0, "a", 1, &fx)
	tb.Grow(5 * time.Second) // shorter: ignored
	if tb.TTL() != 10*time.Second {
		t.Fatalf("TTL %v after Grow(5s), want 10s kept", tb.TTL())
	}
	tb.Grow(20 * time.Second)
	tb.Add(time.Second, "b", 2, &fx)
	tb.Expire(10*time.Second, &fx)
	if _, ok := tb.Get("a"); ok {
		t.Fatal("a (added under 10s) not expired at 10s")
	}
	tb.Expire(20*time.Second, &fx)
	if _, ok := tb.Get("b"); !ok {
		t.Fatal("b (added at 1s under 20s) expired before 21s")
	}
	tb.Expire(21*time.Second, &fx)
	if tb.Len() != 0 {
		t.Fatalf("%d entries left at 21s", tb.Len())
	}
}
