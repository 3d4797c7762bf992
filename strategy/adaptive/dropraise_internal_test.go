package adaptive

import (
	"testing"
	"time"

	peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"
	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// TestRaiseOfDroppedKeyCreatesNoTokens: a key Tick dropped (idle for a
// window, bucket full at its share) and then raised by an epoch must
// come back with the tokens it held, not full at the raised burst: a
// re-split never creates tokens (package documentation, "Transient
// over-commit"). The two cases of the TestWaitingEnvelope failure
// (testdata/rapid/TestWaitingEnvelope, 2 nodes, (2/s, 3)): n1 drops k0
// full at its static (1/s, 1) just after an epoch that raises it to
// (1.9/s, 3); a share lowered to burst 0 (always "full", so dropped)
// goes back to the static split (1/s, 1).
func TestRaiseOfDroppedKeyCreatesNoTokens(t *testing.T) {
	rate := bucket.Rate{Tokens: 2, Per: time.Second}
	params := []string{"window=1s", "step=100ms", "raise_after=20ms"}
	shares := func(a *Adaptive, epoch uint64, sh ...*peerv1.AdaptiveShare) *peerv1.AdaptiveShares {
		return &peerv1.AdaptiveShares{Epoch: epoch, Members: a.memHash, Units: a.units, Shares: sh}
	}
	admitted := func(a *Adaptive, now time.Duration, n int) int {
		var fx strategy.Effects
		got := 0
		for i := range n {
			if d, _ := a.Request(now, strategy.Request{ID: uint64(i + 100), Key: "k0", Tokens: 1, Arrival: now}, &fx); d.Allowed {
				got++
			}
		}
		return got
	}
	// started is n1 started at 0, its static share (1/s, 1) spent.
	started := func(t *testing.T) (*Adaptive, *strategy.Effects) {
		a := newNode(t, "n1", []string{"n0", "n1"}, rate, 3, params...)
		var fx strategy.Effects
		a.Start(0, &fx)
		if got := admitted(a, 0, 1); got != 1 {
			t.Fatalf("t=0: %d admitted, want the static burst 1", got)
		}
		return a, &fx
	}
	t.Run("dropped, then raised by the epoch", func(t *testing.T) {
		a, fx := started(t)
		// The epoch (sent on stale reports) raises k0 to (1.9/s, 3) from
		// raise_after on; the step's Tick then finds k0 idle for the
		// window and full at (1/s, 1), and drops it.
		a.apply(time.Second, shares(a, 1, &peerv1.AdaptiveShare{Key: "k0", RateUnits: a.units * 95 / 100, Burst: 3}), fx)
		a.Tick(time.Second, fx)
		if _, held := a.keys["k0"]; held {
			t.Fatal("k0 not dropped at 1s: the test no longer reaches the drop")
		}
		a.Tick(1021*time.Millisecond, fx)
		// A held bucket would hold 1 token + 1ms of refill at 1.9/s.
		if got := admitted(a, 1022*time.Millisecond, 3); got != 1 {
			t.Fatalf("1.022s: %d of 3 admitted after the raise of the dropped key, want 1 (the token it held)", got)
		}
	})
	t.Run("lowered to burst 0, dropped, back to static", func(t *testing.T) {
		a, fx := started(t)
		a.apply(500*time.Millisecond, shares(a, 1, &peerv1.AdaptiveShare{Key: "k0", RateUnits: a.units / 20, Burst: 0}), fx)
		a.Tick(time.Second, fx)
		if _, held := a.keys["k0"]; held {
			t.Fatal("k0 not dropped at 1s: the test no longer reaches the drop")
		}
		a.apply(time.Second, shares(a, 2), fx) // k0 back to the static (1/s, 1)
		a.Tick(1021*time.Millisecond, fx)
		// A held bucket would hold 1ms of refill at 1/s.
		if got := admitted(a, 1022*time.Millisecond, 1); got != 0 {
			t.Fatalf("1.022s: %d admitted after the raise of the dropped key, want 0 (it held none)", got)
		}
	})
}
