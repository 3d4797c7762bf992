package dedupe

import (
	"slices"
	"unsafe"

	"github.com/tokenmesh/tokenmesh/strategy/internal/memsize"
)

// MemoryBytes estimates the heap the table takes, bytes, when each value
// points to its own valueAlloc-byte allocation (0: values held in the
// map's slots): the table itself, its map's slots (sized by the most
// entries it held since it was made or last shrunk: a Go map keeps them),
// a value allocation per entry and the expiry order's array. Strings
// inside K or V are not counted. O(1). Ours.
func (t *Table[K, V]) MemoryBytes(valueAlloc int) int {
	slot := int(unsafe.Sizeof(struct {
		k K
		v V
	}{}))
	return memsize.Alloc(int(unsafe.Sizeof(*t))) + memsize.MapHeader + memsize.Map(t.peak, slot) +
		len(t.m)*memsize.Alloc(valueAlloc) + memsize.Alloc(cap(t.order)*int(unsafe.Sizeof(entry[K]{})))
}

// Shrink copies the map and the expiry order into new ones sized for their
// entries when the map holds under a quarter of the most it held (of at
// least 1,024): a Go map keeps its slots after deletes, and the order's
// array its capacity. The entries and their expiry order are unchanged.
func (t *Table[K, V]) Shrink() {
	if t.peak >= 1024 && len(t.m) < t.peak/4 {
		t.m = memsize.Rebuild(t.m)
		t.order = slices.Clone(t.order)
		t.peak = len(t.m)
	}
}
