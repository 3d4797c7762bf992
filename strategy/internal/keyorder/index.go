package keyorder

import (
	"github.com/tokenmesh/tokenmesh/strategy/internal/memsize"
)

// Index is an Order that keeps its keys' positions itself, in a map of
// its own, for a strategy's map whose values cannot hold one (a map of
// maps, a value shared with another package's type). It costs a slot of
// that map per key (a string header and an int32: 24 B) besides the
// Order's 16 B, which Bytes counts. Remove takes a key, not a position.
// The zero value is empty. Not safe for concurrent use. Ours.
type Index struct {
	Order
	pos  map[string]int32
	peak int // the most keys pos held since it was made or rebuilt (its slots)
}

// indexSlot is a slot of Index.pos: the key's string header and the
// position (padded to 8).
const indexSlot = memsize.StringHeader + 8

// Add appends key, which must not be in the index. A key added during a
// pass is visited in it.
func (x *Index) Add(key string) {
	if x.pos == nil {
		x.pos = map[string]int32{}
	}
	x.pos[key] = int32(x.Order.Add(key))
	x.peak = max(x.peak, len(x.pos))
}

// Remove takes key out, if the index holds it (Order.Remove: the visited
// keys kept together). O(1).
func (x *Index) Remove(key string) {
	p, ok := x.pos[key]
	if !ok {
		return
	}
	delete(x.pos, key)
	x.Order.Remove(int(p), func(k string, q int) { x.pos[k] = int32(q) })
}

// Has reports whether the index holds key.
func (x *Index) Has(key string) bool {
	_, ok := x.pos[key]
	return ok
}

// EndPass is Order.EndPass, and rebuilds the positions' map when it holds
// under a quarter of its peak (of at least 1,024): a Go map keeps its
// slots after deletes.
func (x *Index) EndPass() {
	x.Order.EndPass()
	if x.peak >= 1024 && len(x.pos) < x.peak/4 {
		x.pos = memsize.Rebuild(x.pos)
		x.peak = len(x.pos)
	}
}

// Bytes is the heap the index takes: the Order's array and the
// positions' map (its slots by its peak; the key strings are the
// strategy's map's).
func (x *Index) Bytes() int {
	if x.pos == nil {
		return x.Order.Bytes()
	}
	return x.Order.Bytes() + memsize.MapHeader + memsize.Map(x.peak, indexSlot)
}
