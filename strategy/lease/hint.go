package lease

import (
	"time"

	"github.com/tokenmesh/tokenmesh/strategy"
)

// SetLatencyHint (strategy.LatencyHinter) re-derives the timers New took
// from Config.LatencyHint, with New's formulas, unless a parameter set
// them: hold = hint, sync = max(hold, 10ms), timeout = 3*hint + 100ms (and the retransmission
// interval timeout/(retries+1)), the holder's ask lead 2*hint + hold and
// return lead min(2*hint, ttl/4). The windows that say how late a message
// may still be taken only grow: the forward de-duplication window
// (2*timeout + hold + 4*hint) and sweepLag (timeout + 3*hint + hold +
// max_skew), so nothing accepted under the old hint is forgotten or
// refused early.
//
// Safe at any time: the owner's ordering buffer keeps every queued
// request, ask and release; a shorter hold decides at once, in (arrival,
// ID) order, those now past their turn, a longer one makes them wait
// longer. Grants, asks and forwards in flight keep the deadlines they were
// given. Ours .
func (l *Lease) SetLatencyHint(now time.Duration, hint time.Duration, fx *strategy.Effects) {
	hint = max(hint, 0)
	if !l.hinted.HoldSet {
		l.hold = hint
	}
	if !l.hinted.TimeoutSet {
		l.timeout = strategy.HintTimeout(hint)
		l.retryEvery = l.timeout / time.Duration(l.hinted.Retries+1)
	}
	if !l.hinted.SyncSet {
		l.syncEvery = strategy.DefaultSync(l.hold)
	}
	l.seen.Grow(2*l.timeout + l.hold + 4*hint)
	l.lead = 2*hint + l.hold
	l.returnLead = min(2*hint, l.ttl/4)
	if hint <= 0 {
		l.returnLead = l.ttl / 4 // as New: without a hint a return at the release would come too late
	}
	l.sweepLag = max(l.sweepLag, l.timeout+3*hint+l.hold+l.maxSkew)
	l.decideDue(now, fx)
	// Every entry was given a wake-up at its turn under the old hold;
	// ask for one at its new turn (hint changes are rare: O(queue)).
	last := time.Duration(-1)
	for _, q := range l.queue.Items() {
		if at := max(q.arrival+l.hold, now); at != last {
			fx.WakeAt(at)
			last = at
		}
	}
}
