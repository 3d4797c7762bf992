package regionlease

import (
	"time"

	"github.com/tokenmesh/tokenmesh/strategy"
)

// Refusals at a node taken by the driver (strategy.Refuser; ours, after
// strategy/lease/refusal.go). A node of the key's region tier (neither
// its global nor its regional owner: nodeTier) refuses a plain request
// on the node when none of its unexpired leases holds the request's
// tokens and it arrives before the dry hint its regional owner gave it
// (a grant's or a refusal's: the stock is empty until then). After such
// a refusal, with no lease holding a token and no allowance open, it
// tells the driver that every plain request of the key is refused until
// the hint ends, but no later than:
//   - the next ask's time when no ask is out (nextAskAt: the renew timer
//     asks then, and a request after it may ask), and the current ask's
//     deadline when one is (it is given up then, and a request may ask
//     again); a window ends by every time at which a request could send
//     an ask that it would not have sent in the window, so the driver's
//     refusals, reported later, do not hold back an ask (without a
//     request to send it, the renew timer asks only while the key is in
//     use: quiet);
//   - the time the key would count as idle here without a further
//     request (idleAt: a grant that comes to an idle key goes back).
//
// A grant ends the window sooner (onGrant: Effects.EndRefusal, for
// tokens as for a new hint or a rescheduled ask), as does a warm-up's
// query that forgets the key's asks (answer). Nothing else can make
// Request admit such a request sooner: a lease's tokens otherwise only
// shrink (an allowance is closed before any Request, and Return gives
// tokens back only to the lease behind an open allowance, which a window
// never has), a node's hint only grows, and the key's tiers change only
// with the membership, before which the driver ends every window. The
// requests refused in a window come back with Refused and are counted
// as Request counts a refused request: as the key's demand at the
// report's time, one arrival instant each, as its use (used: idle and
// quiet), then an ask if the demand warrants one (maybeAsk).

// RefusedUntil is, at a node of key's region tier that holds no
// unexpired lease with a token of it and no allowance of it, while the
// regional owner's dry hint is still ahead at now, the end of that hint,
// capped as above; now otherwise (no window).
func (l *RegionLease) RefusedUntil(now time.Duration, key string) time.Duration {
	if !l.nodeTier(key) {
		return now
	}
	h := l.keys[key]
	if h == nil || h.allow.tokens > 0 || h.emptyUntil <= now || h.available(now) > 0 {
		return now
	}
	until := h.emptyUntil
	switch {
	case h.asking:
		until = min(until, h.askDeadline)
	case h.nextAskAt > now:
		until = min(until, h.nextAskAt)
	default:
		return now // a request may ask now
	}
	return max(min(until, l.idleAt(now, h)), now)
}

// Refused counts requests of key the driver refused in a window (tokens
// in all) as Request counts a refused request, at now: the key's demand
// (one arrival instant each), its use (used), then an ask if the demand
// warrants one (maybeAsk). A key this node owns globally, or counts
// below 1, are ignored.
func (l *RegionLease) Refused(now time.Duration, key string, requests, tokens int64, fx *strategy.Effects) {
	if requests <= 0 || tokens <= 0 {
		return
	}
	if g, _ := l.global(key); g == l.self {
		return
	}
	h := l.holding(key)
	h.count(now, tokens, true, l.window)
	h.curInst += requests - 1
	h.lastArrival = now
	l.used(now, key, h, fx)
	l.maybeAsk(now, key, h, fx)
}

var _ strategy.Refuser = (*RegionLease)(nil)
