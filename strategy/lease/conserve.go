package lease

import (
	"slices"
	"time"

	"github.com/tokenmesh/tokenmesh/rendezvous"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/internal/leasepool"
)

// Split brain under `partition: conserve` (ours; the rules of
// strategy/owner's conserve.go, applied to the owner's pool).
//
// A node that sees k of the last agreed N members (strategy.Conserver: the
// live ones plus those that failed less than reconnect_timeout ago)
// decides every key it owns against its pool and against a conserve pool
// of (k/N)(r, b) that, like the key's pool, counts the tokens leased out of
// it against its capacity (leasepool): a request needs a token in both
// and takes it from both; a grant is at most the conserve pool's whole
// tokens and is lent from both (its end, by expiry or return, gives its
// unused tokens back to both, the conserve pool's in the same view only).
// The sides' conserve pools add up to one bucket, so the sides admit
// together at most b + r*T in any window, leases included: a lease
// granted before the cut was taken from the pool then, and its holder
// spends it wherever it is. (A first version took a grant's tokens from a
// plain conserve bucket, which refilled to its burst while they were still
// out in leases: TestConserveOwnerWholeRun found a side admitting 10 in
// 115 ms against its share's 7.8, at 56/s.) In detail, as in owner:
//   - A key the node owned in the last agreed view starts its conserve
//     bucket at k/N of the pool's whole tokens; a key it took over (its
//     owner is across the cut, which decides from the whole pool until its
//     own detector sees the cut, perhaps draining it) is refused until
//     conserve_delay after the node saw members missing, and starts empty
//     then, whatever state a replica gave it.
//   - on_timeout defaults to reject (a fallback of r/N per holder while
//     the cut is undetected would add to the other side's whole pool).
//   - A forward or an ask reaches only the owner in the receiver's view
//     (one that has not seen the cut would decide from the whole pool):
//     refused, or granted nothing, elsewhere.
//   - When the conserve buckets are dropped (the heal, or a new k/N),
//     each pool's level is capped at its conserve bucket's whole tokens
//     before any pool is shipped or merged, so the heal creates no tokens
//     (the pool refilled at the whole rate while the side spent its
//     share).
// Waiting mode decides without waiting while there are conserve buckets
// (a reservation would have to hold in both at once).

// conserveState is lease's state under partition: conserve.
type conserveState struct {
	on       bool
	delay    time.Duration // parameter conserve_delay
	expected []strategy.NodeID
	k, n     int
	gen      uint64                     // incremented at every new k/N: a lease goes back to the conserve pool of its own view only
	at       time.Duration              // when this node last saw members missing (the current k/N began)
	healAt   time.Duration              // when a heal this node saw drops the conserve pools (rescale); 0: none pending
	sh       leasepool.Shape            // the conserve pools' shape: (k/N)(r, b)
	buckets  map[string]*leasepool.Pool // per key while k < n; nil otherwise
}

// SetExpected records the last agreed members (strategy.Conserver) and,
// under conserve, rescales.
func (l *Lease) SetExpected(now time.Duration, expected []strategy.NodeID, fx *strategy.Effects) {
	l.cons.expected = slices.Clone(expected)
	if l.cons.on {
		l.rescale(now, fx)
	}
}

// rescale sets the conserve pools for the current k of N (none when this
// node sees every expected member), capping the pools at the conserve
// pools being dropped first. A larger share (members back: the heal)
// waits conserve_delay (healDue), the pools capped at once: the other side
// may not see the heal yet and decides its share meanwhile (as in owner).
func (l *Lease) rescale(now time.Duration, fx *strategy.Effects) {
	k, n, _ := strategy.ConserveScale(l.self, l.members, l.cons.expected)
	if k == l.cons.k && n == l.cons.n {
		return
	}
	if l.cons.buckets != nil && k*l.cons.n > l.cons.k*n {
		l.capPools(now, fx)
		if l.cons.healAt == 0 {
			l.cons.healAt = now + l.cons.delay
			fx.WakeAt(l.cons.healAt)
		}
		return
	}
	l.applyScale(now, k, n, fx)
}

// healDue applies a heal's rescale once conserve_delay has passed since
// this node saw it (rescale).
func (l *Lease) healDue(now time.Duration, fx *strategy.Effects) {
	if l.cons.healAt == 0 || now < l.cons.healAt {
		return
	}
	l.cons.healAt = 0
	if k, n, _ := strategy.ConserveScale(l.self, l.members, l.cons.expected); k != l.cons.k || n != l.cons.n {
		l.applyScale(now, k, n, fx)
	}
}

// applyScale makes the conserve pools of k of n (none when k >= n),
// capping the pools at the ones it drops.
func (l *Lease) applyScale(now time.Duration, k, n int, fx *strategy.Effects) {
	l.cons.healAt = 0
	l.capPools(now, fx)
	l.cons.k, l.cons.n = k, n
	l.cons.gen++
	if k >= n {
		l.cons.buckets = nil
		return
	}
	l.cons.sh = leasepool.Shape{TokensPerNs: l.rate.Tokens * int64(k), Per: int64(l.rate.Per) * int64(n), Burst: l.sh.burst * int64(k) / int64(n)}
	l.cons.buckets, l.cons.at = map[string]*leasepool.Pool{}, now
}

// capPools lowers the level of every pool decided under the conserve
// pools to its conserve pool's whole tokens (a pool swept meanwhile is
// made again, as it would be at its next use, and capped). A conserve
// pool swept because it was full holds k/N b: its pool is not capped, as
// the sides' pools add up to one bucket (the other side's merge caps it).
func (l *Lease) capPools(now time.Duration, fx *strategy.Effects) {
	for _, key := range sortedKeys(l.cons.buckets) {
		if l.owner(key) != l.self && l.pools[key] == nil {
			continue // moved away meanwhile: its state went with it
		}
		cp := l.cons.buckets[key]
		p := l.pool(key, now)
		at := max(now, p.Last)
		l.sh.advance(p, at)
		l.cons.sh.Advance(cp, at)
		if w := l.cons.sh.Whole(cp, at) * l.sh.per; p.Level > w {
			p.Level = w
			l.markDirty(now, key, fx) // shipped at the next sync
		}
	}
}

// takenOver reports whether this node did not own key in the last agreed
// view: it decides the key only because the cut took its owner away.
func (l *Lease) takenOver(key string) bool {
	return rendezvous.Owner(key, l.cons.expected) != l.self
}

// conserveFrom is when a side that took a key over starts earning its
// share of the key's rate.
func (l *Lease) conserveFrom() time.Duration { return l.cons.at + l.cons.delay }

// conserveBlocked reports whether q may not be decided or granted at all
// here under conserve: a peer's forward or ask for a key this node does
// not own in its view, or a key it took over before conserveFrom.
func (l *Lease) conserveBlocked(q queued) bool {
	if !l.cons.on {
		return false
	}
	if q.origin != "" && l.owner(q.key) != l.self {
		return true
	}
	return l.cons.buckets != nil && l.takenOver(q.key) && q.arrival < l.conserveFrom()
}

// conservePool is key's conserve pool (while there are conserve pools),
// advanced to at: made at k/N of p's whole tokens for a key this node
// owned in the last agreed view, empty as of conserveFrom for one it took
// over. Like the key's pool it counts the tokens leased out of it against
// its capacity, so that its level plus its leases never exceed (k/N) b.
func (l *Lease) conservePool(key string, p *pool, at time.Duration) *leasepool.Pool {
	cp := l.cons.buckets[key]
	if cp == nil {
		cp = &leasepool.Pool{Last: at}
		switch {
		case l.takenOver(key):
			cp.Last = min(l.conserveFrom(), at) // decisions wait for conserveFrom, a charge does not
		default:
			cp.Level = min(l.sh.whole(p, at)*int64(l.cons.k)/int64(l.cons.n), l.cons.sh.Burst) * l.cons.sh.Per
		}
		l.cons.buckets[key] = cp
	}
	l.cons.sh.Advance(cp, at)
	return cp
}

// conserveWhole is the whole tokens q's key may take now under conserve:
// its conserve pool's (or the burst when there are none).
func (l *Lease) conserveWhole(p *pool, q queued) int64 {
	if l.cons.buckets == nil {
		return l.sh.burst
	}
	return l.cons.sh.Whole(l.conservePool(q.key, p, q.arrival), q.arrival)
}

// conserveLend takes a lease of n tokens of q's key out of its conserve
// pool too (there are conserve pools, and conserveWhole said they are there).
func (l *Lease) conserveLend(p *pool, q queued, n int64) {
	l.cons.sh.Lend(l.conservePool(q.key, p, q.arrival), n)
}

// decideConserved decides request q against p and its conserve pool:
// a token in both, taken from both; a charge (overdraft) taken from both
// whatever the verdict (down to the conserve pool's share of max_debt).
// Waiting mode decides without waiting.
func (l *Lease) decideConserved(p *pool, q queued) bool {
	cp := l.conservePool(q.key, p, q.arrival)
	if l.od.On && q.charge {
		allowed := l.sh.charge(p, q.arrival, q.tokens, l.debtTicks)
		ok := l.cons.sh.Spare(cp, q.arrival) >= q.tokens*l.cons.sh.Per
		floor := max(l.od.MaxDebt*int64(l.cons.k)/int64(l.cons.n), 1) * l.cons.sh.Per
		if room := (cp.Level + floor) / l.cons.sh.Per; room > 0 {
			cp.Level -= min(q.tokens, room) * l.cons.sh.Per
		}
		return allowed && ok
	}
	if l.sh.spare(p, q.arrival) < q.tokens*l.sh.per || !l.cons.sh.Take(cp, q.arrival, q.tokens) {
		return false
	}
	return l.sh.take(p, q.arrival, q.tokens)
}

// conserveRelease releases n tokens of lease g of key in its conserve
// pool (its view's only), unused of them given back.
func (l *Lease) conserveRelease(key string, g *grantRec, at time.Duration, n, unused int64) {
	if l.cons.buckets == nil || g.consGen != l.cons.gen {
		return
	}
	if cp := l.cons.buckets[key]; cp != nil {
		l.cons.sh.Advance(cp, at)
		l.cons.sh.Release(cp, n, unused)
	}
}

// sweepConserve drops the conserve pools that are full (capPools).
func (l *Lease) sweepConserve(now time.Duration) {
	for k, cp := range l.cons.buckets {
		if l.cons.sh.Full(cp, now) {
			delete(l.cons.buckets, k)
		}
	}
}
