package adaptive_test

import (
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/tokenmesh/tokenmesh/eval"
	"github.com/tokenmesh/tokenmesh/sim/simtest"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/adaptive"
)

// TestWaitingEnvelope: in waiting mode, with re-splits every 100 ms
// (window 1 s), the tokens the nodes admit, counted when they proceed
// (arrival + delay), stay within b + r*T plus the one token adaptive
// allows itself in drop mode too (its sim tests: re-splits in whole
// units and tokens, min(current, new) on both components): decreases
// keep the debt, raises keep reservations due when promised
// (bucket.Bucket.SetRateKeepingDue) and wait max_wait more, so no node
// raises its share while another's reservations count on refill of the
// share it gave up. (The same runs in drop mode reach 0.9 tokens.)
func TestWaitingEnvelope(t *testing.T) {
	f := func(cfg strategy.Config) (strategy.Strategy, error) { return adaptive.New(cfg) }
	rapid.Check(t, func(t *rapid.T) {
		w := simtest.WaitingEnvelope(t, "adaptive", f, func(maxWait time.Duration) []string {
			return []string{"window=1s", "step=100ms", "raise_after=20ms", "max_wait=" + maxWait.String()}
		})
		if w.Violation(eval.EnvelopeViolation) > 1+1e-9 {
			t.Fatalf("%d nodes, (%v, %d), max wait %v: admitted tokens when they proceed exceed b + r*T by %.4f (%d waited)", w.Nodes, w.Rate, w.Burst, w.MaxWait, w.Violation(eval.EnvelopeViolation), w.Waited)
		}
	})
}
