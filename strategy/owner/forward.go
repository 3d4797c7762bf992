package owner

import (
	"fmt"
	"slices"
	"time"

	peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/internal/buckets"
	"github.com/tokenmesh/tokenmesh/strategy/internal/forwarding"
	"github.com/tokenmesh/tokenmesh/strategy/internal/wire"
)

// The forwarder side (see "Timeouts" in the package doc): a request for a
// key another node owns is forwarded to it, sent again every
// timeout/(retries+1), decided by the owner's verdict, or by on_timeout
// when none comes within timeout (or while the owner is suspected).

// Request queues req at this node when it owns req.Key, or forwards it to the
// owner; the decision arrives later in fx.Decisions (at once only when hold
// is 0 and this node is the owner, or when the owner is suspected).
func (o *Owner) Request(now time.Duration, req strategy.Request, fx *strategy.Effects) (strategy.Decision, bool) {
	return o.RequestWait(now, req, 0, fx)
}

// OrdersByArrival implements strategy.ArrivalOrderer: the primary decides
// a key's requests in (arrival, ID) order after `hold`, its own as the
// forwarded ones, and a late one takes only tokens held since its arrival.
func (o *Owner) OrdersByArrival() {}

// RequestWait is Request in waiting mode (strategy.Waiter, SRTM §5.2):
// the key's owner reserves req's tokens in (arrival, ID) order, after its
// ordering buffer, with strategy.ReserveWithin, and admits req with the
// wait until its tokens are there when that wait is at most maxWait
// (forwarded as OwnerForward.max_wait_ns, answered in
// OwnerVerdict.delay_ns). A request answered by on_timeout (the owner
// unreachable or suspected) is decided without waiting. maxWait 0 is
// Request; maxWait is capped at b/r, the time the rate refills one burst
// (so a level replicated to the key's other nodes stays within [-b, b]).
func (o *Owner) RequestWait(now time.Duration, req strategy.Request, maxWait time.Duration, fx *strategy.Effects) (strategy.Decision, bool) {
	maxWait = o.capWait(maxWait)
	if o.od.On && req.Charge {
		maxWait = 0 // overdraft: a charge is taken at once, it does not wait
	}
	req.Key = o.routeKey(req.Key, req.ID)
	if o.hold > 0 || !o.owns(req.Key) {
		if allowed, decided := o.route(now, req, maxWait, fx); decided {
			return strategy.Decision{RequestID: req.ID, Allowed: allowed}, true
		}
		return strategy.Decision{}, false
	}
	// With no ordering buffer the owner decides its own requests at once
	// (so, unlike enqueue, it asks for no wake-up).
	o.queue.Push(queued{arrival: req.Arrival, id: req.ID, key: req.Key, tokens: req.Tokens, maxWait: maxWait, charge: req.Charge})
	o.decideDue(now, fx)
	return fx.TakeDecision(req.ID)
}

// routeKey is the (sub-)key a request of key with ID id goes to: key
// itself, or under split sub-bucket id mod K (split=auto: mod the
// sub-buckets live in this node's state).
func (o *Owner) routeKey(key string, id uint64) string {
	switch {
	case o.auto != nil:
		return subKey(key, int(id%uint64(o.autoLive(key))))
	case o.split > 1:
		return subKey(key, int(id%uint64(o.split)))
	}
	return key
}

// capWait bounds a max wait to [0, the time the rule's rate takes to
// refill one burst]: a reservation then leaves the level at or above
// -burst, the bound within which replicas accept a peer's level.
func (o *Owner) capWait(maxWait time.Duration) time.Duration {
	maxWait = max(maxWait, 0)
	if maxWait == 0 || o.rate.Tokens == 0 || o.auto != nil {
		return 0
	}
	return min(maxWait, buckets.FillTime(o.rate, o.burst), MaxWait)
}

// route queues req here if this node owns its key, answers it by
// on_timeout at once when its owner is suspected (decided is true), or
// forwards it.
func (o *Owner) route(now time.Duration, req strategy.Request, maxWait time.Duration, fx *strategy.Effects) (allowed, decided bool) {
	owner := o.primary(req.Key)
	if owner == o.self || owner == "" {
		o.enqueue(now, queued{arrival: req.Arrival, id: req.ID, key: req.Key, tokens: req.Tokens, maxWait: maxWait, charge: req.Charge}, fx)
		return false, false
	}
	if until, ok := o.suspect[owner]; ok && now < until {
		return o.fallback(now, req, owner, fx), true
	}
	p := &forwarding.Pending{Req: req, Deadline: now + o.timeout, MaxWait: maxWait}
	o.pending[req.ID] = p
	o.forward(now, p, owner, fx)
	return false, false
}

// forward sends p to owner and schedules its next retransmission (or its
// deadline).
func (o *Owner) forward(now time.Duration, p *forwarding.Pending, owner strategy.NodeID, fx *strategy.Effects) {
	next := p.SendTo(now, owner, o.retryEvery)
	o.timeouts.Push(deadline{at: next, id: p.Req.ID})
	fx.WakeAt(next)
	fx.Send(owner, wire.MustMarshal(&peerv1.OwnerMessage{Body: &peerv1.OwnerMessage_Forward{Forward: &peerv1.OwnerForward{
		RequestId: p.Req.ID, Key: p.Req.Key, Tokens: p.Req.Tokens, ArrivalNs: int64(p.Req.Arrival), MaxWaitNs: int64(p.MaxWait), PostHoc: p.Req.Charge,
	}}}))
}

// fallback answers req by on_timeout, on behalf of owner; an admission is
// charged to the owner (and, if membership replaces it, to the next one).
func (o *Owner) fallback(now time.Duration, req strategy.Request, owner strategy.NodeID, fx *strategy.Effects) bool {
	var allowed bool
	switch o.onTimeout {
	case TimeoutAdmit:
		allowed = true
	case TimeoutReject:
		if o.od.On && req.Charge {
			o.addCharge(now, req, owner, fx)
		}
		return false
	default:
		if allowed, ok := o.fallbackActing(now, req, owner, fx); ok {
			return allowed
		}
		key, t := req.Key, o.local
		if o.auto != nil { // the sub-bucket's share at this node's K for the key
			t = o.autoLocalOf(key)
		}
		b, ok := t.Lookup(key)
		if !ok {
			// Empty at the first fallback's arrival: the owner may have
			// drained the key just before it stopped answering, which is
			// before the request came; a full local bucket would add
			// (N-1)/N of a burst at once (see strategy.FallbackStart).
			b = t.Get(key, now)
			_ = b.MergeLevel(0, strategy.FallbackStart(now, req)) // 0 is within bounds, the start >= 0
		}
		if o.od.On && req.Charge {
			allowed, _ = b.ChargeN(now, req.Tokens, max(o.od.MaxDebt/int64(max(len(o.members), 1)), 1))
		} else {
			allowed = b.AllowN(now, req.Tokens)
		}
	}
	if allowed || (o.od.On && req.Charge) {
		// Under overdraft a charge is taken, refused or not.
		o.addCharge(now, req, owner, fx)
	}
	return allowed
}

// onVerdict takes an owner's answer: the acknowledgement of a charge
// (forgotten), or the verdict of a forwarded request (decided); either
// ends the owner's suspicion and sends it the charges it may have lost.
// Errors (no state change): an acknowledgement from a node the charge was
// not sent to, a verdict that fails checkVerdict. A verdict for no pending
// request (a duplicate, or the answer after a timeout) is ignored, and so
// is one from a node a charge's request was forwarded to before its
// fallback, when the charge went elsewhere (the owner changed while the
// forward waited: the late verdict carries the charge's id; found by
// TestAutoSplitAgreementProperty at 1,000 checks).
func (o *Owner) onVerdict(now time.Duration, from strategy.NodeID, v *peerv1.OwnerVerdict, fx *strategy.Effects) error {
	if c, ok := o.charges[v.RequestId]; ok {
		if !slices.Contains(c.sentTo, from) {
			if slices.Contains(c.forwardedTo, from) {
				return nil // the late verdict of the forward the fallback answered; the charge stays
			}
			return fmt.Errorf("owner: acknowledgement of charge %d from %s, but it was sent to %v", v.RequestId, from, c.sentTo)
		}
		o.dropCharge(v.RequestId)
		delete(o.suspect, from)
		o.flushCharges(now, from, fx)
		return nil
	}
	p, ok := o.pending[v.RequestId]
	if !ok {
		return nil // a duplicate, or the answer after a timeout
	}
	if err := checkVerdict(from, p, v); err != nil {
		return err
	}
	delete(o.pending, v.RequestId)
	delete(o.suspect, from)
	fx.DecideAfter(v.RequestId, v.Allowed, time.Duration(v.DelayNs))
	o.flushCharges(now, from, fx)
	return nil
}

// forwardTimeouts retransmits the forwards due for it and answers, by
// on_timeout, those past their deadline (their owner is suspected for
// `suspect`).
func (o *Owner) forwardTimeouts(now time.Duration, fx *strategy.Effects) {
	for o.timeouts.Len() > 0 && o.timeouts.Peek().at <= now {
		d := o.timeouts.Pop()
		p, ok := o.pending[d.id]
		if !ok || p.Next != d.at {
			continue // answered, or rescheduled
		}
		if now < p.Deadline {
			o.forward(now, p, p.Owner, fx) // no verdict yet: send again
			continue
		}
		delete(o.pending, d.id)
		o.suspect[p.Owner] = now + o.suspectFor
		allowed := o.fallback(now, p.Req, p.Owner, fx)
		if c, ok := o.charges[d.id]; ok {
			c.forwardedTo = p.SentTo
		}
		fx.Decide(d.id, allowed)
	}
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
