package concurrency

import (
	"maps"
	"slices"
	"time"

	peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"
	"github.com/tokenmesh/tokenmesh/rendezvous"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// Waiting acquires (strategy.Waiter; ours, a semaphore's wait): an acquire
// with a max wait that finds its key at the limit waits in the key's FIFO
// queue at the owner, and is granted as soon as a permit is released,
// lapses or a lease's slots come back, or refused when its wait is over.
// The slot goes to the head of the queue at the owner, with no round trip
// between the release and the grant.

// MaxWait bounds an acquire's wait (an hour).
const MaxWait = time.Hour

// maxWaiters bounds a key's queue: an acquire beyond it is refused.
const maxWaiters = 10_000

// waiter is an acquire queued at the key's owner.
type waiter struct {
	from     strategy.NodeID // c.self for an acquire taken here
	id       uint64          // its request id (at from)
	weight   int64
	received time.Duration // when it was queued
	deadline time.Duration
}

// RequestWait is Request in waiting mode: maxWait > 0 lets an acquire the
// key's owner cannot grant now wait in the key's queue there for up to
// maxWait (decided later: granted when a slot frees, refused at the end of
// the wait). Refused at once: what Request refuses at once, a node that
// may not grant the key now (within permit_ttl of its start or of taking
// the key over), a full queue. A grant's Delay is 0: the permit is valid
// when it is given.
func (c *Concurrency) RequestWait(now time.Duration, req strategy.Request, maxWait time.Duration, fx *strategy.Effects) (strategy.Decision, bool) {
	if maxWait <= 0 {
		return c.Request(now, req, fx)
	}
	maxWait = min(maxWait, MaxWait)
	refuse := strategy.Decision{RequestID: req.ID}
	if req.Tokens < 1 || req.Tokens > c.limit || checkKey(req.Key) != nil {
		return refuse, true
	}
	owner := rendezvous.Owner(req.Key, c.members)
	if owner != c.self {
		if d, ok := c.grantLeased(now, req, fx); ok {
			return d, true
		}
		f := &forward{req: req, owner: owner, deadline: now + maxWait + c.timeout, maxWait: maxWait}
		putID(c.pending, &c.mem.pending, req.ID, f)
		c.pushDue(dueEvent{at: f.deadline, id: req.ID, kind: dueForward})
		fx.Send(owner, encode(&peerv1.ConcurrencyMessage{Body: &peerv1.ConcurrencyMessage_Acquire{Acquire: &peerv1.ConcurrencyAcquire{
			RequestId: req.ID, Key: req.Key, Weight: req.Tokens, MaxWaitNs: int64(maxWait)}}}))
		fx.WakeAt(f.deadline)
		c.noteHot(now, req.Key, owner, fx)
		return strategy.Decision{}, false
	}
	if len(c.queue(req.Key)) == 0 {
		if id := c.grant(now, req.Key, req.Tokens, fx); id != 0 {
			return strategy.Decision{RequestID: req.ID, Allowed: true, Permit: id, Expires: req.Arrival + c.ttl}, true
		}
	}
	if !c.enqueue(now, req.Key, waiter{from: c.self, id: req.ID, weight: req.Tokens, received: now, deadline: now + maxWait}, fx) {
		return refuse, true
	}
	return strategy.Decision{}, false
}

func (c *Concurrency) queue(key string) []*waiter {
	if kp := c.keys[key]; kp != nil {
		return kp.waiters
	}
	return nil
}

// enqueue queues w for key at this owner (false: it may not grant the key
// now, or the queue is full).
func (c *Concurrency) enqueue(now time.Duration, key string, w waiter, fx *strategy.Effects) bool {
	if !c.owns(now, key) {
		return false
	}
	kp := c.table(key)
	if len(kp.waiters) >= maxWaiters {
		return false
	}
	kp.waiters = append(kp.waiters, &w)
	c.kpChanged(kp)
	if _, ok := c.waiting[key]; !ok {
		c.waiting[key] = struct{}{}
		c.mem.waiting.Add("") // its key string is the permit table's
	}
	fx.WakeAt(w.deadline)
	c.scheduleSweep(now, fx)
	return true
}

// serveWaiters grants key's queued acquires in order while there is room,
// refuses those whose wait is over, and asks to be woken at the earliest
// permit expiry while some wait.
func (c *Concurrency) serveWaiters(now time.Duration, key string, fx *strategy.Effects) {
	kp := c.keys[key]
	if kp == nil || len(kp.waiters) == 0 {
		c.doneWaiting(key)
		return
	}
	c.expireTable(now, kp)
	defer c.kpChanged(kp)
	owns := c.owns(now, key)
	kp.waiters = slices.DeleteFunc(kp.waiters, func(w *waiter) bool {
		if w.deadline <= now || !owns {
			c.answerWaiter(now, w, key, 0, fx) // its wait is over
			return true
		}
		return false
	})
	for len(kp.waiters) > 0 {
		w := kp.waiters[0]
		if kp.held+w.weight > c.limit {
			break
		}
		id := c.grant(now, key, w.weight, fx)
		if id == 0 {
			break
		}
		kp.waiters = kp.waiters[1:]
		c.answerWaiter(now, w, key, id, fx)
	}
	if len(kp.waiters) == 0 {
		kp.waiters = nil
		c.doneWaiting(key)
		return
	}
	if next := kp.nextExpiry(); next > now {
		fx.WakeAt(next)
	}
}

// nextExpiry is the earliest expiry of kp's permits and leases granted, -1
// for none.
func (kp *keyPermits) nextExpiry() time.Duration {
	next := time.Duration(-1)
	for _, p := range kp.permits {
		if next < 0 || p.expires < next {
			next = p.expires
		}
	}
	for _, l := range kp.leases {
		if next < 0 || l.until < next {
			next = l.until
		}
	}
	return next
}

// answerWaiter answers a queued acquire at now: permit 0 refuses it. A
// grant here expires at now + permit_ttl, the owner's own expiry; a
// verdict carries the wait, from which the sender counts it.
func (c *Concurrency) answerWaiter(now time.Duration, w *waiter, key string, permit uint64, fx *strategy.Effects) {
	if w.from == c.self {
		if permit == 0 {
			fx.Decide(w.id, false)
		} else {
			fx.DecidePermit(w.id, permit, now+c.ttl)
		}
		return
	}
	v := &peerv1.ConcurrencyVerdict{RequestId: w.id, Key: key, Granted: permit != 0, Permit: permit}
	if permit != 0 {
		v.WaitedNs = int64(now - w.received)
	}
	fx.Send(w.from, encode(&peerv1.ConcurrencyMessage{Body: &peerv1.ConcurrencyMessage_Verdict{Verdict: v}}))
}

// serveAllWaiters is serveWaiters for every key with a queue (waiting),
// in key order: O(keys with a queue), not O(keys) (ours, issue 28: it
// walked every permit table at every Tick).
func (c *Concurrency) serveAllWaiters(now time.Duration, fx *strategy.Effects) {
	if len(c.waiting) == 0 {
		return
	}
	for _, k := range slices.Sorted(maps.Keys(c.waiting)) {
		c.serveWaiters(now, k, fx)
	}
}

// doneWaiting takes key out of waiting (its queue is empty).
func (c *Concurrency) doneWaiting(key string) {
	if _, ok := c.waiting[key]; ok {
		delete(c.waiting, key)
		c.mem.waiting.Remove("")
	}
}

var _ strategy.Waiter = (*Concurrency)(nil)
