package lease

import (
	"slices"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/rendezvous"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/internal/buckets"
)

// Split brain under `partition: conserve` (ours; the rules of
// strategy/owner's conserve.go, applied to the owner's pool).
//
// A node that sees k of the last agreed N members (strategy.Conserver: the
// live ones plus those that failed less than reconnect_timeout ago)
// decides every key it owns against its pool and against a conserve
// bucket of (k/N)(r, b): a request needs a token in both and takes it from
// both; a grant is at most the conserve bucket's whole tokens and is taken
// from both (an unused return made in the same view goes back to both).
// The sides' conserve buckets add up to one bucket, so the sides admit
// together at most b + r*T in any window, leases included: a lease
// granted before the cut was taken from the pool then, and its holder
// spends it wherever it is. In detail, as in owner:
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
	gen      uint64                    // incremented at every new k/N: a grant's return is credited to the conserve bucket of its own view only
	at       time.Duration             // when this node last saw members missing (the current k/N began)
	buckets  map[string]*bucket.Bucket // per key while k < n; nil otherwise
}

// SetExpected records the last agreed members (strategy.Conserver) and,
// under conserve, rescales.
func (l *Lease) SetExpected(now time.Duration, expected []strategy.NodeID, fx *strategy.Effects) {
	l.cons.expected = slices.Clone(expected)
	if l.cons.on {
		l.rescale(now, fx)
	}
}

// rescale sets the conserve buckets for the current k of N (none when this
// node sees every expected member), capping the pools at the conserve
// buckets being dropped first.
func (l *Lease) rescale(now time.Duration, fx *strategy.Effects) {
	k, n, _ := strategy.ConserveScale(l.self, l.members, l.cons.expected)
	if k == l.cons.k && n == l.cons.n {
		return
	}
	l.capPools(now, fx)
	l.cons.k, l.cons.n = k, n
	l.cons.gen++
	if k >= n {
		l.cons.buckets = nil
		return
	}
	l.cons.buckets, l.cons.at = map[string]*bucket.Bucket{}, now
}

// capPools lowers the level of every pool decided under the conserve
// buckets to that bucket's whole tokens (a pool swept meanwhile is made
// again, as it would be at its next use, and capped). A conserve bucket
// swept because it was full holds k/N b: its pool is not capped, as the
// sides' buckets add up to one bucket (the other side's merge caps it).
func (l *Lease) capPools(now time.Duration, fx *strategy.Effects) {
	for _, key := range sortedKeys(l.cons.buckets) {
		if l.owner(key) != l.self && l.pools[key] == nil {
			continue // moved away meanwhile: its state went with it
		}
		cb := l.cons.buckets[key]
		p := l.pool(key, now)
		l.sh.advance(p, max(now, p.Last))
		if w := buckets.Whole(*cb, max(now, p.Last)) * l.sh.per; p.Level > w {
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

// conserveBucket is key's conserve bucket (while there are conserve
// buckets), made at time at: k/N of p's whole tokens for a key this node
// owned in the last agreed view, empty as of conserveFrom for one it took
// over. nil: the scaled rate cannot be represented (everything refused).
func (l *Lease) conserveBucket(key string, p *pool, at time.Duration) *bucket.Bucket {
	if cb := l.cons.buckets[key]; cb != nil {
		return cb
	}
	k, n := int64(l.cons.k), int64(l.cons.n)
	b, err := bucket.New(bucket.Rate{Tokens: l.rate.Tokens * k, Per: l.rate.Per * time.Duration(n)}, l.sh.burst*k/n, at)
	if err != nil {
		return nil
	}
	if l.takenOver(key) {
		_ = b.MergeLevel(0, min(l.conserveFrom(), at)) // 0 is within bounds; decisions wait for conserveFrom, a charge does not
	} else if have, want := buckets.Whole(b, at), l.sh.whole(p, at)*k/n; have > want {
		b.Debit(at, have-want)
	}
	l.cons.buckets[key] = &b
	return &b
}

// conserveWhole is the whole tokens q's key may take now under conserve:
// the conserve bucket's (or any number when there are none).
func (l *Lease) conserveWhole(p *pool, q queued) int64 {
	if l.cons.buckets == nil {
		return l.sh.burst
	}
	cb := l.conserveBucket(q.key, p, q.arrival)
	if cb == nil {
		return 0
	}
	return buckets.Whole(*cb, q.arrival)
}

// conserveTake takes n tokens of q's key from its conserve bucket (there
// are conserve buckets, and conserveWhole said they are there).
func (l *Lease) conserveTake(p *pool, q queued, n int64) {
	if cb := l.conserveBucket(q.key, p, q.arrival); cb != nil && n > 0 {
		cb.AllowN(q.arrival, n)
	}
}

// decideConserved decides request q against p and its conserve bucket:
// a token in both, taken from both; a charge (overdraft) taken from both
// whatever the verdict. Waiting mode decides without waiting.
func (l *Lease) decideConserved(p *pool, q queued) bool {
	if l.od.On && q.charge {
		allowed := l.sh.charge(p, q.arrival, q.tokens, l.debtTicks)
		if cb := l.conserveBucket(q.key, p, q.arrival); cb != nil {
			ok, _ := cb.ChargeN(q.arrival, q.tokens, max(l.od.MaxDebt*int64(l.cons.k)/int64(l.cons.n), 1))
			allowed = allowed && ok
		}
		return allowed
	}
	if l.sh.spare(p, q.arrival) < q.tokens*l.sh.per || l.conserveWhole(p, q) < q.tokens {
		return false
	}
	l.conserveTake(p, q, q.tokens)
	return l.sh.take(p, q.arrival, q.tokens)
}

// conserveRefund gives the unused tokens of a lease granted under the
// current conserve buckets back to its key's conserve bucket.
func (l *Lease) conserveRefund(key string, g *grantRec, at time.Duration, unused int64) {
	if l.cons.buckets == nil || g.consGen != l.cons.gen {
		return
	}
	if cb := l.cons.buckets[key]; cb != nil {
		cb.Refund(at, unused)
	}
}

// sweepConserve drops the conserve buckets that are full (capPools).
func (l *Lease) sweepConserve(now time.Duration) {
	for k, cb := range l.cons.buckets {
		if cb.Full(now) {
			delete(l.cons.buckets, k)
		}
	}
}
