package owner

import (
	"time"

	"github.com/tokenmesh/tokenmesh/strategy"
)

// SetLatencyHint (strategy.LatencyHinter) re-derives the timers New took
// from Config.LatencyHint, with New's formulas, unless a parameter set
// them: hold = hint, timeout = 3*hint + 100ms (and the retransmission
// interval timeout/(retries+1), the charges' lifetime), sync =
// max(hold, 10ms); the forward de-duplication window grows to
// 2*timeout + hold + 4*hint and never shrinks.
//
// Safe at any time: the ordering buffer keeps every queued request; a
// shorter hold decides at once, in (arrival, ID) order, those now past
// their turn, a longer one makes them wait longer (a wake-up is asked for
// every entry's new turn). Forwards in flight keep the deadline they were sent with.
// Ours .
func (o *Owner) SetLatencyHint(now time.Duration, hint time.Duration, fx *strategy.Effects) {
	hint = max(hint, 0)
	if !o.hinted.HoldSet {
		o.hold = hint
	}
	if !o.hinted.TimeoutSet {
		o.timeout = strategy.HintTimeout(hint)
		o.retryEvery = o.timeout / time.Duration(o.hinted.Retries+1)
		o.chargeTTL = chargeTTL(o.timeout)
	}
	if !o.hinted.SyncSet {
		o.syncEvery = strategy.DefaultSync(o.hold)
	}
	o.seen.Grow(2*o.timeout + o.hold + 4*hint)
	o.decideDue(now, fx)
	// Every entry was given a wake-up at its turn under the old hold;
	// ask for one at its new turn (hint changes are rare: O(queue)).
	last := time.Duration(-1)
	for _, q := range o.queue.Items() {
		if at := max(q.arrival+o.hold, now); at != last {
			fx.WakeAt(at)
			last = at
		}
	}
}

// chargeTTL is how long a charge is kept for a forward timeout:
// max(30s, 10*timeout).
func chargeTTL(timeout time.Duration) time.Duration { return max(30*time.Second, 10*timeout) }
