package lease

import (
	"time"

	"github.com/tokenmesh/tokenmesh/strategy"
)

// The fast path at a holder (strategy.Allowancer; ours, as the driver's
// allowances are): tokens of a lease this node holds, handed to the
// driver, which admits checks of the key from them in the caller's
// goroutine without the node's loop, as Request would from the lease
// (a leased token admits at once, a local decision either way). The
// tokens leave the lease while the allowance is open: what the lease
// still holds, what leased() counts and what its expiry returns to the
// owner exclude them (they count as used), and an ask does not report the
// lease as spent meanwhile. Return puts the unused ones back into the
// lease (when it is still held and unexpired; otherwise they stay spent,
// which is safe: the owner released the lease, or will at its expiry) and
// counts the used ones as the key's demand, as Request counts a request's
// tokens, then asks for a lease if the demand warrants one. An allowance
// is valid until the lease's own expiry on this node (which is
// return_lead before the owner's release): lease is a
// strategy.ExpiringAllowancer, so the driver reads its clock before every
// consumption and takes nothing at or after it.
//
// At the key's owner the allowance is lent out of the key's pool as a
// lease to the node itself would be (leasepool's Lend and Release: the
// pool's level plus every lease, this one included, stay within the
// burst, and replicas see its tokens as lent until it ends), valid for
// strategy.AllowanceValidity; only when the owner decides its requests
// at once (hold 0: no ordering buffer to keep), outside partition:
// conserve, and for a key whose pool exists and is not being warmed up.
// Nothing is granted for a key with no such pool or lease holding a
// token, or while an allowance of the key is open.

// allowance is a holding's open allowance: the lease its tokens came from
// (seq, from) and how many were handed out.
type allowance struct {
	seq    uint64
	from   strategy.NodeID
	tokens int64
}

// Grant hands the driver up to want whole tokens of key's lease with the
// most tokens among those unexpired at now, at most strategy.AllowanceCap
// of the rule, valid until that lease's expiry; 0 when this node owns key,
// holds no such lease, or has an allowance of key open already.
func (l *Lease) Grant(now time.Duration, key string, want int64, fx *strategy.Effects) (int64, time.Duration) {
	most := strategy.AllowanceCap(l.rate, l.sh.burst)
	if want <= 0 || most <= 0 {
		return 0, now
	}
	if l.owner(key) == l.self {
		return l.grantOwn(now, key, min(want, most), fx)
	}
	h := l.keys[key]
	if h == nil || h.allow.tokens > 0 {
		return 0, now
	}
	best := -1
	for i, ls := range h.leases {
		if ls.expires > now && ls.tokens > 0 && (best < 0 || ls.tokens > h.leases[best].tokens) {
			best = i
		}
	}
	if best < 0 {
		return 0, now
	}
	ls := &h.leases[best]
	g := min(want, most, ls.tokens)
	ls.tokens -= g
	h.allow = allowance{seq: ls.seq, from: ls.from, tokens: g}
	return g, ls.expires
}

// Return closes key's allowance at now: unused of its tokens (at most
// what was handed out) go back into the lease they came from when it is
// still held and unexpired, the others count as used: as the key's demand
// (holding.count, one arrival instant each, as the driver's checks took
// them one by one), and, when they used the lease up, as a spent lease
// the owner is told of (sendSpent, as Request does). Then an ask goes out
// if the demand warrants one (maybeAsk). A key with no allowance open is
// ignored.
func (l *Lease) Return(now time.Duration, key string, unused int64, fx *strategy.Effects) {
	if p := l.pools[key]; p != nil && p.own > 0 {
		l.returnOwn(now, key, p, unused, fx)
		return
	}
	h := l.keys[key]
	if h == nil || h.allow.tokens <= 0 {
		return
	}
	a := h.allow
	h.allow = allowance{}
	unused = min(max(unused, 0), a.tokens)
	used := a.tokens - unused
	for i := range h.leases {
		ls := &h.leases[i]
		if ls.seq != a.seq || ls.from != a.from {
			continue
		}
		if ls.expires > now {
			ls.tokens += unused
		}
		if ls.tokens == 0 && used > 0 && ls.from != l.self {
			l.sendSpent(ls.from, key, ls.seq, fx)
		}
		break
	}
	if used > 0 {
		h.count(now, used, true, l.window)
		h.curInst += used - 1 // one instant per token: the checks came one by one
		h.lastArrival, h.lastRequestAt = now, now
	}
	l.maybeAsk(now, key, h, fx)
}

// grantOwn is Grant at key's owner: up to want whole tokens lent out of
// key's pool at now, valid for strategy.AllowanceValidity.
func (l *Lease) grantOwn(now time.Duration, key string, want int64, fx *strategy.Effects) (int64, time.Duration) {
	p := l.pools[key]
	if p == nil || p.own > 0 || l.hold > 0 || l.cons.on || l.fetching[key] != nil {
		return 0, now
	}
	l.sh.advance(p, now)
	g := min(want, l.sh.whole(p, now))
	if g <= 0 {
		return 0, now
	}
	until := now + strategy.AllowanceValidity
	l.sh.lend(p, g)
	p.own = g
	p.LentUntil = max(p.LentUntil, until)
	l.markDirty(now, key, fx)
	return g, until
}

// returnOwn is Return at key's owner: the allowance's lease of p ends at
// now, unused of its tokens back into the level (leasepool's Release).
func (l *Lease) returnOwn(now time.Duration, key string, p *pool, unused int64, fx *strategy.Effects) {
	l.sh.advance(p, now)
	l.sh.release(p, p.own, min(max(unused, 0), p.own))
	p.own = 0
	l.markDirty(now, key, fx)
}

// AllowancesExpire marks lease's allowances as valid only until their
// lease's expiry (strategy.ExpiringAllowancer).
func (l *Lease) AllowancesExpire() {}

var _ strategy.ExpiringAllowancer = (*Lease)(nil)
