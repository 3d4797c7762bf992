package quota

import (
	"fmt"
	"slices"
	"time"

	peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"
	"github.com/tokenmesh/tokenmesh/rendezvous"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/internal/memsize"
)

// Warm-up (package doc, # Takeover; after strategy/lease's warmup.go): a
// node about to start a key it owns frozen (it started after time 0, as
// every node of the live runtime does, or a view change moved the key to
// it) with nothing to adopt first asks the nodes that may hold the key's
// state (QuotaStateQuery): the live members among the key's first
// `replicas` nodes in its current view, in each view before a recent
// change, and, after its start, in its view without itself. Each answers
// (QuotaState) "none" when it holds no allocation of the key, no replica,
// no warm-up of its own, and dropped none of these lately (a hand-over, a
// replica swept or a notice of one too large to replicate, within
// takeover + fill time); answering "none" it decides the key, should it
// come to own it, as moved to it at the answer (frozen until the answer +
// takeover). The key's requests and reports wait meanwhile; when every
// asked node said "none" the key starts with its reserve full, else (an
// answer "some", no answer within timeout/2, a view change that leaves the
// key's state possibly nowhere) as without warm-up: from what there is to
// adopt, or frozen.

// heldWork is a request (checked here or forwarded) or a client's report
// waiting for its key's warm-up.
type heldWork struct {
	report bool
	// a request: its id, tokens, arrival, and the node it was forwarded
	// from ("": checked here)
	id      uint64
	tokens  int64
	arrival time.Duration
	from    strategy.NodeID // also a report's sender
	// a report
	u strategy.QuotaUsage
	h *held
}

// warmup is a key's warm-up query under way.
type warmup struct {
	id       uint64
	asked    []strategy.NodeID
	queried  map[strategy.NodeID]bool // every node the query went to
	got      map[strategy.NodeID]bool // the asked nodes that answered
	some     bool                     // an answer said the sender holds (or held lately) state of the key
	deadline time.Duration
	held     []heldWork
}

// Bounds of the warm-up: warm-ups under way at once, the requests and
// reports one holds (beyond, a request is refused and a report dropped:
// its client reports again), the nodes one asks, and the keys a node
// remembers having answered "none" for or having dropped the state of
// (beyond, it answers "some" for every key until takeover + fill time
// later).
const (
	maxWarming  = 4096
	maxWarmHeld = 4096
	maxAsked    = 64
	maxMarks    = maxRecords
)

// warmResult is what warm did with a piece of work.
type warmResult int

const (
	warmNo      warmResult = iota // decide it now
	warmHeld                      // held until the warm-up ends
	warmRefused                   // the warm-up holds as many as it may: refused
)

// markHorizon is how long a dropped state or an answer matters: a key
// emptied then is full again, and every assignment made before it has
// expired, takeover + fill time later.
func (q *Quota) markHorizon() time.Duration { return q.takeover + q.sh.fillTime() }

// warm holds w while key warms up: a warm-up is under way, or key needs
// one (this node owns it, has no allocation of it, would start it frozen
// or not yet refilled, has nothing to adopt, did not answer a query for it
// nor drop its state lately, replicas on) and there are nodes to ask.
// With nobody to ask (this node, not just started, is among the key's
// first nodes in every view) the key starts full at once.
func (q *Quota) warm(now time.Duration, key string, w heldWork, fx *strategy.Effects) warmResult {
	if wu := q.warming[key]; wu != nil {
		if len(wu.held) >= maxWarmHeld {
			return warmRefused
		}
		wu.held = append(wu.held, w)
		return warmHeld
	}
	if !q.mayWarm(key, now) {
		return warmNo
	}
	if q.stillWarm(key, now) {
		// warmed up here since the last view change, and dropped since as
		// idle (full): it starts full again, without asking
		q.setAlloc(key, q.sh.newAlloc(now, 0))
		q.warmedFull++
		return warmNo
	}
	asked, covered := q.holdersOf(key, now)
	if !covered {
		// In some view the key's first nodes are all gone (or are this
		// node, just started, which forgot): its state may be lost.
		return warmNo
	}
	if len(asked) == 0 {
		q.setAlloc(key, q.sh.newAlloc(now, 0))
		q.warmedFull++
		return warmNo
	}
	q.warmSeq++
	wu := &warmup{id: q.warmSeq, asked: asked, queried: map[strategy.NodeID]bool{}, got: map[strategy.NodeID]bool{},
		deadline: now + q.timeout/2, held: []heldWork{w}}
	q.warming[key] = wu
	q.sendQueries(key, wu, fx)
	if q.warmDue == 0 || wu.deadline < q.warmDue {
		q.warmDue = wu.deadline
	}
	fx.WakeAt(wu.deadline)
	return warmHeld
}

// mayWarm reports whether key may be warmed up: replicas on, this node
// owns it, has no allocation of it and would start it frozen or not yet
// refilled, has no replica of it, did not answer a query for it nor drop
// its state lately, and has room for another warm-up.
func (q *Quota) mayWarm(key string, now time.Duration) bool {
	return q.replicas >= 2 && q.allocs[key] == nil && q.owner(key) == q.self && len(q.warming) < maxWarming &&
		q.takeoverEnd(key, now) != 0 && !q.answeredLately(key, now) && !q.goneLately(key, now) && q.records[key] == nil
}

// sendQueries sends wu's query to every node asked that has not answered.
func (q *Quota) sendQueries(key string, wu *warmup, fx *strategy.Effects) {
	msg := frame(&peerv1.QuotaStateQuery{Key: key, Id: wu.id})
	for _, n := range wu.asked {
		if !wu.got[n] {
			fx.Send(n, msg)
			wu.queried[n] = true
		}
	}
}

// endWarm ends key's warm-up: when every node asked answered "none" (and
// this node still owns the key, has no allocation of it, answered no query
// for it and dropped no state of it meanwhile) the key starts with its
// reserve full; else as without warm-up (allocFor). The held work is then
// decided in order; a key this node no longer owns refuses its held
// requests and drops its reports (their nodes send them to the owner they
// see).
func (q *Quota) endWarm(now time.Duration, key string, timedOut bool, fx *strategy.Effects) {
	wu := q.warming[key]
	delete(q.warming, key)
	own := q.owner(key) == q.self
	if own && q.allocs[key] == nil {
		if !timedOut && !wu.some && len(wu.got) == len(wu.asked) && !q.answeredLately(key, now) &&
			!q.goneLately(key, now) && q.records[key] == nil {
			q.setAlloc(key, q.sh.newAlloc(now, 0))
			q.warmedFull++
			q.mark(q.warmed, &q.mem.warmed, key, now)
		} else {
			q.allocFor(key, now)
		}
	}
	for _, w := range wu.held {
		switch {
		case w.report:
			if own {
				q.ownerUsage(now, w.from, w.u, w.h, fx)
			}
		case !own:
			q.verdict(w, false, fx)
		default:
			q.verdict(w, q.decide(now, key, w.tokens, w.arrival, fx), fx)
		}
	}
}

// verdict completes a held request: here, or at the node it was forwarded
// from.
func (q *Quota) verdict(w heldWork, ok bool, fx *strategy.Effects) {
	if w.from == "" {
		fx.Decide(w.id, ok)
		return
	}
	fx.Send(w.from, frame(&peerv1.QuotaVerdict{RequestId: w.id, Allowed: ok}))
}

// warmTimers ends the warm-ups whose deadline has passed and asks for a
// wake-up at the next one.
func (q *Quota) warmTimers(now time.Duration, fx *strategy.Effects) {
	if q.warmDue == 0 || now < q.warmDue {
		return
	}
	q.warmDue = 0
	for _, key := range sortedKeys(q.warming) {
		if q.warming[key].deadline <= now {
			q.endWarm(now, key, true, fx)
		}
	}
	for _, wu := range q.warming {
		if q.warmDue == 0 || wu.deadline < q.warmDue {
			q.warmDue = wu.deadline
		}
	}
	if q.warmDue > 0 {
		fx.WakeAt(q.warmDue)
	}
}

// warmMembersChanged updates the warm-ups under way after a view change: a
// key this node no longer owns, or whose state may now be nowhere, ends as
// without warm-up; otherwise nodes that left are not waited for and the
// key's holders in the new view are asked too.
func (q *Quota) warmMembersChanged(now time.Duration, fx *strategy.Effects) {
	for _, key := range sortedKeys(q.warming) {
		wu := q.warming[key]
		more, covered := q.holdersOf(key, now)
		if q.owner(key) != q.self || !covered {
			q.endWarm(now, key, true, fx)
			continue
		}
		asked := slices.DeleteFunc(wu.asked, func(n strategy.NodeID) bool { return !slices.Contains(q.members, n) })
		for _, n := range more {
			if !slices.Contains(asked, n) && len(asked) < maxAsked {
				asked = append(asked, n)
			}
		}
		slices.Sort(asked)
		wu.asked = asked
		for n := range wu.got {
			if !slices.Contains(asked, n) {
				delete(wu.got, n)
			}
		}
		if len(wu.got) == len(wu.asked) {
			q.endWarm(now, key, false, fx)
			continue
		}
		q.sendQueries(key, wu, fx)
	}
}

// holdersOf is the nodes that may hold key's state, this node excepted:
// the live members among the key's first `replicas` nodes in the current
// view, in every view before a recent change (but a view of this node
// alone: a node that starts sees itself alone until it has joined the
// others, and only it decided there), and, after this node's start, in
// the view without it; sorted, at most maxAsked. covered reports whether
// in each of those views one of the key's first nodes is asked or is this
// node (not just started: a restarted node forgot what it held).
func (q *Quota) holdersOf(key string, now time.Duration) (out []strategy.NodeID, covered bool) {
	covered = true
	forgot := q.restarted && now < q.startAt+q.markHorizon()
	views := [][]strategy.NodeID{q.members}
	for i := len(q.changes) - 1; i >= 0; i-- {
		if prev := q.changes[i].prev; !(len(prev) == 1 && prev[0] == q.self) {
			views = append(views, prev)
		}
	}
	if q.restarted {
		views = append(views, slices.DeleteFunc(slices.Clone(q.members), func(n strategy.NodeID) bool { return n == q.self }))
	}
	for _, v := range views {
		held := false
		for _, n := range rendezvous.Rank(nil, key, v, q.replicas) {
			switch {
			case n == q.self:
				held = held || !forgot
			case slices.Contains(q.members, n):
				held = true
				if !slices.Contains(out, n) && len(out) < maxAsked {
					out = append(out, n)
				}
			}
		}
		covered = covered && (held || len(v) == 0)
	}
	slices.Sort(out)
	return out, covered
}

// onStateQuery answers a warm-up query: "none" when this node holds
// nothing of the key and dropped nothing of it lately; it then decides
// the key, should it own it, as moved to it now (takeoverEnd). Errors: a
// bad key.
func (q *Quota) onStateQuery(now time.Duration, from strategy.NodeID, m *peerv1.QuotaStateQuery, fx *strategy.Effects) error {
	if err := checkKey("state query", m.Key); err != nil {
		return err
	}
	none := q.allocs[m.Key] == nil && q.records[m.Key] == nil && q.warming[m.Key] == nil && !q.goneLately(m.Key, now) &&
		q.mark(q.answered, &q.mem.answered, m.Key, now)
	fx.Send(from, frame(&peerv1.QuotaState{Key: m.Key, Id: m.Id, None: none}))
	return nil
}

// onState takes a warm-up answer, or (id 0) an owner's notice that it
// holds an allocation too large to replicate. Errors: a bad key, or an
// answer from a node the query never went to. An answer to no query under
// way (late, duplicated, to a previous incarnation) is ignored.
func (q *Quota) onState(now time.Duration, from strategy.NodeID, m *peerv1.QuotaState, fx *strategy.Effects) error {
	if err := checkKey("state", m.Key); err != nil {
		return err
	}
	if m.Id == 0 {
		if !m.None {
			q.markGone(m.Key, now)
		}
		return nil
	}
	wu := q.warming[m.Key]
	if wu == nil || wu.id != m.Id {
		return nil
	}
	if !wu.queried[from] {
		return fmt.Errorf("quota: state of %q from %s, but the query went to %v", m.Key, from, wu.asked)
	}
	if !m.None {
		wu.some = true // also from a node no longer waited for: it held state
	}
	if slices.Contains(wu.asked, from) && !wu.got[from] {
		wu.got[from] = true
		if len(wu.got) == len(wu.asked) {
			q.endWarm(now, m.Key, false, fx)
		}
	}
	return nil
}

// mark records key in m (counted in k) at now; false when m is full of
// marks that still matter.
func (q *Quota) mark(m map[string]time.Duration, k *memsize.Keys, key string, now time.Duration) bool {
	_, ok := m[key]
	if !ok && len(m) >= maxMarks {
		q.pruneMarks(now)
		if len(m) >= maxMarks {
			return false
		}
	}
	m[key] = now
	if !ok {
		k.Add(key)
	}
	return true
}

// pruneMarks drops the marks older than markHorizon.
func (q *Quota) pruneMarks(now time.Duration) {
	h := q.markHorizon()
	for _, m := range []struct {
		m map[string]time.Duration
		k *memsize.Keys
	}{{q.answered, &q.mem.answered}, {q.gone, &q.mem.gone}, {q.warmed, &q.mem.warmed}} {
		for k, t := range m.m {
			if now >= t+h {
				delete(m.m, k)
				m.k.Remove(k)
			}
		}
	}
	q.shrinkMarks()
	if q.marksFull > 0 && now >= q.marksFull+h {
		q.marksFull = 0
	}
}

// markGone remembers that this node dropped state of key now (it answers
// "some" for it for markHorizon); when it cannot, it answers "some" for
// every key until then.
func (q *Quota) markGone(key string, now time.Duration) {
	if !q.mark(q.gone, &q.mem.gone, key, now) {
		q.marksFull = now
	}
}

// goneLately reports whether this node dropped state of key within
// markHorizon (or forgot which keys it dropped).
func (q *Quota) goneLately(key string, now time.Duration) bool {
	h := q.markHorizon()
	if q.marksFull > 0 && now < q.marksFull+h {
		return true
	}
	t, ok := q.gone[key]
	return ok && now < t+h
}

// answeredLately reports whether this node answered "none" for key within
// markHorizon.
func (q *Quota) answeredLately(key string, now time.Duration) bool {
	t, ok := q.answered[key]
	return ok && now < t+q.markHorizon()
}

// stillWarm reports whether key started full here after a warm-up with no
// view change since: its allocation has been here since (a view change
// hands it over), so one dropped meanwhile was dropped as idle, full, and
// the key may start full again.
func (q *Quota) stillWarm(key string, now time.Duration) bool {
	t, ok := q.warmed[key]
	if !ok || now >= t+q.markHorizon() {
		return false
	}
	return len(q.changes) == 0 || q.changes[len(q.changes)-1].at < t
}
