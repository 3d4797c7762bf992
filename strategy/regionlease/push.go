package regionlease

import (
	"math"
	"slices"
	"time"

	peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/topology"
)

// Pushed grants (ours; issue 24): while a key is contended (its global
// owner G said "dry" within region_ttl: a grant short of an ask, or a
// refusal of its own), G pushes, every push_every, the whole tokens its
// bucket holds to the regional owners of the other regions, each its
// share by measured demand (the demand each region reported in its last
// ask, against the sum of every region's and of G's own region's), without
// waiting for their asks. What G's own region's share and the share of
// regions that do not take pushes stay in the bucket for their asks; how
// much of it G's own region may take, and how region_split=demand
// divides a push, is split.go's. A push is a lease like a grant: its
// tokens leave the level when it is sent (Lend), so the level plus every
// token in leases stays within b
// exactly as for a grant; it lasts region_ttl from G's send time (the
// holder stops using it rlead earlier), under the key's fence
// (replica.go); a push lost on the WAN is a lease that ends unused at G,
// as a lost grant. Before pushes a region's supply came once per WAN round
// trip, in the chunk of refill its ask found; pushes bring it every
// push_every, one WAN one-way delay after the refill.
//
// Compatibility: G pushes only to an asker whose ask set takes_push (a
// node of a build without pushes never sets it, and would drop a grant it
// did not ask for), and a G of such a build ignores the field and never
// pushes. A mixed cluster therefore runs pushes between new nodes only:
// a region whose regional owner is of the old build gets no pushes (its
// demand still counts in the split, so its share stays in G's bucket for
// its asks), and an old G pushes to no one.

// pushSeqBit marks a pushed lease's seq (G's own counter): an asker's seq
// (its start time in ns plus its asks) never has it.
const pushSeqBit = 1 << 63

// pushState is what a global owner knows of a key for its pushes.
type pushState struct {
	askers map[strategy.NodeID]asker    // the demand in each asker's last ask
	last   map[strategy.NodeID]uint64   // the seq of the last push to each holder (sent again with the next)
	out    map[strategy.NodeID][]uint64 // the seqs of the leases granted or pushed to each remote asker, not yet seen ended
	own    holding                      // G's own requests of the key (count and demand only)
	dryAt  time.Duration                // G last said its bucket was dry (dry set)
	dry    bool
	armed  bool // a push timer is set
	// ownBudget is, while the key is contended, the tokens G's own region
	// may still take until the next push (split.go's setOwnBudget).
	ownBudget float64
	// dated are the dated pushes' lends whose refill is still to come,
	// by their end; horizon is the end of the refill lent so far
	// (dated.go).
	dated   []datedLend
	horizon time.Duration
	// carried is the refill committed to dated pushes and settled but not
	// lent yet: the fractions of a token carried to the next push (tokens;
	// dated.go).
	carried float64
	// ownTook: G's region took a token of the key since the last push
	// (pushMade).
	ownTook bool
}

type asker struct {
	mtps   uint64
	at     time.Duration
	remote bool    // a regional owner of another region
	push   bool    // takes pushed grants
	carry  float64 // region_split=demand: the fraction of a token its last push was short of its share (split.go)
	dated  bool    // takes dated pushes (dated.go)
	// dcarry is, for dated pushes, the fraction of a token of the refill
	// committed to it and not lent yet (dated.go): apart from carry, which
	// pushes of made tokens keep and which is no committed refill.
	dcarry float64
}

// pushTaker reports whether asker a takes pushes and asked within the
// demand window before now: a push goes only to such an asker.
func (l *RegionLease) pushTaker(now time.Duration, a asker) bool {
	return a.push && a.at+l.window > now
}

func (l *RegionLease) pushOf(key string) *pushState {
	ps := l.pushes[key]
	if ps == nil {
		ps = &pushState{askers: map[strategy.NodeID]asker{}, last: map[strategy.NodeID]uint64{}, out: map[strategy.NodeID][]uint64{}}
		l.pushes[key] = ps
		l.mem.pushes.Add(key)
		l.order.pushes.Add(key)
	}
	return ps
}

// noteAsk records, at the global owner, the demand an ask reports.
func (l *RegionLease) noteAsk(now time.Duration, from strategy.NodeID, a *peerv1.RegionLeaseAsk) {
	if l.pushEvery <= 0 {
		return
	}
	remote := topology.Of(from) != l.region
	ps := l.pushOf(a.Key)
	ps.askers[from] = asker{mtps: a.DemandMtps, at: now, remote: remote, push: remote && a.TakesPush, carry: ps.askers[from].carry, dated: remote && a.TakesDated, dcarry: ps.askers[from].dcarry}
}

// outstanding is, at the global owner, the tokens of key's unended leases
// to holder n not reported used (what n may still hold or have lent on);
// it forgets the ended ones.
func (l *RegionLease) outstanding(now time.Duration, key string, n strategy.NodeID, ps *pushState) int64 {
	var sum int64
	ps.out[n] = slices.DeleteFunc(ps.out[n], func(seq uint64) bool {
		g := l.grants[grantID{n, key, seq}]
		if g == nil || g.released || g.expires <= now {
			return true
		}
		sum += g.tokens - g.used
		return false
	})
	return sum
}

// notePushIdle stops the pushes of a key to a holder that returned
// unused tokens of a lease of it (idle, or left over at the lease's end:
// it held more than it used) until it asks again.
func (l *RegionLease) notePushIdle(id grantID) {
	if ps := l.pushes[id.key]; ps != nil {
		if a, ok := ps.askers[id.node]; ok {
			a.push = false
			a.mtps = 0 // out of the split until it asks again
			ps.askers[id.node] = a
		}
	}
}

// noteOwn counts a request of key decided at its global owner.
func (l *RegionLease) noteOwn(key string, req strategy.Request) {
	if l.pushEvery <= 0 {
		return
	}
	h := &l.pushOf(key).own
	h.count(req.Arrival, req.Tokens, h.cur+h.prev == 0 || req.Arrival != h.lastArrival, l.window)
	h.lastArrival = req.Arrival
}

// noteDry records that the global owner's bucket of key was dry at now,
// and arms the key's push timer.
func (l *RegionLease) noteDry(now time.Duration, key string, fx *strategy.Effects) {
	if l.pushEvery <= 0 {
		return
	}
	ps := l.pushOf(key)
	ps.dry, ps.dryAt = true, now
	if !ps.armed {
		ps.armed = true
		l.pushTimer(timer{at: now + l.pushEvery, kind: timerPush, key: key})
		fx.WakeAt(now + l.pushEvery)
	}
}

// onPushTimer pushes key's stock to the regions while the key is contended,
// and arms the next push.
func (l *RegionLease) onPushTimer(now time.Duration, t timer, fx *strategy.Effects) {
	ps := l.pushes[t.key]
	if ps == nil {
		return
	}
	ps.armed = false
	g, _ := l.global(t.key)
	if g != l.self || !ps.dry || now >= ps.dryAt+l.rttl || l.pools[t.key] == nil {
		return
	}
	l.push(now, t.key, ps, fx)
	ps.armed = true
	l.pushTimer(timer{at: now + l.pushEvery, kind: timerPush, key: t.key})
	fx.WakeAt(now + l.pushEvery)
}

// push lends each remote regional owner that takes pushes its share of
// the pool's whole tokens by the demands reported within the window.
func (l *RegionLease) push(now time.Duration, key string, ps *pushState, fx *strategy.Effects) {
	p := l.pools[key]
	l.advanceG(now, key, p)
	whole := l.wholeG(now, key, p)
	total := l.demandTotal(now, ps)
	var own float64 // G's region's demand, for the split (split.go)
	if l.split != splitFirst {
		own = l.ownDemand(now, ps)
	}
	var belowMin int64 // shares skipped as below min_lease: kept for the next push
	defer func() { l.setOwnBudget(now, key, p, ps, whole, total, own, belowMin) }()
	if l.dated(now, ps) {
		l.pushDated(now, key, ps, p, total, total-own, fx)
		return
	}
	if whole <= 0 {
		return
	}
	if total <= 0 || !l.fenced(now, key, now+l.rttl, fx) {
		return
	}
	left := whole
	for _, n := range sortedKeys(ps.askers) {
		a := ps.askers[n]
		if !l.pushTaker(now, a) {
			continue
		}
		share := min(l.pushShare(ps, n, whole, total, total-own), left)
		capped := min(share, int64(float64(a.mtps)/1000*(l.rperiod/2).Seconds())-l.outstanding(now, key, n, ps))
		if capped < l.minLease {
			if capped == share {
				belowMin += max(share, 0)
			}
			continue
		}
		share = capped
		left -= share
		l.sendPush(now, key, n, ps, p, share, 0, fx)
	}
}

// demandTotal is, at the global owner, the key's demand in tokens per
// second: its own requests' and every asker's reported within the window
// (the denominator of the pushes' split and of askShare).
func (l *RegionLease) demandTotal(now time.Duration, ps *pushState) float64 {
	total := ps.own.demand(now, l.window, l.minLease)
	for _, n := range sortedKeys(ps.askers) { // in order: the sum is the same on every run
		if a := ps.askers[n]; a.at+l.window > now {
			total += float64(a.mtps) / 1000
		}
	}
	return total
}

// askShare is the most the global owner lends a remote regional owner's
// ask (not its first) while the key is contended and the region takes
// pushes: the region's share of the level's whole tokens by the demands
// reported, as a push splits them (ours; docs/EVALUATION.md, "the
// steady-state swing"). An ask otherwise took the whole level when it
// arrived, the refill meant for G's own region and for the other regions'
// next pushes included: the regions' supply came in chunks of every
// token accumulated since the last push, and the other regions' pushes
// came up short after it. While the key's pushes are dated, 0. ok is
// false when the rule does not apply.
func (l *RegionLease) askShare(now time.Duration, key string, from strategy.NodeID, whole int64) (share int64, ok bool) {
	ps := l.pushes[key]
	if ps == nil || !l.contended(now, key) {
		return 0, false
	}
	a, known := ps.askers[from]
	if !known || !a.push {
		return 0, false
	}
	total := l.demandTotal(now, ps)
	if total <= 0 {
		return 0, false
	}
	if l.dated(now, ps) {
		// Its supply is its dated pushes (dated.go), lent ahead: what
		// the level holds is G's region's.
		return 0, true
	}
	// Rounded up: a region whose share is below a token still gets one
	// per ask (once per round trip), as pushes skip shares below
	// min_lease.
	return int64(math.Ceil(float64(whole) * float64(a.mtps) / 1000 / total)), true
}

// onPush takes a pushed lease at a regional owner: only from the key's
// global owner while this node is the key's regional owner (else it is
// dropped and ends unused at its granter), once per seq, used until its
// end there (at most region_ttl from now) less rlead.
func (l *RegionLease) onPush(now time.Duration, from strategy.NodeID, g *peerv1.RegionLeaseGrant, fx *strategy.Effects) {
	if to, region := l.upstream(g.Key); to != from || !region || g.Seq&pushSeqBit == 0 {
		return
	}
	h := l.holding(g.Key)
	if g.PrevSeq&pushSeqBit != 0 {
		l.takePushed(now, from, g.Key, h, pushedLease{seq: g.PrevSeq, tokens: g.PrevTokens, end: time.Duration(g.PrevExpiresNs),
			sent: time.Duration(g.PrevSentAtNs), usableAt: time.Duration(g.PrevUsableAtNs)}, fx)
	}
	if !l.takePushed(now, from, g.Key, h, pushedLease{seq: g.Seq, tokens: g.Tokens, end: time.Duration(g.ExpiresNs),
		sent: time.Duration(g.SentAtNs), usableAt: time.Duration(g.UsableAtNs)}, fx) {
		return
	}
	if h.pushAt > 0 {
		h.pushGap += (min(now-h.pushAt, l.rttl) - h.pushGap) / 8
	} else {
		h.pushGap = l.pushEvery
	}
	h.pushAt = now
}

// takePushed takes one pushed lease of a grant: a dated one (usable_at
// set) by takeDated, any other at once by takePush, sent at its end less
// region_ttl.
func (l *RegionLease) takePushed(now time.Duration, from strategy.NodeID, key string, h *holding, pl pushedLease, fx *strategy.Effects) bool {
	if pl.usableAt != 0 {
		return l.takeDated(now, from, key, h, pl, fx)
	}
	return l.takePush(now, from, key, h, pl.seq, pl.tokens, pl.end, pl.end-l.rttl, fx)
}

// takePush takes one pushed lease (seq, tokens, end at the granter, sent
// at the granter's time) once; false if it had been taken.
func (l *RegionLease) takePush(now time.Duration, from strategy.NodeID, key string, h *holding, seq uint64, tokens int64, end, sent time.Duration, fx *strategy.Effects) bool {
	if _, dup := h.accepted[seq]; dup {
		return false
	}
	if l.restarted && sent < l.restartAt+l.maxSkew {
		// Sent before this incarnation started (by the granter's clock,
		// within max_skew): a push to the previous one, which may have
		// used it and reported it used or spent (a copy comes late, or
		// as the next push's prev). Taking it again would create its
		// tokens; dropped, it ends at its granter's expiry, its tokens
		// counted spent there (safe; a live node's pushes in its first
		// max_skew may go the same way). Ours; found by
		// TestEnvelopeAllowancesUnderFaults at 531 tokens/s: a regional
		// owner restarted 4 ms after taking a push took it again from
		// the next push's prev 68 ms later, after the global owner had
		// released it as used.
		return false
	}
	expires := min(end, now+l.rttl) - l.rlead
	h.accepted[seq] = expires
	if tokens > 0 && expires > now && l.isIdle(now, h) {
		l.giveBack(now, key, held{seq: seq, from: from, tokens: tokens, expires: expires, since: now, region: true, granted: tokens}, fx)
		l.holdingChanged(h)
		return true
	}
	if tokens > 0 && expires > now {
		// Tokens came: the global owner's last dry hint to the region
		// (until its next grant is due, up to rlead after the ask) is
		// overtaken; the region's nodes are told of the next push instead
		// (regionHint).
		h.emptyUntil = min(h.emptyUntil, now)
		h.leases = append(h.leases, held{seq: seq, from: from, tokens: tokens, expires: expires, since: now, region: true, granted: tokens})
		h.noteIn(now, tokens, l.window)
		l.pushTimer(timer{at: expires, kind: timerLease, key: key, seq: seq, node: from})
		fx.WakeAt(expires)
	}
	l.holdingChanged(h)
	return true
}

// pushDue is, at a regional owner that receives pushes, when the next one
// is expected (the last one's time plus the measured gap), or 0 when no
// push came within two gaps.
func (l *RegionLease) pushDue(now time.Duration, h *holding) time.Duration {
	if h.pushAt == 0 || now >= h.pushAt+2*h.pushGap {
		return 0
	}
	return h.pushAt + h.pushGap
}

// regionHint is, at a regional owner, the end of the dry spell it tells
// its region's nodes of (they refuse on the node until then): the global
// owner's last dry hint to the region, but no later than the next stock
// due (stockDue: the next push expected, or its ask's grant).
// The global owner's hint to a region lasts up to rlead (2*latency_hint)
// after its ask, for the region's asks; passed on to the nodes it kept
// them refusing while pushes landed in the stock, which then went out in
// one burst of period-sized leases to the nodes that came back first
// (ours; docs/EVALUATION.md, "the steady-state swing"); and before the
// pushes began (a region the load just moved to) while its ask's grant
// lay in the stock (docs/EVALUATION.md, "follow-the-sun").
func (l *RegionLease) regionHint(now time.Duration, h *holding) time.Duration {
	if h.emptyUntil > now {
		return min(h.emptyUntil, l.stockDue(now, h))
	}
	return h.emptyUntil
}

// contended reports whether key's bucket at its global owner was dry
// within region_ttl while another region asked for it within the window
// (its pushes share the refill): one region alone is never contended here.
func (l *RegionLease) contended(now time.Duration, key string) bool {
	ps := l.pushes[key]
	if ps == nil || !ps.dry || now >= ps.dryAt+l.rttl {
		return false
	}
	for _, a := range ps.askers { // any one: the order does not matter
		if a.remote && a.at+l.window > now {
			return true
		}
	}
	return false
}
