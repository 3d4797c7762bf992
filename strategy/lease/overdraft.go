package lease

import (
	"time"

	peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/internal/wire"
)

// Overdraft (strategy.Overdraft; ours): a charge (strategy.Request.Charge)
// is taken at the key's owner, into its pool, admitted or refused. A
// holder takes a charge from one of its leases only when that lease holds
// all its tokens (they left the pool when the lease was granted: the
// charge is paid, and admitted); any other charge goes to the owner
// (LeaseForward.post_hoc), also when the owner's dry hint says its bucket
// is empty (a refused charge must be taken too, and only the owner holds
// the bucket). The owner's pool takes its tokens whatever the verdict
// (shape.charge), down to a debt of max_debt, and grants no lease while
// its level is below one token, so every check that reaches it is refused
// until the refill has repaid the debt. Checks are decided as without
// overdraft. Leases granted before the debt are used until they end (at
// most ttl): their tokens were paid when granted, so the admitted tokens
// stay within b + r*T, but for up to ttl after a charge drove the key
// into debt a holder may still admit checks from them (the debt is
// exact at the owner; the leases are what was paid ahead). A charge whose
// forward gets no verdict within timeout is answered by on_timeout and
// does not reach the owner (an unreachable owner: the per-crash bounds of
// the package doc). A charge never waits (max_wait applies to checks).

// Refund gives back tokens of key (strategy.Refunder): a key this node
// owns gets them through its ordering buffer (credited in arrival order at
// now, capped at its pool's room); any other key's owner is sent a
// LeaseRefund, once (a lost refund is not credited).
func (l *Lease) Refund(now time.Duration, id uint64, key string, tokens int64, fx *strategy.Effects) {
	if tokens <= 0 || key == "" || len(key) > maxKeyBytes {
		return
	}
	if owner := l.owner(key); owner != l.self {
		fx.Send(owner, wire.MustMarshal(&peerv1.LeaseMessage{Body: &peerv1.LeaseMessage_Refund{Refund: &peerv1.LeaseRefund{
			RequestId: id, Key: key, Tokens: tokens, AtNs: int64(now)}}}))
		return
	}
	l.queue.Push(queued{arrival: now, id: id, key: key, tokens: tokens, refund: true})
	fx.WakeAt(now + l.hold)
}

// receiveRefund queues a peer's refund, once per (sender, request ID).
// Its bounds are checked before (checkRefund: a bad key, non-positive
// tokens, a time before 0 or more than max_skew after now).
func (l *Lease) receiveRefund(now time.Duration, from strategy.NodeID, r *peerv1.LeaseRefund, fx *strategy.Effects) {
	fid := forwardID{from, r.RequestId}
	if _, dup := l.seen.Get(fid); dup {
		return
	}
	l.seen.Add(now, fid, &verdict{decided: true, allowed: true}, fx)
	at := min(time.Duration(r.AtNs), now)
	l.queue.Push(queued{arrival: at, id: r.RequestId, key: r.Key, tokens: r.Tokens, origin: from, refund: true})
	fx.WakeAt(max(at+l.hold, now))
}

// credit gives q's tokens back to its key's pool at q's arrival, capped at
// the pool's room (shape.credit), when this node holds the pool as the
// key's owner; otherwise (no pool: a full one, or a key that moved) the
// tokens stay spent.
func (l *Lease) credit(now time.Duration, q queued, fx *strategy.Effects) {
	p := l.pools[q.key]
	if p == nil || l.owner(q.key) != l.self {
		return
	}
	l.sh.advance(p, q.arrival)
	l.sh.credit(p, q.tokens)
	l.markDirty(now, q.key, fx)
}

var _ strategy.Refunder = (*Lease)(nil)
