// Package keyorder keeps the keys of a strategy's per-key map in a slice,
// for sweeps that visit a bounded number of keys per call and go on from
// there at the next (issue 28 item 5: no loop stall in proportion to the
// keys; a Go map's iteration cannot be resumed). The map's values keep
// their key's position (Add's result, updated through Remove's moved
// callback), so that any key is removed in O(1). Deterministic; no clock.
// Ours.
package keyorder

import (
	"slices"
	"time"

	"github.com/tokenmesh/tokenmesh/strategy"
)

// Order is the keys of a map, each once, in no particular order, with the
// cursor of the pass under way: Keys()[:Cursor()] are the keys the pass
// has visited. The zero value is empty. Not safe for concurrent use.
type Order struct {
	keys   []string
	cursor int
}

// Add appends key (new in the map) and returns its position, which the
// caller keeps with the key's value. A key added during a pass is visited
// in it.
func (o *Order) Add(key string) int {
	o.keys = append(o.keys, key)
	return len(o.keys) - 1
}

// Remove takes the key at pos out, keeping the visited keys together: a
// hole among them is filled with the last visited key, whose place the
// last key takes (and the cursor goes back by one: that key is not
// visited yet); a hole after the cursor with the last key. moved(key,
// pos) is told each key that changed place, to update its value's
// position. O(1).
func (o *Order) Remove(pos int, moved func(key string, pos int)) {
	if pos < o.cursor {
		o.move(o.cursor-1, pos, moved)
		pos = o.cursor - 1
		o.cursor--
	}
	last := len(o.keys) - 1
	o.move(last, pos, moved)
	o.keys[last] = ""
	o.keys = o.keys[:last]
}

func (o *Order) move(from, to int, moved func(string, int)) {
	if from == to {
		return
	}
	o.keys[to] = o.keys[from]
	moved(o.keys[to], to)
}

// Next is the key at the cursor, and false when the pass has visited
// every key (call EndPass).
func (o *Order) Next() (string, bool) {
	if o.cursor >= len(o.keys) {
		return "", false
	}
	return o.keys[o.cursor], true
}

// Visited moves the cursor past the key Next returned (kept). A key
// removed instead (Remove at the cursor) is replaced there by the last
// key, which Next returns then.
func (o *Order) Visited() { o.cursor++ }

// EndPass starts the next pass from the first key, and gives the array
// back when it is under a quarter full (of at least 1,024).
func (o *Order) EndPass() {
	o.cursor = 0
	if cap(o.keys) >= 1024 && len(o.keys) < cap(o.keys)/4 {
		o.keys = slices.Clone(o.keys)
	}
}

// Restart starts the pass under way over from the first key.
func (o *Order) Restart() { o.cursor = 0 }

// Len is the number of keys.
func (o *Order) Len() int { return len(o.keys) }

// Cursor is the number of keys the pass under way has visited.
func (o *Order) Cursor() int { return o.cursor }

// Key is the key at pos.
func (o *Order) Key(pos int) string { return o.keys[pos] }

// Bytes is the heap the order's array takes: a string header (16 B) per
// slot of its capacity.
func (o *Order) Bytes() int { return cap(o.keys) * 16 }

// Pass is an order a sweep steps through: *Order, and *Index (whose
// EndPass also rebuilds its map of positions).
type Pass interface {
	Next() (string, bool)
	Visited()
	EndPass()
}

// Step goes on with p's pass under way: it visits up to *budget keys from
// the cursor, taking each off *budget, by visit(key), which reports
// whether it removed the key from p (at the cursor: the last key moves
// there and is visited next) rather than kept it; and reports whether the
// pass is over (every key visited: EndPass called, the next pass starts
// from the first key).
func Step(p Pass, budget *int, visit func(key string) (removed bool)) bool {
	for ; *budget > 0; *budget-- {
		k, ok := p.Next()
		if !ok {
			break
		}
		if !visit(k) {
			p.Visited()
		}
	}
	if _, ok := p.Next(); ok {
		return false
	}
	p.EndPass()
	return true
}

// StepTables goes on with a pass over tables 0 to n-1 from table *at: it
// calls step(i, &budget) for table *at, which visits up to budget keys of
// it (taking them off budget) and reports whether that table's pass is
// over, and goes on to the next table while the budget lasts. It reports
// whether the pass over every table is over (*at back to 0): with fewer
// keys than budget in all tables, a pass is one call.
func StepTables(at *int, n, budget int, step func(i int, budget *int) bool) bool {
	for *at < n {
		if !step(*at, &budget) {
			return false
		}
		*at++
		if budget <= 0 && *at < n {
			return false
		}
	}
	*at = 0
	return true
}

// Budget is the keys one sweep step visits: at 1M keys on the 2-core
// test machine a step of 512 keys of a buckets.Table took at most 0.7-3.6
// ms of the loop thread's CPU (BenchmarkLoopStalls in strategy/registry;
// steps of 4,096 took 6-11 ms: the keys are spread over the heap, a few
// cache misses each).
const Budget = 512

// StepEvery is the time between two steps of a pass under way: a
// pass over 1M keys takes about 1,950 steps, 10 s, with the loop busy
// about a fifth of that time (before, one sweep of 1M keys took 0.5-1.1 s
// of the loop at once, every SweepInterval).
const StepEvery = 5 * time.Millisecond

// Sweeper spreads a strategy's sweeps of its tables over ticks: a pass
// begins every Every (from Start: the cadence of the sweeps in one go it
// replaces; right after the last one when a pass took longer) and visits
// Budget keys per Step, one table after another, with a wake-up
// StepEvery later while it is under way. Not safe for concurrent
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
// table i the pass is at, which visits up to Budget keys of it
// (e.g. buckets.Table.SweepStep) and reports whether its pass is over. It asks fx to
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
		fx.WakeAt(now + StepEvery)
		return
	}
	s.passing = false
	s.next = max(s.next, now+StepEvery)
	fx.WakeAt(s.next)
}

// Passing reports whether a pass is under way.
func (s *Sweeper) Passing() bool { return s.passing }
