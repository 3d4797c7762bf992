package owner

import (
	"maps"
	"slices"
	"time"

	peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/internal/wire"
)

// Charges (see "Timeouts" in the package doc): every request a forwarder
// admits by itself is charged to the key's owner afterwards, sent again
// to a new owner after a membership change and when the owner answers
// after a loss, and forgotten once acknowledged or after chargeTTL.

type charge struct {
	req    strategy.Request
	owner  strategy.NodeID   // where the charge was last sent
	sentTo []strategy.NodeID // every node it was sent to: each may acknowledge
	// forwardedTo is, for a timed-out forward's fallback, every node the
	// forward went to: a late verdict from one carries the charge's
	// request id.
	forwardedTo []strategy.NodeID
	sentAt      time.Duration // the last send
	until       time.Duration
	// taken: this node's bucket took the tokens already (a forward it
	// decided for another owner, chargeNotOwned), so the charge is
	// dropped, not debited, when this node becomes the key's owner.
	taken bool
}

type chargeAt struct {
	until time.Duration
	id    uint64
}

// addCharge remembers an admission decided here for owner and sends it.
func (o *Owner) addCharge(now time.Duration, req strategy.Request, owner strategy.NodeID, fx *strategy.Effects) {
	if len(o.charges) >= maxCharges {
		o.dropOldestCharge()
	}
	c := &charge{req: req, until: now + o.chargeTTL}
	o.charges[req.ID] = c
	if len(o.chargeOrder) == 0 {
		fx.WakeAt(c.until)
	}
	o.chargeOrder = append(o.chargeOrder, chargeAt{until: c.until, id: req.ID})
	o.sendCharge(now, c, owner, fx)
	o.chargeClaimant(now, c, owner, fx)
}

func (o *Owner) dropOldestCharge() {
	for len(o.chargeOrder) > 0 {
		c := o.chargeOrder[0]
		o.chargeOrder = o.chargeOrder[1:]
		if _, ok := o.charges[c.id]; ok {
			o.dropCharge(c.id)
			return
		}
	}
}

// dropCharge forgets charge id (acknowledged, expired or dropped).
func (o *Owner) dropCharge(id uint64) {
	if c, ok := o.charges[id]; ok {
		o.unlistCharge(c)
		delete(o.charges, id)
	}
}

// unlistCharge takes c out of chargesTo for the node it was last sent to.
func (o *Owner) unlistCharge(c *charge) {
	delete(o.chargesTo[c.owner], c.req.ID)
	if len(o.chargesTo[c.owner]) == 0 {
		delete(o.chargesTo, c.owner)
	}
}

// flushCharges sends again the charges last sent to from, which just
// answered (a charge sent while it was unreachable was lost), at most once
// per timeout.
func (o *Owner) flushCharges(now time.Duration, from strategy.NodeID, fx *strategy.Effects) {
	ids := o.chargesTo[from]
	if len(ids) == 0 {
		return
	}
	if at, ok := o.flushedAt[from]; ok && now < at+o.timeout {
		return
	}
	o.flushedAt[from] = now
	sorted := make([]uint64, 0, len(ids))
	for id := range ids {
		sorted = append(sorted, id)
	}
	slices.Sort(sorted)
	for _, id := range sorted {
		if c := o.charges[id]; now >= c.sentAt+o.timeout { // not one still in flight
			o.sendCharge(now, c, from, fx)
		}
	}
}

func (o *Owner) sendCharge(now time.Duration, c *charge, owner strategy.NodeID, fx *strategy.Effects) {
	c.sentAt = now
	if c.owner != "" {
		o.unlistCharge(c)
	}
	if o.chargesTo[owner] == nil {
		o.chargesTo[owner] = map[uint64]bool{}
	}
	o.chargesTo[owner][c.req.ID] = true
	c.owner = owner
	if !slices.Contains(c.sentTo, owner) {
		c.sentTo = append(c.sentTo, owner)
	}
	fx.Send(owner, chargeMessage(c))
}

// chargeMessage is c as sent to an owner.
func chargeMessage(c *charge) []byte {
	return wire.MustMarshal(&peerv1.OwnerMessage{Body: &peerv1.OwnerMessage_Forward{Forward: &peerv1.OwnerForward{
		RequestId: c.req.ID, Key: c.req.Key, Tokens: c.req.Tokens, ArrivalNs: int64(c.req.Arrival), Charge: true,
	}}})
}

// expireCharges forgets the fallback admissions not acknowledged within
// chargeTTL.
func (o *Owner) expireCharges(now time.Duration, fx *strategy.Effects) {
	n := 0
	for n < len(o.chargeOrder) && o.chargeOrder[n].until <= now {
		o.dropCharge(o.chargeOrder[n].id)
		n++
	}
	o.chargeOrder = o.chargeOrder[n:]
	if n > 0 && len(o.chargeOrder) > 0 {
		fx.WakeAt(o.chargeOrder[0].until)
	}
}

// rerouteCharges sends, in request ID order, each charge whose key's owner
// changed to the new owner, or takes it here when this node owns the key
// now.
func (o *Owner) rerouteCharges(now time.Duration, fx *strategy.Effects) {
	for _, id := range slices.Sorted(maps.Keys(o.charges)) {
		c := o.charges[id]
		owner := o.primary(c.req.Key)
		if owner == c.owner {
			continue
		}
		if owner == o.self || owner == "" {
			if !c.taken {
				o.debit(c.req.Key, c.req.Arrival, c.req.Tokens)
				o.markDirty(now, c.req.Key, fx)
			}
			o.dropCharge(id)
			continue
		}
		o.sendCharge(now, c, owner, fx)
	}
}
