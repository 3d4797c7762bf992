package adaptive

import (
	"time"

	"github.com/tokenmesh/tokenmesh/strategy"
)

// Refusals the driver takes itself (strategy.Refuser; ours, as the driver's
// windows are): after Request refused a plain request of a key, every
// plain request of the key is refused until the key's sub-token bucket
// holds a whole token again (bucket.Bucket.DelayN), unless the bucket
// gains tokens some other way first. Only a raise of the key's share does
// that (a re-split's increase, raise_after later; a membership change,
// before which the driver ends every window; an allowance's return cannot
// happen while a window is open), and a raise ends the window
// (refresh: Effects.EndRefusal). The requests the driver refused come back
// with Refused and count as the key's offered tokens at the report's time,
// as Request would have counted them one by one (the backlog's peak sees
// them as one arrival).

// RefusedUntil is, for a key whose bucket holds no whole token at now, the
// time it will hold one (a nanosecond early: the delay is rounded up);
// now otherwise (no window), or for a key with tokens in an allowance.
// A bucket that can never hold a token (a share of burst 0, or rate 0 and
// empty) refuses for an hour: the driver caps every window, and a raise
// ends it.
func (a *Adaptive) RefusedUntil(now time.Duration, key string) time.Duration {
	ks := a.keys[key]
	if ks == nil || a.lent.Held(key) > 0 {
		return now
	}
	cp := ks.b // a query: the key's bucket is not advanced
	d, ok := cp.DelayN(now, 1)
	switch {
	case !ok:
		return now + time.Hour
	case d <= 1:
		return now
	}
	return now + d - 1
}

// Refused counts requests of key the driver refused in a window (tokens in
// all) as offered at now. A key this node holds no bucket of, or counts
// below 1, are ignored.
func (a *Adaptive) Refused(now time.Duration, key string, requests, tokens int64, fx *strategy.Effects) {
	if requests <= 0 || tokens <= 0 || a.keys[key] == nil {
		return
	}
	a.offer(strategy.Request{Key: key, Tokens: tokens, Arrival: now})
}

var _ strategy.Refuser = (*Adaptive)(nil)
