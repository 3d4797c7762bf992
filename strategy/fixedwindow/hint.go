package fixedwindow

import (
	"time"

	"github.com/tokenmesh/tokenmesh/strategy"
)

// SetLatencyHint (strategy.LatencyHinter) re-derives timeout, how long a
// forwarder waits for the owner's verdict, with New's formula
// 3*hint + 100ms, unless the timeout parameter set it. Forwards in flight
// keep their deadline; a new forward's deadline is never before the last
// one's (deadlineAt), so the deadline list stays sorted when the timeout
// shrinks. Ours .
func (f *FixedWindow) SetLatencyHint(now time.Duration, hint time.Duration, fx *strategy.Effects) {
	if f.timeoutSet {
		return
	}
	f.timeout = strategy.HintTimeout(max(hint, 0))
}

// deadlineAt is the deadline of a forward sent at now: now + timeout, or
// the latest deadline given so far when that is later (after the timeout
// shrank), so that the deadline list stays in order.
func (f *FixedWindow) deadlineAt(now time.Duration) time.Duration {
	f.lastDeadline = max(now+f.timeout, f.lastDeadline)
	return f.lastDeadline
}
