// Package memsize estimates the Go heap that strategy state takes, for
// strategy.MemoryReporter: the allocation size classes of Go's allocator
// and the slot tables of Go (1.24+, Swiss table) maps, and Keys, which
// keeps a map's share of the estimate incrementally (O(1) per key added or
// removed) so that reading it walks no key. Deterministic; no clock. Ours:
// the sizes follow the Go runtime's sizeclasses.go and
// internal/runtime/maps, measured against runtime.MemStats by each
// strategy's memory test (docs/PERFORMANCE.md).
package memsize

// sizeClasses are the Go allocator's small-object size classes, bytes
// (runtime/sizeclasses.go, Go 1.21-1.26): an allocation of n bytes takes
// the first class >= n.
var sizeClasses = [...]int{8, 16, 24, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224, 240, 256,
	288, 320, 352, 384, 416, 448, 480, 512, 576, 640, 704, 768, 896, 1024, 1152, 1280, 1408, 1536, 1792,
	2048, 2304, 2688, 3072, 3200, 3456, 4096, 4864, 5376, 6144, 6528, 6784, 6912, 8192, 9472, 9728, 10240,
	10880, 12288, 13568, 14336, 16384, 18432, 19072, 20480, 21760, 24576, 27264, 28672, 32768}

// pageBytes is the runtime's page: allocations above 32 KiB take whole pages.
const pageBytes = 8192

// Alloc is the heap an allocation of n bytes takes, in bytes: n rounded up
// to its size class (whole 8 KiB pages above 32 KiB); 0 for n <= 0. Tiny
// pointer-free allocations (under 16 B) share 16-byte blocks in the
// runtime; Alloc rounds them to 8 or 16, what they take on average.
func Alloc(n int) int {
	if n <= 0 {
		return 0
	}
	if n > sizeClasses[len(sizeClasses)-1] {
		return (n + pageBytes - 1) / pageBytes * pageBytes
	}
	lo, hi := 0, len(sizeClasses)-1
	for lo < hi { // the first class >= n
		mid := (lo + hi) / 2
		if sizeClasses[mid] < n {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return sizeClasses[lo]
}

// Map layout of Go's Swiss-table maps (internal/runtime/maps): groups of 8
// slots, each group with an 8-byte control word; a table holds at most
// 1,024 slots (a bigger map is a directory of tables) and grows (doubles,
// or splits in two) when more than 7/8 of its slots are used, so a map's
// slots are a power of two. A table's groups are one allocation, rounded
// up to its size class.
const (
	groupSlots             = 8
	groupCtrlBytes         = 8
	maxTableSlots          = 1024
	maxLoadNum, maxLoadDen = 7, 8
	tableHeaderBytes       = 48 // a table's struct (maps.table), plus its directory entry
	// StringHeader is the bytes a string takes in a struct or map slot.
	StringHeader = 16
	// Pointer is the bytes a pointer (or map, or chan) takes.
	Pointer = 8
	// SliceHeader is the bytes a slice takes in a struct or map slot.
	SliceHeader = 24
	// MapHeader is the heap a map value itself takes (internal/runtime/maps.Map),
	// besides its tables: what a map held in each of many structs adds.
	MapHeader = 48
)

// Slots is the number of slots a map holds after it held peak entries
// at once (Go maps do not shrink on delete): 0 for none, 8 up to 8, then
// the least power of two that keeps peak within 7/8 of it.
func Slots(peak int) int {
	if peak <= 0 {
		return 0
	}
	if peak <= groupSlots {
		return groupSlots
	}
	need := (peak*maxLoadDen + maxLoadNum - 1) / maxLoadNum
	slots := groupSlots
	for slots < need {
		slots *= 2
	}
	return slots
}

// Map is the heap of a map's tables, in bytes, after it held peak entries
// whose slots take slotBytes each (key plus value, as laid out in a struct:
// StringHeader+Pointer for map[string]*T; a zero-size value is padded to a
// Pointer, so map[string]struct{} takes StringHeader+Pointer too): the
// groups of Slots(peak) slots in allocations of at most 1,024 slots each,
// rounded to their size class, and the tables' headers. The keys' and
// values' own allocations (a string's bytes, a *T's struct) are not
// included.
func Map(peak, slotBytes int) int {
	slots := Slots(peak)
	if slots == 0 {
		return 0
	}
	perTable := min(slots, maxTableSlots)
	tables := slots / perTable
	groups := Alloc(perTable / groupSlots * (groupCtrlBytes + groupSlots*slotBytes))
	if slots == groupSlots {
		return groups // a small map: one group, no table
	}
	return tables * (groups + tableHeaderBytes)
}

// Keys keeps, incrementally, the heap share of a map keyed by strings
// whose entries each hold a fixed-size allocation: the key strings'
// allocations, the entries, and the peak the map's slot tables were sized
// for. Add and Remove are O(1); Bytes reads it without a walk. The zero
// value is an empty map's. Not safe for concurrent use.
type Keys struct {
	n        int // entries
	peak     int // the most entries since the map was built (Rebuilt)
	keyAlloc int // sum of Alloc(len(key))
}

// Add counts one new key of the map (after it was inserted).
func (k *Keys) Add(key string) {
	k.n++
	k.keyAlloc += Alloc(len(key))
	k.peak = max(k.peak, k.n)
}

// Remove counts one key deleted from the map.
func (k *Keys) Remove(key string) {
	k.n--
	k.keyAlloc -= Alloc(len(key))
}

// Peak is the most entries counted since the map was built (Rebuilt).
func (k *Keys) Peak() int { return k.peak }

// KeyAlloc is the heap the key strings take, bytes.
func (k *Keys) KeyAlloc() int { return k.keyAlloc }

// Len is the number of entries counted.
func (k *Keys) Len() int { return k.n }

// ShouldRebuild reports whether the map holds under a quarter of the
// entries its slots were sized for (and had at least 1,024): then copying
// it into a new map of its size gives the old slots back to the heap (a Go
// map keeps the slots of its largest size after deletes).
func (k *Keys) ShouldRebuild() bool {
	return k.peak >= 1024 && k.n < k.peak/4
}

// Rebuilt records that the map was copied into a new one sized for its
// current entries.
func (k *Keys) Rebuilt() { k.peak = k.n }

// Bytes is the heap the map takes, in bytes: its slots (Map(peak,
// slotBytes)), one entryAlloc-byte allocation per entry (0: values held in
// the slot) and the key strings.
func (k *Keys) Bytes(slotBytes, entryAlloc int) int {
	return Map(k.peak, slotBytes) + k.n*Alloc(entryAlloc) + k.keyAlloc
}

// Recount records n as an item's own bytes (its maps and slices, counted
// by the caller) in *own, the bytes last counted for it, and moves *total,
// the sum over the items, by the difference: O(1) per change.
func Recount(total *int, own *int32, n int) {
	*total += n - int(*own)
	*own = int32(n)
}

// Peak16 is the larger of a peak p and a length n, saturated at 65,535
// (a map's most entries kept in two bytes).
func Peak16(p uint16, n int) uint16 { return uint16(min(max(int(p), n), 1<<16-1)) }

// Put sets m[key] = v and counts key in k when m did not hold it (a
// replaced value is not counted again).
func Put[V any](m map[string]V, k *Keys, key string, v V) {
	if _, ok := m[key]; !ok {
		k.Add(key)
	}
	m[key] = v
}

// Delete deletes key from m and from k's count, if m holds it.
func Delete[V any](m map[string]V, k *Keys, key string) {
	if _, ok := m[key]; ok {
		k.Remove(key)
		delete(m, key)
	}
}

// Shrink is m rebuilt (Rebuild) when k, the count of m's keys, says its
// slots are mostly empty (Keys.ShouldRebuild), with k told (Rebuilt);
// else m itself.
func Shrink[K comparable, V any](m map[K]V, k *Keys) map[K]V {
	if !k.ShouldRebuild() {
		return m
	}
	k.Rebuilt()
	return Rebuild(m)
}

// Rebuild copies m into a new map sized for its entries: a Go map keeps
// the slots of its largest size after deletes (see Keys.ShouldRebuild).
// maps.Clone keeps them too.
func Rebuild[K comparable, V any](m map[K]V) map[K]V {
	out := make(map[K]V, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
