package owner

import (
	"slices"
	"time"

	peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/internal/wire"
)

// Warm-up (see "Warm-up" in the package doc): within warmup of a
// membership change or of a late start, a key this node holds no level
// for waits while the key's possible holders are asked for it
// (OwnerLevelQuery, answered by receiveQuery).

type fetch struct {
	waiting  []queued
	await    []strategy.NodeID // holders that have not answered yet
	deadline time.Duration
}

// fetchFor reports whether q must wait for its key's level: during a
// warm-up (within warmup of a membership change or of a late start) this
// node holds no level for the key, so the level may be on its way from, or
// only at, the key's replicas in the previous or the current view. Then it
// asks them (OwnerLevelQuery) and holds q until all answered (OwnerLevels;
// a holder without a level answers full) or timeout passed (then the key
// starts empty as of the change: the holders may have been drained and be
// unreachable). Requests of a key already being fetched wait too.
func (o *Owner) fetchFor(now time.Duration, q queued, fx *strategy.Effects) bool {
	if f := o.fetching[q.key]; f != nil {
		f.waiting = append(f.waiting, q)
		return true
	}
	if o.changedAt < 0 || now >= o.changedAt+o.warmup {
		return false
	}
	if _, ok := o.tab(q.key).Lookup(q.key); ok {
		return false
	}
	var await []strategy.NodeID
	others := o.others()
	for _, view := range [][]strategy.NodeID{o.prevMembers, others} {
		for _, m := range o.replicasOf(q.key, view) {
			// Only live members can answer; a previous holder that is
			// gone left its level on its replicas, asked as well.
			if m != o.self && slices.Contains(o.members, m) && !slices.Contains(await, m) {
				await = append(await, m)
			}
		}
	}
	if len(await) == 0 {
		return false
	}
	slices.Sort(await)
	f := &fetch{waiting: []queued{q}, await: await, deadline: now + o.timeout}
	o.fetching[q.key] = f
	msg := wire.MustMarshal(&peerv1.OwnerMessage{Body: &peerv1.OwnerMessage_LevelQuery{LevelQuery: &peerv1.OwnerLevelQuery{Keys: []string{q.key}}}})
	for _, m := range await {
		fx.Send(m, msg)
	}
	fx.WakeAt(f.deadline)
	return true
}

// fetched ends key's fetch: with timedOut, a key still without a level
// starts empty as of the membership change; the waiting requests are
// queued again (their turn has come) and decided.
func (o *Owner) fetched(now time.Duration, key string, timedOut bool, fx *strategy.Effects) {
	f := o.fetching[key]
	delete(o.fetching, key)
	t := o.tab(key)
	if _, ok := t.Lookup(key); !ok && timedOut {
		b := t.Get(key, o.changedAt)
		_ = b.MergeLevel(0, o.changedAt) // 0 is within bounds, changedAt >= 0
	}
	for _, q := range f.waiting {
		o.queue.Push(q)
	}
	o.decideDue(now, fx)
}

// receiveQuery (validated: checkLevelQuery) answers a warm-up's level
// query with the level of each key this node holds, a full one for the
// others.
func (o *Owner) receiveQuery(now time.Duration, from strategy.NodeID, q *peerv1.OwnerLevelQuery, fx *strategy.Effects) {
	ls := make([]*peerv1.OwnerLevel, 0, len(q.Keys))
	for _, k := range q.Keys {
		o.noteClaim(now, from, k)
		sub := o.subOf(k)
		l := &peerv1.OwnerLevel{Key: k, LevelTicks: o.caps[sub], AtNs: int64(now)} // none held: full
		if b, ok := o.tables[sub].Lookup(k); ok {
			o.clampRaw(b, k)
			ticks, at := b.Level()
			l.LevelTicks, l.AtNs = ticks, int64(at)
		}
		if o.auto != nil {
			l.LevelTicks = o.autoAnswer(now, k, sub, l.LevelTicks, o.tables[sub])
		}
		ls = append(ls, l)
	}
	o.sendLevels(from, ls, false, fx)
}

// fetchTimeouts ends, in key order, the warm-ups whose deadline has come
// (their keys start empty as of the change, fetched).
func (o *Owner) fetchTimeouts(now time.Duration, fx *strategy.Effects) {
	if len(o.fetching) > 0 {
		var late []string
		for k, f := range o.fetching {
			if now >= f.deadline {
				late = append(late, k)
			}
		}
		slices.Sort(late)
		for _, k := range late {
			o.fetched(now, k, true, fx)
		}
	}
}
