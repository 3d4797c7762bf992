// Package owner implements the `owner` strategy: every key has one
// designated node, chosen by rendezvous hashing over the live members, that
// holds the key's only token bucket; the other nodes forward requests to it
// and wait for its verdict.
//
// Source: "Throttling in Distributed Systems" (seed 003): direct all of a
// tenant's traffic to one designated server, found by consistent (here
// rendezvous) hashing, so that its local view is the global view. The
// article's K servers per tenant (with r/K each) are not built yet; K = 1.
//
// Ours:
//   - A forwarded request carries the time it reached the cluster, and the
//     owner decides with that time, not with the time the message reached it
//     (SRTM §5.2 makes the same point about scheduling delays). To make
//     decisions independent of network jitter the owner also holds every
//     request, local or forwarded, in an ordering buffer for `hold` after its
//     arrival and decides them in (arrival, request ID) order. With a fixed
//     one-way latency L and hold = L, every forwarded request is in the
//     buffer before its turn, so `owner` takes exactly the decisions of
//     `central`. The price is latency: hold for the owner's own requests, a
//     round trip plus hold for forwarded ones. A request that reaches the
//     owner after its turn (latency above hold) is decided at once.
//   - Lost messages: the forwarding node sends the request again every
//     timeout/(retries+1) until a verdict comes, and the owner remembers
//     (origin, request ID) for a while, so a retransmitted or duplicated
//     forward is decided once and its verdict sent again.
//   - Failover: the forwarding node gives up after `timeout` and answers by
//     `fail_open` (allow, by default: a limiter that cannot reach its owner
//     should not take the service down). When membership drops the owner,
//     pending requests are forwarded again to the key's next node in
//     rendezvous order, which starts with a full bucket: that burst, and the
//     requests answered by timeout, are what an owner crash costs.
package owner

import (
	"fmt"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"

	peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"
	"github.com/tokenmesh/tokenmesh/internal/minheap"
	"github.com/tokenmesh/tokenmesh/rendezvous"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/internal/buckets"
)

// Owner is one node of the owner strategy.
type Owner struct {
	self     strategy.NodeID
	members  []strategy.NodeID
	table    *buckets.Table
	hold     time.Duration
	timeout  time.Duration
	failOpen bool

	retryEvery time.Duration // timeout/(retries+1): time between retransmissions

	queue    *minheap.Heap[queued]   // requests waiting for their turn at this node as owner, by (arrival, ID)
	pending  map[uint64]*pendingReq  // requests this node forwarded, by ID
	timeouts *minheap.Heap[deadline] // pending IDs by next retry or deadline (stale entries skipped)

	// seen remembers the forwards this node received as owner, so that a
	// retransmission or a duplicate is decided once; expiry lists them in
	// the order they expire (a constant TTL after receipt).
	seen    map[forwardID]*verdict
	expiry  []expiring
	seenTTL time.Duration

	sweepEvery time.Duration
	nextSweep  time.Duration
}

// queued is a request waiting at its owner. origin is "" for a request that
// reached the owner itself.
type queued struct {
	arrival time.Duration
	id      uint64
	key     string
	tokens  int64
	origin  strategy.NodeID
}

type pendingReq struct {
	req      strategy.Request
	owner    strategy.NodeID   // where the last attempt went
	sentTo   []strategy.NodeID // every node it was forwarded to: each may answer
	next     time.Duration     // next retransmission, or the deadline
	deadline time.Duration
}

type forwardID struct {
	origin strategy.NodeID
	id     uint64
}

type verdict struct {
	decided, allowed bool
}

type expiring struct {
	at time.Duration
	id forwardID
}

// New builds a node. Parameters:
//   - hold (duration, default Config.LatencyHint): the ordering buffer.
//   - timeout (duration, default 3*LatencyHint + 100ms): how long a
//     forwarding node waits for the verdict.
//   - retries (int, default 2): retransmissions within timeout.
//   - fail_open (bool, default true): the answer when the verdict does not come.
//
// Errors: an invalid Config or parameter.
func New(cfg strategy.Config) (*Owner, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	o := &Owner{self: cfg.Self, members: slices.Clone(cfg.Members), pending: map[uint64]*pendingReq{},
		queue: minheap.New(queuedLess), timeouts: minheap.New(deadlineLess)}
	var err error
	if o.hold, err = cfg.Params.Duration("hold", cfg.LatencyHint); err != nil {
		return nil, err
	}
	if o.timeout, err = cfg.Params.Duration("timeout", 3*cfg.LatencyHint+100*time.Millisecond); err != nil {
		return nil, err
	}
	if o.timeout == 0 {
		return nil, fmt.Errorf("owner: parameter timeout must be positive")
	}
	if o.failOpen, err = cfg.Params.Bool("fail_open", true); err != nil {
		return nil, err
	}
	retries, err := cfg.Params.Int("retries", 2)
	if err != nil {
		return nil, err
	}
	if retries < 0 {
		return nil, fmt.Errorf("owner: parameter retries=%d is negative", retries)
	}
	o.retryEvery = o.timeout / time.Duration(retries+1)
	o.seen = map[forwardID]*verdict{}
	o.seenTTL = 2*o.timeout + o.hold + 4*cfg.LatencyHint
	if err := cfg.Params.Check("owner"); err != nil {
		return nil, err
	}
	if o.table, err = buckets.New(cfg.Rate, cfg.Burst); err != nil {
		return nil, err
	}
	o.sweepEvery = buckets.SweepInterval(cfg.Rate, cfg.Burst)
	return o, nil
}

// Start schedules the first sweep of idle (full) buckets.
func (o *Owner) Start(now time.Duration, fx *strategy.Effects) {
	o.nextSweep = now + o.sweepEvery
	fx.WakeAt(o.nextSweep)
}

// Request queues req at this node when it owns req.Key, or forwards it to the
// owner; the decision arrives later in fx.Decisions (at once only when hold
// is 0 and this node is the owner).
func (o *Owner) Request(now time.Duration, req strategy.Request, fx *strategy.Effects) (strategy.Decision, bool) {
	if o.hold > 0 || !o.owns(req.Key) {
		o.route(now, req, fx)
		return strategy.Decision{}, false
	}
	// With no ordering buffer the owner decides its own requests at once
	// (so, unlike enqueue, it asks for no wake-up).
	o.queue.Push(queued{arrival: req.Arrival, id: req.ID, key: req.Key, tokens: req.Tokens})
	o.decideDue(now, fx)
	for i, d := range fx.Decisions {
		if d.RequestID == req.ID {
			fx.Decisions = slices.Delete(fx.Decisions, i, i+1)
			return d, true
		}
	}
	return strategy.Decision{}, false
}

// route queues req here if this node owns its key, or forwards it.
func (o *Owner) route(now time.Duration, req strategy.Request, fx *strategy.Effects) {
	owner := rendezvous.Owner(req.Key, o.members)
	if owner == o.self || owner == "" {
		o.enqueue(now, queued{arrival: req.Arrival, id: req.ID, key: req.Key, tokens: req.Tokens}, fx)
		return
	}
	p := &pendingReq{req: req, deadline: now + o.timeout}
	o.pending[req.ID] = p
	o.forward(now, p, owner, fx)
}

// owns reports whether this node owns key in its current view.
func (o *Owner) owns(key string) bool {
	owner := rendezvous.Owner(key, o.members)
	return owner == o.self || owner == ""
}

// forward sends p to owner and schedules its next retransmission (or its
// deadline).
func (o *Owner) forward(now time.Duration, p *pendingReq, owner strategy.NodeID, fx *strategy.Effects) {
	p.owner = owner
	if !slices.Contains(p.sentTo, owner) {
		p.sentTo = append(p.sentTo, owner)
	}
	p.next = min(now+o.retryEvery, p.deadline)
	o.timeouts.Push(deadline{at: p.next, id: p.req.ID})
	fx.WakeAt(p.next)
	fx.Send(owner, mustMarshal(&peerv1.OwnerMessage{Body: &peerv1.OwnerMessage_Forward{Forward: &peerv1.OwnerForward{
		RequestId: p.req.ID, Key: p.req.Key, Tokens: p.req.Tokens, ArrivalNs: int64(p.req.Arrival),
	}}}))
}

// enqueue puts q in the ordering buffer and asks to be woken at its turn.
// Even a request whose turn has come waits for that wake-up: drivers run
// wake-ups after the messages delivered at the same instant, so requests
// that arrive together are decided together, in (arrival, ID) order.
func (o *Owner) enqueue(now time.Duration, q queued, fx *strategy.Effects) {
	o.queue.Push(q)
	fx.WakeAt(max(q.arrival+o.hold, now))
}

// decideDue decides, in (arrival, ID) order, every queued request whose
// hold has passed.
func (o *Owner) decideDue(now time.Duration, fx *strategy.Effects) {
	for o.queue.Len() > 0 && o.queue.Peek().arrival+o.hold <= now {
		q := o.queue.Pop()
		allowed := o.table.Get(q.key, q.arrival).AllowN(q.arrival, q.tokens)
		if q.origin == "" {
			fx.Decide(q.id, allowed)
			continue
		}
		if v := o.seen[forwardID{q.origin, q.id}]; v != nil {
			v.decided, v.allowed = true, allowed
		}
		sendVerdict(q.origin, q.id, allowed, fx)
	}
}

func sendVerdict(to strategy.NodeID, id uint64, allowed bool, fx *strategy.Effects) {
	fx.Send(to, mustMarshal(&peerv1.OwnerMessage{Body: &peerv1.OwnerMessage_Verdict{Verdict: &peerv1.OwnerVerdict{
		RequestId: id, Allowed: allowed,
	}}}))
}

// Receive handles a forwarded request (this node as owner) or a verdict
// (this node as forwarder). Errors: an undecodable payload, a forward with
// an empty key or non-positive tokens, a verdict from a node the request was
// not forwarded to. Errors change no state.
func (o *Owner) Receive(now time.Duration, from strategy.NodeID, payload []byte, fx *strategy.Effects) error {
	var m peerv1.OwnerMessage
	if err := proto.Unmarshal(payload, &m); err != nil {
		return fmt.Errorf("owner: message from %s does not decode: %w", from, err)
	}
	switch b := m.Body.(type) {
	case *peerv1.OwnerMessage_Forward:
		f := b.Forward
		switch {
		case f.Key == "":
			return fmt.Errorf("owner: forward from %s: empty key", from)
		case f.Tokens <= 0:
			return fmt.Errorf("owner: forward from %s: tokens %d must be positive", from, f.Tokens)
		case f.ArrivalNs < 0:
			return fmt.Errorf("owner: forward from %s: negative arrival_ns %d", from, f.ArrivalNs)
		}
		fid := forwardID{from, f.RequestId}
		if v, dup := o.seen[fid]; dup {
			if v.decided { // the verdict was lost: send it again
				sendVerdict(from, f.RequestId, v.allowed, fx)
			}
			return nil
		}
		o.seen[fid] = &verdict{}
		o.expiry = append(o.expiry, expiring{at: now + o.seenTTL, id: fid})
		if len(o.expiry) == 1 {
			fx.WakeAt(now + o.seenTTL)
		}
		o.enqueue(now, queued{arrival: time.Duration(f.ArrivalNs), id: f.RequestId, key: f.Key, tokens: f.Tokens, origin: from}, fx)
	case *peerv1.OwnerMessage_Verdict:
		v := b.Verdict
		p, ok := o.pending[v.RequestId]
		if !ok {
			return nil // a duplicate, or the answer after a timeout
		}
		if !slices.Contains(p.sentTo, from) {
			return fmt.Errorf("owner: verdict for request %d from %s, but it was forwarded to %v", v.RequestId, from, p.sentTo)
		}
		delete(o.pending, v.RequestId)
		fx.Decide(v.RequestId, v.Allowed)
	default:
		return fmt.Errorf("owner: message from %s has no body", from)
	}
	return nil
}

// Tick decides the queued requests whose hold has passed, retransmits or
// times out forwarded ones, forgets old forward IDs, and sweeps idle buckets.
func (o *Owner) Tick(now time.Duration, fx *strategy.Effects) {
	o.decideDue(now, fx)
	for o.timeouts.Len() > 0 && o.timeouts.Peek().at <= now {
		d := o.timeouts.Pop()
		p, ok := o.pending[d.id]
		if !ok || p.next != d.at {
			continue // answered, or rescheduled
		}
		if now < p.deadline {
			o.forward(now, p, p.owner, fx) // no verdict yet: send again
			continue
		}
		delete(o.pending, d.id)
		fx.Decide(d.id, o.failOpen)
	}
	n := 0
	for n < len(o.expiry) && o.expiry[n].at <= now {
		delete(o.seen, o.expiry[n].id)
		n++
	}
	o.expiry = o.expiry[n:]
	if n > 0 && len(o.expiry) > 0 {
		fx.WakeAt(o.expiry[0].at)
	}
	if now >= o.nextSweep {
		o.table.Sweep(now - o.hold)
		o.nextSweep = now + o.sweepEvery
		fx.WakeAt(o.nextSweep)
	}
}

// SetMembers re-routes the pending requests whose owner left, in request ID
// order, to their keys' new owners.
func (o *Owner) SetMembers(now time.Duration, members []strategy.NodeID, fx *strategy.Effects) {
	o.members = append(o.members[:0], members...)
	var moved []uint64
	for id, p := range o.pending {
		if !slices.Contains(members, p.owner) {
			moved = append(moved, id)
		}
	}
	slices.Sort(moved)
	for _, id := range moved {
		p := o.pending[id]
		if owner := rendezvous.Owner(p.req.Key, o.members); owner != o.self && owner != "" {
			o.forward(now, p, owner, fx)
			continue
		}
		delete(o.pending, id) // this node owns the key now
		o.route(now, p.req, fx)
	}
}

// StateBytes counts the buckets this node owns and the requests it holds.
func (o *Owner) StateBytes() int {
	const perRequest = 40 // id, arrival, tokens, deadline as varints, plus the key
	n := o.table.StateBytes()
	for _, q := range o.queue.Items() {
		n += perRequest + len(q.key)
	}
	for _, p := range o.pending {
		n += perRequest + len(p.req.Key)
	}
	const perSeen = 16 // request ID and verdict, with the origin's index
	return n + len(o.seen)*perSeen
}

// Remaining is the whole tokens of key's bucket at now, known only where
// the key is decided locally and at once: this node owns key (in its
// current view) and hold is 0 (with an ordering buffer no decision is
// synchronous, and the bucket does not yet count the requests waiting in
// it). Elsewhere it is (0, false): the key's bucket is at its owner. It
// changes no state (strategy.Remainer).
func (o *Owner) Remaining(now time.Duration, key string) (int64, bool) {
	if o.hold > 0 {
		return 0, false
	}
	if !o.owns(key) {
		return 0, false
	}
	return o.table.Remaining(key, now), true
}

var _ strategy.Remainer = (*Owner)(nil)

func mustMarshal(m proto.Message) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		panic(fmt.Sprintf("owner: marshal %T: %v", m, err)) // cannot fail for these message types
	}
	return b
}

func queuedLess(a, b queued) bool {
	if a.arrival != b.arrival {
		return a.arrival < b.arrival
	}
	return a.id < b.id
}

type deadline struct {
	at time.Duration
	id uint64
}

func deadlineLess(a, b deadline) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	return a.id < b.id
}
