package concurrency

import (
	"slices"
	"time"

	"github.com/tokenmesh/tokenmesh/internal/minheap"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/internal/keyorder"
	"github.com/tokenmesh/tokenmesh/strategy/internal/memsize"
)

// Timed work without a walk of every key (issue 28 item 5: no loop stall
// in proportion to the keys). Ours. Every Tick walked the pending
// forwards for those past their deadline and sorted every key with leases
// held (sweepLeases), and the sweep walked every permit table and granted
// forward at once (1.65 s of the loop's CPU at 1M keys). Now a Tick takes
// from a heap of deadlines (due) only the events that have come, and the
// sweep visits the permit tables in steps of keyorder.Budget.

// dueKind is what a due event is the time of.
type dueKind uint8

const (
	dueForward dueKind = iota // id: a forwarded acquire's deadline (pending)
	dueLease                  // key: a lease held ends, or a permit granted from it lapses (or a lease ended empty, at once)
	dueAsk                    // key: a lease ask's deadline
	dueHot                    // key: a hot count's window ends
)

// dueEvent is an event of the due heap: at its time, Tick looks at its
// forward or key, which may have changed since (stale events are
// skipped: every check is made against the state).
type dueEvent struct {
	at   time.Duration
	id   uint64
	key  string // shared with the key's map entry
	kind dueKind
}

func dueLess(a, b dueEvent) bool { return a.at < b.at }

// idAt is a granted forward's expiry in the granted heap.
type idAt struct {
	at time.Duration
	id uint64
}

func idAtLess(a, b idAt) bool { return a.at < b.at }

// Heap entry sizes, bytes.
var (
	dueBytes  = int(unsafeSizeofDue())
	idAtBytes = 16
)

// pushDue adds e to the due heap.
func (c *Concurrency) pushDue(e dueEvent) {
	if c.due == nil {
		c.due = minheap.New(dueLess)
	}
	c.due.Push(e)
}

// runDue handles the events whose time has come, in the order the walks
// they replace took: the forwards past their deadline refused (by request
// id), the keys with leases held (in key order: their lapsed permits
// freed, the slots of an ended lease returned, an ended empty lease
// dropped), the asks past their deadline and the hot counts whose window
// ended forgotten. O(events due + their keys' leases).
func (c *Concurrency) runDue(now time.Duration, fx *strategy.Effects) {
	if c.due == nil || c.due.Len() == 0 || c.due.Peek().at > now {
		return
	}
	var late []uint64
	var leaseKeys []string
	for c.due.Len() > 0 && c.due.Peek().at <= now {
		e := c.due.Pop()
		switch e.kind {
		case dueForward:
			if f := c.pending[e.id]; f != nil && f.deadline <= now {
				late = append(late, e.id)
			}
		case dueLease:
			leaseKeys = append(leaseKeys, e.key)
		default:
			c.forgetDue(now, e)
		}
	}
	slices.Sort(late)
	for _, id := range slices.Compact(late) {
		if _, ok := c.pending[id]; ok {
			dropID(c.pending, &c.mem.pending, id)
			fx.Decide(id, false)
		}
	}
	slices.Sort(leaseKeys) // the returns leave in a deterministic order
	for _, k := range slices.Compact(leaseKeys) {
		c.expireLeases(now, k, fx)
	}
}

// forgetDue forgets what e (of kind dueAsk or dueHot) is due for, if it
// still is at now: an ask past its deadline, or a hot count whose window
// (lease_ttl) ended.
func (c *Concurrency) forgetDue(now time.Duration, e dueEvent) {
	switch e.kind {
	case dueAsk:
		if a := c.asks[e.key]; a != nil && a.deadline <= now {
			memsize.Delete(c.asks, &c.mem.asks, e.key)
		}
	case dueHot:
		if h := c.hot[e.key]; h != nil && now-h.since >= c.leaseTTL {
			memsize.Delete(c.hot, &c.mem.hot, e.key)
		}
	}
}

// sweepTick runs the sweep: a pass begins when the sweep is due (every
// permit_ttl while there is state: scheduleSweep) and no pass is under
// way; it forgets the granted forwards expired at its beginning (granted
// heap: O(expired)) and then visits keyorder.Budget permit tables per
// Tick, with a wake-up keyorder.StepEvery later while it is under way.
func (c *Concurrency) sweepTick(now time.Duration, fx *strategy.Effects) {
	if !c.passing && c.nextSweep != 0 && c.nextSweep <= now {
		c.nextSweep = 0
		c.passing, c.passAt = true, now
		c.expireGranted(now)
		c.trimViews(now)
	}
	if !c.passing {
		return
	}
	if !c.sweepStep(keyorder.Budget) {
		fx.WakeAt(now + keyorder.StepEvery)
		return
	}
	c.passing = false
	if len(c.keys) > 0 || len(c.leases) > 0 || len(c.granted) > 0 {
		c.scheduleSweep(c.passAt, fx) // as the sweep in one go at passAt did
		if c.nextSweep <= now {       // the pass took longer than permit_ttl: the next right after
			c.nextSweep = now + keyorder.StepEvery
			fx.WakeAt(c.nextSweep)
		}
	}
}

// expireGranted forgets the granted forwards expired at now.
func (c *Concurrency) expireGranted(now time.Duration) {
	for c.gexp != nil && c.gexp.Len() > 0 && c.gexp.Peek().at <= now {
		e := c.gexp.Pop()
		if g, ok := c.granted[e.id]; ok && g.expires <= now {
			dropID(c.granted, &c.mem.granted, e.id)
		}
	}
}

// sweepStep visits the next permit tables of the pass under way, at most
// budget (keyorder.Order: the pass goes on at the next call): each
// table's permits and leases granted lapsed at the pass's beginning
// (passAt) are freed, and a table left with none and no waiters is
// dropped. It reports whether the pass is over (every table held at its
// beginning or added since visited). Expiring at passAt frees what the
// sweep in one go at passAt freed, and a table touched since holds a
// permit, lease or waiter newer than that; an empty table decides as no
// table (grant, Remaining, InFlight, passRelease, onReturn all read it so).
func (c *Concurrency) sweepStep(budget int) bool {
	return keyorder.Step(&c.order, &budget, func(k string) bool {
		kp := c.keys[k]
		c.expireTable(c.passAt, kp)
		if len(kp.permits) == 0 && len(kp.leases) == 0 && len(kp.waiters) == 0 {
			c.dropTable(k, kp)
			return true
		}
		return false
	})
}

// movedKey records that key's place in the order is now pos.
func (c *Concurrency) movedKey(key string, pos int) { c.keys[key].pos = pos }

// expireLeases is, for key's leases held, what every Tick did for every
// key: their lapsed permits freed and the unused slots of the ended ones
// returned (expireLease), the ended leases with no slot left dropped.
func (c *Concurrency) expireLeases(now time.Duration, k string, fx *strategy.Effects) {
	ls, ok := c.leases[k]
	if !ok {
		return
	}
	for _, l := range ls {
		c.expireLease(now, k, l, fx)
	}
	ls = slices.DeleteFunc(ls, func(l *lease) bool {
		if now >= l.end && l.slots == 0 {
			c.mem.leaseMem -= int(l.mem)
			return true
		}
		return false
	})
	if len(ls) == 0 {
		c.dropLeases(k)
	} else {
		c.setLeases(k, ls)
	}
}

// leaseEnded asks the next Tick to drop key's leases that ended with no
// slot left (the walk of every key at every Tick did).
func (c *Concurrency) leaseEnded(now time.Duration, key string, l *lease) {
	if now >= l.end && l.slots == 0 {
		c.pushDue(dueEvent{at: now, key: key, kind: dueLease})
	}
}
