package owner

import (
	"time"

	peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/internal/wire"
)

// Refund gives back tokens of key (strategy.Refunder): a key this node
// owns gets them through its ordering buffer (credited in arrival order at
// now, after the requests that arrived before, capped at the burst less
// the tokens lent to the driver's fast path); any other key's owner is
// sent an OwnerRefund, once (a lost refund is not credited). Under split
// > 1 they go to the sub-bucket id picks, as a request's tokens do.
func (o *Owner) Refund(now time.Duration, id uint64, key string, tokens int64, fx *strategy.Effects) {
	if tokens <= 0 || key == "" {
		return
	}
	key = o.routeKey(key, id)
	owner := o.primary(key)
	if owner == o.self || owner == "" {
		o.enqueue(now, queued{arrival: now, id: id, key: key, tokens: tokens, refund: true}, fx)
		return
	}
	fx.Send(owner, wire.MustMarshal(&peerv1.OwnerMessage{Body: &peerv1.OwnerMessage_Refund{Refund: &peerv1.OwnerRefund{
		RequestId: id, Key: key, Tokens: tokens, AtNs: int64(now)}}}))
}

// receiveRefund queues a peer's refund in the ordering buffer, once per
// (sender, request ID, key), when this node owns the key (else it is
// dropped: the tokens stay spent). Its bounds are checked before
// (checkRefund: an empty or invalid key, non-positive tokens, a negative
// time or one more than slack after now).
func (o *Owner) receiveRefund(now time.Duration, from strategy.NodeID, r *peerv1.OwnerRefund, fx *strategy.Effects) {
	fid := forwardID{from, r.RequestId, r.Key}
	if _, dup := o.seen.Get(fid); dup {
		return
	}
	o.seen.Add(now, fid, &verdict{decided: true, allowed: true}, fx)
	if !o.owns(r.Key) {
		return
	}
	o.enqueue(now, queued{arrival: min(time.Duration(r.AtNs), now), id: r.RequestId, key: r.Key, tokens: r.Tokens, origin: from, refund: true}, fx)
}

// credit gives tokens back to key's bucket at time at (capped at the
// burst less the tokens lent to the driver's fast path), and to its
// conserve bucket while there is one. A key without a bucket has a full
// one: nothing to credit.
func (o *Owner) credit(key string, at time.Duration, tokens int64) {
	b, ok := o.tab(key).Lookup(key)
	if !ok {
		return
	}
	b.Refund(at, tokens)
	if o.lend.Held.Len() > 0 {
		o.lend.Held.Clamp(b, at, key)
	}
	if o.scaled != nil {
		if sb, ok := o.scaled[o.subOf(key)].Lookup(key); ok {
			sb.Refund(at, tokens)
		}
	}
}

var _ strategy.Refunder = (*Owner)(nil)
