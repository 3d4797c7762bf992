package lease

import (
	"time"

	"github.com/tokenmesh/tokenmesh/strategy"
)

// Refusals at a holder taken by the driver (strategy.Refuser; ours, as the
// driver's windows are). A holder refuses a plain request locally when
// none of its unexpired leases holds the request's tokens and it arrives
// before the owner's dry hint ends (RequestWait). After such a refusal,
// with no lease holding a token, it tells the driver that every plain
// request of the key is refused until the hint ends, unless a lease with
// tokens arrives first: onGrant then ends the window
// (Effects.EndRefusal). Nothing else can make Request admit such a
// request sooner: a lease's tokens otherwise only shrink (an allowance is
// closed before any Request, and Return gives tokens back only to the
// lease behind an open allowance), and the hint only grows. The requests
// refused in a window come back with Refused and are counted as the key's
// demand at the report's time, one arrival instant each, as Return counts
// an allowance's; the driver reports within a few milliseconds
// (strategy.Refuser), so an ask sized from the demand sees them.

// RefusedUntil is the end of key's dry hint when this node holds key
// (does not own it), holds no unexpired lease with a token of it and has
// no allowance of it open, the hint being still ahead at now; now
// otherwise (no window).
func (l *Lease) RefusedUntil(now time.Duration, key string) time.Duration {
	if l.owner(key) == l.self {
		return now
	}
	h := l.keys[key]
	if h == nil || h.allow.tokens > 0 || h.emptyUntil <= now || h.leased(now) > 0 {
		return now
	}
	return h.emptyUntil
}

// Refused counts requests of key the driver refused in a window (tokens
// in all) as the key's demand at now, one arrival instant each, as
// Request would have counted them, then asks for a lease if the demand
// warrants one (maybeAsk, as Request does after counting). A key this
// node owns or no longer holds, or counts below 1, are ignored.
func (l *Lease) Refused(now time.Duration, key string, requests, tokens int64, fx *strategy.Effects) {
	if requests <= 0 || tokens <= 0 || l.owner(key) == l.self {
		return
	}
	h := l.keys[key]
	if h == nil {
		return
	}
	h.count(now, tokens, true, l.window)
	h.curInst += requests - 1
	h.lastArrival, h.lastRequestAt = now, now
	l.maybeAsk(now, key, h, fx)
}

var _ strategy.Refuser = (*Lease)(nil)
