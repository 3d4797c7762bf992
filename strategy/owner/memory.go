package owner

import (
	"unsafe"

	"github.com/tokenmesh/tokenmesh/strategy"
)

// Heap estimates of owner's per-request state besides its buckets
// (64-bit Go; map entries with their share of empty slots).
const (
	queuedMemBytes  = 64  // a queued request in the ordering buffer's slice (56 B) and its heap index
	pendingMemBytes = 200 // a forwarded request: map slot, *pendingReq (~112 B), sentTo, timeout entry
)

// verdictAlloc is a remembered forward's *verdict (its map slot and
// expiry entry are counted by dedupe.Table.MemoryBytes).
var verdictAlloc = int(unsafe.Sizeof(verdict{}))

// MemoryBytes estimates the heap this node's owner state takes, in bytes
// (strategy.MemoryReporter): its buckets (buckets.Table.MemoryBytes of
// every split sub-bucket table and of the on_timeout=local fallback table,
// as StateBytes counts them) and the requests it holds, with their keys;
// the remembered forwards by dedupe.Table.MemoryBytes (the map's slots by
// its peak since it was last rebuilt: Shrink at every Tick); the
// allowances of its own keys held by the driver's fast path
// (buckets.Lender.MemoryBytes).
func (o *Owner) MemoryBytes() int {
	n := o.local.MemoryBytes() + o.lend.MemoryBytes()
	if o.auto != nil {
		for _, t := range o.auto.local[1:] {
			n += t.MemoryBytes()
		}
	}
	for _, t := range o.tables {
		n += t.MemoryBytes()
	}
	for _, q := range o.queue.Items() {
		n += queuedMemBytes + len(q.key)
	}
	for _, p := range o.pending {
		n += pendingMemBytes + len(p.Req.Key)
	}
	return n + o.seen.MemoryBytes(verdictAlloc)
}

var _ strategy.MemoryReporter = (*Owner)(nil)
