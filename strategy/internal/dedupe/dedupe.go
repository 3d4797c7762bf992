// Package dedupe remembers, for a fixed time after receipt, the requests a
// node received from peers and what it answered, so that a retransmitted
// or duplicated message is decided once and its answer sent again (ours:
// the at-most-once receive of owner's and lease's forwards). Every entry
// lives the same TTL from its receipt and time never decreases, so entries
// expire in the order they were added: a FIFO, not a heap.
package dedupe

import (
	"iter"
	"maps"
	"time"

	"github.com/tokenmesh/tokenmesh/strategy"
)

// Table maps a received message's ID (K: origin and request ID, and
// whatever else names it) to what this node answered (V), each for TTL
// after it was added. Not safe for concurrent use.
type Table[K comparable, V any] struct {
	ttl   time.Duration
	m     map[K]V
	order []entry[K] // by expiry time, oldest first
	peak  int        // the most entries m held since it was made or shrunk (MemoryBytes)
}

type entry[K comparable] struct {
	at time.Duration
	id K
}

// New returns an empty table whose entries live ttl (a duration) after
// they are added.
func New[K comparable, V any](ttl time.Duration) *Table[K, V] {
	return &Table[K, V]{ttl: ttl, m: map[K]V{}}
}

// Get returns what was remembered for id, and whether anything was.
func (t *Table[K, V]) Get(id K) (V, bool) {
	v, ok := t.m[id]
	return v, ok
}

// Add remembers v for id from now until now + TTL. When no other entry is
// waiting to expire it asks fx for a wake-up at that time (Expire asks for
// the next ones). id must not be remembered already (Get first).
func (t *Table[K, V]) Add(now time.Duration, id K, v V, fx *strategy.Effects) {
	t.m[id] = v
	t.peak = max(t.peak, len(t.m))
	t.order = append(t.order, entry[K]{at: now + t.ttl, id: id})
	if len(t.order) == 1 {
		fx.WakeAt(now + t.ttl)
	}
}

// Expire forgets the entries whose TTL ended at or before now and, if it
// forgot any and others remain, asks fx for a wake-up when the next one
// ends.
func (t *Table[K, V]) Expire(now time.Duration, fx *strategy.Effects) {
	n := 0
	for n < len(t.order) && t.order[n].at <= now {
		delete(t.m, t.order[n].id)
		n++
	}
	t.order = t.order[n:]
	if len(t.order) == 0 {
		t.order = nil // its array given back (a slice cut from the front keeps it)
	}
	if n > 0 && len(t.order) > 0 {
		fx.WakeAt(t.order[0].at)
	}
}

// Len is the number of IDs remembered.
func (t *Table[K, V]) Len() int { return len(t.m) }

// IDs iterates over the IDs remembered, in no particular order.
func (t *Table[K, V]) IDs() iter.Seq[K] { return maps.Keys(t.m) }
