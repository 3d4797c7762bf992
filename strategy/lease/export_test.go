package lease

import (
	"fmt"
	"sort"
	"time"

	"github.com/tokenmesh/tokenmesh/strategy"
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
