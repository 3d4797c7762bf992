package keyorder

// Index is an Order that keeps its keys' positions itself, in a map of
// its own, for a strategy's map whose values cannot hold one (a map of
// maps, a value shared with another package's type). It costs a slot of
// that map per key (IndexSlot) besides the Order's 16 B: a strategy counts
// it as memsize.MapHeader + memsize.Map(Peak(), IndexSlot) + Order.Bytes()
// (memsize is beside this package on the package map: not imported). Remove takes a key, not a position.
// The zero value is empty. Not safe for concurrent use. Ours.
type Index struct {
	Order
	pos  map[string]int32
	peak int // the most keys pos held since it was made or rebuilt (its slots)
}

// IndexSlot is the bytes of a slot of an Index's map of positions: the
// key's string header (16) and the int32 position, padded to 8.
const IndexSlot = 16 + 8

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
		m := make(map[string]int32, len(x.pos))
		for k, p := range x.pos {
			m[k] = p
		}
		x.pos, x.peak = m, len(m)
	}
}

// Peak is the most keys the map of positions held since it was made or
// rebuilt (its slots: a Go map keeps them after deletes); 0 before the
// first Add.
func (x *Index) Peak() int { return x.peak }
