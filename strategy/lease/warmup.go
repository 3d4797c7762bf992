package lease

import (
	"fmt"
	"slices"
	"time"

	peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"
	"github.com/tokenmesh/tokenmesh/rendezvous"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/internal/leasepool"
	"github.com/tokenmesh/tokenmesh/strategy/internal/wire"
)

// Warm-up (see "# Crashes" in the package doc): a node that would start a
// key it owns conservatively (it restarted, or a membership change moved
// the key to it) and holds no trusted record for it first asks the nodes
// that may hold the key's state (LeaseStateQuery) and holds the key's
// requests and asks until all answered (then it continues from the most
// consumed answer, a "none" counting as a full bucket) or the query timed
// out (then it starts conservatively, as without warm-up, merged with the
// answers it got). Answering is a hand-over: the answerer stops deciding
// the key (gave).

// fetch is a key's warm-up query in flight.
type fetch struct {
	id       uint64
	movedAt  time.Duration // the conservative start's move, if it times out
	asked    []strategy.NodeID
	queried  map[strategy.NodeID]bool // every node the query went to, asked now or not
	got      map[strategy.NodeID]bool
	acc      *pool // the answers merged: full (at 0) until one has a state
	waiting  []queued
	next     time.Duration // next resend
	deadline time.Duration
}

// gave is what this node gave up of a key lately: the most consumed state
// it answered a warm-up query with or handed over at a membership change
// (nil: none), kept to answer later queries with; answered says it
// answered a query at answeredAt and so decides the key as moved to it at
// that time (conservatively, without a warm-up) until the entry is swept.
type gave struct {
	swept      // its place in the sweep's order (sweep.go)
	state      *record
	at         time.Duration // last update (never before answeredAt)
	answered   bool
	answeredAt time.Duration
}

// maxAsked bounds the nodes one warm-up asks.
const maxAsked = 64

// fetchDeadline is how long a warm-up query waits for its answers: it is
// resent every timeout/(retries+1) and given up after timeout less one
// resend interval (at least one), so that a forwarded request held by it
// still gets its verdict within the forwarder's timeout.
func (l *Lease) fetchDeadline() time.Duration {
	return max(l.retryEvery, l.timeout-l.retryEvery)
}

// moveOf reports whether key moved to this node and when (restart,
// membership change, a peer that routes it here although this node does
// not own it in its own view, or an answered warm-up query), and whether
// the move is an answered query (no warm-up then).
func (l *Lease) moveOf(key string, now time.Duration) (movedAt time.Duration, moved, answered bool) {
	if l.restarted {
		moved, movedAt = true, l.restartAt
	}
	for _, c := range l.changes {
		if rendezvous.Owner(key, c.prev) != l.self {
			moved, movedAt = true, max(movedAt, c.at)
		}
	}
	if l.owner(key) != l.self {
		// A peer sends this node a key it does not own in its own view: the
		// views disagree, a change is under way.
		moved, movedAt = true, max(movedAt, now)
	}
	if g := l.gave[key]; g != nil && g.answered {
		moved, movedAt, answered = true, max(movedAt, g.answeredAt), true
	}
	return movedAt, moved, answered
}

// handedOff reports whether this node answered a warm-up query for key
// lately and r is no hand-over: then r is not trusted, whatever this
// node's view says of its sender, nor adopted. Its sender may be the
// asker, deciding the key now, which a lagging view may not list yet (a
// restarted node that has not rejoined it): adopting its state would make
// two nodes decide from it.
func (l *Lease) handedOff(key string, r *record) bool {
	g := l.gave[key]
	return g != nil && g.answered && !r.handover
}

// conservativeStart is the empty pool of a key moved here at movedAt.
func (l *Lease) conservativeStart(movedAt time.Duration) *pool {
	return &pool{Pool: leasepool.Pool{Level: 0, Last: movedAt + l.takeover}, conservative: true}
}

// warm reports whether q must wait for its key's warm-up: one is under way
// (q joins its waiting requests), or q's key needs one (it has no pool,
// this node owns it, it moved here and would start conservatively, not
// yet full at q's arrival, and no trusted record is here; replicas on)
// and there are nodes to ask (then the query is sent).
func (l *Lease) warm(now time.Duration, q queued, fx *strategy.Effects) bool {
	if f := l.fetching[q.key]; f != nil {
		f.waiting = append(f.waiting, q)
		return true
	}
	if l.replicas < 2 || l.pools[q.key] != nil || l.owner(q.key) != l.self {
		return false
	}
	r := l.records[q.key]
	if r != nil && l.trusted(r) {
		return false
	}
	movedAt, moved, answered := l.moveOf(q.key, now)
	if !moved || answered {
		return false
	}
	if cp := l.conservativeStart(movedAt); l.sh.full(cp, q.arrival) {
		return false
	}
	asked, covered := l.holdersOf(q.key, r, now)
	if !covered {
		// In some view the key's first K nodes are all gone (or only this
		// node, restarted, which forgot): the key's state may be lost, so
		// it starts conservatively (pool).
		return false
	}
	if len(asked) == 0 {
		// Nobody else may hold the key's state: this node's record (if
		// any) and a full bucket are all there is.
		return l.startFrom(q.key)
	}
	l.fetchSeq++
	f := &fetch{id: l.fetchSeq, movedAt: movedAt, asked: asked, queried: map[strategy.NodeID]bool{}, got: map[strategy.NodeID]bool{},
		acc: &pool{Pool: leasepool.Pool{Level: l.sh.burst * l.sh.per}}, waiting: []queued{q}, deadline: now + l.fetchDeadline()}
	l.fetching[q.key] = f
	l.sendQueries(now, q.key, f, fx)
	return true
}

// startFrom makes key's pool when warm-up has nobody to ask: its record
// merged into a full bucket. It returns false (q is decided now).
func (l *Lease) startFrom(key string) bool {
	p := &pool{Pool: leasepool.Pool{Level: l.sh.burst * l.sh.per}}
	if r := l.records[key]; r != nil {
		l.mergeAt(p, r.asPool())
		l.dropRecord(key)
	}
	l.setPool(key, p)
	return false
}

// mergeAt merges q into p (the more consumed of both) after refilling both
// to the later of their times.
func (l *Lease) mergeAt(p, q *pool) {
	t := max(p.Last, q.Last)
	l.sh.advance(p, t)
	l.sh.advance(q, t)
	l.mergeInto(p, q)
}

// holdersOf is the nodes that may hold key's state, this node excepted:
// the live members among the key's first K nodes in the current view, in
// every view before a recent change, and (after a restart) in the view
// without this node, plus the sender of r; sorted, at most maxAsked.
// covered reports whether in each of those views some of the key's first
// K nodes is asked or is this node (not just restarted: a restarted node
// forgot what its previous incarnation held): else the state a node gone
// held may be nowhere.
func (l *Lease) holdersOf(key string, r *record, now time.Duration) (out []strategy.NodeID, covered bool) {
	covered = true
	// What a previous incarnation held matters until a conservative start
	// at the restart would be full.
	forgot := l.restarted && now < l.restartAt+l.takeover+l.fillTime
	views := [][]strategy.NodeID{l.members}
	for i := len(l.changes) - 1; i >= 0; i-- {
		// A past view of this node alone is skipped: a node that starts
		// sees itself alone until it has joined the others (after the
		// expected members it boots with), and counting that view would
		// start every key it owns conservatively after every start (a
		// restarted node forgot what it held in it). Only this node
		// decided in such a view and only it held leases of it, so what a
		// previous incarnation alone decided there (before a restart
		// without state_dir, alone by partition or as a one-node cluster)
		// is its own admissions, at most one envelope, as with owner's
		// restart; no other node's leases are lost. The current view still
		// counts: a one-node cluster restarts conservatively.
		if prev := l.changes[i].prev; !(len(prev) == 1 && prev[0] == l.self) {
			views = append(views, prev)
		}
	}
	if l.restarted {
		views = append(views, slices.DeleteFunc(slices.Clone(l.members), func(n strategy.NodeID) bool { return n == l.self }))
	}
	for _, v := range views {
		var held bool
		out, held = l.holdersIn(key, v, forgot, out)
		covered = covered && (held || len(v) == 0)
	}
	if r != nil && r.from != l.self && slices.Contains(l.members, r.from) && !slices.Contains(out, r.from) && len(out) < maxAsked {
		out = append(out, r.from)
	}
	slices.Sort(out)
	return out, covered
}

// holdersIn adds to out (up to maxAsked) the live members other than this
// node among key's first K nodes in view v, and reports whether one of
// them is live or is this node (unless it forgot: just restarted).
func (l *Lease) holdersIn(key string, v []strategy.NodeID, forgot bool, out []strategy.NodeID) (_ []strategy.NodeID, held bool) {
	for _, n := range l.replicasOf(key, v) {
		switch {
		case n == l.self:
			held = held || !forgot
		case slices.Contains(l.members, n):
			held = true
			if !slices.Contains(out, n) && len(out) < maxAsked {
				out = append(out, n)
			}
		}
	}
	return out, held
}

// sendQueries sends f's query to every node asked that has not answered,
// and schedules the next resend (or the deadline).
func (l *Lease) sendQueries(now time.Duration, key string, f *fetch, fx *strategy.Effects) {
	msg := wire.MustMarshal(&peerv1.LeaseMessage{Body: &peerv1.LeaseMessage_StateQuery{StateQuery: &peerv1.LeaseStateQuery{Key: key, Id: f.id}}})
	for _, n := range f.asked {
		if !f.got[n] {
			fx.Send(n, msg)
			f.queried[n] = true
		}
	}
	f.next = min(now+l.retryEvery, f.deadline)
	l.pushTimer(timer{at: f.next, kind: timerFetch, key: key, seq: f.id})
	fx.WakeAt(f.next)
}

// fetchTimer resends key's query or, at its deadline, ends it.
func (l *Lease) fetchTimer(now time.Duration, t timer, fx *strategy.Effects) {
	f := l.fetching[t.key]
	if f == nil || f.id != t.seq || f.next != t.at {
		return
	}
	if now >= f.deadline {
		l.fetched(now, t.key, true, fx)
		return
	}
	l.sendQueries(now, t.key, f, fx)
}

// fetched ends key's warm-up: its pool is the answers merged with its
// record (if any), or, when the query timed out, this node answered a
// query for the key meanwhile, or it no longer owns the key, the
// conservative start merged with them. The waiting requests are queued
// again (their turn has come) and decided.
func (l *Lease) fetched(now time.Duration, key string, timedOut bool, fx *strategy.Effects) {
	f := l.fetching[key]
	delete(l.fetching, key)
	p := f.acc
	if r := l.records[key]; r != nil {
		l.mergeAt(p, r.asPool())
		l.dropRecord(key)
	}
	movedAt, _, answered := l.moveOf(key, now)
	if timedOut || answered || l.owner(key) != l.self {
		c := l.conservativeStart(max(movedAt, f.movedAt))
		l.mergeAt(c, p)
		p = c
	}
	if old := l.pools[key]; old != nil { // adopted meanwhile from a trusted record (adopt): keep the more consumed
		l.mergeAt(old, p)
		p = old
	}
	l.setPool(key, p)
	for _, q := range f.waiting {
		l.queue.Push(q)
	}
	l.decideDue(now, fx)
}

// answer answers a warm-up query for key and gives the key up: the answer
// is the most consumed of this node's pool (unless an untouched
// conservative start: it decided nothing), its record, a state it gave up
// lately and the answers its own warm-up of the key got so far; the pool
// is dropped and, for takeover after now, the key is decided as moved here
// now (moveOf).
func (l *Lease) answer(now time.Duration, from strategy.NodeID, qr *peerv1.LeaseStateQuery, fx *strategy.Effects) {
	var st *record
	if p := l.pools[qr.Key]; p != nil {
		if !p.untouched(now) {
			own := l.stateOf(p, now)
			own.from = l.self
			st = &own
		}
		l.dropPool(qr.Key)
		l.dropDirty(qr.Key)
	}
	if r := l.records[qr.Key]; r != nil {
		st = l.mergeRecords(st, r)
	}
	g := l.gave[qr.Key]
	if g != nil && g.state != nil {
		st = l.mergeRecords(st, g.state)
	}
	if f := l.fetching[qr.Key]; f != nil && len(f.got) > 0 {
		acc := f.acc.asRecord()
		st = l.mergeRecords(st, &acc)
	}
	if g == nil {
		g = &gave{}
		l.setGave(qr.Key, g)
	}
	g.state, g.at, g.answered, g.answeredAt = st, now, true, now
	a := &peerv1.LeaseState{Key: qr.Key, Id: qr.Id, None: st == nil}
	if st != nil {
		a.LevelTicks, a.AtNs, a.LentTokens = st.level, int64(st.at), st.lent
		if st.lent > 0 {
			a.LentUntilNs = int64(st.lentUntil)
		}
	}
	fx.Send(from, wire.MustMarshal(&peerv1.LeaseMessage{Body: &peerv1.LeaseMessage_State{State: a}}))
}

// gaveUp remembers the state of key this node handed over at a membership
// change (not an answered query: a warm-up may take the key back).
func (l *Lease) gaveUp(key string, s record, now time.Duration) {
	g := l.gave[key]
	if g == nil {
		g = &gave{}
		l.setGave(key, g)
	}
	s.from = l.self
	g.state, g.at = l.mergeRecords(g.state, &s), now
}

// answerRecord is a warm-up answer's state as a record from its sender.
func answerRecord(a *peerv1.LeaseState, from strategy.NodeID) *record {
	r := &record{level: a.LevelTicks, lent: a.LentTokens, at: time.Duration(a.AtNs), from: from}
	if r.lent > 0 {
		r.lentUntil = time.Duration(a.LentUntilNs)
	}
	return r
}

// mergeRecords is the more consumed of a (nil: none) and b, a new record.
func (l *Lease) mergeRecords(a, b *record) *record {
	if a == nil {
		cp := *b
		return &cp
	}
	p := a.asPool()
	l.mergeAt(p, b.asPool())
	r := p.asRecord()
	r.from = a.from
	return &r
}

// receiveState takes a warm-up answer, its bounds checked (checkAnswer).
// Errors (no state change): an answer from a node the query never went to (one that was asked before a membership change dropped it is
// merged, not waited for). An answer to no query under way (late,
// duplicated, or to a previous incarnation) is ignored.
func (l *Lease) receiveState(now time.Duration, from strategy.NodeID, a *peerv1.LeaseState, fx *strategy.Effects) error {
	f := l.fetching[a.Key]
	if f == nil || f.id != a.Id {
		return nil
	}
	// A node asked before a membership change dropped it may still answer
	// (its answer was on the way): it is not waited for any more, but it
	// gave the key up when it answered, so its state is kept (a merge keeps
	// the more consumed state: it never adds tokens).
	waited := slices.Contains(f.asked, from)
	switch {
	case !waited && !f.queried[from]:
		return fmt.Errorf("lease: state of %q from %s, but the query went to %v", a.Key, from, f.asked)
	case waited && f.got[from]:
		return nil // a duplicate
	}
	if !a.None {
		l.mergeAt(f.acc, answerRecord(a, from).asPool())
	}
	if waited {
		f.got[from] = true
		if len(f.got) == len(f.asked) {
			l.fetched(now, a.Key, false, fx)
		}
	}
	return nil
}

// membersChanged updates the warm-ups under way after a membership change:
// a key this node no longer owns, or whose state may now be nowhere (the
// coverage of holdersOf), ends conservatively; otherwise nodes that left
// are not waited for (their state is on their replicas, asked too) and the
// key's holders in the new view are asked too.
func (l *Lease) membersChanged(now time.Duration, fx *strategy.Effects) {
	for _, key := range sortedKeys(l.fetching) {
		f := l.fetching[key]
		if l.owner(key) != l.self {
			l.fetched(now, key, true, fx)
			continue
		}
		more, covered := l.holdersOf(key, l.records[key], now)
		if !covered { // the state of a holder gone may be nowhere now
			l.fetched(now, key, true, fx)
			continue
		}
		asked := slices.DeleteFunc(f.asked, func(n strategy.NodeID) bool { return !slices.Contains(l.members, n) })
		for _, n := range more {
			if !slices.Contains(asked, n) && len(asked) < maxAsked {
				asked = append(asked, n)
			}
		}
		slices.Sort(asked)
		f.asked = asked
		for n := range f.got {
			if !slices.Contains(asked, n) {
				delete(f.got, n)
			}
		}
		if len(f.got) == len(f.asked) {
			l.fetched(now, key, false, fx)
			continue
		}
		l.sendQueries(now, key, f, fx)
	}
}
