package concurrency

import (
	"slices"
	"time"

	peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"
	"github.com/tokenmesh/tokenmesh/rendezvous"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/internal/memsize"
)

// Leased permits (parameter lease = K > 0; ours, after `lease`, which
// leases tokens): a node that forwarded at least K acquires of a key within
// lease_ttl (the key is hot there) asks the key's owner for a lease of up
// to K slots, and then grants permits of the key itself from it, with no
// round trip, until lease_ttl after it asked. The owner counts the lease's
// slots as in flight until lease_ttl + permit_ttl after it granted it (a
// permit granted from the lease at its last instant lapses by then), less
// the slots the lessee returns: at the lease's end, its unused slots; after
// it, each slot whose permit is released or lapses. A permit granted from
// a lease and released at another node reaches the lessee through the
// owner, which passes releases of permits it does not hold on to the key's
// lessees.
//
// The bound is unchanged with the window permit_ttl + lease_ttl in place of
// permit_ttl: a node grants (permits or leases) only after it has been the
// key's owner in every view for that window, since a former owner's
// lessees may grant until their lease ends, and their permits live
// permit_ttl more.

// lease is a lease held by this node (the lessee).
type lease struct {
	id      uint64
	owner   strategy.NodeID
	slots   int64         // not returned yet
	used    int64         // by the live permits below
	end     time.Duration // no grant from it at or after end
	permits map[uint64]permit
	// heap accounting (memory.go): the bytes counted for this lease, the
	// most entries its permits map held
	mem, permPeak int32
}

// ownerLease is a lease the owner granted.
type ownerLease struct {
	node  strategy.NodeID
	slots int64
	until time.Duration // its slots free themselves then
}

// leaseAsk is an outstanding ask.
type leaseAsk struct {
	id       uint64
	owner    strategy.NodeID
	sent     time.Duration
	deadline time.Duration
}

// hotCount counts the acquires of a key this node forwarded in a window.
type hotCount struct {
	since time.Duration
	n     int64
}

// grantLeased grants req from a lease of its key held here: a decision,
// or false when no lease has room (or leases are off).
func (c *Concurrency) grantLeased(now time.Duration, req strategy.Request, fx *strategy.Effects) (strategy.Decision, bool) {
	for _, l := range c.leases[req.Key] {
		if now >= l.end || l.slots-l.used < req.Tokens {
			continue
		}
		c.expireLease(now, req.Key, l, fx)
		if l.slots-l.used < req.Tokens {
			continue
		}
		id := c.rng.Uint64()
		for id == 0 || l.permits[id].weight != 0 {
			id = c.rng.Uint64()
		}
		l.permits[id] = permit{weight: req.Tokens, expires: req.Arrival + c.ttl}
		l.used += req.Tokens
		c.pushDue(dueEvent{at: req.Arrival + c.ttl, key: req.Key, kind: dueLease})
		c.leaseChanged(l)
		c.scheduleSweep(now, fx)
		return strategy.Decision{RequestID: req.ID, Allowed: true, Permit: id, Expires: req.Arrival + c.ttl}, true
	}
	return strategy.Decision{}, false
}

// noteHot counts a forwarded acquire of key and asks its owner for a lease
// once the key is hot here (K forwards within lease_ttl) and no ask is out.
func (c *Concurrency) noteHot(now time.Duration, key string, owner strategy.NodeID, fx *strategy.Effects) {
	if c.leaseSlots == 0 {
		return
	}
	h := c.hot[key]
	if h == nil || now-h.since >= c.leaseTTL {
		h = &hotCount{since: now}
		memsize.Put(c.hot, &c.mem.hot, key, h)
		c.pushDue(dueEvent{at: now + c.leaseTTL, key: key, kind: dueHot})
	}
	h.n++
	if h.n < c.leaseSlots || c.asks[key] != nil {
		return
	}
	c.nextAsk++
	a := &leaseAsk{id: c.nextAsk, owner: owner, sent: now, deadline: now + c.timeout}
	memsize.Put(c.asks, &c.mem.asks, key, a)
	c.pushDue(dueEvent{at: a.deadline, key: key, kind: dueAsk})
	fx.Send(owner, encode(&peerv1.ConcurrencyMessage{Body: &peerv1.ConcurrencyMessage_LeaseAsk{LeaseAsk: &peerv1.ConcurrencyLeaseAsk{
		RequestId: a.id, Key: key, Slots: c.leaseSlots}}}))
	fx.WakeAt(a.deadline)
	h.n = 0
}

// grantLease decides a lease ask at the owner: the lease's id and slots,
// or 0, 0.
func (c *Concurrency) grantLease(now time.Duration, from strategy.NodeID, key string, slots int64, fx *strategy.Effects) (uint64, int64) {
	if c.leaseSlots == 0 || !c.owns(now, key) {
		return 0, 0
	}
	kp := c.table(key)
	c.expireTable(now, kp)
	g := min(slots, c.limit-kp.held)
	if g < 1 {
		return 0, 0
	}
	id := c.rng.Uint64()
	for id == 0 || kp.leases[id] != nil {
		id = c.rng.Uint64()
	}
	if kp.leases == nil {
		kp.leases = map[uint64]*ownerLease{}
	}
	kp.leases[id] = &ownerLease{node: from, slots: g, until: now + c.leaseTTL + c.ttl}
	kp.held += g
	c.kpChanged(kp)
	c.scheduleSweep(now, fx)
	return id, g
}

// onLeaseGrant takes a grant in: a lease from the ask's send, or, for a
// grant nobody waits for (late, duplicate), its slots returned at once.
func (c *Concurrency) onLeaseGrant(now time.Duration, from strategy.NodeID, g *peerv1.ConcurrencyLeaseGrant, fx *strategy.Effects) {
	a := c.asks[g.Key]
	if a == nil || a.id != g.RequestId || a.owner != from {
		for _, l := range c.leases[g.Key] {
			if l.id == g.Lease && l.owner == from {
				return // a duplicate of the grant it holds
			}
		}
		if g.Lease != 0 {
			c.sendReturn(from, g.Key, g.Lease, g.Slots, fx)
		}
		return
	}
	memsize.Delete(c.asks, &c.mem.asks, g.Key)
	if g.Lease == 0 {
		return
	}
	l := &lease{id: g.Lease, owner: from, slots: g.Slots, end: a.sent + c.leaseTTL, permits: map[uint64]permit{}}
	c.setLeases(g.Key, append(c.leases[g.Key], l))
	c.leaseChanged(l)
	fx.WakeAt(a.sent + c.leaseTTL)
	c.pushDue(dueEvent{at: l.end, key: g.Key, kind: dueLease})
	c.scheduleSweep(now, fx)
}

func (c *Concurrency) sendReturn(to strategy.NodeID, key string, id uint64, slots int64, fx *strategy.Effects) {
	fx.Send(to, encode(&peerv1.ConcurrencyMessage{Body: &peerv1.ConcurrencyMessage_LeaseReturn{LeaseReturn: &peerv1.ConcurrencyLeaseReturn{
		Key: key, Lease: id, Slots: slots}}}))
}

// onReturn frees returned slots of a lease granted to from.
func (c *Concurrency) onReturn(from strategy.NodeID, r *peerv1.ConcurrencyLeaseReturn) {
	kp := c.keys[r.Key]
	if kp == nil {
		return
	}
	if l := kp.leases[r.Lease]; l != nil && l.node == from {
		n := min(r.Slots, l.slots)
		l.slots -= n
		kp.held -= n
		if l.slots == 0 {
			delete(kp.leases, r.Lease)
		}
		c.kpChanged(kp)
	}
}

// freeLeased frees permit of key if a lease here granted it (true).
func (c *Concurrency) freeLeased(now time.Duration, key string, id uint64, fx *strategy.Effects) bool {
	for _, l := range c.leases[key] {
		if p, ok := l.permits[id]; ok {
			delete(l.permits, id)
			l.used -= p.weight
			c.expireLease(now, key, l, fx)
			c.leaseEnded(now, key, l)
			return true
		}
	}
	return false
}

// expireLease frees l's lapsed permits and, once l has ended, returns
// every slot not in use to its owner.
func (c *Concurrency) expireLease(now time.Duration, key string, l *lease, fx *strategy.Effects) {
	for id, p := range l.permits {
		if p.expires <= now {
			l.used -= p.weight
			delete(l.permits, id)
		}
	}
	if now >= l.end && l.slots > l.used {
		c.sendReturn(l.owner, key, l.id, l.slots-l.used, fx)
		l.slots = l.used
	}
}

// endMovedLeases ends, at a membership change, the leases whose key's
// owner in the new view is another node than the one that granted them
// (their unused slots go back to it).
func (c *Concurrency) endMovedLeases(now time.Duration, fx *strategy.Effects) {
	keys := make([]string, 0, len(c.leases))
	for k := range c.leases {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		owner := rendezvous.Owner(k, c.members)
		for _, l := range c.leases[k] {
			if l.owner != owner && now < l.end {
				l.end = now
				c.expireLease(now, k, l, fx)
				c.leaseEnded(now, k, l)
			}
		}
	}
}

// lessees is the nodes holding leases of key from this owner, sorted,
// from excluded.
func (kp *keyPermits) lessees(from strategy.NodeID) []strategy.NodeID {
	var out []strategy.NodeID
	for _, l := range kp.leases {
		if l.node != from && !slices.Contains(out, l.node) {
			out = append(out, l.node)
		}
	}
	slices.Sort(out)
	return out
}
