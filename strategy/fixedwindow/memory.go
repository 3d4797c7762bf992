package fixedwindow

import (
	"unsafe"

	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/internal/forwarding"
	"github.com/tokenmesh/tokenmesh/strategy/internal/memsize"
)

// Heap sizes of fixedwindow's state (64-bit Go), from the structures themselves.
var (
	counterAlloc = int(unsafe.Sizeof(counter{}))            // a key's *counter
	pendingAlloc = int(unsafe.Sizeof(forwarding.Pending{})) // a forwarded request's *Pending
)

const (
	// countsSlot is a slot of the counts map: the key's string header and the *counter.
	countsSlot = memsize.StringHeader + memsize.Pointer
	// pendingSlot is a slot of the pending map: the request ID and the *Pending.
	pendingSlot = 8 + memsize.Pointer
)

// shrinkCounts copies the counts map into a new one when the window's
// sweep left it under a quarter of its peak (a Go map keeps the slots of
// its largest size). Nothing depends on its order.
func (f *FixedWindow) shrinkCounts() {
	f.counts = memsize.Shrink(f.counts, &f.mem)
}

// MemoryBytes estimates the Go heap this node's fixedwindow state takes,
// in bytes (strategy.MemoryReporter; ours): the counts map (slots by its
// peak since it was last rebuilt, a counter per key, the keys' strings,
// kept as keys are counted and swept) and the forwarded requests it waits
// for (their slots, structs and keys; as many as are in flight). No key
// counted is walked.
func (f *FixedWindow) MemoryBytes() int {
	n := f.mem.Bytes(countsSlot, counterAlloc) + f.order.Bytes() + memsize.Map(len(f.pending), pendingSlot)
	for _, p := range f.pending {
		n += memsize.Alloc(pendingAlloc) + memsize.Alloc(len(p.Req.Key))
	}
	return n
}

var _ strategy.MemoryReporter = (*FixedWindow)(nil)
