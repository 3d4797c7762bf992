package lease

import (
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/workload"
)

// Conserved checks, for tests, the invariant the envelope rests on: for
// every owner O (every node with a pool for a key), O's level plus the
// unused tokens that any node holds in unexpired leases granted by O for
// that key never exceed the burst, and O's level is never negative. nodes
// is the current incarnation of every node; leases held by crashed nodes
// are counted too (they are lost, which only makes the check stricter),
// unless O runs with replicas (then only the leases granted out of O's
// pool count: see the bound in "# Crashes").
func Conserved(nodes map[strategy.NodeID]*Lease, burst int64, now time.Duration) error {
	return ConservedWaiting(nodes, burst, 0, now)
}

// ConservedWaiting is Conserved for waiting mode with at most maxWait:
// an owner's level may go below 0 while reservations wait, but never below
// what its rate refills in maxWait (a reservation is taken only when the
// deficit refills within maxWait).
func ConservedWaiting(nodes map[strategy.NodeID]*Lease, burst int64, maxWait, now time.Duration) error {
	ids := make([]strategy.NodeID, 0, len(nodes))
	for id := range nodes {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for _, oid := range ids {
		o := nodes[oid]
		for key, p := range o.pools {
			cp := *p
			o.sh.advance(&cp, now)
			if floor := -o.sh.tokensPerNs * int64(maxWait); cp.Level < floor || cp.Leased < 0 {
				return fmt.Errorf("at %v: %s: pool of %q has level %d ticks, %d leased", now, oid, key, cp.Level, cp.Leased)
			}
			held := p.own // the driver's allowance at the owner (allowance.go)
			for hid, h := range nodes {
				if hk := h.keys[key]; hk != nil {
					for _, ls := range hk.leases {
						if ls.from != oid || ls.expires <= now {
							continue
						}
						// With replicas, a restarted owner may continue
						// from a replicated state that misses leases its
						// previous incarnation granted after its last
						// sync (the bound in "# Crashes"): count the
						// leases granted out of this pool.
						if g := o.grants[grantID{hid, key, ls.seq}]; o.replicas > 1 && (g == nil || g.pool != p) {
							continue
						}
						held += ls.tokens
						if hk.allowFrom(ls) {
							// The driver's allowance out of this lease
							// (allowance.go): its tokens left the lease
							// and may still be taken.
							held += hk.allow.tokens
						}
					}
				}
			}
			if cp.Level+held*o.sh.per > burst*o.sh.per {
				return fmt.Errorf("at %v: %s's level (%d ticks, %d per token) of %q plus %d tokens held in its leases exceed the burst %d",
					now, oid, cp.Level, o.sh.per, key, held, burst)
			}
		}
	}
	return nil
}

// Audit is, for tests, key's pool at now as this node's owner view has
// it: its level in ticks (o.sh.per ticks a token), the whole tokens in its
// leases, and whether it has one. It reads a copy: the pool is not
// advanced (advancing it would change what later late decisions may take,
// shape.spare).
func (l *Lease) Audit(now time.Duration, key string) (levelTicks, leased int64, ok bool) {
	p := l.pools[key]
	if p == nil {
		return 0, 0, false
	}
	cp := *p
	l.sh.advance(&cp, now)
	return cp.Level, cp.Leased, true
}

// ExactEnvelopeExcess is, for tests, eval.EnvelopeViolation in integers:
// the largest excess over b + r*T of the tokens admitted for one key in
// any interval [t, t+T], over all keys, in ticks of rate (rate.Per ticks
// a token, rate.Tokens ticks refilled per ns: a nanosecond's refill is
// resolved, where the float check rounds away 1e-6 tokens), and where.
// reqs must be sorted by arrival; at most 0 when every key conforms. For
// admissions t_1 <= ... <= t_n of prefix sums S_k, the excess over
// [t_i, t_j] is (S_j - S_{i-1} - b)*Per - (t_j - t_i)*Tokens ticks (one
// pass, keeping the minimum of S_{i-1}*Per - t_i*Tokens). Int64 holds it
// for spans up to ~2^63 / Tokens ns and sums up to ~2^63 / Per tokens.
func ExactEnvelopeExcess(reqs []workload.Request, rate bucket.Rate, burst int64) (ticks int64, key string, at time.Duration) {
	type state struct{ sum, minPre int64 }
	keys := map[string]*state{}
	ticks = math.MinInt64
	per := int64(rate.Per)
	for _, r := range reqs {
		st := keys[r.Key]
		if st == nil {
			st = &state{minPre: math.MaxInt64}
			keys[r.Key] = st
		}
		t := int64(r.Arrival) * rate.Tokens
		st.minPre = min(st.minPre, st.sum*per-t)
		st.sum += r.Tokens
		if v := (st.sum-burst)*per - t - st.minPre; v > ticks {
			ticks, key, at = v, r.Key, r.Arrival
		}
	}
	return ticks, key, at
}
