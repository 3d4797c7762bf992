package dedupe

import "time"

// Grow raises the time entries added from now on are remembered to ttl
// when ttl is longer than the current one; a shorter ttl is ignored, so a
// window only grows (an entry is never forgotten earlier than it was
// promised) and entries stay in expiry order (Expire's FIFO). For
// strategies that re-derive the window from a new latency hint
// (strategy.LatencyHinter).
func (t *Table[K, V]) Grow(ttl time.Duration) {
	t.ttl = max(t.ttl, ttl)
}

// TTL is how long entries added now are remembered.
func (t *Table[K, V]) TTL() time.Duration { return t.ttl }
