package owner

import (
	"time"

	peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"
	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/internal/wire"
)

// The primary side (see the package doc): the key's primary holds every
// request, its own and the forwarded ones, in its ordering buffer for
// `hold` after its arrival, decides them in (arrival, ID) order with the
// key's bucket, answers forwarders with verdicts, and takes their charges.

// queued is a request waiting at its owner. origin is "" for a request that
// reached the owner itself.
type queued struct {
	arrival time.Duration
	id      uint64
	key     string
	tokens  int64
	origin  strategy.NodeID
	maxWait time.Duration // waiting mode (RequestWait); 0: drop mode
	refund  bool          // a refund of tokens (Refund): credited, nothing decided
	charge  bool          // a cost already incurred (strategy.Request.Charge)
}

type forwardID struct {
	origin strategy.NodeID
	id     uint64
	key    string
}

type verdict struct {
	decided, allowed bool
	delay            time.Duration // waiting mode: the wait after arrival
	charged          bool          // a charge for this request was taken
}

// enqueue puts q in the ordering buffer and asks to be woken at its turn.
// Even a request whose turn has come waits for that wake-up: drivers run
// wake-ups after the messages delivered at the same instant, so requests
// that arrive together are decided together, in (arrival, ID) order.
func (o *Owner) enqueue(now time.Duration, q queued, fx *strategy.Effects) {
	o.queue.Push(q)
	fx.WakeAt(max(q.arrival+o.hold, now))
}

// bucketFor returns key's bucket for a decision at time at, creating a
// full one if there is none.
func (o *Owner) bucketFor(key string, at time.Duration) *bucket.Bucket {
	t := o.tab(key)
	b, ok := t.Lookup(key)
	if !ok {
		b = t.Get(key, at)
		if o.auto != nil {
			o.autoNewBucket(key, b)
		}
	}
	if o.lend.Held.Len() > 0 {
		o.lend.Held.Clamp(b, at, key) // the tokens in the driver's allowance are spent
	}
	return b
}

// decideDue decides, in (arrival, ID) order, every queued request whose
// hold has passed.
func (o *Owner) decideDue(now time.Duration, fx *strategy.Effects) {
	for o.queue.Len() > 0 && o.queue.Peek().arrival+o.hold <= now {
		q := o.queue.Pop()
		if o.fetchFor(now, q, fx) {
			continue
		}
		if q.refund {
			o.creditQueued(now, q, fx)
			continue
		}
		v, _ := o.seen.Get(forwardID{q.origin, q.id, q.key})
		if v != nil && v.charged { // answered and charged already: acknowledge
			v.decided, v.allowed = true, true
			sendVerdict(q.origin, q.id, true, 0, fx)
			continue
		}
		if o.refuse(now, q, v, fx) {
			continue
		}
		delay, allowed := o.allow(q.key, q.arrival, q.tokens, q.maxWait, q.charge)
		charged := allowed || (o.od.On && q.charge) // under overdraft a charge is taken, refused or not
		if charged {
			o.markDirty(now, q.key, fx)
		}
		if q.origin == "" {
			fx.DecideAfter(q.id, allowed, delay)
			continue
		}
		if v != nil {
			v.decided, v.allowed, v.delay = true, allowed, delay
			v.charged = v.charged || (o.od.On && q.charge)
		}
		sendVerdict(q.origin, q.id, allowed, delay, fx)
		o.shipToDeferring(q, fx)
		o.chargeNotOwned(now, q, charged, fx)
	}
}

// chargeNotOwned charges a forward q this node admitted (charged: or
// took, under overdraft) for a key another node owns in its view, not q's sender, to
// that owner, as a fallback admission (charge.go): the views disagree
// (the sender does not see the owner yet, a restart or a join within a
// detection), and the owner decides the key meanwhile from its own
// bucket, which would not count q. Measured: r = 6/s, b = 1, 3 nodes,
// n0 and n1 down from 0.2 s to 0.3 s, detection 1 s: n0 restarted first
// and saw n1 only at 1.3 s, so it sent key u0001 (owner n1) to n2, which
// decided it beside n1, 0.098 tokens over the 2 bursts of the bound
// (TestDoubleCrashEnvelopeProperty). Not under conserve (such a forward
// is refused, refuseNotOwned).
func (o *Owner) chargeNotOwned(now time.Duration, q queued, charged bool, fx *strategy.Effects) {
	owner := o.primary(q.key)
	if owner == o.self || owner == "" || owner == q.origin {
		return
	}
	o.noteActing(now, q.key)
	if !charged {
		return
	}
	o.addCharge(now, strategy.Request{ID: q.id, Key: q.key, Tokens: q.tokens, Arrival: q.arrival, Charge: q.charge}, owner, fx)
	o.charges[q.id].taken = true
}

// creditQueued credits a refund q at its turn (and ships the level
// where this node owns the key).
func (o *Owner) creditQueued(now time.Duration, q queued, fx *strategy.Effects) {
	o.credit(q.key, q.arrival, q.tokens)
	if o.owns(q.key) {
		o.markDirty(now, q.key, fx)
	}
}

// refuse refuses q at its turn, and reports whether it did, when this
// node may not decide it: refuseNotOwned (conserve), autoGate
// (split=auto, which also measures q).
func (o *Owner) refuse(now time.Duration, q queued, v *verdict, fx *strategy.Effects) bool {
	return o.refuseNotOwned(q, v, fx) || o.autoGate(now, q, v, fx)
}

// refuseNotOwned refuses, under conserve, a forward q for a key this node
// does not own in its view (v: its record, nil if none), and reports
// whether it did. A forward reaches only the owner in this node's view:
// the views disagree, and the sender may see a cut this node does not see
// yet, so deciding it here would hand out the whole bucket beside the side
// that owns the key now (TestConserveOwnerWholeRun: 1.3 tokens over b +
// r*T). Under available the receiver decides, as views disagree at every
// change. A charge (overdraft's) is taken.
func (o *Owner) refuseNotOwned(q queued, v *verdict, fx *strategy.Effects) bool {
	if !o.conserve || q.origin == "" || q.charge || o.owns(q.key) {
		return false
	}
	if v != nil {
		v.decided = true
	}
	sendVerdict(q.origin, q.id, false, 0, fx)
	return true
}

func sendVerdict(to strategy.NodeID, id uint64, allowed bool, delay time.Duration, fx *strategy.Effects) {
	fx.Send(to, wire.MustMarshal(&peerv1.OwnerMessage{Body: &peerv1.OwnerMessage_Verdict{Verdict: &peerv1.OwnerVerdict{
		RequestId: id, Allowed: allowed, DelayNs: int64(delay),
	}}}))
}

// receiveForward (validated: checkForward) takes a charge's tokens, or
// queues a forwarded request in the ordering buffer, once per (origin,
// request ID, key); a duplicate gets its verdict again, and a charge for
// a request refused or undecided here takes its tokens once.
func (o *Owner) receiveForward(now time.Duration, from strategy.NodeID, f *peerv1.OwnerForward, fx *strategy.Effects) {
	fid := forwardID{from, f.RequestId, f.Key}
	if v, dup := o.seen.Get(fid); dup {
		if f.Charge && !v.charged && !(v.decided && v.allowed) {
			// The forwarder answered this request itself after a
			// timeout and admitted it, while this node refused it (or
			// has not decided it yet): take its tokens now, once, and
			// let a pending decision only acknowledge. (Under overdraft
			// a charge decided here was taken, refused or not: charged.)
			o.debit(f.Key, peerArrival(f, now), f.Tokens)
			v.charged = true
			if o.owns(f.Key) {
				o.markDirty(now, f.Key, fx)
			}
			if v.decided {
				v.allowed = true
			}
		}
		if v.decided { // the verdict was lost: send it again
			sendVerdict(from, f.RequestId, v.allowed, v.delay, fx)
		}
		return
	}
	arrival := peerArrival(f, now)
	if f.Charge {
		o.debit(f.Key, arrival, f.Tokens)
		o.seen.Add(now, fid, &verdict{decided: true, allowed: true, charged: true}, fx)
		if o.owns(f.Key) {
			o.markDirty(now, f.Key, fx)
		}
		sendVerdict(from, f.RequestId, true, 0, fx)
		return
	}
	o.seen.Add(now, fid, &verdict{}, fx)
	o.enqueue(now, queued{arrival: arrival, id: f.RequestId, key: f.Key, tokens: f.Tokens, origin: from, maxWait: o.capWait(time.Duration(f.MaxWaitNs)), charge: f.PostHoc}, fx)
}

// peerArrival is a forward's arrival time as this node decides it: the
// sender's clock, but never after now. A time ahead of this node's clock
// (skew, or a forged frame) would advance the key's bucket into the
// future, and every request decided at the right time after it would be
// a late decision, held to the tokens spared since (bucket.Bucket): a
// far-future arrival could refuse the key for that long.
func peerArrival(f *peerv1.OwnerForward, now time.Duration) time.Duration {
	return min(time.Duration(f.ArrivalNs), now)
}

func queuedLess(a, b queued) bool {
	if a.arrival != b.arrival {
		return a.arrival < b.arrival
	}
	return a.id < b.id
}
