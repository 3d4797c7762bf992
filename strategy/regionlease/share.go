package regionlease

import (
	"time"

	peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"
	"github.com/tokenmesh/tokenmesh/strategy/internal/leaseshare"
)

// Shares of a contended key on the node tier (share.go): strategy/lease's
// share and untilDry (its package doc, "# Contended keys"), applied to the
// grants a node gets from the key's global owner G in G's own region and
// from its regional owner R elsewhere. The rules are lease's (their
// arithmetic is strategy/internal/leaseshare's, which lease's owner uses
// too); reading the demand and the supply on each tier is ours.
//
// Before, a node got the period's worth it asked for as long as its
// granter held it: when the bucket (at G) or the stock (at R) ran dry,
// the nodes that asked last held a period's demand each and those that
// asked after them refused on dry hints, the float lease had before its
// shares (docs/EVALUATION.md, "regionlease: shares on the node tier").
//
//   - At G, while no other region asks for the key (ownGrant): the demand
//     is the push state's record of every ask's reported demand plus G's
//     own count (demandTotal, so with pushes on only), the supply the
//     bucket's whole tokens and its refill at r. While another region asks
//     and the bucket has been dry (contended, push.go), hot_period caps
//     these grants instead, and the pushes split the level.
//   - At R (stockGrant): the demand is the region's (regionDemand), the
//     supply the stock's tokens and what comes into it, measured: the
//     tokens of the stock grants and pushes it took, as a moving rate over
//     the demand window (holding.inflow), at most the demand.
//
// Both only make grants smaller and tell a node to refuse until its turn
// (a dry hint where a grant had none, or a shorter one): no token is
// created, and nothing changes on the wire or at the holder.

// sizeShare is lease's grant to an ask of ask tokens for a period (its
// holder's rate ask/period) from a granter whose holders ask demand tokens
// per second in all, which holds whole tokens and gets inflow tokens per
// second more. It returns the tokens to lend and, for a share, the
// holder's turn: how long from now it should refuse once the grant is
// used (its dry hint), 0 otherwise.
//
// When the demand over a quantum exceeds the supply, whole plus the
// inflow over a quantum, the holder's fair rate is the supply's share in
// proportion to its ask; the grant is that rate over a quantum, rounded,
// at least 1 token, at most the ask and whole (at least 1: a grant is
// bounded by what the granter holds anyway), and the turn the time the
// rate takes to refill it plus lead (the holder asks again lead before a
// hint ends), unless that turn would end no earlier than maxTurn. Else,
// when the demand outruns the inflow, whole lasts whole / (demand -
// inflow) seconds, and an ask for a period that outlasts it is cut to that
// time's part (untilDry), at least 1 token. Otherwise the ask.
func sizeShare(ask int64, demand, inflow float64, whole int64, quantum, period, lead, maxTurn time.Duration) (n int64, turn time.Duration) {
	qs := quantum.Seconds()
	if n, turn, ok := leaseshare.Share(ask, demand*qs, float64(whole)+inflow*qs, whole, quantum, period, lead, maxTurn); ok {
		return max(n, 1), turn // 0 only with whole 0: the grant is bounded by what the granter holds anyway
	}
	if until, ok := leaseshare.UntilDry(ask, demand-inflow, whole, period); ok {
		return min(ask, max(until, 1)), 0
	}
	return ask, 0
}

// shares reports whether the rules apply to this rule's keys: quantum > 0
// and a refill over a quantum of at least min_lease (a slower key's supply
// is its burst, first come, first served, as in lease).
func (l *RegionLease) shares() bool {
	return l.quantum > 0 && l.rate.PerSec()*l.quantum.Seconds() >= float64(l.minLease)
}

// ownGrant is the most G lends ask a of a node of its own region (p the
// key's pool, whole its whole tokens at now) while the key is not
// contended, and the node's turn (sizeShare; the turn ends before an
// empty bucket's dry hint, min(period, fill time)): the ask as it came
// with pushes off (no demands recorded) and when shares are off.
func (l *RegionLease) ownGrant(now time.Duration, p *pool, a *peerv1.RegionLeaseAsk, whole int64) (n int64, turn time.Duration) {
	ps := l.pushes[a.Key]
	if ps == nil || !l.shares() {
		return a.Tokens, 0
	}
	return sizeShare(a.Tokens, l.demandTotal(now, ps), l.rate.PerSec(), whole, l.quantum, l.period, l.lead, min(l.period, l.sh.FillTime(p)))
}

// stockGrant is the most a regional owner lends ask a of a node of its
// region out of the stock h holds, and the node's turn (sizeShare, the
// turn within a period): the region's demand against the stock's tokens
// and its measured inflow (at most the demand).
func (l *RegionLease) stockGrant(now time.Duration, h *holding, a *peerv1.RegionLeaseAsk) (n int64, turn time.Duration) {
	if !l.shares() {
		return a.Tokens, 0
	}
	d := l.regionDemand(now, h)
	return sizeShare(a.Tokens, d, min(d, h.inflow(now, l.window)), h.available(now), l.quantum, l.period, l.lead, l.period)
}
