package regionlease

import (
	"math"
	"time"

	peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"
)

// Contended keys in the global owner's own region (share.go): strategy/
// lease's share and untilDry (its package doc, "# Contended keys"), applied
// to the grants the global owner G makes to the nodes of its own region
// while no other region asks for the key. The rules are lease's; reading
// the demand from the push state's askers (every ask's reported demand,
// the regions' included, and G's own count) and the port are ours.
//
// Before, such a node got the period's worth it asked for as long as the
// bucket held it: when a tenant's load sat in G's region (one region, or
// the load of follow-the-sun there), the bucket ran dry while the nodes
// that asked last held a period's demand each and those that asked after
// them refused on dry hints, the float lease had before its shares
// (docs/EVALUATION.md, "regionlease: shares in the global owner's
// region"). While another region asks (contended, push.go), hot_period
// caps these grants instead, and the pushes split the level.
//
// Both only make grants smaller and dry hints shorter: no token is created
// and nothing changes on the wire or at the holder.

// ownGrant is the most G lends ask a of a node of its own region (p the
// key's pool, whole its whole tokens at now) while the key is not
// contended, and, for a share, the node's turn: how long from now it
// should refuse once the grant is used (its dry hint), 0 otherwise.
//
// When the demands reported (demandTotal, tokens per second) over a
// quantum exceed the supply, whole plus the refill over a quantum, the
// node's fair rate is the supply's share in proportion to its ask
// (a.Tokens per period); the grant is that rate over a quantum, rounded,
// at least 1 token, at most the ask and whole, and the turn the time the
// rate takes to refill it plus lead (the node asks again lead before a
// hint ends). Else, when the demand outruns the refill, the bucket lasts
// whole / (demand - r) seconds, and an ask for a period that outlasts it
// is cut to that time's part (untilDry), at least 1 token. Neither applies
// (the ask as it came) with quantum 0, with pushes off (no demands are
// recorded), for a rule whose refill over a quantum is below min_lease,
// and for a share whose turn would end no earlier than an empty bucket's
// dry hint (min(period, fill time)).
func (l *RegionLease) ownGrant(now time.Duration, p *pool, a *peerv1.RegionLeaseAsk, whole int64) (n int64, turn time.Duration) {
	ps := l.pushes[a.Key]
	qs, per := l.quantum.Seconds(), l.period.Seconds()
	if ps == nil || l.quantum <= 0 || l.ratePerS*qs < float64(l.minLease) {
		return a.Tokens, 0
	}
	total := l.demandTotal(now, ps)
	demand := total * qs
	supply := float64(whole) + l.ratePerS*qs
	if supply < demand {
		rate := supply / demand * float64(a.Tokens) / per // tokens/s
		n = min(max(int64(math.Round(rate*qs)), 1), a.Tokens, max(whole, 1))
		wait := float64(n) / rate
		if wait+l.lead.Seconds() < min(l.period, l.sh.FillTime(p)).Seconds() {
			return n, time.Duration(wait*float64(time.Second)) + l.lead
		}
	}
	if drain := total - l.ratePerS; drain > 0 {
		if last := float64(whole) / drain; last < per {
			return min(a.Tokens, max(int64(math.Ceil(float64(a.Tokens)*last/per)), 1)), 0
		}
	}
	return a.Tokens, 0
}
