package gdrl

import (
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// The live driver's fast path (strategy.Allowancer, strategy.Refuser;
// ours, as adaptive's and static's: the papers have no such thing): whole
// tokens of this node's bucket (C_i, B_i) of a key (GDRL's local token
// bucket at the node's capacity and burst share, 001 §II, 004 §2.2),
// handed to the driver, which admits the key's checks from them in the
// caller's goroutine without the node's event loop, and windows in which
// the driver refuses the key's plain checks itself.
//
// Allowances. The tokens granted count as spent: the key's bucket refills
// only up to its burst less the tokens held (share.held), and it is
// clamped to that before every use of it (clamp: Request, RequestWait,
// every share change in adjust, so transfers out and in, inheritances,
// fences and give-ups, a leave's hand-over and default-share payments,
// the tokens a transfer carries (level, shrink, addTokens), pay's debt
// check, Remaining). As strategy.AllowanceLedger.Clamp, but with no
// floor at minus the burst: a share lowered below the tokens held
// leaves the bucket in debt by exactly the excess (bucket levels below
// -burst are the overdraft's, bucket.Bucket.MergeLevelFloor), repaid by
// the refill at the new share, so the tokens available at the node
// (level + unconsumed allowance) never exceed its burst share B_i. So
// the tokens in all buckets, in allowances and in flight never exceed
// b, as without allowances (see "Burst follows capacity" in the package
// documentation): tokens held never travel with a transfer's burst
// (shrink sends what the bucket holds above its reduced burst, and a
// bucket in debt sends nothing), and a key with tokens held is never
// dropped as full (closeInterval). The cluster's envelope with
// allowances is gdrl's without them.
//
// A crash loses what its driver held (spent, never created); a graceful
// leave hands over after the driver returned everything (the driver's
// contract), and Grant grants nothing while leaving.
//
// Demand. The tokens used of an allowance come back as the key's
// requested tokens (demand estimate, the measured indicators' admitted
// tokens, activity) when it is returned, at the return's time: at most
// strategy.AllowanceValidity late, so the 001 §III-A filter's sample of
// an interval may count tokens admitted up to that long before it.
// Refused checks in a window come back the same way (Refused), as
// refused tokens. Under the response indicator (001 §I-A's mean response
// time, measured per request at its arrival) neither is offered: the
// driver cannot tell the waits, so every check goes through Request.

// Grant hands the driver up to want whole tokens (request tokens) of
// this node's bucket (C_i, B_i) of key at now, taken out of it as
// admitted at now, at most strategy.AllowanceCap of the share's rate and
// burst (in request tokens, rounded down: 5 ms of the share's refill, at
// most a quarter of its burst), valid for strategy.AllowanceValidity. 0
// (nothing changes) before Start, while leaving, under the response
// indicator, for a key this node holds no explicit share of (no request
// has made one yet), a share with no rate (a debt, or below the bucket's
// resolution) or too small for a whole token per allowance, or a bucket
// holding no whole token. Request decides every key from that bucket
// alone, whatever the node's view (split brain: each side admits with the
// shares it holds), fences or inheritances in progress, so no other state
// keeps a key from being granted. The envelope bound: none beyond
// gdrl's without allowances (see above).
func (g *GDRL) Grant(now time.Duration, key string, want int64, fx *strategy.Effects) (int64, time.Duration) {
	if want <= 0 || !g.started || g.leaving || g.indicator == IndicatorResponse {
		return 0, now
	}
	sh := g.shares[key]
	if sh == nil {
		return 0, now
	}
	most := strategy.AllowanceCap(g.rateOf(sh.c), g.burstOf(sh.b)) / g.perToken
	if most <= 0 {
		return 0, now
	}
	g.clamp(sh, now)
	level, _, per := sh.bkt.LevelAt(now)
	n := min(want, most, max(level/per, 0)/g.perToken)
	if n <= 0 || !sh.bkt.AllowN(now, n*g.perToken) {
		return 0, now
	}
	sh.held += n
	return n, now + strategy.AllowanceValidity
}

// Return closes key's allowance at now: unused of its tokens (at most
// those granted) go back into the key's bucket (dropped when the bucket
// is in debt, as addTokens drops tokens: safe), every other one counts
// as requested and admitted at now, as Request counts an admitted
// request's tokens. A key with no allowance open is ignored.
func (g *GDRL) Return(now time.Duration, key string, unused int64, fx *strategy.Effects) {
	sh := g.shares[key]
	if sh == nil || sh.held <= 0 {
		return
	}
	h := sh.held
	u := min(max(unused, 0), h)
	g.clamp(sh, now)
	sh.held = 0
	if u > 0 {
		if level, _, per := sh.bkt.LevelAt(now); level >= 0 {
			_ = sh.bkt.SetLevel(now, level+u*g.perToken*per, per) // <= burst less the tokens used: no cap
		}
	}
	if used := h - u; used > 0 {
		g.arrived(key, sh, used, now)
	}
	g.flush(now, fx)
}

// RefusedUntil is, after Request refused a plain request of key at now,
// the time key's bucket will hold a whole request token again at its
// current share (bucket.Bucket.DelayN, a nanosecond early: the delay is
// rounded up); now (no window) when it holds one, for a key with tokens
// in an allowance or no explicit share, under the response indicator, or
// before Start. A bucket that can never hold a token at its share (a
// burst share below a token, or no rate and empty) refuses for an hour:
// the driver caps every window. Only a raise of the key's share or
// tokens credited to it can make a token come sooner (a transfer in, an
// inheritance, a fence given up elsewhere, a default-share payment; an
// allowance's return cannot happen while a window is open, and the
// driver ends its windows before a membership change or Leave), and each
// ends the window (adjust, addTokens: Effects.EndRefusal). Ours.
func (g *GDRL) RefusedUntil(now time.Duration, key string) time.Duration {
	sh := g.shares[key]
	if sh == nil || sh.held > 0 || !g.started || g.indicator == IndicatorResponse {
		return now
	}
	cp := sh.bkt // a query: the key's bucket is not advanced
	d, ok := cp.DelayN(now, g.perToken)
	switch {
	case !ok:
		d = time.Hour
	case d <= 1:
		return now
	default:
		d--
	}
	sh.refusing = true
	return now + d
}

// Refused counts requests of key the driver refused in a window (tokens
// in all) as Request counts refused requests: requested and refused
// tokens at now, and the key active. A key this node holds no explicit
// share of, or counts below 1, are ignored.
func (g *GDRL) Refused(now time.Duration, key string, requests, tokens int64, fx *strategy.Effects) {
	sh := g.shares[key]
	if sh == nil || requests <= 0 || tokens <= 0 {
		return
	}
	g.arrived(key, sh, tokens, now)
	g.countRefused(sh, tokens, false)
	g.flush(now, fx)
}

// arrived counts tokens (> 0) requested of key at now in sh, as Request
// does: the interval's requested tokens, the key's activity and seen.
func (g *GDRL) arrived(key string, sh *share, tokens int64, now time.Duration) {
	if sh.reqTokens < 1<<62-tokens {
		sh.reqTokens += tokens
	}
	sh.lastActive, sh.everActive = max(sh.lastActive, now), true
	if _, ok := g.seen[key]; !ok {
		g.seenAdded(key)
	}
	g.seen[key] = sh.lastActive
}

// clamp brings sh's bucket to now and lowers its level to the burst less
// the tokens the driver holds (sh.held), if above; below -burst when the
// tokens held exceed the burst (a share lowered while they were held): a
// debt the refill repays. Clamping before every use of the bucket is
// exact (strategy.AllowanceLedger.Clamp: between two clamps with the
// same tokens held, the level is that of a bucket of the smaller
// capacity). Nothing happens with nothing held.
func (g *GDRL) clamp(sh *share, now time.Duration) { g.clampBucket(&sh.bkt, sh.held, now) }

// clampBucket is clamp of bucket b with held request tokens held.
func (g *GDRL) clampBucket(b *bucket.Bucket, held int64, now time.Duration) {
	if held <= 0 {
		return
	}
	_, c, per := b.LevelAt(now)
	ceil := c - held*g.perToken*per // held <= the burst granted at: no overflow
	_ = b.MergeLevelFloor(ceil, now, ceil)
}

// endRefusal marks key's refusal window, if RefusedUntil opened one, as
// ended by the current call (flush hands it to the driver).
func (g *GDRL) endRefusal(key string, sh *share) {
	if sh.refusing {
		sh.refusing = false
		g.endRefusals = append(g.endRefusals, key)
	}
}

// endedRefusals hands the windows ended by the current call to the
// driver (Effects.EndRefusal).
func (g *GDRL) endedRefusals(fx *strategy.Effects) {
	for _, k := range g.endRefusals {
		fx.EndRefusal(k)
	}
	clear(g.endRefusals)
	g.endRefusals = g.endRefusals[:0]
	if cap(g.endRefusals) > 64 {
		g.endRefusals = nil // an inheritance that raised many keys: not kept
	}
}

var (
	_ strategy.Allowancer = (*GDRL)(nil)
	_ strategy.Refuser    = (*GDRL)(nil)
)
