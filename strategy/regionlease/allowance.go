package regionlease

import (
	"time"

	"github.com/tokenmesh/tokenmesh/strategy"
)

// The fast path at a node (strategy.ExpiringAllowancer; ours, after
// strategy/lease's holder side, strategy/lease/allowance.go): tokens of a
// node lease this node holds from its regional owner, handed to the live
// driver, which admits checks of the key from them in the caller's
// goroutine without the node's loop, as Request would from the lease (a
// leased token admits at once, a decision on the node either way).
//
// Only at a node of the key's region tier: neither the key's global
// owner (it decides from its pool) nor its regional owner (it decides
// from the region's stock, which it lends on and reports to the global
// owner as it is used); Grant returns 0 there, and for a region-tier
// lease a node still holds from a time it was a regional owner.
//
// The tokens leave the lease while the allowance is open: what the lease
// still holds (its tokens, the conservation checks' held count), what
// its return sends back (at its end, leaseTimer, or at idle, which keeps
// the lease while the allowance is out of it) and the spent leases an
// ask reports (maybeAsk skips it) exclude them: they count as used (the
// lease's used, which a warm-up's answer counts, heldOf). So the regional
// owner counts the whole lease as lent until its end or until the driver
// gave the allowance back and the rest of the lease was used or
// returned: no token of it is reported used (and its room given back
// upstream) while the driver may still take it. The allowance is valid
// until the lease's own end of use on this node (lead before the
// regional owner's release: the time Request stops using it), and the
// driver (strategy.ExpiringAllowancer) takes nothing at or after it.
//
// Return puts the unused tokens back into the lease when it is still
// held and usable (unexpired); otherwise they stay spent, which is safe
// (the lease ended, and its return excluded them). The used ones count
// as the key's requests at the time of the return, as Request counts a
// request's tokens: the demand window (holding.count, one arrival instant
// per token, as the driver's checks took them one by one), the key's use
// (used: the idle and quiet bookkeeping, the idle check), a lease used
// up reported spent (noteUsed), then an ask if the demand warrants one
// (maybeAsk).

// allowance is a holding's open allowance: the lease its tokens came from
// (seq, from) and how many were handed out. Per key it is a field of the
// holding, counted in MemoryBytes with it (holdingAlloc).
type allowance struct {
	seq    uint64
	from   strategy.NodeID
	tokens int64
}

// allowFrom reports whether ls backs the driver's open allowance of h's
// key (its tokens are out, not used: it is not spent, nor returned at
// idle, meanwhile).
func (h *holding) allowFrom(ls held) bool {
	return h.allow.tokens > 0 && h.allow.seq == ls.seq && h.allow.from == ls.from
}

// nodeTier reports whether this node decides key from node leases of its
// regional owner: it is neither the key's global owner nor its regional
// owner (an upstream of the region tier), and the key is coordinated.
func (l *RegionLease) nodeTier(key string) bool {
	to, region := l.upstream(key)
	return to != "" && !region
}

// Grant hands the driver up to want whole tokens (at most
// strategy.AllowanceCap of the rule) of key's node lease with the most
// tokens among those unexpired at now (received by now), valid until that
// lease's end of use here; tokens 0 when this node is the key's global or
// regional owner, holds no such lease with a token, or has an allowance
// of key open already.
func (l *RegionLease) Grant(now time.Duration, key string, want int64, fx *strategy.Effects) (int64, time.Duration) {
	if want <= 0 || l.allowCap <= 0 || !l.nodeTier(key) {
		return 0, now
	}
	h := l.keys[key]
	if h == nil || h.allow.tokens > 0 {
		return 0, now
	}
	best := h.richestNodeLease(now)
	if best < 0 {
		return 0, now
	}
	ls := &h.leases[best]
	g := min(want, l.allowCap, ls.tokens)
	ls.tokens -= g
	ls.used += g
	h.allow = allowance{seq: ls.seq, from: ls.from, tokens: g}
	return g, ls.expires
}

// richestNodeLease is the index in h.leases of the node lease (not a
// region's, none of it lent on) with the most tokens among those
// received and unexpired at now; -1 when none holds a token.
func (h *holding) richestNodeLease(now time.Duration) int {
	best := -1
	for i, ls := range h.leases {
		if ls.expires > now && ls.since <= now && ls.tokens > 0 && !ls.region && ls.lent == 0 && ls.subs == 0 &&
			(best < 0 || ls.tokens > h.leases[best].tokens) {
			best = i
		}
	}
	return best
}

// Return closes key's allowance at now: unused of its tokens (at most
// what was handed out) go back into the lease they came from when it is
// still held and unexpired, the others count as used: as the key's
// requests at now (see the comment at the top of this file), then an ask
// goes out if the demand warrants one. A key with no allowance open is
// ignored.
func (l *RegionLease) Return(now time.Duration, key string, unused int64, fx *strategy.Effects) {
	h := l.keys[key]
	if h == nil || h.allow.tokens <= 0 {
		return
	}
	a := h.allow
	h.allow = allowance{}
	unused = min(max(unused, 0), a.tokens)
	used := a.tokens - unused
	var from *held
	for i := range h.leases {
		if ls := &h.leases[i]; ls.seq == a.seq && ls.from == a.from && ls.expires > now {
			from = ls
			break
		}
	}
	if from != nil {
		from.tokens += unused
		from.used -= unused
	}
	if used > 0 {
		h.count(now, used, true, l.window)
		h.curInst += used - 1 // one instant per token: the checks came one by one
		h.lastArrival = now
		l.used(now, key, h, fx)
		if from != nil {
			l.noteUsed(key, from, fx)
		}
	} else {
		// The idle check may have kept the lease for the allowance.
		l.scheduleIdle(now, key, h, fx)
	}
	l.maybeAsk(now, key, h, fx)
}

// AllowancesExpire marks regionlease's allowances as valid only until
// their lease's end of use (strategy.ExpiringAllowancer).
func (l *RegionLease) AllowancesExpire() {}

var _ strategy.ExpiringAllowancer = (*RegionLease)(nil)
