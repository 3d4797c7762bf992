package buckets

import (
	"math"
	"time"

	"github.com/tokenmesh/tokenmesh/strategy/internal/keyorder"
)

// Incremental sweeps (issue 28 item 5: no loop stall in proportion to the
// keys). Ours. A sweep drops the buckets that are full (a full bucket
// equals a new one, so dropping one at any time it is full changes no
// decision). Done in one go, a sweep of 1M keys held the node's loop for
// 0.5-1.1 s (docs/PERFORMANCE.md, "Loop stalls"); SweepStep visits at most
// a budget of keys per call and goes on from there at the next one, over
// Table.order (keyorder.Order), so that a strategy spreads a pass over
// many ticks (keyorder.Sweeper).

// SweepStep visits the next keys of the pass under way, at most budget:
// it drops each whose bucket is full at now and for which held (nil: none)
// is false (a key with tokens lent out is not full), and reports whether
// the pass is over (every key held at its start or added since visited
// once; the map and the order's array rebuilt if they shrank under a
// quarter). The next call begins a new pass. A key dropped by Delete
// during a pass, or added, is handled (Delete keeps the visited keys
// together: none is skipped). O(budget).
func (t *Table) SweepStep(now time.Duration, budget int, held func(key string) bool) bool {
	over := keyorder.Step(&t.order, &budget, func(k string) bool {
		if e := t.m[k]; e.b.Full(now) && (held == nil || !held(k)) {
			t.drop(k, e)
			return true
		}
		return false
	})
	if over {
		t.shrink()
	}
	return over
}

// Sweep drops the buckets that are full at now, all in one call, and
// returns how many it dropped (a pass under way starts over).
func (t *Table) Sweep(now time.Duration) int {
	n := len(t.m)
	t.order.Restart()
	t.SweepStep(now, math.MaxInt, nil)
	return n - len(t.m)
}

// drop deletes key's entry e from the map and the order, and its share
// of the accounting.
func (t *Table) drop(key string, e *entry) {
	t.dropped(e)
	delete(t.m, key)
	t.order.Remove(e.pos, t.moved)
	t.keyBytes -= len(key)
	t.keyAlloc -= allocBytes(len(key))
}

// moved records that key's place in the order is now pos.
func (t *Table) moved(key string, pos int) { t.m[key].pos = pos }
