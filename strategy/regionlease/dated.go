package regionlease

import (
	"math"
	"slices"
	"time"

	peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/internal/leasepool"
	"github.com/tokenmesh/tokenmesh/strategy/internal/wire"
)

// Dated pushes (dated.go; ours; issue 24; docs/EVALUATION.md, "regionlease:
// dated pushes"). A push of tokens the global owner G has already made
// spends its WAN crossing in flight: a token G made at t is of no use to
// anyone until the push reaches the other region, one WAN delay later,
// and the tokens so held (the other regions' share of r times the delay)
// are shortfall against one bucket, which would have admitted them at t.
// The delay's jitter adds more: pushes arrive bunched, and what a region
// admits per second swings with them (on issue 24's tenant workload the
// tokens in flight were 45% of the variance of a key's admissions per
// second, the stocks holding bunched pushes 34%).
//
// With push_ahead = A > 0, while region_split=demand divides a contended
// key and every region it pushes to takes them (takes_dated), each push
// at G's time t lends the other regions their share of the refill of
// (the last push's horizon, t+A]: refill G has not made yet, dated
// usable_at = t+A. The holder takes none of it before usable_at plus the
// smallest gap it measured lately between a dated push's sent_at and its
// receipt, which is the WAN's shortest delay plus the offset between the
// two clocks: on its clock that time is no earlier than usable_at on G's,
// so no token is used before G has made it, with no synchronized clocks.
// Tokens are then usable the WAN's shortest delay after they are made
// (rather than its mean, plus its jitter), on a schedule set by G's refill
// rather than by the pushes' arrivals: a push that comes later than that
// (a delay longer than A plus the shortest) is used on receipt.
// With clock_uncertainty = e > 0 the holder waits at most e instead of
// the shortest gap (usableAfter): trusting every two clocks within e, it
// uses the tokens e after they are made rather than the WAN's shortest
// delay after.
//
// Why nothing is created (G's accounting of a dated push is ours):
//   - A dated push commits its asker's part of the refill of its interval
//     (from, at] (n whole tokens of it lent, the fraction carried to the
//     next push). The bucket keeps room for the committed refill not made
//     yet (leasepool.Pool.Committed: its capacity is b less the leases
//     less that), so the refill makes it however full the bucket is, and
//     G commits no more than that room (its capacity less its level).
//   - Made, the committed tokens stay in the level, but no take at G
//     counts them (wholeG, spareG, takeG: the level less the committed
//     tokens made and not settled, owedTicks). When at has passed G
//     settles the push (settleDated): its n tokens leave the level for
//     the leases (Leased), as a push of made tokens does when it is
//     sent; the fraction carried stays committed until the push that
//     lends it settles. The level never falls below what is committed
//     and made, so no token is taken twice, and level plus leases plus
//     the room kept stay within b.
//   - The holder holds a dated push apart (datedHold, counted in no
//     stock) until it is usable there, no earlier than at on G's clock,
//     then takes it as a push. Its warm-up answers count it as held.
//   - A dated push given back or ended before it settles only drops its
//     commitment (forgetDated): its tokens never left the level.
//   - A warm-up's answer or hand-over of G's bucket counts its unsettled
//     dated pushes as settled (answerState).
//
// With dated pushes the level holds only G's region's part of the refill
// and tokens given back; those G's region does not take (it took none
// since the last push, or they exceed its budget) go out as pushes of
// made tokens (pushMade), as every push splits the level without dated
// pushes.
//
// Compatibility: G sends dated pushes only when every push-taking region
// of the key set takes_dated in its last ask (a node of a build without
// them would use the tokens on receipt); otherwise pushes are of made
// tokens, as before. A G of such a build never sends one.

// datedLend is a dated push at G: refill, its asker's part of the refill
// of (from, at], is committed to the asker as it is made; n whole tokens
// of it are lent, with cin of the fraction the asker's earlier pushes
// carried, leaving cout carried to the next (n = cin + refill - cout; n 0
// once given back). At its settling (at has passed) its n tokens leave
// the level for the leases, and the fraction it carried (cout - cin)
// stays committed (pushState.carried) until a later push settles it.
type datedLend struct {
	from, at  time.Duration
	refill    float64
	cin, cout float64
	n         int64
	node      strategy.NodeID
	seq       uint64
}

// datedHold is a dated push held at a regional owner until usable.
type datedHold struct {
	from      strategy.NodeID
	seq       uint64
	tokens    int64
	end, sent time.Duration // the lease's end and its sending, G's time
	usable    time.Duration // this node's time
}

// gapPeriod is how long a regional owner's smallest measured gap between a
// dated push's sending and its receipt lasts before it is measured again:
// the gap's minimum over two periods, so that a change of the clocks'
// offset is taken within two periods.
const gapPeriod = 10 * time.Second

// owedTicks is, at G, the ticks of refill committed to key's dated
// pushes that the bucket has made by now and G has not settled: the
// fractions carried by settled pushes (pushState.carried) and, of each
// unsettled push, its part of the refill made so far. In the level, but
// not G's to take. Rounded up.
func (l *RegionLease) owedTicks(now time.Duration, ps *pushState) int64 {
	if ps == nil {
		return 0
	}
	owed := ps.carried
	for _, d := range ps.dated {
		frac := 1.0
		if now < d.at {
			frac = max(float64(now-d.from), 0) / float64(d.at-d.from)
		}
		owed += frac * d.refill
	}
	return int64(math.Ceil(max(owed, 0) * float64(l.sh.Per)))
}

// settleDated moves, at G, the tokens of key's dated pushes whose interval
// has passed from the level into the leases of p (key's pool); the
// fractions they carried stay committed.
func (l *RegionLease) settleDated(now time.Duration, key string, ps *pushState, p *pool) {
	if ps == nil || len(ps.dated) == 0 {
		return
	}
	keep := ps.dated[:0]
	for _, d := range ps.dated {
		if d.at > now {
			keep = append(keep, d)
			continue
		}
		ps.carried += d.refill - float64(d.n)
		if d.n > 0 {
			p.Level -= d.n * l.sh.Per
			p.Leased += d.n
			if g := l.grants[grantID{d.node, key, d.seq}]; g != nil {
				g.settled = true
			}
		}
	}
	ps.dated = keep
	p.Committed = slices.DeleteFunc(p.Committed, func(c leasepool.Commitment) bool { return c.At <= now })
}

// unsettled reports whether grant g of key is a dated push whose tokens
// have not left the level yet, once its pool (if still key's) has settled
// what is due by now.
func (l *RegionLease) unsettled(now time.Duration, key string, g *grantRec) bool {
	if g.usable == 0 {
		return false
	}
	if l.pools[key] == g.pool {
		l.advanceG(now, key, g.pool)
	}
	return !g.settled
}

// advanceG advances key's pool p at G to now and settles its dated pushes.
func (l *RegionLease) advanceG(now time.Duration, key string, p *pool) {
	l.sh.Advance(p, now)
	l.settleDated(now, key, l.pushes[key], p)
}

// spareG is Spare(p, at) of key's pool p at G less its dated pushes'
// tokens made by now (owedTicks): what any take at G may use.
func (l *RegionLease) spareG(now, at time.Duration, key string, p *pool) int64 {
	return max(l.sh.Spare(p, at)-l.owedTicks(now, l.pushes[key]), 0)
}

// wholeG is spareG's whole tokens at now.
func (l *RegionLease) wholeG(now time.Duration, key string, p *pool) int64 {
	return l.spareG(now, now, key, p) / l.sh.Per
}

// takeG takes n tokens of key's pool p at G for a request that arrived at
// at, if spareG holds them.
func (l *RegionLease) takeG(now, at time.Duration, key string, p *pool, n int64) bool {
	if n <= 0 || n > l.sh.Burst || l.spareG(now, at, key, p) < n*l.sh.Per {
		return false
	}
	p.Level -= n * l.sh.Per
	return true
}

// answerState is key's pool p at G (refilled to now) for a warm-up's
// answer or hand-over: its dated pushes counted as settled, the tokens
// made of them out of the level and all of them in the leases.
func (l *RegionLease) answerState(now time.Duration, key string, p *pool) pool {
	cp := *p
	l.sh.Advance(&cp, now)
	if ps := l.pushes[key]; ps != nil {
		cp.Level -= l.owedTicks(now, ps)
		for _, d := range ps.dated {
			cp.Leased += d.n
		}
	}
	return cp
}

// dated reports whether key's pushes at now are dated: push_ahead > 0,
// region_split=demand, and every fresh push-taking asker takes them.
func (l *RegionLease) dated(now time.Duration, ps *pushState) bool {
	if l.pushAhead <= 0 || l.split != splitDemand {
		return false
	}
	n := 0
	for _, a := range ps.askers { // any order: all must
		if l.pushTaker(now, a) {
			if !a.dated {
				return false
			}
			n++
		}
	}
	return n > 0
}

// pushDated lends each fresh push-taking asker its share, by the other
// regions' demand (others, tokens per second; total is the key's), of
// their part of the refill of (horizon, now+push_ahead], in chunks of at
// most push_every, each usable from its end (G's time): the whole tokens
// of its part, the fraction carried to the next chunk. At steady state a
// push lends one chunk; the first (and the first after a pause) lends
// every chunk up to now+push_ahead at once, so that the first is usable
// after push_every rather than after push_ahead. Never the refill before
// the bucket's Last (a conservative start makes nothing until then).
func (l *RegionLease) pushDated(now time.Duration, key string, ps *pushState, p *pool, total, others float64, fx *strategy.Effects) {
	horizon, first := now+l.pushAhead, max(ps.horizon, now, p.Last)
	if others <= 0 || total <= 0 || first >= horizon || !l.fenced(now, key, horizon+l.rttl, fx) {
		return
	}
	skip := l.outlasting(now, key, ps, p, total)
	l.pushMade(now, key, ps, p, total, others, skip, fx)
	for start := first; start < horizon; {
		end := min(start+l.pushEvery, horizon)
		refill := others / total * l.rate.PerSec() * (end - start).Seconds()
		// At most the room the bucket has for it: its capacity (leases
		// and promised refill counted) less its level, so that the
		// refill promised is never lost at a full bucket.
		refill = min(refill, float64(max(l.sh.Capacity(p)-p.Level, 0))/float64(l.sh.Per))
		if refill <= 0 {
			break
		}
		l.lendChunk(now, key, ps, p, start, end, refill, others, skip, fx)
		start = end
	}
	ps.horizon = horizon
}

// lendChunk commits refill tokens of the refill of (start, end] to the
// fresh push-taking askers, each its part by the demand it reported
// against others (tokens per second), and lends each the whole tokens of
// its part and of the fraction it carried, dated end, keeping the new
// fraction (a.dcarry); the bucket keeps room for what it committed.
func (l *RegionLease) lendChunk(now time.Duration, key string, ps *pushState, p *pool, start, end time.Duration, refill, others float64, skip map[strategy.NodeID]bool, fx *strategy.Effects) {
	var promised float64
	for _, n := range sortedKeys(ps.askers) {
		a := ps.askers[n]
		if !l.pushTaker(now, a) || skip[n] {
			continue
		}
		part, cin := refill*float64(a.mtps)/1000/others, a.dcarry
		promised += part
		share := min(int64(part+cin), l.sh.Burst) // a grant's bound
		a.dcarry = part + cin - float64(share)
		ps.askers[n] = a
		var seq uint64
		if share >= 1 {
			seq = l.sendPush(now, key, n, ps, p, share, end, fx)
		}
		ps.dated = append(ps.dated, datedLend{from: start, at: end, refill: part, cin: cin, cout: a.dcarry, n: share, node: n, seq: seq})
	}
	if promised > 0 {
		p.Committed = append(p.Committed, leasepool.Commitment{From: start, At: end, Ticks: int64(math.Ceil(promised * float64(l.sh.Per)))})
	}
}

// pushMade lends, with dated pushes on, the whole tokens the level holds
// beyond every lend and what G's region may still take (its budget left
// and its share of the refill until the next push; none once it took no
// token since the last push) to the other regions' askers, each its share
// of the key's demand by the demand it reported, as pushes of made tokens:
// tokens given back, or the refill left by a G region the load has just
// left, would otherwise wait in the level for G's region alone, as the
// pushes are dated. (Without dated pushes every push splits the level.)
func (l *RegionLease) pushMade(now time.Duration, key string, ps *pushState, p *pool, total, others float64, skip map[strategy.NodeID]bool, fx *strategy.Effects) {
	reserve := int64(1)
	if ps.ownTook {
		s := min(max((total-others)/total, 0), 1)
		reserve = int64(math.Ceil(max(ps.ownBudget, 0) + s*l.rate.PerSec()*l.pushEvery.Seconds()))
	}
	ps.ownTook = false
	made := l.wholeG(now, key, p) - reserve
	if made <= 0 {
		return
	}
	for _, n := range sortedKeys(ps.askers) {
		a := ps.askers[n]
		if !l.pushTaker(now, a) || skip[n] {
			continue
		}
		if share := int64(float64(made) * float64(a.mtps) / 1000 / total); share >= 1 {
			l.sendPush(now, key, n, ps, p, share, 0, fx)
		}
	}
}

// sendPush lends holder n share tokens of key's pool p in a pushed grant,
// dated usable (G's time; 0: made tokens, usable on receipt), lasting
// region_ttl from usable (or from now), the previous push carried again.
func (l *RegionLease) sendPush(now time.Duration, key string, n strategy.NodeID, ps *pushState, p *pool, share int64, usable time.Duration, fx *strategy.Effects) (seq uint64) {
	l.pushSeq++
	id := grantID{n, key, l.pushSeq | pushSeqBit}
	g := &grantRec{pool: p, tokens: share, expires: max(usable, now) + l.rttl, sent: now, usable: usable}
	if usable == 0 {
		l.sh.Lend(p, share) // made tokens; a dated push's leave the level when it settles (settleDated)
	}
	putID(l.grants, &l.mem.grants, id, id.key, g)
	l.gexp.Push(grantExp{at: g.expires, id: id})
	l.gexp.Push(grantExp{at: g.expires + l.timeout + l.maxSkew, id: id, end: true})
	fx.WakeAt(g.expires)
	m := &peerv1.RegionLeaseGrant{Key: key, Seq: id.seq, Tokens: share, ExpiresNs: int64(g.expires), Pushed: true}
	if usable > 0 {
		m.SentAtNs, m.UsableAtNs = int64(now), int64(usable)
	}
	if prev := l.grants[grantID{n, key, ps.last[n]}]; prev != nil && !prev.released && prev.expires > now {
		m.PrevSeq, m.PrevTokens, m.PrevExpiresNs = ps.last[n], prev.tokens, int64(prev.expires)
		if prev.usable > 0 {
			m.PrevSentAtNs, m.PrevUsableAtNs = int64(prev.sent), int64(prev.usable)
		}
	}
	ps.last[n] = id.seq
	ps.out[n] = append(ps.out[n], id.seq)
	fx.Send(n, wire.MustMarshal(&peerv1.RegionLeaseMessage{Body: &peerv1.RegionLeaseMessage_Grant{Grant: m}}))
	return id.seq
}

// forgetDated undoes, at G, the lend of dated push id given back or
// ended before it settled (its tokens never left the level): the fraction
// it took from the asker's earlier pushes is no longer committed, and of
// its refill only what it carried to the next push (cout, the last of it
// made) stays committed, to be settled by that push.
func (l *RegionLease) forgetDated(id grantID) {
	ps := l.pushes[id.key]
	if ps == nil {
		return
	}
	for i := range ps.dated {
		if d := &ps.dated[i]; d.node == id.node && d.seq == id.seq && d.n > 0 {
			ps.carried -= d.cin
			if p := l.pools[id.key]; p != nil {
				// Rounded down: the room kept never falls short.
				uncommit(p, d.from, d.at, int64((d.refill-d.cout)*float64(l.sh.Per)))
			}
			d.refill, d.cin, d.n = d.cout, 0, 0
			return
		}
	}
}

// uncommit takes ticks off p's promised refill of (from, at] (at least 0
// left).
func uncommit(p *pool, from, at time.Duration, ticks int64) {
	for j := range p.Committed {
		if c := &p.Committed[j]; c.From == from && c.At == at {
			c.Ticks = max(c.Ticks-ticks, 0)
			return
		}
	}
}

// clearDated forgets key's dated commitments (its pool dropped or
// replaced).
func (l *RegionLease) clearDated(key string) {
	if ps := l.pushes[key]; ps != nil {
		ps.dated, ps.horizon, ps.carried = nil, 0, 0
		for n, a := range ps.askers { // any order
			a.dcarry = 0
			ps.askers[n] = a
		}
	}
}

// pushedLease is one pushed lease of a grant as the holder reads it.
type pushedLease struct {
	seq                 uint64
	tokens              int64
	end, sent, usableAt time.Duration // G's time; usableAt 0: not dated
}

// takeDated takes a dated pushed lease (its usable_at set; checkGrant
// bounded it) at a regional owner: at once when usable here (usable_at
// plus the smallest gap measured) or when the key is idle here (given
// back at once, takePush), else held until then (datedHold); false if it
// had been taken or is held.
func (l *RegionLease) takeDated(now time.Duration, from strategy.NodeID, key string, h *holding, pl pushedLease, fx *strategy.Effects) bool {
	if _, dup := h.accepted[pl.seq]; dup {
		return false
	}
	for _, d := range h.dated {
		if d.seq == pl.seq && d.from == from {
			return false
		}
	}
	at := pl.usableAt + l.usableAfter(now, h, now-pl.sent)
	if at <= now || l.isIdle(now, h) { // usable, or idle: given back at once (takePush)
		return l.takePush(now, from, key, h, pl.seq, pl.tokens, pl.end, pl.sent, fx)
	}
	h.dated = append(h.dated, datedHold{from: from, seq: pl.seq, tokens: pl.tokens, end: pl.end, sent: pl.sent, usable: at})
	l.holdingChanged(h)
	l.pushTimer(timer{at: at, kind: timerDated, key: key})
	fx.WakeAt(at)
	return true
}

// usableAfter is how long after its usable_at (G's time) a dated push
// is usable here, on this node's clock: the smallest gap between a dated
// push's sending and its receipt (sentGap; gap is this one's), which is
// no earlier than usable_at on G's clock whatever the clocks, or, when
// that is longer, clock_uncertainty, trusted to bound how far this
// node's clock runs ahead of G's (ours; docs/EVALUATION.md, "regionlease:
// trusting the clocks"). The gap is recorded either way.
func (l *RegionLease) usableAfter(now time.Duration, h *holding, gap time.Duration) time.Duration {
	after := l.sentGap(now, h, gap)
	if l.clockUncertainty > 0 {
		after = min(after, l.clockUncertainty)
	}
	return after
}

// sentGap records gap, a dated push's receipt here less its sending at
// G, and returns the smallest over the current and the last gapPeriod.
func (l *RegionLease) sentGap(now time.Duration, h *holding, gap time.Duration) time.Duration {
	switch {
	case !h.gapSet:
		h.gapPrev, h.gapCur, h.gapAt, h.gapSet = gap, gap, now, true
	case now >= h.gapAt+gapPeriod:
		h.gapPrev, h.gapCur, h.gapAt = h.gapCur, gap, now
	}
	h.gapCur = min(h.gapCur, gap)
	return min(h.gapCur, h.gapPrev)
}

// datedTimer takes key's held dated pushes that are usable now.
func (l *RegionLease) datedTimer(now time.Duration, t timer, fx *strategy.Effects) {
	h := l.keys[t.key]
	if h == nil || len(h.dated) == 0 {
		return
	}
	keep := h.dated[:0]
	var due []datedHold
	for _, d := range h.dated {
		if d.usable <= now {
			due = append(due, d)
			continue
		}
		keep = append(keep, d)
	}
	h.dated = keep
	// No longer the key's regional owner (or a push from a previous
	// upstream): dropped, they end unused at G.
	to, region := l.upstream(t.key)
	for _, d := range due {
		if region && d.from == to {
			l.takePush(now, d.from, t.key, h, d.seq, d.tokens, d.end, d.sent, fx)
		}
	}
	l.holdingChanged(h)
}
