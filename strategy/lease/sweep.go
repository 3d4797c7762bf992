package lease

import (
	"time"

	"github.com/tokenmesh/tokenmesh/strategy/internal/keyorder"
)

// The sweep in steps (issue 28 item 5: no loop stall in proportion to the
// keys; the sweep in one go held the loop for 543 ms of CPU at 1M keys).
// Ours. keyorder.Sweeper begins a pass every sweepEvery, as the sweep in
// one go ran, and visits keyorder.Budget keys per Tick, one table after
// another: the pools, the replicated states (records), the states given
// up (gave), the holdings and the on_timeout=local fallback buckets. Each
// key is judged as the sweep in one go judged it at the pass's beginning
// (passAt); an entry set (made or replaced) since is not dropped in this
// pass (its swept.set is the pass's number), and an entry changed in
// place since shows a time after passAt (a pool's Last, a holding's
// lastRequestAt), so a key is dropped at its visit only if that sweep
// dropped it too: later, never earlier.

// swept is a per-key entry's place in its table's sweep order and the
// pass during which it was last set (not dropped in that pass).
type swept struct {
	pos int32
	set uint32
}

func (s *swept) place() *swept { return s }

// sweptEntry is a per-key entry of a swept table (*pool, *record, *gave,
// *holding).
type sweptEntry interface{ place() *swept }

// putKey records v, about to be key's entry of m (replacing the entry m
// holds, if any), in o: in the old entry's place, or appended.
func putKey[V sweptEntry](o *keyorder.Order, m map[string]V, key string, v V, pass uint32) {
	if old, ok := m[key]; ok {
		v.place().pos = old.place().pos
	} else {
		v.place().pos = int32(o.Add(key))
	}
	v.place().set = pass
}

// dropKey takes key, whose entry of m is v, out of o (before m's delete).
func dropKey[V sweptEntry](o *keyorder.Order, m map[string]V, v V) {
	o.Remove(int(v.place().pos), func(k string, pos int) { m[k].place().pos = int32(pos) })
}

// Tables of a pass, in order.
const (
	sweepPools = iota
	sweepRecords
	sweepGave
	sweepHoldings
	sweepLocal
	sweepTables
)

// beginPass starts a pass at now: its number and time, and the conserve
// pools' sweep (in one go: only under partition=conserve).
func (l *Lease) beginPass(now time.Duration) {
	l.pass++
	l.sweepAt = 0
	l.passAt = now
	l.sweepConserve(now)
}

// sweepSome goes on with the pass under way at now, visiting up to budget
// keys in the tables from the one it is at, and reports whether the pass
// is over: with fewer keys than budget in all tables, a pass is one call
// (one Tick), as the sweep in one go was.
func (l *Lease) sweepSome(now time.Duration, budget int) bool {
	return keyorder.StepTables(&l.sweepAt, sweepTables, budget, func(i int, budget *int) bool {
		return l.sweepStep(now, i, budget)
	})
}

// sweepStep visits up to *budget keys of table i of the pass under way at
// now, taking them off *budget, and reports whether the table's pass is
// over (after the last table, the maps and heaps are shrunk: shrinkMaps).
func (l *Lease) sweepStep(now time.Duration, i int, budget *int) bool {
	switch i {
	case sweepPools:
		return l.stepPools(budget)
	case sweepRecords:
		return stepTable(&l.recOrder, l.records, budget, func(k string, r *record) bool {
			// A full record is kept while its owner may still hold the key's
			// pool (fill time + sweepLag after the state; a busy key is shipped
			// again before); without one a takeover starts conservatively.
			if p := r.asPool(); r.set != l.pass && r.at+l.fillTime+l.sweepLag <= l.passAt && l.sh.full(p, l.passAt) {
				l.dropRecord(k)
				return true
			}
			return false
		})
	case sweepGave:
		return stepTable(&l.gaveOrder, l.gave, budget, func(k string, g *gave) bool {
			// After takeover + fill time a conservative start is full and a
			// state given up has refilled, its leases ended.
			if g.set != l.pass && g.at+l.takeover+l.fillTime < l.passAt { // g.at is never before g.answeredAt
				l.dropGave(k)
				return true
			}
			return false
		})
	case sweepHoldings:
		return stepTable(&l.holdOrder, l.keys, budget, l.sweepHolding)
	default:
		if l.local.SweepStep(now, max(*budget, 1), nil) { // the last table: what it visits is not counted
			l.shrinkMaps()
			return true
		}
		return false
	}
}

// stepTable visits up to *budget keys of m in o's pass under way, taking
// them off *budget, dropping those drop says it dropped (drop deletes the
// key from m and o), and reports whether the pass is over (the order
// ended: EndPass).
func stepTable[V any](o *keyorder.Order, m map[string]V, budget *int, drop func(string, V) bool) bool {
	return keyorder.Step(o, budget, func(k string) bool { return drop(k, m[k]) })
}

// stepPools drops, of the next budget pools, the full pools without
// leases: a pool is dropped only if it was full at passAt - sweepLag and
// nothing was decided after (a forward or ask still to come has an
// arrival after that: forwarders give up after timeout, and a new full
// pool decides it as this one would have), and no request of its key is
// queued.
func (l *Lease) stepPools(budget *int) bool {
	queued := l.queuedKeys()
	at := l.passAt - l.sweepLag
	return stepTable(&l.poolOrder, l.pools, budget, func(k string, p *pool) bool {
		if queued[k] || p.set == l.pass || p.Last > at {
			return false
		}
		if cp := *p; l.sh.full(&cp, at) {
			l.dropPool(k)
			return true
		}
		return false
	})
}

// queuedKeys is the set of keys with a request in the ordering buffer
// (nil when it is empty). O(requests queued).
func (l *Lease) queuedKeys() map[string]bool {
	if l.queue.Len() == 0 {
		return nil
	}
	m := make(map[string]bool, l.queue.Len())
	for _, q := range l.queue.Items() {
		m[q.key] = true
	}
	return m
}

// sweepHolding forgets h's accepted grants past their expiry at passAt,
// and drops h if it asks for nothing, holds no lease and no dry hint, and
// saw no request for 2*window + ttl before passAt.
func (l *Lease) sweepHolding(k string, h *holding) bool {
	for seq, exp := range h.accepted {
		if exp <= l.passAt {
			delete(h.accepted, seq)
		}
	}
	if h.set == l.pass || h.asking || len(h.leases) > 0 || h.emptyUntil > l.passAt || l.passAt < h.lastRequestAt+2*l.window+l.ttl {
		return false
	}
	l.dropHolding(k, h)
	return true
}
