package lease

import (
	"time"

	peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/internal/leasepool"
	"github.com/tokenmesh/tokenmesh/strategy/internal/leaseshare"
	"github.com/tokenmesh/tokenmesh/strategy/internal/wire"
)

// The owner side (see "# Protocol" in the package doc): the key's owner
// holds its pool, orders requests, asks, releases and refunds in its
// ordering buffer, decides them in (arrival, ID) order, grants leases out
// of the pool and releases them at their expiry or return.

type grantRec struct {
	pool       *pool // the bucket it was lent from (a bucket dropped and created again is another one)
	tokens     int64 // granted
	used       int64 // of tokens, reported used before the lease ended and released from the pool (partly used leases)
	expires    time.Duration
	emptyUntil time.Duration
	released   bool   // expired or returned: no longer counted in the pool's leases
	returned   bool   // a return was credited
	consGen    uint64 // under conserve, the view of conserve buckets it was taken from too (0: none)
}

type grantExp struct {
	at  time.Duration
	id  grantID
	end bool // false: release the lease; true: forget the record
}

// queued is a request (or an ask) waiting at its owner. origin is "" for a
// request that reached the owner itself.
type queued struct {
	arrival time.Duration
	id      uint64 // request ID, or ask seq
	ask     bool
	spent   bool // a lease (id = its seq) to release, crediting tokens unused ones (a spent lease or a return)
	used    bool // with spent: a partly used lease, tokens of which are used so far (its room comes back, the rest stays lent)
	key     string
	tokens  int64
	origin  strategy.NodeID
	sent    time.Duration // an ask's sending time (min(asked_at, receipt)): its lease's validity counts from it
	maxWait time.Duration // waiting mode (RequestWait); 0: drop mode
	refund  bool          // tokens given back (Refund): credited, nothing decided
	charge  bool          // a cost already incurred (strategy.Request.Charge)
}

type forwardID struct {
	origin strategy.NodeID
	id     uint64
}

type verdict struct {
	decided, allowed bool
	emptyFor         uint64        // µs
	delay            time.Duration // waiting mode: the wait after arrival
}

// pool returns key's pool at this node as owner, creating it: full, or,
// when the key moved to this node (restart, membership change, a peer
// that sends it a key it does not own in its own view: the move is under
// way, or a warm-up query it answered), empty and refilling from the move
// + takeover. (A moved key is warmed up first where it can be: warm,
// warmup.go, which makes the pool.)
func (l *Lease) pool(key string, now time.Duration) *pool {
	if p := l.pools[key]; p != nil {
		return p
	}
	p := &pool{Pool: leasepool.Pool{Level: l.sh.burst * l.sh.per}}
	movedAt, moved, _ := l.moveOf(key, now)
	if moved {
		p = l.conservativeStart(movedAt)
	}
	if r := l.records[key]; r != nil && l.owner(key) == l.self {
		// Replicated state (replica.go), at the key's owner in this view
		// only (a pool made for a peer whose view lags stays
		// conservative: the owner in this view may be deciding from the
		// same state): continue from it when its owner handed the key
		// over or is gone, or when the key did not move (it is then no
		// fuller than a full start); otherwise merge it into the
		// conservative start.
		if !moved || (l.trusted(r) && !l.handedOff(key, r)) {
			p = r.asPool()
		} else {
			q := r.asPool()
			t := max(p.Last, q.Last)
			l.sh.advance(q, t)
			l.mergeInto(p, q)
		}
		l.dropRecord(key)
	}
	l.setPool(key, p)
	return p
}

// decideDue decides, in (arrival, ID) order, every queued request and ask
// whose hold has passed.
func (l *Lease) decideDue(now time.Duration, fx *strategy.Effects) {
	l.healDue(now, fx)
	for l.queue.Len() > 0 && l.queue.Peek().arrival+l.hold <= now {
		q := l.queue.Pop()
		if q.spent {
			l.release(now, q, fx)
			continue
		}
		if q.refund {
			l.credit(now, q, fx)
			continue
		}
		if l.warm(now, q, fx) {
			continue // waits for its key's warm-up (warmup.go)
		}
		p := l.pool(q.key, now)
		l.sh.advance(p, q.arrival)
		// Only what took tokens is shipped to the replicas (markDirty): a
		// refused request or an empty grant leaves the pool as its last
		// state refilled, which a replica computes itself.
		if q.ask {
			if l.grant(p, q, fx) > 0 {
				l.markDirty(now, q.key, fx)
			}
			continue
		}
		l.decide(now, p, q, fx)
	}
}

// release ends the lease a spent report or a return q names (q.tokens
// of what is left of it unused), or, for a report of a partly used lease
// (q.used), gives the room of the tokens it used so far (q.tokens, counted
// from the grant) back to the pool and keeps the rest lent. Each token of
// a lease is released once: a resent report changes nothing.
func (l *Lease) release(now time.Duration, q queued, fx *strategy.Effects) {
	g := l.grants[grantID{q.origin, q.key, q.id}]
	if g == nil || g.released {
		return
	}
	l.sh.advance(g.pool, q.arrival)
	var n, unused int64
	if q.used {
		n = min(q.tokens, g.tokens) - g.used
		if n <= 0 {
			return
		}
		g.used += n
		g.released = g.used == g.tokens
	} else {
		n = g.tokens - g.used
		unused = min(q.tokens, n)
		g.released, g.returned = true, true
	}
	l.releaseLent(q.key, q.origin, g, q.arrival, n, unused)
	l.markDirty(now, q.key, fx)
}

// releaseLent gives n tokens of lease g (of key, to holder) back to its
// pool, advanced to at, unused of them credited: in the pool
// (leasepool's Release), in the holder's askers record (lentTo) and in
// the key's conserve pool.
func (l *Lease) releaseLent(key string, holder strategy.NodeID, g *grantRec, at time.Duration, n, unused int64) {
	l.sh.release(g.pool, n, unused)
	lentTo(g.pool, holder, -n)
	l.conserveRelease(key, g, at, n, unused)
}

// decide takes (or reserves, or charges) request q's tokens out of p,
// advanced to q's arrival, and answers it: a decision of this node's own,
// or a verdict to its forwarder, with the owner's dry hint on a refusal.
func (l *Lease) decide(now time.Duration, p *pool, q queued, fx *strategy.Effects) {
	var allowed bool
	var delay time.Duration
	switch {
	case l.conserveBlocked(q):
		// under conserve: not the owner in this view, or a key taken over
		// before conserve_delay (conserve.go)
	case l.cons.buckets != nil:
		allowed = l.decideConserved(p, q)
	case l.od.On && q.charge:
		allowed = l.sh.charge(p, q.arrival, q.tokens, l.debtTicks)
	case q.maxWait > 0:
		delay, allowed = l.sh.reserve(p, q.arrival, q.tokens, q.maxWait)
	default:
		allowed = l.sh.take(p, q.arrival, q.tokens)
	}
	if allowed || (l.od.On && q.charge) { // under overdraft a refused charge took its tokens too
		l.markDirty(now, q.key, fx)
	}
	if q.origin == "" {
		fx.DecideAfter(q.id, allowed, delay)
		return
	}
	var emptyFor uint64 // µs after arrival
	if !allowed {
		if until := l.sh.untilOne(p, q.arrival); until > q.arrival {
			// Waiting-mode reservations can hold the level below 0 for
			// long: the hint is capped at what a holder accepts (a
			// shorter hint only forwards more).
			wait := min(until-q.arrival, l.takeover+l.oneToken()+q.maxWait)
			emptyFor = uint64(wait / time.Microsecond)
		}
	}
	if v, _ := l.seen.Get(forwardID{q.origin, q.id}); v != nil {
		v.decided, v.allowed, v.emptyFor, v.delay = true, allowed, emptyFor, delay
	}
	sendVerdict(q.origin, q.id, allowed, emptyFor, delay, fx)
}

// grant answers an ask out of p (advanced to the ask's time) and returns
// the tokens it took from p (0 for a duplicate).
func (l *Lease) grant(p *pool, q queued, fx *strategy.Effects) int64 {
	id := grantID{q.origin, q.key, q.id}
	if g := l.grants[id]; g != nil { // answered already (a duplicate that queued)
		l.sendGrant(id, g, fx)
		return 0
	}
	whole := l.sh.whole(p, q.arrival)
	switch {
	case l.conserveBlocked(q):
		whole = 0 // under conserve (conserve.go): nothing to grant here
	case l.cons.buckets != nil:
		whole = min(whole, l.conserveWhole(p, q))
	}
	g := &grantRec{pool: p, expires: q.sent + l.ttl}
	if n, turn, ok := l.share(p, q, whole); ok {
		// Contended: the holder's fair share, and its next turn.
		g.tokens, g.emptyUntil = n, q.arrival+turn
	} else {
		g.tokens = min(q.tokens, whole)
		if g.tokens < q.tokens && g.tokens == whole {
			// Dry: the bucket holds no more. Its refill until the hint
			// ends is for the other holders' next asks and forwards; the
			// hint ends before the bucket could fill up again (else its
			// refill would be lost while the holders refuse).
			g.emptyUntil = q.arrival + min(l.period, l.sh.fillTime(p))
		} else {
			g.tokens = l.untilDry(p, q, g.tokens, whole)
		}
	}
	l.sh.lend(p, g.tokens)
	lentTo(p, q.origin, g.tokens)
	if l.cons.buckets != nil && g.tokens > 0 {
		l.conserveLend(p, q, g.tokens)
		g.consGen = l.cons.gen
	}
	if g.tokens > 0 {
		p.LentUntil = max(p.LentUntil, g.expires)
	}
	l.grants[id] = g
	l.mem.grants.Add(id.key)
	l.gexpiry.Push(grantExp{at: g.expires, id: id})
	l.gexpiry.Push(grantExp{at: g.expires + l.timeout + l.maxSkew, id: id, end: true})
	fx.WakeAt(g.expires)
	l.sendGrant(id, g, fx)
	return g.tokens
}

// share is the fair share of a contended pool (see "Contended keys" in the
// package doc; the arithmetic is leaseshare.Share, which regionlease's
// granters use too): it records ask q as its holder's latest and, when the
// tokens the holders asked for within ttl, scaled to a quantum, exceed
// what p can give over a quantum (whole tokens now plus the refill),
// returns the tokens to grant to q's holder (its share of the supply in
// proportion to its ask, for the time that share takes to refill: at
// least 1 token, at most what it asked for and whole) and that time plus
// lead, its dry hint. ok is false when p is not contended, when quantum is
// 0 or the refill over a quantum is below min_lease, or when the turn
// would end no earlier than the dry hint of an empty bucket (min(period,
// fill time)): then the grant is as without sharing.
func (l *Lease) share(p *pool, q queued, whole int64) (n int64, turn time.Duration, ok bool) {
	return l.shareOf(p, q, whole, true)
}

// shareOf is share; record false leaves p.askers as they are.
func (l *Lease) shareOf(p *pool, q queued, whole int64, record bool) (n int64, turn time.Duration, ok bool) {
	qs, ps := l.quantum.Seconds(), l.period.Seconds()
	if l.quantum <= 0 || l.rate.PerSec()*qs < float64(l.minLease) {
		// No sharing, or a key whose refill over a quantum is less than a
		// lease worth asking for: its supply is its burst, granted first
		// come, first served as before.
		return 0, 0, false
	}
	if record {
		if p.askers == nil {
			p.askers = map[strategy.NodeID]askRec{}
		}
		a := p.askers[q.origin]
		a.tokens, a.at = q.tokens, q.arrival
		p.askers[q.origin] = a
		for id, a := range p.askers {
			if a.at+l.ttl <= q.arrival {
				delete(p.askers, id) // no ask within ttl: its demand is gone
			}
		}
		l.askersChanged(p)
	}
	demand := float64(l.askedOf(p, q)) * qs / ps // what the holders want over a quantum
	supply := float64(whole) + l.rate.PerSec()*qs
	return leaseshare.Share(q.tokens, demand, supply, whole, l.quantum, l.period, l.lead, min(l.period, l.sh.fillTime(p)))
}

// untilDry caps n, the tokens an uncontended ask q would get out of p
// (whole: p's whole tokens at the ask's time), at its holder's demand
// until p runs dry ("Contended keys" in the package doc; ours). When the
// holders' latest asks within ttl (p.askers, recorded by share) take more
// than p refills, its whole tokens last whole / (asked/period - r)
// seconds; a lease of a period's demand granted then outlasts the bucket
// and sits in its holder's hands while the holders that ask after the
// bucket ran dry get shares or dry hints: the float when central's burst
// runs out. Such a lease is cut to that time's share of the ask, less
// what the holder may still hold of its earlier leases (askRec.out: lent,
// not released nor reported used), at least 1 token. Keys that are never
// shared (share's conditions: quantum 0, a refill over a quantum below
// min_lease) have no askers and keep n. The arithmetic is
// leaseshare.UntilDry.
func (l *Lease) untilDry(p *pool, q queued, n, whole int64) int64 {
	if p.askers == nil {
		return n
	}
	drain := float64(l.askedOf(p, q))/l.period.Seconds() - l.rate.PerSec() // tokens/s
	if until, ok := leaseshare.UntilDry(q.tokens, drain, whole, l.period); ok {
		return min(n, max(until-p.askers[q.origin].out, 1))
	}
	return n
}

// askedOf is the tokens p's holders ask for, a period's worth each: ask
// q's and the latest ask within ttl of every other holder.
func (l *Lease) askedOf(p *pool, q queued) int64 {
	asked := q.tokens
	for id, a := range p.askers {
		if id != q.origin && a.at+l.ttl > q.arrival {
			asked += a.tokens
		}
	}
	return asked
}

// lentTo counts delta tokens more (or, negative, fewer) in node's leases of
// p in its askers' record (askRec.out), when p records node's asks; a
// record dropped (no ask within ttl: its leases have ended) is not made
// again.
func lentTo(p *pool, node strategy.NodeID, delta int64) {
	if a, ok := p.askers[node]; ok {
		a.out = max(a.out+delta, 0)
		p.askers[node] = a
	}
}

func (l *Lease) sendGrant(id grantID, g *grantRec, fx *strategy.Effects) {
	fx.Send(id.node, wire.MustMarshal(&peerv1.LeaseMessage{Body: &peerv1.LeaseMessage_Grant{Grant: &peerv1.LeaseGrant{
		Key: id.key, Seq: id.seq, Tokens: g.tokens, ExpiresNs: int64(g.expires), EmptyUntilNs: int64(g.emptyUntil)}}}))
}

func sendVerdict(to strategy.NodeID, id uint64, allowed bool, emptyForUs uint64, delay time.Duration, fx *strategy.Effects) {
	fx.Send(to, wire.MustMarshal(&peerv1.LeaseMessage{Body: &peerv1.LeaseMessage_Verdict{Verdict: &peerv1.LeaseVerdict{
		RequestId: id, Allowed: allowed, EmptyForUs: emptyForUs, DelayNs: int64(delay)}}}))
}

// onForward queues a forwarded request (validated: checkForward) in the
// ordering buffer, once per (sender, request ID); a duplicate of one
// decided already gets its verdict again.
func (l *Lease) onForward(now time.Duration, from strategy.NodeID, f *peerv1.LeaseForward, fx *strategy.Effects) {
	if time.Duration(f.ArrivalNs) < now-l.sweepLag {
		return // the forwarder has given up on it; its key's bucket may be gone
	}
	fid := forwardID{from, f.RequestId}
	if v, dup := l.seen.Get(fid); dup {
		if v.decided {
			sendVerdict(from, f.RequestId, v.allowed, v.emptyFor, v.delay, fx)
		}
		return
	}
	l.seen.Add(now, fid, &verdict{}, fx)
	arr := min(time.Duration(f.ArrivalNs), now)
	l.queue.Push(queued{arrival: arr, id: f.RequestId, key: f.Key, tokens: f.ExtraTokens + 1, origin: from, maxWait: min(time.Duration(f.MaxWaitNs), l.maxWait), charge: f.PostHoc})
	fx.WakeAt(max(arr+l.hold, now))
}

// onAsk (validated: checkAsk) releases the spent and partly used leases
// the ask reports (queueReports) and queues the ask in the ordering
// buffer, or sends its grant again.
func (l *Lease) onAsk(now time.Duration, from strategy.NodeID, a *peerv1.LeaseAsk, fx *strategy.Effects) {
	l.queueReports(now, from, a, fx)
	id := grantID{from, a.Key, a.Seq}
	if g := l.grants[id]; g != nil {
		l.sendGrant(id, g, fx) // the grant was lost: the same again
		return
	}
	at := min(time.Duration(a.AskedAtNs), now)
	if at+l.ttl <= now || at < now-l.sweepLag {
		return // too old to be of use: the holder has given up
	}
	for _, q := range l.queue.Items() {
		if q.ask && q.origin == from && q.id == a.Seq && q.key == a.Key {
			return // queued already
		}
	}
	q := queued{arrival: at, sent: at, id: a.Seq, ask: true, key: a.Key, tokens: a.Tokens, origin: from}
	if l.answerAtReceipt(now, q, fx) {
		return
	}
	l.queue.Push(q)
	fx.WakeAt(max(at+l.hold, now))
}

// queueReports queues, at now, the release of the spent leases ask a
// reports and of the used tokens of its partly used ones (ours; "Partly
// used leases" in the package doc). They are released in arrival order:
// a request decided later with an earlier arrival must not see their room
// (the holder may still have held tokens then). Idempotent: each token of
// a lease is released once (release).
func (l *Lease) queueReports(now time.Duration, from strategy.NodeID, a *peerv1.LeaseAsk, fx *strategy.Effects) {
	for _, seq := range a.Spent {
		if g := l.grants[grantID{from, a.Key, seq}]; g != nil && !g.released {
			l.queue.Push(queued{arrival: now, id: seq, spent: true, key: a.Key, origin: from})
			fx.WakeAt(now + l.hold)
		}
	}
	for _, u := range a.Used {
		if g := l.grants[grantID{from, a.Key, u.Seq}]; g != nil && !g.released && u.Tokens > g.used {
			l.queue.Push(queued{arrival: now, id: u.Seq, spent: true, used: true, tokens: u.Tokens, key: a.Key, origin: from})
			fx.WakeAt(now + l.hold)
		}
	}
}

// answerAtReceipt answers ask q at once, at its receipt now, out of the
// bucket as it is now, when it gets a share of a contended pool (its
// holder's share does not wait for the ordering buffer, whose refill
// would sit in the level meanwhile), and reports whether it did; the
// lease is valid until asked_at + ttl as any other, its dry hint counts
// from now. A key with no pool yet, or warming up, waits in the buffer as
// before.
func (l *Lease) answerAtReceipt(now time.Duration, q queued, fx *strategy.Effects) bool {
	p := l.pools[q.key]
	if p == nil || l.fetching[q.key] != nil || !l.contendedAt(p, q, now) {
		return false
	}
	q.arrival = now
	l.sh.advance(p, now)
	if l.grant(p, q, fx) > 0 {
		l.markDirty(now, q.key, fx)
	}
	return true
}

// contendedAt reports whether ask q, answered at now, would get a share of
// a contended pool (share), without changing p.
func (l *Lease) contendedAt(p *pool, q queued, now time.Duration) bool {
	cp := *p
	l.sh.advance(&cp, now)
	q.arrival = now
	_, _, ok := l.shareOf(&cp, q, l.sh.whole(&cp, now), false)
	return ok
}

// onReturn (validated: checkReturn) queues the credit of a lease's unused
// tokens while the lease is still counted, and acknowledges a return of
// unused tokens.
func (l *Lease) onReturn(now time.Duration, from strategy.NodeID, r *peerv1.LeaseReturn, fx *strategy.Effects) {
	id := grantID{from, r.Key, r.Seq}
	g := l.grants[id]
	if g != nil && r.Unused > g.tokens {
		// More than this node granted for that seq: a lease of this
		// node's previous incarnation (a restarted owner may have
		// answered a late copy of the same ask, with fewer tokens).
		// An honest peer does this: not an error; not credited (the
		// previous incarnation's tokens are not in this bucket), but
		// acknowledged below so that the holder stops resending.
		g = nil
	}
	// Credited only while the lease is still counted: once released by
	// expiry, the bucket may have refilled the lease's room, and a
	// credit would make tokens.
	if g != nil && !g.returned && !g.released {
		// Credited in arrival order at now, after the bucket has
		// refilled up to now with the lease still counted: its room
		// must not refill backwards.
		l.queue.Push(queued{arrival: now, id: r.Seq, spent: true, tokens: r.Unused, key: r.Key, origin: from})
		fx.WakeAt(now + l.hold)
	}
	if r.Unused > 0 { // a spent lease (0 unused) is reported once, unacknowledged
		fx.Send(from, wire.MustMarshal(&peerv1.LeaseMessage{Body: &peerv1.LeaseMessage_ReturnAck{ReturnAck: &peerv1.LeaseReturnAck{Key: r.Key, Seq: r.Seq}}}))
	}
}

// expireGrants releases, at the owner, the leases whose expiry has come
// (none unused), and forgets the records of those past their end.
func (l *Lease) expireGrants(now time.Duration, fx *strategy.Effects) {
	for l.gexpiry.Len() > 0 && l.gexpiry.Peek().at <= now {
		e := l.gexpiry.Pop()
		g := l.grants[e.id]
		if g == nil {
			continue
		}
		if e.end {
			delete(l.grants, e.id)
			l.mem.grants.Remove(e.id.key)
			continue
		}
		if !g.released {
			g.released = true
			l.sh.advance(g.pool, e.at)
			l.releaseLent(e.id.key, e.id.node, g, e.at, g.tokens-g.used, 0)
			if g.pool.Leased > 0 || g.pool.Inherited > 0 || g.expires < g.pool.LentUntil {
				// A replica's state counts the lent tokens until the
				// latest expiry: only the release of the last one (none
				// unused) is what it computes itself.
				l.markDirty(now, e.id.key, fx)
			}
		}
	}
	if l.gexpiry.Len() > 0 {
		fx.WakeAt(l.gexpiry.Peek().at)
	}
}

func queuedLess(a, b queued) bool {
	if a.arrival != b.arrival {
		return a.arrival < b.arrival
	}
	if a.spent != b.spent {
		return !a.spent // releases last at their instant
	}
	if a.used != b.used {
		return a.used // a lease's used part before its end
	}
	if a.refund != b.refund {
		return !a.refund // and refunds after everything else
	}
	if a.ask != b.ask {
		return !a.ask // requests before asks at the same instant
	}
	if a.id != b.id {
		return a.id < b.id
	}
	if a.origin != b.origin {
		return a.origin < b.origin
	}
	return a.key < b.key
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
