// Package concurrency implements the `concurrency` strategy: at most N
// requests of a key in flight across the whole cluster, the
// "concurrency" half of the throttling article's "throttling concurrency
// or RPS" (seed 003). An admitted request holds a permit (an id and an
// expiry) until it is released (strategy.Releaser) or lapses after
// permit_ttl: a holder that crashed or never released gives its slot
// back by then.
//
// Design (ours, on the article's designated server): the key's owner,
// picked by rendezvous hashing over the live members as in `owner`, holds
// the key's permits: a table of (id, weight, expiry). A key is a token
// bucket of rate 0 and burst N whose tokens come back on release or at
// expiry. Other nodes forward an acquire to the owner and wait up to
// timeout for its verdict (refusing when none comes; a verdict that comes
// later is released at once); they forward releases to it.
//
// Safety across crashes and membership changes. A node's table is lost
// when it crashes, and a node that becomes a key's owner cannot know the
// permits its former owner handed out. So a node grants a permit of key
// at now only if it has been key's owner in every view of the members it
// held during [now - permit_ttl, now], and it started at least
// permit_ttl ago: by then every permit any other node granted as the
// key's owner has lapsed. A node that is not the owner in its own view
// refuses forwarded acquires. Hence, per key:
//
//   - while the live nodes' views differ at most in dead nodes (a crash,
//     detected at different times, as long as no partition, false
//     suspicion or unseen join is in play), in flight <= N: all live
//     views name the same live owner (or a dead one, which grants
//     nothing), and that owner took over only after a permit_ttl in
//     which the old owner's permits lapsed;
//   - during a split (a partition, or views that disagree on a live
//     member: a join not yet seen everywhere), each side whose view names
//     itself the owner grants up to N: in flight <= s*N for s such nodes
//     (s <= the number of sides), and so until permit_ttl after the
//     views agree again (the permits granted during the split lapse);
//     then N again.
//
// The price: after a membership change, the keys that moved are refused
// for permit_ttl, and a node refuses every key for permit_ttl + join_wait
// after it starts (PartitionAvailable only; conserve does not apply: a
// side cannot know what the other side's owner granted). The bound is
// checked by TestPropertyInFlightBound; docs/CONCURRENCY.md has the
// measurements.
//
// A node that starts waits join_wait more (default permit_ttl, + lease_ttl
// with leases): its peers, until they see it (back), still grant its keys
// as their owner; a restart or join every peer sees within join_wait is
// no split.
//
// Hot keys (parameter lease = K > 0; lease.go): a node that forwarded K
// acquires of a key within lease_ttl leases up to K slots from its owner
// and grants the key's permits itself, as `lease` leases tokens; the
// takeover wait above becomes permit_ttl + lease_ttl. Off by default.
package concurrency

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"
	"github.com/tokenmesh/tokenmesh/internal/minheap"
	"github.com/tokenmesh/tokenmesh/rendezvous"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/internal/keyorder"
)

// Name is the strategy's name in the registry and in rules.
const Name = "concurrency"

// MaxTTL bounds permit_ttl.
const MaxTTL = time.Hour

// maxViews bounds the views of the members a node remembers (those of the
// last permit_ttl); on more, it forgets them and refuses every key for
// permit_ttl, which is as safe.
const maxViews = 256

// Concurrency is one node's state machine for a concurrency rule.
type Concurrency struct {
	self    strategy.NodeID
	members []strategy.NodeID // live members, sorted, self included
	limit   int64             // N
	ttl     time.Duration
	timeout time.Duration
	rng     *rand.Rand
	// leases (lease.go): K slots per lease (0: off), a lease's length,
	// and the takeover window, permit_ttl + lease_ttl.
	leaseSlots int64
	leaseTTL   time.Duration
	window     time.Duration
	startWait  time.Duration // more wait after a start, for the peers to see this node (join_wait)

	blockedUntil time.Duration // no grant before: Start + ttl, or after forgetting views
	views        []view        // the views of the last ttl, oldest first; the last is current

	keys      map[string]*keyPermits // the keys this node granted permits of
	pending   map[uint64]*forward    // acquires forwarded to an owner, by request id
	nextSweep time.Duration          // 0: none scheduled
	// the sweep in steps (due.go): the permit tables' keys, whether a
	// pass is under way and when it began; the granted forwards by expiry
	order   keyorder.Order
	passing bool
	passAt  time.Duration
	gexp    *minheap.Heap[idAt]
	// due holds the deadlines of forwards, leases held, asks and hot
	// counts (due.go), so that a Tick finds what is due without a walk
	due *minheap.Heap[dueEvent]

	granted map[uint64]grantedVia // forwarded acquires granted, by request id, until their expiry

	leases  map[string][]*lease  // leases this node holds, by key
	asks    map[string]*leaseAsk // outstanding lease asks, by key
	hot     map[string]*hotCount // forwarded acquires per key in the current window
	nextAsk uint64
	// waiting holds the keys whose permit table has acquires queued
	// (wait.go), so that a Tick serves them without a walk of every key.
	waiting map[string]struct{}

	mem memory // heap accounting (memory.go)
}

// view is a set of live members and when this node began to hold it.
type view struct {
	since   time.Duration
	members []strategy.NodeID
}

// keyPermits are the live permits of one key at its owner.
type keyPermits struct {
	held    int64 // sum of the weights and of the leases' slots
	permits map[uint64]permit
	leases  map[uint64]*ownerLease // granted to other nodes (lease.go)
	waiters []*waiter              // acquires waiting for a slot, in arrival order (wait.go)
	pos     int                    // the key's place in Concurrency.order (the sweep's)
	// heap accounting (memory.go): the bytes counted for the maps and
	// queue above, and the most entries the maps held (their slots)
	mem                 int32
	permPeak, leasePeak int32
}

type permit struct {
	weight  int64
	expires time.Duration
}

// grantedVia is the permit a forwarded acquire was granted, kept until
// it expires so that a duplicate of its verdict is told from a late grant.
type grantedVia struct {
	permit  uint64
	expires time.Duration
}

// forward is an acquire sent to the key's owner.
type forward struct {
	req      strategy.Request
	owner    strategy.NodeID
	deadline time.Duration
	maxWait  time.Duration // waiting mode (wait.go); 0: none
}

// New builds a node. N is the parameter limit (default the rule's burst).
// Errors: an invalid Config, an unknown parameter or one of the wrong
// type, limit < 1, permit_ttl not in (0, 1h], timeout not positive.
func New(cfg strategy.Config) (*Concurrency, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	v, err := strategy.ReadParams(Name, Params, cfg.Params)
	if err != nil {
		return nil, err
	}
	c := &Concurrency{
		self:    cfg.Self,
		limit:   int64(v.IntOr("limit", int(min(cfg.Burst, int64(1)<<31)))),
		ttl:     v.Duration("permit_ttl"),
		timeout: v.DurationOr("timeout", strategy.HintTimeout(cfg.LatencyHint)),
		rng:     cfg.Rand,
		keys:    map[string]*keyPermits{},
		pending: map[uint64]*forward{},
		granted: map[uint64]grantedVia{},
		leases:  map[string][]*lease{},
		asks:    map[string]*leaseAsk{},
		hot:     map[string]*hotCount{},
		waiting: map[string]struct{}{},
	}
	c.leaseSlots = int64(v.Int("lease"))
	c.leaseTTL = v.Duration("lease_ttl")
	c.startWait = v.DurationOr("join_wait", -1) // -1: the default, W (below)
	switch {
	case c.limit < 1:
		return nil, fmt.Errorf("concurrency: limit %d: want at least 1 permit in flight per key", c.limit)
	case c.ttl <= 0 || c.ttl > MaxTTL:
		return nil, fmt.Errorf("concurrency: permit_ttl %v: want a duration in (0, %v]", c.ttl, MaxTTL)
	case c.timeout <= 0:
		return nil, fmt.Errorf("concurrency: timeout %v: want a positive duration", c.timeout)
	case c.leaseSlots < 0 || c.leaseSlots > c.limit:
		return nil, fmt.Errorf("concurrency: lease %d: want 0 (off) to the limit %d slots", c.leaseSlots, c.limit)
	case c.leaseTTL <= 0 || c.leaseTTL > MaxTTL:
		return nil, fmt.Errorf("concurrency: lease_ttl %v: want a duration in (0, %v]", c.leaseTTL, MaxTTL)
	}
	c.window = c.ttl
	if c.leaseSlots > 0 {
		c.window += c.leaseTTL
	}
	if c.startWait == -1 {
		c.startWait = c.window
	}
	if c.startWait < 0 || c.startWait > MaxTTL {
		return nil, fmt.Errorf("concurrency: join_wait %v: want a duration in [0, %v]", c.startWait, MaxTTL)
	}
	c.members = sortedWith(cfg.Members, cfg.Self)
	return c, nil
}

// sortedWith is members sorted, without duplicates, self included.
func sortedWith(members []strategy.NodeID, self strategy.NodeID) []strategy.NodeID {
	m := append(slices.Clone(members), self)
	slices.Sort(m)
	return slices.Compact(m)
}

// Limit is N, the most permits (weights) of a key in flight.
func (c *Concurrency) Limit() int64 { return c.limit }

// TTL is permit_ttl.
func (c *Concurrency) TTL() time.Duration { return c.ttl }

// Start begins the node's first view; it grants nothing before now + W
// (it may be a restart: the permits it granted before are unknown to it)
// + join_wait (the peers, until they see it back, still grant its keys as
// their owner; those permits lapse W after they do).
func (c *Concurrency) Start(now time.Duration, fx *strategy.Effects) {
	c.blockedUntil = now + c.window + c.startWait
	c.views = []view{{since: now, members: c.members}}
}

// SetMembers starts a new view. Acquires forwarded to a node that left
// the view are refused at once.
func (c *Concurrency) SetMembers(now time.Duration, members []strategy.NodeID, fx *strategy.Effects) {
	m := sortedWith(members, c.self)
	if slices.Equal(m, c.members) {
		return
	}
	c.members = m
	c.trimViews(now)
	if len(c.views) >= maxViews {
		c.views = c.views[:0]
		c.blockedUntil = max(c.blockedUntil, now+c.window)
	}
	c.views = append(c.views, view{since: now, members: m})
	c.endMovedLeases(now, fx)
	c.serveAllWaiters(now, fx) // the keys this node no longer owns refuse their queues
	var gone []uint64
	for id, f := range c.pending {
		if !slices.Contains(m, f.owner) {
			gone = append(gone, id)
		}
	}
	slices.Sort(gone)
	for _, id := range gone {
		dropID(c.pending, &c.mem.pending, id)
		fx.Decide(id, false)
	}
}

// trimViews forgets the views that ended before now - ttl (the current
// one never ends).
func (c *Concurrency) trimViews(now time.Duration) {
	i := 0
	for i+1 < len(c.views) && c.views[i+1].since <= now-c.window {
		i++
	}
	c.views = c.views[i:]
}

// owns reports whether this node may grant permits of key at now: it
// started (or forgot its views) permit_ttl ago and was key's owner in
// every view it held during [now - ttl, now].
func (c *Concurrency) owns(now time.Duration, key string) bool {
	c.trimViews(now)
	return c.mayGrant(now, key)
}

// mayGrant is owns without forgetting old views (it changes nothing):
// the views that ended before now - ttl are skipped.
func (c *Concurrency) mayGrant(now time.Duration, key string) bool {
	if now < c.blockedUntil {
		return false
	}
	for i, v := range c.views {
		if i+1 < len(c.views) && c.views[i+1].since <= now-c.window {
			continue // ended before the window
		}
		if rendezvous.Owner(key, v.members) != c.self {
			return false
		}
	}
	return true
}

// grant decides an acquire of weight for key at now at this node as the
// owner: a permit id, or 0 when refused (not the owner, or no room).
func (c *Concurrency) grant(now time.Duration, key string, weight int64, fx *strategy.Effects) uint64 {
	if weight < 1 || weight > c.limit || !c.owns(now, key) {
		return 0
	}
	kp := c.table(key)
	c.expireTable(now, kp)
	if kp.held+weight > c.limit {
		return 0
	}
	id := c.rng.Uint64()
	for id == 0 || kp.has(id) {
		id = c.rng.Uint64()
	}
	kp.permits[id] = permit{weight: weight, expires: now + c.ttl}
	kp.held += weight
	c.kpChanged(kp)
	c.scheduleSweep(now, fx)
	return id
}

// table is key's permit table, made when missing.
func (c *Concurrency) table(key string) *keyPermits {
	kp := c.keys[key]
	if kp == nil {
		kp = &keyPermits{permits: map[uint64]permit{}}
		c.keys[key] = kp
		kp.pos = c.order.Add(key)
		c.mem.keys.Add(key)
		c.kpChanged(kp)
	}
	return kp
}

func (kp *keyPermits) has(id uint64) bool { _, ok := kp.permits[id]; return ok }

// expireTable is kp.expire with the heap accounting kept (kpChanged: an
// expired lease leaves kp's leases map, which MemoryBytes counts per
// entry); every caller goes through it, also those that return before
// changing kp otherwise (grant refusing for want of room: a recount in
// TestPropertyInFlightBound found 32 bytes kept for a lease gone).
func (c *Concurrency) expireTable(now time.Duration, kp *keyPermits) {
	kp.expire(now)
	c.kpChanged(kp)
}

// expire frees the permits and the leases' slots that lapsed by now.
func (kp *keyPermits) expire(now time.Duration) {
	for id, p := range kp.permits {
		if p.expires <= now {
			kp.held -= p.weight
			delete(kp.permits, id)
		}
	}
	for id, l := range kp.leases {
		if l.until <= now {
			kp.held -= l.slots
			delete(kp.leases, id)
		}
	}
}

// free releases permit id if held (true).
func (kp *keyPermits) free(id uint64) bool {
	p, ok := kp.permits[id]
	if ok {
		kp.held -= p.weight
		delete(kp.permits, id)
	}
	return ok
}

// scheduleSweep asks for a sweep of lapsed permits a ttl from now, unless
// one is scheduled.
func (c *Concurrency) scheduleSweep(now time.Duration, fx *strategy.Effects) {
	if c.nextSweep == 0 {
		c.nextSweep = now + c.ttl
		fx.WakeAt(c.nextSweep)
	}
}

// Request acquires a permit of req.Tokens slots (its weight) for req.Key:
// at once at the key's owner, otherwise after a round trip to it (or
// refused after timeout). An admitted Decision carries the permit's id
// and its expiry, req.Arrival + permit_ttl (at most the owner's own
// expiry, which counts from its later decision). Refused at once: weight
// above the limit, a key that no peer message can carry.
func (c *Concurrency) Request(now time.Duration, req strategy.Request, fx *strategy.Effects) (strategy.Decision, bool) {
	refuse := strategy.Decision{RequestID: req.ID}
	if req.Tokens < 1 || req.Tokens > c.limit || checkKey(req.Key) != nil {
		return refuse, true
	}
	owner := rendezvous.Owner(req.Key, c.members)
	if owner == c.self {
		id := c.grant(now, req.Key, req.Tokens, fx)
		if id == 0 {
			return refuse, true
		}
		return strategy.Decision{RequestID: req.ID, Allowed: true, Permit: id, Expires: req.Arrival + c.ttl}, true
	}
	if d, ok := c.grantLeased(now, req, fx); ok {
		return d, true
	}
	f := &forward{req: req, owner: owner, deadline: now + c.timeout}
	putID(c.pending, &c.mem.pending, req.ID, f)
	c.pushDue(dueEvent{at: f.deadline, id: req.ID, kind: dueForward})
	fx.Send(owner, encode(&peerv1.ConcurrencyMessage{Body: &peerv1.ConcurrencyMessage_Acquire{Acquire: &peerv1.ConcurrencyAcquire{
		RequestId: req.ID, Key: req.Key, Weight: req.Tokens}}}))
	fx.WakeAt(f.deadline)
	c.noteHot(now, req.Key, owner, fx)
	return strategy.Decision{}, false
}

// Release gives permit of key back: freed here if this node holds it,
// and sent to the key's owner when that is another node (a release lost
// on the way leaves the permit to lapse at its expiry).
func (c *Concurrency) Release(now time.Duration, key string, permit uint64, fx *strategy.Effects) {
	if permit == 0 || checkKey(key) != nil {
		return
	}
	if c.freeLeased(now, key, permit, fx) {
		return
	}
	if kp := c.keys[key]; kp != nil && kp.free(permit) {
		c.kpChanged(kp)
		c.serveWaiters(now, key, fx)
		return
	}
	if owner := rendezvous.Owner(key, c.members); owner == c.self {
		c.passRelease(key, permit, c.self, fx)
	} else {
		fx.Send(owner, encode(&peerv1.ConcurrencyMessage{Body: &peerv1.ConcurrencyMessage_Release{Release: &peerv1.ConcurrencyRelease{
			Key: key, Permit: permit}}}))
	}
}

// Receive handles a peer's acquire (decided as the owner, answered with
// a verdict), verdict (completes the forwarded request; a verdict for a
// request no longer waiting has its permit released) or release.
// Errors (no state changed): a payload that does not decode or is out of
// bounds (decode), a verdict from a node the request was not sent to.
func (c *Concurrency) Receive(now time.Duration, from strategy.NodeID, payload []byte, fx *strategy.Effects) error {
	m, err := c.decode(from, payload)
	if err != nil {
		return err
	}
	switch b := m.Body.(type) {
	case *peerv1.ConcurrencyMessage_Acquire:
		c.onAcquire(now, from, b.Acquire, fx)
	case *peerv1.ConcurrencyMessage_Verdict:
		return c.onVerdict(now, from, b.Verdict, fx)
	case *peerv1.ConcurrencyMessage_Release:
		c.onRelease(now, from, b.Release, fx)
	case *peerv1.ConcurrencyMessage_LeaseAsk:
		a := b.LeaseAsk
		id, slots := c.grantLease(now, from, a.Key, a.Slots, fx)
		fx.Send(from, encode(&peerv1.ConcurrencyMessage{Body: &peerv1.ConcurrencyMessage_LeaseGrant{LeaseGrant: &peerv1.ConcurrencyLeaseGrant{
			RequestId: a.RequestId, Key: a.Key, Lease: id, Slots: slots}}}))
	case *peerv1.ConcurrencyMessage_LeaseGrant:
		c.onLeaseGrant(now, from, b.LeaseGrant, fx)
	case *peerv1.ConcurrencyMessage_LeaseReturn:
		c.onReturn(from, b.LeaseReturn)
		c.serveWaiters(now, b.LeaseReturn.Key, fx)
	}
	return nil
}

// onAcquire decides a peer's acquire as the key's owner: granted, queued
// behind the acquires already waiting (or when refused, if it may wait),
// or refused; a grant or refusal is answered with a verdict.
func (c *Concurrency) onAcquire(now time.Duration, from strategy.NodeID, a *peerv1.ConcurrencyAcquire, fx *strategy.Effects) {
	w := waiter{from: from, id: a.RequestId, weight: a.Weight, received: now, deadline: now + time.Duration(a.MaxWaitNs)}
	var id uint64
	if a.MaxWaitNs > 0 && len(c.queue(a.Key)) > 0 {
		// Behind the acquires already waiting.
		if c.enqueue(now, a.Key, w, fx) {
			return
		}
	} else {
		id = c.grant(now, a.Key, a.Weight, fx)
		if id == 0 && a.MaxWaitNs > 0 && c.enqueue(now, a.Key, w, fx) {
			return
		}
	}
	fx.Send(from, encode(&peerv1.ConcurrencyMessage{Body: &peerv1.ConcurrencyMessage_Verdict{Verdict: &peerv1.ConcurrencyVerdict{
		RequestId: a.RequestId, Key: a.Key, Granted: id != 0, Permit: id}}}))
}

// onVerdict completes a request this node forwarded; a verdict for a
// request no longer waiting has its permit given back (unless it repeats
// the grant in use). Errors: a verdict from a node the request was not
// sent to, or a wait above the request's max wait.
func (c *Concurrency) onVerdict(now time.Duration, from strategy.NodeID, v *peerv1.ConcurrencyVerdict, fx *strategy.Effects) error {
	f := c.pending[v.RequestId]
	if f == nil || f.req.Key != v.Key {
		if g, ok := c.granted[v.RequestId]; ok && g.permit == v.Permit {
			return nil // a duplicate of the verdict that granted it: the permit is in use
		}
		if v.Granted { // late (refused already) or a second grant: give it back
			fx.Send(from, encode(&peerv1.ConcurrencyMessage{Body: &peerv1.ConcurrencyMessage_Release{Release: &peerv1.ConcurrencyRelease{
				Key: v.Key, Permit: v.Permit}}}))
		}
		return nil
	}
	if from != f.owner {
		return fmt.Errorf("concurrency: verdict for request %d from %s, but it was sent to %s", v.RequestId, from, f.owner)
	}
	if v.WaitedNs > int64(f.maxWait) {
		return fmt.Errorf("concurrency: verdict for request %d from %s: waited_ns %d above the request's max wait %v", v.RequestId, from, v.WaitedNs, f.maxWait)
	}
	dropID(c.pending, &c.mem.pending, v.RequestId)
	if !v.Granted {
		fx.Decide(v.RequestId, false)
		return nil
	}
	// The owner's expiry is its grant + permit_ttl, at least the
	// acquire's arrival here + its wait there + permit_ttl.
	expires := f.req.Arrival + time.Duration(v.WaitedNs) + c.ttl
	putID(c.granted, &c.mem.granted, v.RequestId, grantedVia{permit: v.Permit, expires: expires})
	if c.gexp == nil {
		c.gexp = minheap.New(idAtLess)
	}
	c.gexp.Push(idAt{at: expires, id: v.RequestId})
	c.scheduleSweep(now, fx)
	fx.DecidePermit(v.RequestId, v.Permit, expires)
	return nil
}

// onRelease frees a permit: one of this node's leases, one this owner
// granted (serving the waiters), or, at the owner, passed on to the
// key's lessees.
func (c *Concurrency) onRelease(now time.Duration, from strategy.NodeID, r *peerv1.ConcurrencyRelease, fx *strategy.Effects) {
	if c.freeLeased(now, r.Key, r.Permit, fx) {
		return
	}
	if kp := c.keys[r.Key]; kp != nil && kp.free(r.Permit) {
		c.kpChanged(kp)
		c.serveWaiters(now, r.Key, fx)
		return
	}
	if rendezvous.Owner(r.Key, c.members) == c.self {
		c.passRelease(r.Key, r.Permit, from, fx)
	}
}

// passRelease passes a release of a permit this owner does not hold to
// the key's lessees (one of their leases granted it), but from.
func (c *Concurrency) passRelease(key string, permit uint64, from strategy.NodeID, fx *strategy.Effects) {
	kp := c.keys[key]
	if kp == nil {
		return
	}
	for _, n := range kp.lessees(from) {
		if n == c.self {
			continue
		}
		fx.Send(n, encode(&peerv1.ConcurrencyMessage{Body: &peerv1.ConcurrencyMessage_Release{Release: &peerv1.ConcurrencyRelease{
			Key: key, Permit: permit}}}))
	}
}

// Tick refuses the forwarded acquires whose timeout passed, frees the
// lapsed permits of the leases held and returns the ended leases' slots
// (due events: due.go), serves the acquires waiting, and sweeps lapsed
// permits (in steps: sweepTick).
func (c *Concurrency) Tick(now time.Duration, fx *strategy.Effects) {
	c.runDue(now, fx)
	c.serveAllWaiters(now, fx)
	c.sweepTick(now, fx)
	c.shrinkMaps()
}

// Remaining is N minus the weights of key's live permits when this node
// is key's owner (false otherwise); 0 while it may not grant the key
// (within permit_ttl of its start or of taking the key over).
func (c *Concurrency) Remaining(now time.Duration, key string) (int64, bool) {
	if rendezvous.Owner(key, c.members) != c.self {
		return 0, false
	}
	if !c.mayGrant(now, key) {
		return 0, true
	}
	kp := c.keys[key]
	if kp == nil {
		return c.limit, true
	}
	return c.limit - c.InFlight(now, key), true
}

// InFlight is the weights of key's live permits and the slots of its live
// leases at now in this node's table (as the key's owner, or from before
// it lost the key). It changes nothing.
func (c *Concurrency) InFlight(now time.Duration, key string) int64 {
	kp := c.keys[key]
	if kp == nil {
		return 0
	}
	var held int64
	for _, p := range kp.permits {
		if p.expires > now {
			held += p.weight
		}
	}
	for _, l := range kp.leases {
		if l.until > now {
			held += l.slots
		}
	}
	return held
}

// StateBytes is the size of the permit tables: per key its length, per
// permit 24 bytes (id, weight, expiry); plus 24 bytes per pending forward.
// It walks every key: /metrics reads MemoryBytes (memory.go) instead.
func (c *Concurrency) StateBytes() int {
	n := 24*(len(c.pending)+len(c.asks)) + 16*len(c.granted)
	for k, kp := range c.keys {
		n += len(k) + 24*(len(kp.permits)+len(kp.leases)) + 40*len(kp.waiters)
	}
	for k, ls := range c.leases {
		n += len(k)
		for _, l := range ls {
			n += 40 + 24*len(l.permits)
		}
	}
	return n
}

var (
	_ strategy.Strategy = (*Concurrency)(nil)
	_ strategy.Releaser = (*Concurrency)(nil)
	_ strategy.Remainer = (*Concurrency)(nil)
)
