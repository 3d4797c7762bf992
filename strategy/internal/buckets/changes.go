package buckets

import (
	"time"

	"github.com/tokenmesh/tokenmesh/strategy"
)

// Snapshots of the keys changed (issue 28: no loop stall in proportion to
// the keys; strategy.ChangeSnapshotter). Ours. Once ExportFull has been
// called, the table keeps a list of the keys whose bucket may have
// changed since the last ExportFull or ExportChanges: a key is listed
// when Get or Lookup hands out its bucket (every change of a level goes
// through one of them: checks, reservations, lends, clamps, peers'
// levels) and when it is dropped (a sweep, Delete). A bucket no caller
// touched keeps its raw state (level and last update; a sweep's Full
// only advances it, and refilling is exact), so the state a store holds
// for it from an earlier snapshot is still exact. A change of every
// bucket (SetRate, SetRateKeepingDue, Import) or a list longer than the
// keys held plus changesSlack stops the tracking: ExportChanges then
// reports false until the next ExportFull.

// changesSlack is how many more listed keys than keys held the list may
// hold before it is given up (a full snapshot costs the keys held; a
// churn that drops and adds keys faster than snapshots are taken makes
// the list grow without one).
const changesSlack = 4096

// changesChunk is the keys one array of the list holds: the list grows by
// arrays of this size, not by doubling one array, so that no call copies
// the whole list (measured: a doubling copy of 1M keys' strings held a
// sweep's step 6-9 ms of CPU, BenchmarkLoopStalls).
const changesChunk = 512

// changes is a Table's list of changed keys.
type changes struct {
	on bool // ExportFull was called, and nothing stopped the tracking since
	// chunks hold each key marked since (entry.dirty set) once, and the
	// keys dropped since, a key dropped and added again possibly more
	// than once; each chunk of capacity changesChunk, all full but the
	// last.
	chunks    [][]string
	n         int // keys listed
	goneAlloc int // the heap of the dropped keys' strings the list keeps alive
}

// invalidate stops the tracking until the next ExportFull (entries'
// dirty flags left set are cleared there).
func (c *changes) invalidate() {
	*c = changes{}
}

// add lists key.
func (c *changes) add(key string) {
	if len(c.chunks) == 0 || len(c.chunks[len(c.chunks)-1]) == changesChunk {
		c.chunks = append(c.chunks, make([]string, 0, changesChunk))
	}
	last := &c.chunks[len(c.chunks)-1]
	*last = append(*last, key)
	c.n++
}

// bytes is the list's heap: its arrays (a string header per slot), the
// slice of them, and the strings of the dropped keys.
func (c *changes) bytes() int {
	return len(c.chunks)*changesChunk*16 + cap(c.chunks)*24 + c.goneAlloc
}

// reset empties the list after a snapshot, keeping its first array.
func (c *changes) reset() {
	if len(c.chunks) > 0 {
		first := c.chunks[0]
		clear(first)
		c.chunks = append(c.chunks[:0:0], first[:0])
	}
	c.n, c.goneAlloc = 0, 0
}

// mark lists e's key as changed (once until the next snapshot).
func (t *Table) mark(e *entry) {
	if !t.ch.on || e.dirty {
		return
	}
	e.dirty = true
	t.ch.add(t.order.Key(e.pos))
	t.bound()
}

// dropped lists e's key, about to be dropped, as gone (drop calls it
// before the entry leaves the map and the order).
func (t *Table) dropped(e *entry) {
	if !t.ch.on {
		return
	}
	key := t.order.Key(e.pos)
	if !e.dirty {
		t.ch.add(key)
	}
	t.ch.goneAlloc += allocBytes(len(key))
	t.bound()
}

// bound gives the list up when it holds more than the keys plus
// changesSlack.
func (t *Table) bound() {
	if t.ch.n > len(t.m)+changesSlack {
		t.ch.invalidate()
	}
}

// Tracking reports whether ExportChanges can report the changes since the
// last snapshot (false before the first ExportFull, and after an event
// that stopped the tracking).
func (t *Table) Tracking() bool { return t.ch.on }

// ExportFull is Export, and starts (or restarts) the list of changed
// keys from now: the next ExportChanges reports the changes since this
// call. O(keys).
func (t *Table) ExportFull(now time.Duration, keep func(key string) bool, emit func(strategy.KeyState)) {
	for k, e := range t.m {
		e.dirty = false
		if st, ok := exported(k, e, now, keep); ok {
			emit(st)
		}
	}
	t.ch.on = true
	t.ch.reset()
}

// ExportChanges calls emit with the state (as Export gives it) of every
// key listed since the last ExportFull or ExportChanges that Export
// would emit at now, and gone with every other listed key (dropped, full
// at now, or one keep says no to), each key once, and empties the list.
// false, calling neither, when the table does not track its changes
// (Tracking). O(keys listed).
func (t *Table) ExportChanges(now time.Duration, keep func(key string) bool, emit func(strategy.KeyState), gone func(key string)) bool {
	if !t.ch.on {
		return false
	}
	var told map[string]struct{} // the dropped keys told gone already
	for _, chunk := range t.ch.chunks {
		t.exportChunk(chunk, now, keep, emit, gone, &told)
	}
	t.ch.reset()
	return true
}

// exportChunk is ExportChanges' work on one array of the list; told holds
// the dropped keys reported gone already.
func (t *Table) exportChunk(chunk []string, now time.Duration, keep func(key string) bool, emit func(strategy.KeyState), gone func(key string), told *map[string]struct{}) {
	for _, k := range chunk {
		e, ok := t.m[k]
		switch {
		case ok && e.dirty:
			e.dirty = false
			if st, ok := exported(k, e, now, keep); ok {
				emit(st)
			} else {
				gone(k)
			}
		case ok:
			// Listed again after a drop and an add: handled at its first
			// place with the flag set, or cleared there.
		default:
			if *told == nil {
				*told = map[string]struct{}{}
			}
			if _, dup := (*told)[k]; !dup {
				(*told)[k] = struct{}{}
				gone(k)
			}
		}
	}
}
