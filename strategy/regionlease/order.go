package regionlease

import (
	peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"
	"time"

	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/internal/memsize"
)

// Cold keys (ours; issue 24, docs/EVALUATION.md "regionlease: cold keys
// across regions"): a key with no lease out of its global owner's bucket
// is decided there like owner's, in arrival order. Its requests (the
// owner's own, its region's forwards and the other regions' relays) wait
// in an ordering buffer until arrival + hold and are then decided in
// (arrival, receipt) order, the bucket refilled to each one's arrival: a
// relay that crossed the WAN takes the token it would have taken at its
// arrival, not the one a request that arrived later but came from nearer
// took first (deciding at receipt refused it, and admitted the later one:
// on zanbil across 3 regions, 4,767 of 6,947 false rejections with no
// stock, the rest a bucket emptied in another order). A request that
// reaches the owner after its turn (arrival + hold passed) is decided at
// once, at its arrival, from what the bucket is sure to have held since
// then (Spare), as before. A key with leases out keeps deciding at
// receipt: its bucket is advanced to the grants' and returns' times, and a
// buffered decision would only lose the refill of its wait.

// queued is a request waiting in the global owner's ordering buffer.
type queued struct {
	arr   time.Duration // its arrival (at the node that received it)
	seq   uint64        // receipt order here: the last tie-break
	key   string
	n     int64
	from  strategy.NodeID // the forward's sender; "" for this node's own request
	id    uint64          // the request's id (own) or the forward's request_id
	relay bool            // the forward is a regional owner's relay
	v     *verdict        // the forward's remembered verdict (gseen), set when decided
	tie   uint64          // the request's id at the node that received it (a relay's origin_request_id): the tie-break among one arrival time
}

func queuedLess(a, b queued) bool {
	if a.arr != b.arr {
		return a.arr < b.arr
	}
	if a.tie != b.tie {
		return a.tie < b.tie
	}
	return a.seq < b.seq
}

// cold reports whether key's pool p decides through the ordering buffer:
// the rule's rate is too low for a region to hold a stock (stocks: false
// also when hold is 0), and no lease is out of it.
func (l *RegionLease) cold(p *pool) bool {
	return !l.stocks && p.Leased == 0
}

// enqueue puts q in the ordering buffer until q.arr + hold, deciding
// first what is due; false (nothing queued) when q's turn has passed:
// the caller decides it at once (decideAt).
func (l *RegionLease) enqueue(now time.Duration, q queued, fx *strategy.Effects) bool {
	l.drainQueue(now, fx)
	if q.arr+l.hold <= now {
		return false
	}
	l.queueSeq++
	q.seq = l.queueSeq
	l.queue.Push(q)
	l.mem.queueKey += memsize.Alloc(len(q.key))
	l.pushTimer(timer{at: q.arr + l.hold, kind: timerQueue})
	fx.WakeAt(q.arr + l.hold)
	return true
}

// enqueueForward takes a forward (or relay) of a cold key at its global
// owner: remembered as undecided (gseen: a resend waits for the verdict),
// and queued, or decided at once when its turn has passed.
func (l *RegionLease) enqueueForward(now time.Duration, p *pool, from strategy.NodeID, f *peerv1.RegionLeaseForward, arr time.Duration, n int64, fid fwdID, fx *strategy.Effects) {
	v := &verdict{}
	l.gseen.Add(now, fid, v, fx)
	if l.enqueue(now, queued{arr: arr, key: f.Key, n: n, from: from, id: f.RequestId, relay: f.Relay, v: v, tie: tieOf(f)}, fx) {
		return
	}
	v.decided = true
	v.allowed, v.emptyFor = l.decideAt(p, arr, n)
	l.sendVerdict(from, f.RequestId, f.Relay, v.allowed, v.emptyFor, fx)
}

// drainQueue decides the buffered requests whose turn has come, in
// arrival order.
func (l *RegionLease) drainQueue(now time.Duration, fx *strategy.Effects) {
	for l.queue.Len() > 0 && l.queue.Peek().arr+l.hold <= now {
		q := l.queue.Pop()
		l.mem.queueKey -= memsize.Alloc(len(q.key))
		ok, emptyFor := false, uint64(0)
		if g, _ := l.global(q.key); g == l.self {
			ok, emptyFor = l.decideAt(l.ownPool(now, q.key, fx), q.arr, q.n)
		} // else the key moved away while it waited: refused, no hint
		if q.from == "" {
			fx.Decide(q.id, ok)
			continue
		}
		q.v.decided, q.v.allowed, q.v.emptyFor = true, ok, emptyFor
		l.sendVerdict(q.from, q.id, q.relay, ok, emptyFor, fx)
	}
}

// decideAt takes n tokens of a cold pool p for a request that arrived at
// arr (the pool refilled to arr, or what it is sure to have held since,
// Spare, when it is already past arr), and on a refusal gives the time
// until its next whole token as the dry hint (µs after arr: exact, as no
// lease is out to be returned). A refusal does not mark the key contended
// (noteDry): no region holds a stock of it to push to, and a push
// advances the pool to its time, which would make the next buffered
// decisions late.
func (l *RegionLease) decideAt(p *pool, arr time.Duration, n int64) (bool, uint64) {
	l.sh.Advance(p, arr)
	if l.sh.Take(p, arr, n) {
		return true, 0
	}
	var emptyFor uint64
	if until := l.sh.UntilOne(p, arr); until > arr {
		emptyFor = uint64(min(until-arr, l.takeover+l.fillTime, maxHint) / time.Microsecond)
	}
	return false, emptyFor
}

// tieOf is a forward's tie-break in the ordering buffer: the request's id
// at the node that received it (a relay's origin_request_id).
func tieOf(f *peerv1.RegionLeaseForward) uint64 {
	if f.Relay {
		return f.OriginRequestId
	}
	return f.RequestId
}
