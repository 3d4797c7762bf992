package buckets

import (
	"math"
	"time"

	"github.com/tokenmesh/tokenmesh/strategy"
)

// Incremental sweeps (issue 28 item 5: no loop stall in proportion to the
// keys). Ours. A sweep drops the buckets that are full (a full bucket
// equals a new one, so dropping one at any time it is full changes no
// decision). Done in one go, a sweep of 1M keys held the node's loop for
// 0.5-1.1 s (docs/PERFORMANCE.md, "Loop stalls"); SweepStep visits at most
// a budget of keys per call and goes on from there at the next one, over
// Table.order, so that a strategy spreads a pass over many ticks.

// SweepBudget is the keys one sweep step visits: about 1 ms of the loop
// at 1M keys on the 2-core test machine (a step of 4,096 took 6-11 ms
// there, BenchmarkLoopStalls in strategy/registry: the keys are spread
// over the heap, a few cache misses each).
const SweepBudget = 512

// SweepStepEvery is the time between two steps of a pass under way: a
// pass over 1M keys takes about 1,950 steps, 10 s, with the loop busy
// about a fifth of that time (before, one sweep of 1M keys took 0.5-1.1 s
// of the loop at once, every SweepInterval).
const SweepStepEvery = 5 * time.Millisecond

// SweepStep visits the next keys of the pass under way, at most budget:
// it drops each whose bucket is full at now and for which held (nil: none)
// is false (a key with tokens lent out is not full), and reports whether
// the pass is over (every key held at its start or added since visited
// once; the map and the order's array rebuilt if they shrank under a
// quarter). The next call begins a new pass. A key dropped by Delete
// during a pass, or added, is handled (Delete keeps the visited keys
// together: none is skipped). O(budget).
func (t *Table) SweepStep(now time.Duration, budget int, held func(key string) bool) bool {
	for n := 0; n < budget && t.cursor < len(t.order); n++ {
		k := t.order[t.cursor]
		e := t.m[k]
		if e.b.Full(now) && (held == nil || !held(k)) {
			t.drop(k, e) // the last key moves to cursor: visited next
			continue
		}
		t.cursor++
	}
	if t.cursor < len(t.order) {
		return false
	}
	t.cursor = 0
	t.shrink()
	return true
}

// Sweep drops the buckets that are full at now, all in one call, and
// returns how many it dropped (a pass under way starts over).
func (t *Table) Sweep(now time.Duration) int {
	n := len(t.m)
	t.cursor = 0
	t.SweepStep(now, math.MaxInt, nil)
	return n - len(t.m)
}

// drop deletes key's entry e from the map and the order, and its share
// of the accounting.
func (t *Table) drop(key string, e *entry) {
	delete(t.m, key)
	t.removeAt(e.pos)
	t.keyBytes -= len(key)
	t.keyAlloc -= allocBytes(len(key))
}

// removeAt takes the key at pos out of the order, keeping the keys the
// pass under way visited in order[:cursor]: a hole among them is filled
// with the last visited key, whose place the last key takes (and cursor
// goes back by one, since that key is not visited yet).
func (t *Table) removeAt(pos int) {
	if pos < t.cursor {
		t.move(t.cursor-1, pos)
		pos = t.cursor - 1
		t.cursor--
	}
	last := len(t.order) - 1
	t.move(last, pos)
	t.order[last] = ""
	t.order = t.order[:last]
}

// move puts the key at order[from] at order[to] (its entry told).
func (t *Table) move(from, to int) {
	if from == to {
		return
	}
	k := t.order[from]
	t.order[to] = k
	t.m[k].pos = to
}

// Sweeper spreads a strategy's sweeps of its tables over ticks: a pass
// begins every Every (from Start: the cadence of the sweeps in one go it
// replaces; right after the last one when a pass took longer) and visits
// SweepBudget keys per Step, one table after another, with a wake-up
// SweepStepEvery later while it is under way. Not safe for concurrent
// use. Ours.
type Sweeper struct {
	Every   time.Duration
	next    time.Duration // when the next pass begins
	passing bool
	table   int // the table the pass is at
}

// Start schedules the first pass, Every after now.
func (s *Sweeper) Start(now time.Duration, fx *strategy.Effects) {
	s.next = now + s.Every
	s.passing = false
	fx.WakeAt(s.next)
}

// Step runs one step of the pass due at now, if any: at a pass's
// beginning begin (nil: nothing) and then, per step, step(i) for the
// table i the pass is at, which visits up to SweepBudget keys of it
// (Table.SweepStep) and reports whether its pass is over. It asks fx to
// wake it for the next step, or for the next pass once step has been
// done for all n tables.
func (s *Sweeper) Step(now time.Duration, fx *strategy.Effects, n int, begin func(), step func(i int) bool) {
	if !s.passing {
		if now < s.next {
			return
		}
		s.passing, s.table = true, 0
		s.next = max(s.next+s.Every, now) // the pass after this one
		if begin != nil {
			begin()
		}
	}
	if s.table < n && step(s.table) {
		s.table++
	}
	if s.table < n {
		fx.WakeAt(now + SweepStepEvery)
		return
	}
	s.passing = false
	s.next = max(s.next, now+SweepStepEvery)
	fx.WakeAt(s.next)
}

// Passing reports whether a pass is under way.
func (s *Sweeper) Passing() bool { return s.passing }
