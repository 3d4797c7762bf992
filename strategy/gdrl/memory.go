package gdrl

import (
	"time"
	"unsafe"

	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/internal/memsize"
)

// Heap sizes of gdrl's per-key state (64-bit Go), from the structures themselves.
var (
	shareAlloc  = int(unsafe.Sizeof(share{}))                                 // a key's *share
	seenSlot    = memsize.StringHeader + int(unsafe.Sizeof(time.Duration(0))) // a slot of seen
	changedSlot = memsize.StringHeader + int(unsafe.Sizeof(uint64(0)))        // a slot of changed
	sentSlot    = memsize.StringHeader + int(unsafe.Sizeof(sentKey{}))        // a slot of a neighbour's sent inputs
	heldSlot    = memsize.StringHeader + int(unsafe.Sizeof([2]int64{}))       // a slot of a held record's shares
)

// sharesSlot is a slot of the shares map: the key's string header and the *share.
const sharesSlot = memsize.StringHeader + memsize.Pointer

// memory is gdrl's accounting for MemoryBytes and CapacityShares, kept
// where explicit shares are created, changed and dropped (materialize,
// adjust, closeInterval: O(1) each) and where keys are seen, so that
// neither walks a key when read.
type memory struct {
	shares  memsize.Keys // the shares map: its keys, entries and peak
	seen    memsize.Keys // the seen map's entries and peak (its key strings are the requests', counted with shares)
	changed memsize.Keys // the changed map: its keys and peak
	sumC    int64        // the sum of the explicit shares' c, units
}

// shareAdded counts key's new explicit share sh.
func (g *GDRL) shareAdded(key string, sh *share) {
	g.mem.shares.Add(key)
	g.mem.sumC += sh.c
}

// shareDropped counts key's explicit share sh, just deleted.
func (g *GDRL) shareDropped(key string, sh *share) {
	g.mem.shares.Remove(key)
	g.mem.sumC -= sh.c
}

// seenAdded counts a key newly put in seen.
func (g *GDRL) seenAdded(key string) { g.mem.seen.Add(key) }

// seenDropped counts a key deleted from seen.
func (g *GDRL) seenDropped(key string) { g.mem.seen.Remove(key) }

// shrinkMaps copies the shares and seen maps into new ones when either
// holds under a quarter of its peak (a Go map keeps the slots of its
// largest size after deletes). Nothing depends on their order
// (sortedKeys), so no outcome changes.
func (g *GDRL) shrinkMaps() {
	g.shares = memsize.Shrink(g.shares, &g.mem.shares)
	g.seen = memsize.Shrink(g.seen, &g.mem.seen)
}

// shrinkChanged copies the changed map into a new one when the buddy's
// acknowledgement left it under a quarter of its peak.
func (g *GDRL) shrinkChanged() {
	g.changed = memsize.Shrink(g.changed, &g.mem.changed)
}

// MemoryBytes estimates the Go heap this node's gdrl state takes, in
// bytes (strategy.MemoryReporter; ours): the shares map (slots by its peak
// since it was last rebuilt, a share per key), the seen map's slots, the
// changed map's (keys changed and not yet acknowledged by a buddy: a
// node alone keeps every key it changed until it has a buddy again), the
// key strings (those of shares or of changed, whichever are more: a key in
// both is one string, and a node holds most of its keys in one of them),
// per neighbour the inputs last probed, and the records held for wards
// (their keys' strings taken at the shares' mean size). O(members): no
// key is walked.
func (g *GDRL) MemoryBytes() int {
	n := memsize.Map(g.mem.shares.Peak(), sharesSlot) + g.mem.shares.Len()*memsize.Alloc(shareAlloc)
	n += memsize.Map(g.mem.seen.Peak(), seenSlot) + memsize.Map(g.mem.changed.Peak(), changedSlot)
	n += max(g.mem.shares.KeyAlloc(), g.mem.changed.KeyAlloc())
	for _, sent := range g.sent {
		n += memsize.Map(len(sent), sentSlot)
	}
	for _, h := range g.heard {
		n += memsize.Map(len(h.until), seenSlot)
	}
	meanKey := 0
	if k := g.mem.shares.Len(); k > 0 {
		meanKey = g.mem.shares.KeyAlloc() / k
	}
	for _, rec := range g.held {
		n += memsize.Map(len(rec.shares), heldSlot) + len(rec.shares)*meanKey
	}
	for _, m := range g.gated {
		n += memsize.Alloc(cap(m.payload))
	}
	n += memsize.Alloc(cap(g.endRefusals) * memsize.StringHeader) // the fast path's (allowance.go; the share's held and refusing are in shareAlloc)
	return n
}

var _ strategy.MemoryReporter = (*GDRL)(nil)
