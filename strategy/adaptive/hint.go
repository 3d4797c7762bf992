package adaptive

import (
	"time"

	"github.com/tokenmesh/tokenmesh/strategy"
)

// SetLatencyHint (strategy.LatencyHinter) re-derives raise_after, the
// delay before a node applies the raises of a new epoch, with New's
// formula max(4*hint, 10ms), unless the raise_after parameter set it. A
// raise already scheduled keeps its time; the new delay applies from the
// next epoch on. Ours .
func (a *Adaptive) SetLatencyHint(now time.Duration, hint time.Duration, fx *strategy.Effects) {
	if a.raiseAfterSet {
		return
	}
	a.raiseAfter = max(4*max(hint, 0), 10*time.Millisecond)
}
