package regionlease

import (
	"math"
	"slices"
	"time"

	peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/internal/wire"
	"github.com/tokenmesh/tokenmesh/topology"
)

// The granter side: the global owner decides forwards and grants leases
// out of its pool (lease's owner, strategy/lease/owner.go, deciding at
// receipt with no ordering buffer); a regional owner decides forwards and
// grants its nodes' leases out of its stock, and relays to the global
// owner the forwards its stock cannot serve.

// grantRec is one lease this node granted: out of a pool (pool set), or
// out of its stock's lease (parentSeq, parentFrom).
type grantRec struct {
	pool       *pool
	parentSeq  uint64
	parentFrom strategy.NodeID
	tokens     int64
	used       int64 // reported used (RegionLeaseUsed): no longer counted in the pool's leases
	expires    time.Duration
	emptyUntil time.Duration
	released   bool
	// sent and usable are a dated push's sending and usable_at (G's
	// time; dated.go); usable 0: not dated. settled: its tokens have left
	// the level for the leases (settleDated).
	sent, usable time.Duration
	settled      bool
}

type grantExp struct {
	at  time.Duration
	id  grantID
	end bool // false: release the lease; true: forget the record
}

// relay is a forward a regional owner sent on to the global owner.
type relay struct {
	origin   strategy.NodeID
	originID uint64
	key      string
	tokens   int64
	arrival  time.Duration
	to       strategy.NodeID
	next     time.Duration
	deadline time.Duration
}

// maxHint bounds a dry hint a peer may send (a day): beyond it the
// message is refused.
const maxHint = 24 * time.Hour

func (l *RegionLease) sendVerdict(to strategy.NodeID, id uint64, relay, allowed bool, emptyFor uint64, fx *strategy.Effects) {
	fx.Send(to, wire.MustMarshal(&peerv1.RegionLeaseMessage{Body: &peerv1.RegionLeaseMessage_Verdict{Verdict: &peerv1.RegionLeaseVerdict{
		RequestId: id, Allowed: allowed, EmptyForUs: emptyFor, Relay: relay}}}))
}

// onForward decides a forwarded request: from the pool at the key's
// global owner; elsewhere (a regional owner, or a node its sender takes for
// one) from the stock, or refused by the global owner's dry hint, or
// relayed to the global owner.
func (l *RegionLease) onForward(now time.Duration, from strategy.NodeID, f *peerv1.RegionLeaseForward, fx *strategy.Effects) {
	arr := min(time.Duration(f.ArrivalNs), now)
	if arr < now-l.sweepLag {
		return // its forwarder has given up on it
	}
	n := f.ExtraTokens + 1
	fid := fwdID{from, f.RequestId, f.Relay}
	g, live := l.global(f.Key)
	if g == l.self {
		if v, dup := l.gseen.Get(fid); dup {
			if v.decided {
				l.sendVerdict(from, f.RequestId, f.Relay, v.allowed, v.emptyFor, fx)
			}
			return // in the ordering buffer, the verdict to come
		}
		p := l.ownPool(now, f.Key, fx)
		if l.cold(p) {
			l.enqueueForward(now, p, from, f, arr, n, fid, fx)
			return
		}
		l.advanceG(now, f.Key, p)
		v := &verdict{decided: true}
		if topology.Of(from) == l.region {
			v.allowed = l.takeOwn(now, arr, f.Key, p, n) // within its region's budget while contended
		} else {
			v.allowed = l.takeG(now, arr, f.Key, p, n) // another region's relay
		}
		if !v.allowed {
			l.noteDry(now, f.Key, fx)
			if until := l.sh.UntilOne(p, arr); until > arr {
				v.emptyFor = uint64(min(until-arr, l.takeover+l.fillTime, maxHint) / time.Microsecond)
			}
		}
		l.gseen.Add(now, fid, v, fx)
		l.sendVerdict(from, f.RequestId, f.Relay, v.allowed, v.emptyFor, fx)
		return
	}
	if f.Relay {
		// A relay for a key this node does not own globally (views
		// disagree): refused, as the stock is its region's.
		l.sendVerdict(from, f.RequestId, true, false, 0, fx)
		return
	}
	if v, dup := l.rseen.Get(fid); dup {
		if v.decided {
			l.sendVerdict(from, f.RequestId, false, v.allowed, v.emptyFor, fx)
		}
		return // relayed, the verdict to come
	}
	h := l.holding(f.Key)
	if r, ok := h.reports[from]; !ok || r.at+l.window <= now {
		h.count(arr, n, true, l.window)
	}
	l.used(now, f.Key, h, fx)
	defer l.maybeAsk(now, f.Key, h, fx)
	v := l.fromStock(now, f.Key, h, arr, n, live, fx)
	l.rseen.Add(now, fid, v, fx)
	if v.decided {
		l.sendVerdict(from, f.RequestId, false, v.allowed, v.emptyFor, fx)
		return
	}
	l.relaySeq++
	r := &relay{origin: from, originID: f.RequestId, key: f.Key, tokens: n, arrival: arr, to: g, deadline: now + l.timeout}
	putID(l.relays, &l.mem.relays, l.relaySeq, "", r)
	l.sendRelay(now, l.relaySeq, r, fx)
}

// fromStock is a regional owner's verdict on a forward of n tokens that
// arrived at arr: allowed from the stock; refused by the global owner's
// dry hint; refused when cut off from the global owner (conserve) or when
// the region lives on leases (hot), with, for a live region, a dry hint
// until its next stock is due (stockDue: the sender refuses on the node
// until then); else undecided (to relay).
func (l *RegionLease) fromStock(now time.Duration, key string, h *holding, arr time.Duration, n int64, live bool, fx *strategy.Effects) *verdict {
	v := &verdict{}
	switch {
	case l.takeLeased(now, key, h, arr, n, fx):
		v.decided, v.allowed = true, true
	case arr < l.regionHint(now, h):
		v.decided, v.emptyFor = true, uint64((l.regionHint(now, h)-arr)/time.Microsecond)
		h.hintUntil = max(h.hintUntil, l.regionHint(now, h))
	case !live, l.hot(now, h):
		v.decided = true
		if due := l.stockDue(now, h); live && due > arr {
			v.emptyFor = uint64((due - arr) / time.Microsecond)
			h.hintUntil = max(h.hintUntil, due)
		}
	}
	return v
}

func (l *RegionLease) sendRelay(now time.Duration, id uint64, r *relay, fx *strategy.Effects) {
	r.next = min(now+l.retryEvery, r.deadline)
	l.pushTimer(timer{at: r.next, kind: timerRelay, id: id})
	fx.WakeAt(r.next)
	fx.Send(r.to, wire.MustMarshal(&peerv1.RegionLeaseMessage{Body: &peerv1.RegionLeaseMessage_Forward{Forward: &peerv1.RegionLeaseForward{
		RequestId: id, Key: r.key, ExtraTokens: r.tokens - 1, ArrivalNs: int64(r.arrival), Relay: true, OriginRequestId: r.originID}}}))
}

// relayTimer resends a relay, or gives it up at its deadline (its origin
// then decides by on_timeout).
func (l *RegionLease) relayTimer(now time.Duration, t timer, fx *strategy.Effects) {
	r := l.relays[t.id]
	if r == nil || r.next != t.at {
		return
	}
	if now < r.deadline {
		l.sendRelay(now, t.id, r, fx)
		return
	}
	dropID(l.relays, &l.mem.relays, t.id, "")
}

// onRelayVerdict passes the global owner's verdict on to the node the
// forward came from, keeping its dry hint for the region. Errors: a
// verdict from a node the relay did not go to.
func (l *RegionLease) onRelayVerdict(now time.Duration, from strategy.NodeID, v *peerv1.RegionLeaseVerdict, fx *strategy.Effects) error {
	r := l.relays[v.RequestId]
	if r == nil {
		return nil
	}
	if r.to != from {
		return errorf("relayed verdict for %d from %s, but the relay went to %s", v.RequestId, from, r.to)
	}
	dropID(l.relays, &l.mem.relays, v.RequestId, "")
	if !v.Allowed {
		h := l.holding(r.key)
		h.dry, h.dryAt = true, now
		h.emptyUntil = max(h.emptyUntil, r.arrival+time.Duration(v.EmptyForUs)*time.Microsecond)
	}
	if s, ok := l.rseen.Get(fwdID{r.origin, r.originID, false}); ok {
		s.decided, s.allowed, s.emptyFor = true, v.Allowed, v.EmptyForUs
	}
	l.sendVerdict(r.origin, r.originID, false, v.Allowed, v.EmptyForUs, fx)
	return nil
}

// onAsk releases the spent leases an ask reports, and answers it: out of
// the pool at the key's global owner (a lease of ttl to a node of its own
// region, of region_ttl to another region's owner), out of the stock
// elsewhere; a duplicate gets the same grant again.
func (l *RegionLease) onAsk(now time.Duration, from strategy.NodeID, a *peerv1.RegionLeaseAsk, fx *strategy.Effects) {
	for _, seq := range a.Spent {
		l.release(now, grantID{from, a.Key, seq}, 0, fx)
	}
	id := grantID{from, a.Key, a.Seq}
	if g := l.grants[id]; g != nil {
		l.sendGrant(id, g, fx)
		return
	}
	at := min(time.Duration(a.AskedAtNs), now)
	ttl := l.ttl
	if topology.Of(from) != l.region {
		ttl = l.rttl
	}
	if at+ttl <= now || at < now-l.sweepLag {
		return // too old to be of use
	}
	var g *grantRec
	if gl, _ := l.global(a.Key); gl == l.self {
		g = l.grantPool(now, at, from, a, fx)
	} else {
		g = l.grantStock(now, at, from, a, fx)
	}
	putID(l.grants, &l.mem.grants, id, id.key, g)
	l.gexp.Push(grantExp{at: g.expires, id: id})
	l.gexp.Push(grantExp{at: max(g.expires, now) + l.timeout + l.maxSkew, id: id, end: true})
	fx.WakeAt(max(g.expires, now))
	l.sendGrant(id, g, fx)
}

// grantPool lends out of the pool, when the key's replicas hold a fence
// that covers the lease (fenced); else it grants 0 tokens with no dry
// hint, and the holder asks again a little later. It lends what the pool
// holds now, the refill since the ask was sent included: the holder uses
// a token only for a request that arrives after it received the lease
// (takeLeased), so every token lent was in the level before any request
// that takes it (ours; a grant that lent only what the pool held since
// the ask, as lease's ordered grants do, left the refill of the ask's WAN
// crossing, about 70 tokens per key at 1000/s, in the global level).
// When the pool is dry, the hint (a holder asks again lead before it
// ends) is at most period for a node of this region and, for a region,
// at most rlead: the regional owner asks again as the grant reaches it,
// once per WAN round trip, instead of leaving the refill of
// region_period - rlead in the global owner's bucket.
//
// Two bounds on the tokens lent (ours; docs/EVALUATION.md, "the first
// second and the swing"), both only with pushes on (push_every > 0: they
// read the key's push state): a remote region's first ask of a key (no
// ask of its recorded here) is lent at least the region's share of the
// burst by live nodes (burstShare), as much as the level holds: its first
// ask is sized on the few requests seen so far, and the region otherwise
// relayed and then refused through the key's first second while the
// bucket, at its capacity, lost its refill; and while the key is
// contended (dry within region_ttl, another region asking: contended), a
// node of this node's own region is lent at most ceil(d*hot_period) of
// its ask (hotLease), so that its region's nodes do not park period's
// worth of the refill each while the other regions wait for pushes.
// Neither is a dry hint. A third, while the key is contended: a remote
// region's later asks get at most its share of the level (askShare),
// with the dry hint (docs/EVALUATION.md, "the steady-state swing"). And
// while it is not, a node of this node's own region gets lease's share of
// a contended pool, with its turn as the dry hint, or its demand until the
// bucket runs dry (ownGrant, share.go).
func (l *RegionLease) grantPool(now, at time.Duration, from strategy.NodeID, a *peerv1.RegionLeaseAsk, fx *strategy.Effects) *grantRec {
	ttl, period, hint := l.ttl, l.period, l.period
	ownRegion := topology.Of(from) == l.region
	if !ownRegion {
		ttl, period, hint = l.rttl, l.rperiod, l.rlead
	}
	p := l.ownPool(now, a.Key, fx)
	l.advanceG(now, a.Key, p)
	first := l.firstAsk(a.Key, from)
	l.noteAsk(now, from, a)
	whole := l.wholeG(now, a.Key, p)
	want, turn, shared := l.grantWant(now, p, from, a, first, whole)
	n := min(want, whole)
	if n > 0 && !l.fenced(now, a.Key, at+ttl, fx) {
		return &grantRec{pool: p, expires: at + ttl}
	}
	g := &grantRec{pool: p, tokens: n, expires: at + ttl}
	if turn > 0 {
		// A share (ownGrant), or the region's budget (split.go): the
		// node refuses once it is used until its next turn.
		g.emptyUntil = now + turn
	} else if n < min(a.Tokens, want) && n == whole || shared {
		// Dry: the bucket's refill until the hint ends is for the other
		// holders' next asks (lease's dry hint); an ask cut to its share
		// (askShare) is told the same, so that its region stays hot
		// (refuses rather than relays) and asks again as the grant
		// reaches it.
		g.emptyUntil = at + min(period, l.sh.FillTime(p), hint)
		l.noteDry(now, a.Key, fx)
	}
	l.sh.Lend(p, n)
	if ownRegion {
		l.spendOwn(now, a.Key, n)
	} else if n > 0 && l.pushEvery > 0 {
		ps := l.pushOf(a.Key)
		ps.out[from] = append(ps.out[from], a.Seq)
	}
	return g
}

// grantWant is the most grantPool lends from's ask a out of p, before the
// level's whole tokens (whole) bound it: the ask, raised to the region's
// share of the burst on a remote region's first ask (burstShare, with
// pushes on); for a node of this region, cut to hotLease while the key is
// contended, else sized by ownGrant (its share, with turn its dry hint
// from now, or its demand until the bucket runs dry); and cut to the
// region's share of the level (askShare) on a remote region's later asks
// while the key is contended, shared then reporting it (the grant carries
// the dry hint).
func (l *RegionLease) grantWant(now time.Duration, p *pool, from strategy.NodeID, a *peerv1.RegionLeaseAsk, first bool, whole int64) (want int64, turn time.Duration, shared bool) {
	want = a.Tokens
	switch {
	case topology.Of(from) == l.region:
		if l.contended(now, a.Key) {
			want = min(want, l.hotLease(a.DemandMtps))
			if b := l.ownAllowance(now, a.Key); b >= 0 && b < want {
				return b, l.pushEvery, false // the region's budget: back at the next push
			}
			return want, 0, false
		}
		want, turn = l.ownGrant(now, p, a, whole)
		return want, turn, false
	case first:
		if l.pushEvery > 0 {
			want = max(want, l.burstShare(from))
		}
	default:
		if share, ok := l.askShare(now, a.Key, from, whole); ok && share < want {
			return share, 0, true
		}
	}
	return want, 0, false
}

// grantStock lends a node of the region tokens of one stock lease (the
// one that ends last among those that cover the ask, else the one with
// the most tokens: betterParent), for ttl from the ask but never beyond
// that lease's end here: the node has stopped using it by the time this
// node returns the stock lease's unused tokens to the global owner. A
// grant short of the ask carries a dry hint when the stock is empty (the
// global owner's, or, while the region is hot, until the next stock grant
// is due: stockDue), and when it is the node's share of a contended stock
// (stockGrant, share.go: until its next turn).
func (l *RegionLease) grantStock(now, at time.Duration, from strategy.NodeID, a *peerv1.RegionLeaseAsk, fx *strategy.Effects) *grantRec {
	h := l.holding(a.Key)
	h.reports[from] = report{mtps: a.DemandMtps, at: now}
	l.holdingChanged(h)
	l.used(now, a.Key, h, fx)
	defer l.maybeAsk(now, a.Key, h, fx)
	want, turn := l.stockGrant(now, h, a)
	var best *held
	for i := range h.leases {
		ls := &h.leases[i]
		if ls.tokens > 0 && ls.expires-l.lead > now && (best == nil || betterParent(ls, best, want)) {
			best = ls
		}
	}
	g := &grantRec{expires: at + l.ttl}
	if best != nil {
		g.parentSeq, g.parentFrom = best.seq, best.from
		g.expires = min(g.expires, best.expires)
		g.tokens = min(want, best.tokens)
		best.tokens -= g.tokens
		best.lent += g.tokens
		best.subs++
	}
	if turn > 0 && g.tokens > 0 {
		// A share (stockGrant): the node refuses once it is used until
		// its next turn.
		g.emptyUntil = now + turn
		h.hintUntil = max(h.hintUntil, g.emptyUntil)
	} else if g.tokens < a.Tokens && h.available(now+l.lead) == 0 {
		if u := l.regionHint(now, h); u > now {
			g.emptyUntil = u
		}
		if _, live := l.global(a.Key); live && l.hot(now, h) {
			g.emptyUntil = max(g.emptyUntil, l.stockDue(now, h))
		}
		h.hintUntil = max(h.hintUntil, g.emptyUntil)
	}
	return g
}

// betterParent reports whether stock lease a serves an ask of n tokens
// better than b: one that covers the ask over one that does not; among
// those that do, the one that ends last; among those that do not, the one
// with more tokens.
func betterParent(a, b *held, n int64) bool {
	ac, bc := a.tokens >= n, b.tokens >= n
	if ac != bc {
		return ac
	}
	if ac {
		return a.expires > b.expires
	}
	return a.tokens > b.tokens
}

func (l *RegionLease) sendGrant(id grantID, g *grantRec, fx *strategy.Effects) {
	fx.Send(id.node, wire.MustMarshal(&peerv1.RegionLeaseMessage{Body: &peerv1.RegionLeaseMessage_Grant{Grant: &peerv1.RegionLeaseGrant{
		Key: id.key, Seq: id.seq, Tokens: g.tokens, ExpiresNs: int64(g.expires), EmptyUntilNs: int64(g.emptyUntil)}}}))
}

// onReturn credits a lease's unused tokens once, while the lease is still
// counted (before its end here), and acknowledges a return of unused
// tokens (a spent lease, 0 unused, is reported once, unacknowledged).
func (l *RegionLease) onReturn(now time.Duration, from strategy.NodeID, r *peerv1.RegionLeaseReturn, fx *strategy.Effects) {
	l.release(now, grantID{from, r.Key, r.Seq}, r.Unused, fx)
	if r.Unused > 0 {
		fx.Send(from, wire.MustMarshal(&peerv1.RegionLeaseMessage{Body: &peerv1.RegionLeaseMessage_ReturnAck{ReturnAck: &peerv1.RegionLeaseReturnAck{Key: r.Key, Seq: r.Seq}}}))
	}
}

// release ends the lease id (granted here) with unused of its tokens back:
// into its pool (capped at the capacity), or into the stock lease it was
// lent from if that has not ended. Once per lease; a return of more than
// was granted (a previous incarnation's lease) credits nothing.
func (l *RegionLease) release(now time.Duration, id grantID, unused int64, fx *strategy.Effects) {
	g := l.grants[id]
	if g == nil || g.released {
		return
	}
	if unused > g.tokens {
		unused = 0
	}
	g.released = true
	if g.pool != nil {
		l.releasePool(now, id, g, unused)
		return
	}
	h := l.keys[id.key]
	if h == nil || g.tokens == 0 {
		return
	}
	for i := range h.leases {
		ls := &h.leases[i]
		if ls.seq == g.parentSeq && ls.from == g.parentFrom {
			ls.lent -= g.tokens
			ls.subs--
			if ls.expires > now {
				ls.tokens += unused
			} else {
				unused = 0
			}
			ls.used += g.tokens - unused
			l.noteUsed(id.key, ls, fx)
			if ls.lent == 0 && ls.subs == 0 && !ls.spentSent && l.isIdle(now, h) {
				// The key went idle here while this lease was lent out
				// (idleTimer kept it): give it back now.
				l.giveBack(now, id.key, *ls, fx)
				h.leases = slices.Delete(h.leases, i, i+1)
			}
			return
		}
	}
}

// releasePool ends a lease granted (or pushed) out of a pool: its tokens
// not reported used leave the leased count, unused of them back into the
// level; a holder that gave tokens back gets no more pushes until it asks
// (notePushIdle).
func (l *RegionLease) releasePool(now time.Duration, id grantID, g *grantRec, unused int64) {
	if unused > 0 {
		l.notePushIdle(id)
	}
	if l.unsettled(now, id.key, g) {
		l.forgetDated(id) // its tokens never left the level
		return
	}
	left := g.tokens - g.used
	l.sh.Advance(g.pool, now)
	l.sh.Release(g.pool, left, min(unused, left))
}

// onUsed takes a holder's report of the tokens it has used of a lease
// granted out of a pool: their room in the bucket comes back now (they
// will not be returned). Cumulative: only an increase counts; capped at
// the lease's tokens.
func (l *RegionLease) onUsed(now time.Duration, from strategy.NodeID, u *peerv1.RegionLeaseUsed) {
	g := l.grants[grantID{from, u.Key, u.Seq}]
	if g == nil || g.released || g.pool == nil {
		return
	}
	if l.unsettled(now, u.Key, g) {
		return // its tokens are not in the leases yet
	}
	if used := min(u.Used, g.tokens); used > g.used {
		l.sh.Advance(g.pool, now)
		g.pool.Leased -= used - g.used
		g.used = used
	}
}

// expireGrants releases the leases whose end has come (none unused) and
// forgets the records past their end.
func (l *RegionLease) expireGrants(now time.Duration, fx *strategy.Effects) {
	for l.gexp.Len() > 0 && l.gexp.Peek().at <= now {
		e := l.gexp.Pop()
		if e.end {
			if g := l.grants[e.id]; g != nil && g.expires+l.timeout+l.maxSkew <= e.at {
				dropID(l.grants, &l.mem.grants, e.id, e.id.key)
			}
			continue
		}
		l.release(e.at, e.id, 0, fx)
	}
	if l.gexp.Len() > 0 {
		fx.WakeAt(l.gexp.Peek().at)
	}
}

func grantExpLess(a, b grantExp) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	if a.end != b.end {
		return !a.end
	}
	if a.id.key != b.id.key {
		return a.id.key < b.id.key
	}
	if a.id.node != b.id.node {
		return a.id.node < b.id.node
	}
	return a.id.seq < b.id.seq
}

// firstAsk reports whether key's global owner has no record of an ask
// from holder (its first, or the first since the key's push state was
// forgotten).
func (l *RegionLease) firstAsk(key string, from strategy.NodeID) bool {
	ps := l.pushes[key]
	if ps == nil {
		return true
	}
	_, ok := ps.askers[from]
	return !ok
}

// burstShare is the burst times the share of the global owner's candidate
// members that are in from's region (b*10/30 for one region of 10 nodes
// in 30), in whole tokens.
func (l *RegionLease) burstShare(from strategy.NodeID) int64 {
	reg := topology.Of(from)
	in, all := 0, 0
	for _, m := range l.candidates() {
		all++
		if topology.Of(m) == reg {
			in++
		}
	}
	if all == 0 {
		return 0
	}
	return l.sh.Burst * int64(in) / int64(all)
}

// hotLease is the most tokens the global owner lends a node of its own
// region while the key is contended (hot_period): ceil(d*hot_period) for
// a node that reported d tokens per second (mtps: milli-tokens per
// second), at least 1; the burst when hot_period is 0.
func (l *RegionLease) hotLease(mtps uint64) int64 {
	if l.hotPeriod <= 0 {
		return l.sh.Burst
	}
	return max(1, int64(math.Ceil(float64(mtps)/1000*l.hotPeriod.Seconds())))
}
