package regionlease

import (
	"slices"
	"time"
	"unsafe"

	peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"
	"github.com/tokenmesh/tokenmesh/rendezvous"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/internal/memsize"
	"github.com/tokenmesh/tokenmesh/strategy/internal/wire"
)

// Warm-up of the global owner (package doc, "# Warm-up"; after
// strategy/lease's and strategy/quota's warmup.go, the regionlease parts
// ours): a node about to start the bucket of a key it owns globally
// conservatively (it restarted, or a membership change moved the key to
// it) first asks every other live member what it holds of the key
// (RegionLeaseStateQuery), holds the key's requests, forwards and asks
// until all answered or the query's deadline, and then starts from the
// most consumed of: a full bucket at the end of the warm-up; an empty one
// at the latest recent start of itself or of an answerer (what a forgotten
// previous incarnation took is unknown, but it took it before that
// start); each answerer's bucket (an owner hands its pool over: its level,
// and its leases counted as lent until they may end), with the leases
// every answerer holds of the key counted as lent too (the leases of a
// forgotten incarnation are known only to their holders). On timeout
// (a node that does not answer: one of a build without warm-up, or one
// gone), when a member leaves meanwhile, when this node answered another
// node's query for the key meanwhile or no longer owns it, it starts
// conservatively as without warm-up (moveOf), merged with what it got.

// warming is a key's warm-up under way at its global owner.
type warming struct {
	id        uint64
	asked     []strategy.NodeID
	got       map[strategy.NodeID]bool
	acc       *pool         // the answers' buckets merged (lent tokens as Inherited), from a full bucket at the start
	emptyAt   time.Duration // the latest recent start of this node or of an answerer (-1: none): an empty bucket then
	heldTok   int64         // tokens the answerers hold in unexpired leases of the key
	heldUntil time.Duration // their latest end
	waiting   []warmWork
	next      time.Duration
	start     time.Duration
	deadline  time.Duration
	mem       int32 // bytes counted for asked, got and waiting
	gotPeak   uint16
}

// warmWork is what waits for a warm-up: a request checked here (msg nil),
// or a forward or an ask from a peer.
type warmWork struct {
	req  strategy.Request
	from strategy.NodeID
	msg  *peerv1.RegionLeaseMessage
}

// gave is what a node gave up of a key lately: its bucket dropped at a
// membership change or handed over in an answer (nil: none), kept for
// takeover + fill time to answer later queries with; answered says it
// answered a query at answeredAt: its outstanding asks of the key were
// forgotten then (a grant for one is ignored) and a pushed grant that ends
// by answeredAt + region_ttl is refused.
type gave struct {
	state      *pool
	at         time.Duration
	answered   bool
	answeredAt time.Duration
}

// warmups is a node's warm-up state (a field of RegionLease).
type warmups struct {
	fetching map[string]*warming
	gave     map[string]*gave
	seq      uint64       // warm-ups started
	full     uint64       // warm-ups ended with every answer (not conservatively)
	memF     memsize.Keys // the fetching map
	memG     memsize.Keys // the gave map
	bytes    int          // sum of the warmings' own bytes
}

// Bounds of the warm-up: the nodes one asks (with more live members, no
// warm-up: the conservative start), the keys warming at once (beyond, the
// conservative start) and the work one key holds (beyond, a request is
// refused and a message dropped: its sender sends it again).
const (
	maxAsked    = 64
	maxWarming  = 4096
	maxWarmHeld = 4096
)

// Timer kinds of the warm-up (beyond holder.go's).
const (
	timerWarm int8 = 64 + iota // a query's resend or deadline (key, seq = its id)
	timerGave                  // a gave record's end (key)
)

var (
	warmingAlloc = int(unsafe.Sizeof(warming{}))
	gaveAlloc    = int(unsafe.Sizeof(gave{})) + memsize.Alloc(poolAlloc) // the record and its state
	workBytes    = int(unsafe.Sizeof(warmWork{}))
	nodeBytes    = int(unsafe.Sizeof(strategy.NodeID("")))
)

// warmingBytes is w's own heap: its asked and waiting arrays and its got
// map (by its peak).
func warmingBytes(w *warming) int {
	w.gotPeak = memsize.Peak16(w.gotPeak, len(w.got))
	return memsize.Alloc(cap(w.asked)*nodeBytes) + memsize.Alloc(cap(w.waiting)*workBytes) +
		memsize.MapHeader + memsize.Map(int(w.gotPeak), nodeBytes+1)
}

func (l *RegionLease) warmingChanged(w *warming) {
	memsize.Recount(&l.wu.bytes, &w.mem, warmingBytes(w))
}

// warmMemoryBytes is the warm-up's share of MemoryBytes.
func (l *RegionLease) warmMemoryBytes() int {
	return l.wu.memF.Bytes(keySlot, warmingAlloc) + l.wu.bytes + l.wu.memG.Bytes(keySlot, gaveAlloc)
}

// fetchDeadline is how long a warm-up waits for its answers: resent every
// timeout/(retries+1), given up after timeout less one resend interval
// (at least one), so that a forward it holds still gets its verdict
// within its forwarder's timeout (lease's rule).
func (l *RegionLease) fetchDeadline() time.Duration {
	return max(l.retryEvery, l.timeout-l.retryEvery)
}

// recentStart is this node's start, if it was a restart recent enough
// that what a previous incarnation did may still matter (takeover + fill
// time).
func (l *RegionLease) recentStart(now time.Duration) (time.Duration, bool) {
	if l.restarted && now < l.restartAt+l.takeover+l.fillTime {
		return l.restartAt, true
	}
	return 0, false
}

// answeredAt is when this node last answered a query for key, if lately.
func (l *RegionLease) answeredAt(key string) (time.Duration, bool) {
	if g := l.wu.gave[key]; g != nil && g.answered {
		return g.answeredAt, true
	}
	return 0, false
}

// needsWarm reports whether key, owned globally here with no pool, would
// start conservatively and can be warmed up: it moved here (moveOf)
// recently enough that the conservative start is not full now, every
// previous global owner of the recorded changes is live (a gone one's
// fence or the takeover wait is the start: # Crashes), it has not
// answered a query for key lately (it handed the key over to a node its
// view does not list: # Warm-up), and there are 1 to maxAsked other live
// members to ask. Never under conserve (package doc, "# Warm-up").
func (l *RegionLease) needsWarm(now time.Duration, key string) bool {
	if l.conserve || l.pools[key] != nil || len(l.wu.fetching) >= maxWarming {
		return false
	}
	if g, live := l.global(key); g != l.self || !live {
		return false
	}
	from, moved := l.moveOf(key, now)
	if !moved || (l.fillTime > 0 && from+l.fillTime <= now) {
		return false
	}
	if _, ok := l.answeredAt(key); ok {
		// It handed the key over lately to a node warming it up as its
		// owner, which outranks this one and so is not in this node's view
		// (else it would own the key here): that node's bucket is one a
		// warm-up here cannot ask. The conservative start (moveOf: the
		// answer + takeover) is the rule.
		return false
	}
	return l.previousOwnersLive(key) && l.askable()
}

// previousOwnersLive reports whether every previous global owner of key
// in the recorded changes (but this node) is live: a gone one's fence or
// the takeover wait is the start, not a warm-up (# Crashes).
func (l *RegionLease) previousOwnersLive(key string) bool {
	for _, c := range l.changes {
		if o := rendezvous.Owner(key, c.prev); o != "" && o != l.self && !slices.Contains(l.live, o) {
			return false
		}
	}
	return true
}

// askable reports whether a warm-up has 1 to maxAsked other live members
// to ask.
func (l *RegionLease) askable() bool {
	others := len(l.live)
	if slices.Contains(l.live, l.self) {
		others--
	}
	return others >= 1 && others <= maxAsked
}

// warmHold holds work for key's warm-up: one under way takes it, or key
// needs one (needsWarm) and it is started. full: the warm-up holds
// maxWarmHeld already (a request is then refused, a message dropped).
func (l *RegionLease) warmHold(now time.Duration, key string, w warmWork, fx *strategy.Effects) (held, full bool) {
	f := l.wu.fetching[key]
	if f == nil {
		if !l.needsWarm(now, key) {
			return false, false
		}
		f = l.startWarm(now, key, fx)
	}
	if len(f.waiting) >= maxWarmHeld {
		return false, true
	}
	f.waiting = append(f.waiting, w)
	l.warmingChanged(f)
	return true, false
}

// warmRequest is Request's hook: true when req waits for its key's
// warm-up (decided by fx.Decide at its end) or is refused (refuse).
func (l *RegionLease) warmRequest(now time.Duration, req strategy.Request, fx *strategy.Effects) (wait, refuse bool) {
	return l.warmHold(now, req.Key, warmWork{req: req}, fx)
}

// startWarm sends key's query to every other live member.
func (l *RegionLease) startWarm(now time.Duration, key string, fx *strategy.Effects) *warming {
	if l.wu.fetching == nil {
		l.wu.fetching = map[string]*warming{}
	}
	l.wu.seq++
	f := &warming{id: l.wu.seq, got: map[strategy.NodeID]bool{}, emptyAt: -1, start: now, deadline: now + l.fetchDeadline(),
		acc: &pool{Level: l.sh.Burst * l.sh.Per, Last: now}}
	for _, n := range l.live {
		if n != l.self {
			f.asked = append(f.asked, n)
		}
	}
	slices.Sort(f.asked)
	if at, ok := l.recentStart(now); ok {
		f.emptyAt = at
	}
	memsize.Put(l.wu.fetching, &l.wu.memF, key, f)
	l.warmingChanged(f)
	l.sendQueries(now, key, f, fx)
	return f
}

// sendQueries sends f's query to every node asked that has not answered,
// and arms the next resend (or the deadline).
func (l *RegionLease) sendQueries(now time.Duration, key string, f *warming, fx *strategy.Effects) {
	msg := wire.MustMarshal(&peerv1.RegionLeaseMessage{Body: &peerv1.RegionLeaseMessage_StateQuery{StateQuery: &peerv1.RegionLeaseStateQuery{Key: key, Id: f.id}}})
	for _, n := range f.asked {
		if !f.got[n] {
			fx.Send(n, msg)
		}
	}
	f.next = min(now+l.retryEvery, f.deadline)
	l.pushTimer(timer{at: f.next, kind: timerWarm, key: key, seq: f.id})
	fx.WakeAt(f.next)
}

// warmTimer resends key's query or, at its deadline, ends the warm-up
// conservatively.
func (l *RegionLease) warmTimer(now time.Duration, t timer, fx *strategy.Effects) {
	f := l.wu.fetching[t.key]
	if f == nil || f.id != t.seq || f.next != t.at {
		return
	}
	if now >= f.deadline {
		l.fetched(now, t.key, true, fx)
		return
	}
	l.sendQueries(now, t.key, f, fx)
}

// fetched ends key's warm-up: its pool is the answers merged (the held
// leases as inherited, an empty bucket at the latest recent start), and,
// when it timed out, this node answered a query for the key meanwhile or
// no longer owns it, merged with the conservative start (moveOf). The
// held work is then done in its order.
func (l *RegionLease) fetched(now time.Duration, key string, timedOut bool, fx *strategy.Effects) {
	f := l.wu.fetching[key]
	memsize.Delete(l.wu.fetching, &l.wu.memF, key)
	l.wu.bytes -= int(f.mem)
	p := f.acc
	if f.emptyAt >= 0 {
		l.mergeAt(p, &pool{Level: 0, Last: f.emptyAt})
	}
	l.inherit(p, f.heldTok, f.heldUntil)
	_, answered := l.answeredAt(key) // meanwhile: none before it started (needsWarm)
	g, _ := l.global(key)
	if timedOut || answered || g != l.self {
		from, _ := l.moveOf(key, now)
		c := &pool{Level: 0, Last: from}
		l.mergeAt(c, p)
		p = c
	} else {
		l.wu.full++
	}
	if g == l.self && l.pools[key] == nil {
		l.setPool(key, p)
		if l.replicas > 0 {
			l.fenced(now, key, 0, fx)
		}
	}
	for _, w := range f.waiting {
		if w.msg == nil {
			if d, ok := l.Request(now, w.req, fx); ok {
				fx.Decide(w.req.ID, d.Allowed)
			}
			continue
		}
		_ = l.dispatch(now, w.from, w.msg, fx) // forwards and asks return no error
	}
}

// mergeAt makes p the more consumed of p and q: both refilled to the
// later of their times, the lower level, the sum of their inherited
// (lent) tokens until the later end (summed: the leases of two buckets
// may both be out), the level capped at what that leaves.
func (l *RegionLease) mergeAt(p, q *pool) {
	t := max(p.Last, q.Last)
	l.sh.Advance(p, t)
	cq := *q
	l.sh.Advance(&cq, t)
	p.Level = min(p.Level, cq.Level)
	l.inherit(p, cq.Inherited+cq.Leased, cq.InheritedUntil)
}

// inherit counts n more tokens as lent out of p until until (a previous
// owner's leases, or leases held elsewhere), capped at the burst, the
// level capped at the capacity left.
func (l *RegionLease) inherit(p *pool, n int64, until time.Duration) {
	if n <= 0 || until <= p.Last {
		return
	}
	p.Inherited = min(p.Inherited+n, l.sh.Burst-p.Leased)
	p.InheritedUntil = max(p.InheritedUntil, until)
	p.Level = min(p.Level, l.sh.Capacity(p))
}

// answer answers a query for key from a node warming it up, and hands the
// key over: this node's bucket of it (unless an untouched conservative
// start) and any it gave up lately, merged; the tokens it holds of the
// key in unexpired leases; its recent start. The bucket is dropped and
// the answer remembered (gave); the outstanding asks of the key are
// forgotten (a grant for one would be of a bucket the asker did not count;
// the holder asks again). A node warming the key itself, as its global
// owner in its own view, does not answer (views disagree: the asker times
// out into its conservative start).
func (l *RegionLease) answer(now time.Duration, from strategy.NodeID, q *peerv1.RegionLeaseStateQuery, fx *strategy.Effects) {
	key := q.Key
	if l.wu.fetching[key] != nil {
		if g, _ := l.global(key); g == l.self {
			return
		}
	}
	st := l.handOver(now, key)
	a := &peerv1.RegionLeaseState{Key: key, Id: q.Id}
	if st != nil {
		a.HasPool, a.LevelTicks, a.AtNs = true, st.Level, int64(st.Last)
		if n := st.Leased + st.Inherited; n > 0 {
			a.LeasedTokens, a.LentUntilNs = n, int64(st.InheritedUntil)
		}
	}
	if h := l.keys[key]; h != nil {
		a.HeldTokens, a.HeldUntilNs = l.heldOf(now, h)
		l.forgetAsks(h)
		fx.EndRefusal(key) // no ask out any more: a request may ask again (refusal.go)
	}
	if at, ok := l.recentStart(now); ok {
		a.RestartedAtNs = int64(at)
	}
	g := l.gaveOf(now, key, fx)
	g.state, g.answered, g.answeredAt = st, true, now
	fx.Send(from, wire.MustMarshal(&peerv1.RegionLeaseMessage{Body: &peerv1.RegionLeaseMessage_State{State: a}}))
}

// handOver drops key's pool and returns what this node hands over of the
// key's bucket (nil: nothing): the pool (unless an untouched
// conservative start), one it gave up lately and the answers of its own
// warm-up under way, merged (the most consumed).
func (l *RegionLease) handOver(now time.Duration, key string) *pool {
	var st *pool
	merge := func(q *pool) {
		if st == nil {
			cp := *q
			st = &cp
		} else {
			l.mergeAt(st, q)
		}
	}
	if p := l.pools[key]; p != nil {
		cp := l.answerState(now, key, p) // dated pushes counted as lent (dated.go)
		if !(p.Last > now && cp.Leased == 0 && cp.Inherited == 0 && cp.Level == 0) {
			merge(l.lentState(&cp, now))
		}
		l.dropPool(key)
	}
	if g := l.wu.gave[key]; g != nil && g.state != nil {
		merge(g.state)
	}
	if f := l.wu.fetching[key]; f != nil && len(f.got) > 0 {
		cp := *f.acc
		l.inherit(&cp, f.heldTok, f.heldUntil)
		if f.emptyAt >= 0 {
			l.mergeAt(&cp, &pool{Level: 0, Last: f.emptyAt})
		}
		merge(&cp)
	}
	return st
}

// heldOf is the tokens h holds in unexpired leases, with those already
// taken out of them here (used, and the spent leases dropped before their
// end, h.spentTok) and the dated pushes held until usable (dated.go),
// capped at the burst, and their latest end. The taken
// ones count because the asker's bucket may start empty at a restart
// before they were taken (a lease of its previous incarnation, received
// and used up after the restart, before this answer): counted as lent
// until the lease's end they keep its level plus leases within b; taken
// before the restart they only make the start more conservative (ours).
func (l *RegionLease) heldOf(now time.Duration, h *holding) (tokens, untilNs int64) {
	for _, ls := range h.leases {
		if ls.expires > now && ls.tokens+ls.lent+ls.used > 0 {
			tokens += ls.tokens + ls.lent + ls.used
			untilNs = max(untilNs, int64(ls.expires))
		}
	}
	if h.spentUntil > now && h.spentTok > 0 {
		tokens += h.spentTok
		untilNs = max(untilNs, int64(h.spentUntil))
	}
	for _, d := range h.dated { // held until usable (dated.go): to be used
		tokens += d.tokens
		untilNs = max(untilNs, int64(d.end))
	}
	return min(tokens, l.sh.Burst), untilNs
}

// forgetAsks forgets h's outstanding asks (a grant for one would be of a
// bucket the warm-up's asker did not count; the holder asks again).
func (l *RegionLease) forgetAsks(h *holding) {
	for seq := range h.sentTo {
		if _, ok := h.accepted[seq]; !ok {
			delete(h.sentTo, seq)
		}
	}
	h.asking = false
	l.holdingChanged(h)
}

// lentState is p (refilled to now) as a state to hand over: its leases
// and inherited tokens together as inherited, until the latest they may
// end (a lease granted here ends within region_ttl of its grant, at most
// now, plus the skew of its asker's clock).
func (l *RegionLease) lentState(p *pool, now time.Duration) *pool {
	st := &pool{Level: p.Level, Last: p.Last}
	if n := p.Leased + p.Inherited; n > 0 {
		st.Inherited = n
		st.InheritedUntil = max(p.InheritedUntil, now+l.rttl+l.maxSkew)
	}
	return st
}

// gaveOf is key's gave record, made if need be; it lives until takeover +
// fill time after its last update (timerGave).
func (l *RegionLease) gaveOf(now time.Duration, key string, fx *strategy.Effects) *gave {
	if l.wu.gave == nil {
		l.wu.gave = map[string]*gave{}
	}
	g := l.wu.gave[key]
	if g == nil {
		g = &gave{}
		memsize.Put(l.wu.gave, &l.wu.memG, key, g)
	}
	g.at = now
	end := now + l.takeover + l.fillTime
	l.pushTimer(timer{at: end, kind: timerGave, key: key})
	fx.WakeAt(end)
	return g
}

// gaveTimer forgets key's gave record at its end.
func (l *RegionLease) gaveTimer(now time.Duration, t timer) {
	if g := l.wu.gave[t.key]; g != nil && g.at+l.takeover+l.fillTime <= now {
		memsize.Delete(l.wu.gave, &l.wu.memG, t.key)
	}
}

// gaveUp remembers the bucket of key this node drops at a membership
// change (no longer its global owner), so that a warm-up's query gets it.
func (l *RegionLease) gaveUp(now time.Duration, key string, fx *strategy.Effects) {
	p := l.pools[key]
	if p == nil {
		return
	}
	cp := l.answerState(now, key, p) // dated pushes counted as lent (dated.go)
	if cp.Leased == 0 && cp.Inherited == 0 && (cp.Level == l.sh.Burst*l.sh.Per || (p.Last > now && cp.Level == 0)) {
		return // a full bucket with nothing lent, or an untouched conservative start: nothing to tell
	}
	st := l.lentState(&cp, now)
	g := l.gaveOf(now, key, fx)
	if g.state != nil {
		l.mergeAt(st, g.state)
	}
	g.state = st
}

// checkState bounds an answer: the key; its bucket (checkStateBucket);
// held tokens within [0, burst]; lent and held tokens ending within
// [0, now + takeover + region_ttl + max_skew]; a start within
// [0, now + max_skew].
func (l *RegionLease) checkState(now time.Duration, from strategy.NodeID, a *peerv1.RegionLeaseState) error {
	if err := checkKey(from, a.Key); err != nil {
		return err
	}
	if err := l.checkStateBucket(now, from, a); err != nil {
		return err
	}
	end := int64(now + l.takeover + l.rttl + l.maxSkew)
	switch {
	case a.HeldTokens < 0 || a.HeldTokens > l.sh.Burst:
		return errorf("state from %s: %d held tokens outside [0, burst %d]", from, a.HeldTokens, l.sh.Burst)
	case a.LentUntilNs < 0 || a.LentUntilNs > end, a.HeldUntilNs < 0 || a.HeldUntilNs > end:
		return errorf("state from %s: a lease's end (%v, %v) outside [0, now + takeover + region_ttl + max_skew]", from, time.Duration(a.LentUntilNs), time.Duration(a.HeldUntilNs))
	case a.RestartedAtNs < 0 || a.RestartedAtNs > int64(now+l.maxSkew):
		return errorf("state from %s: start %v outside [0, now + max_skew]", from, time.Duration(a.RestartedAtNs))
	}
	return nil
}

// checkStateBucket bounds an answer's bucket: a level within [0, burst]
// tokens (in ticks) at a time within [0, now + takeover + max_skew], lent
// tokens within [0, burst], and none of these without has_pool.
func (l *RegionLease) checkStateBucket(now time.Duration, from strategy.NodeID, a *peerv1.RegionLeaseState) error {
	switch {
	case a.LevelTicks < 0 || a.LevelTicks > l.sh.Burst*l.sh.Per:
		return errorf("state from %s: level %d ticks outside [0, burst %d x %d]", from, a.LevelTicks, l.sh.Burst, l.sh.Per)
	case a.AtNs < 0 || a.AtNs > int64(now+l.maxSkew+l.takeover):
		return errorf("state from %s: time %v outside [0, now + takeover + max_skew]", from, time.Duration(a.AtNs))
	case a.LeasedTokens < 0 || a.LeasedTokens > l.sh.Burst:
		return errorf("state from %s: %d lent tokens outside [0, burst %d]", from, a.LeasedTokens, l.sh.Burst)
	case !a.HasPool && (a.LevelTicks != 0 || a.AtNs != 0 || a.LeasedTokens != 0):
		return errorf("state from %s: a bucket's fields without has_pool", from)
	}
	return nil
}

// receiveState takes an answer (bounds checked) to the query under way.
// Errors (no state change): an answer from a node the query did not go
// to. An answer to no query under way (late, duplicated, to a previous
// incarnation) is ignored.
func (l *RegionLease) receiveState(now time.Duration, from strategy.NodeID, a *peerv1.RegionLeaseState, fx *strategy.Effects) error {
	f := l.wu.fetching[a.Key]
	if f == nil || f.id != a.Id {
		return nil
	}
	if !slices.Contains(f.asked, from) {
		return errorf("state of %q from %s, but the query went to %v", a.Key, from, f.asked)
	}
	if f.got[from] {
		return nil
	}
	if a.HasPool {
		q := &pool{Level: a.LevelTicks, Last: time.Duration(a.AtNs)}
		l.inherit(q, a.LeasedTokens, time.Duration(a.LentUntilNs))
		l.mergeAt(f.acc, q)
	}
	if a.HeldTokens > 0 {
		f.heldTok = min(f.heldTok+a.HeldTokens, l.sh.Burst)
		f.heldUntil = max(f.heldUntil, time.Duration(a.HeldUntilNs))
	}
	if a.RestartedAtNs > 0 {
		f.emptyAt = max(f.emptyAt, min(time.Duration(a.RestartedAtNs), now))
	}
	f.got[from] = true
	l.warmingChanged(f)
	if len(f.got) == len(f.asked) {
		l.fetched(now, a.Key, false, fx)
	}
	return nil
}

// warmReceive is Receive's hook, after validate: it answers queries, takes
// answers, holds a forward or an ask of a key warming up (or that needs a
// warm-up) at its global owner, and refuses a pushed grant a query's
// answer forgot (gave). handled: the message was taken here.
func (l *RegionLease) warmReceive(now time.Duration, from strategy.NodeID, m *peerv1.RegionLeaseMessage, fx *strategy.Effects) (handled bool, err error) {
	switch b := m.Body.(type) {
	case *peerv1.RegionLeaseMessage_StateQuery:
		if err := checkKey(from, b.StateQuery.Key); err != nil {
			return true, err
		}
		l.answer(now, from, b.StateQuery, fx)
		return true, nil
	case *peerv1.RegionLeaseMessage_State:
		if err := l.checkState(now, from, b.State); err != nil {
			return true, err
		}
		return true, l.receiveState(now, from, b.State, fx)
	case *peerv1.RegionLeaseMessage_Forward:
		return l.warmHoldMessage(now, b.Forward.Key, from, m, fx), nil
	case *peerv1.RegionLeaseMessage_Ask:
		return l.warmHoldMessage(now, b.Ask.Key, from, m, fx), nil
	case *peerv1.RegionLeaseMessage_Grant:
		return l.forgottenPush(b.Grant), nil
	}
	return false, nil
}

// warmHoldMessage holds m, a forward or an ask of key from a peer, for
// key's warm-up when this node is its global owner and the key warms up
// (or needs to); handled: held, or dropped because the warm-up holds too
// much (its sender sends it again).
func (l *RegionLease) warmHoldMessage(now time.Duration, key string, from strategy.NodeID, m *peerv1.RegionLeaseMessage, fx *strategy.Effects) bool {
	if g, _ := l.global(key); g != l.self {
		return false
	}
	held, full := l.warmHold(now, key, warmWork{from: from, msg: m}, fx)
	return held || full
}

// forgottenPush reports whether gr is a pushed grant that this node's
// answer to a warm-up query forgot: one that ends by the answer +
// region_ttl (refused: its tokens were counted by the asker).
func (l *RegionLease) forgottenPush(gr *peerv1.RegionLeaseGrant) bool {
	g := l.wu.gave[gr.Key]
	return gr.Pushed && g != nil && g.answered && time.Duration(gr.ExpiresNs) <= g.answeredAt+l.rttl
}

// warmMembersChanged ends, at a membership change, the warm-ups of keys
// this node no longer owns or whose asked nodes left (their state may be
// nowhere now): conservatively.
func (l *RegionLease) warmMembersChanged(now time.Duration, fx *strategy.Effects) {
	for _, key := range sortedKeys(l.wu.fetching) {
		f := l.wu.fetching[key]
		g, _ := l.global(key)
		gone := slices.ContainsFunc(f.asked, func(n strategy.NodeID) bool { return !slices.Contains(l.live, n) })
		if g != l.self || gone {
			l.fetched(now, key, true, fx)
		}
	}
}
