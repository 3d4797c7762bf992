package adaptive

import (
	"unsafe"

	peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/internal/memsize"
)

// Heap sizes of adaptive's state (64-bit Go), from the structures themselves.
var (
	keyStateAlloc = int(unsafe.Sizeof(keyState{}))                     // a key's *keyState
	slotBytes     = int(unsafe.Sizeof(slot{}))                         // one slot of a key's history ring
	shareSlot     = memsize.StringHeader + int(unsafe.Sizeof(share{})) // a slot of the shares and pending maps
	statAlloc     = int(unsafe.Sizeof(peerv1.AdaptiveStat{}))          // one key's statistics in a report
	reportAlloc   = int(unsafe.Sizeof(peerv1.AdaptiveReport{}))
)

// keysSlot is a slot of the keys map: the key's string header and the *keyState.
const keysSlot = memsize.StringHeader + memsize.Pointer

// memory is adaptive's accounting for MemoryBytes and CapacityShares, kept
// where keys are created and dropped (get, Tick: O(1) each) and where the
// shares change (apply, applyPending, SetMembers, SetExpected, which walk
// the keys anyway), so that neither walks a key when read.
type memory struct {
	keys     memsize.Keys            // the keys map: its keys and peak
	reports  map[strategy.NodeID]int // per reporting node, the heap of its report held at the adaptor, bytes
	shareSum float64                 // CapacityShares' sum over the keys
}

// reportBytes estimates the heap of a report held at the adaptor: the
// message, its slice of stats and each stat, plus the stats' key strings
// when the report was decoded (a node's own report shares its keys' strings).
func reportBytes(rep *peerv1.AdaptiveReport, decoded bool) int {
	n := memsize.Alloc(reportAlloc) + memsize.Alloc(cap(rep.Stats)*memsize.Pointer) + len(rep.Stats)*memsize.Alloc(statAlloc)
	if decoded {
		for _, s := range rep.Stats {
			n += memsize.Alloc(len(s.Key))
		}
	}
	return n
}

// holdReport counts the report of node the adaptor now holds (its
// previous one, if any, replaced).
func (m *memory) holdReport(node strategy.NodeID, rep *peerv1.AdaptiveReport, decoded bool) {
	if m.reports == nil {
		m.reports = map[strategy.NodeID]int{}
	}
	m.reports[node] = reportBytes(rep, decoded)
}

// shareFraction is key's term of CapacityShares: its applied rate share
// as a fraction of the rule's rate (the burst share with a zero rate).
func (a *Adaptive) shareFraction(key string) float64 {
	r, b := a.shareOf(key)
	switch total := a.rate.PerSec(); {
	case total > 0:
		return r.PerSec() / total
	case a.burst > 0:
		return float64(b) / float64(a.burst)
	}
	return 0
}

// recountShares recomputes CapacityShares' sum after the shares changed
// (called by the operations that already walk every key).
func (a *Adaptive) recountShares() {
	sum := 0.0
	for k := range a.keys {
		sum += a.shareFraction(k)
	}
	a.mem.shareSum = sum
}

// keyAdded counts key, just created.
func (a *Adaptive) keyAdded(key string) {
	a.mem.keys.Add(key)
	a.mem.shareSum += a.shareFraction(key)
}

// keyDropped counts key, just deleted.
func (a *Adaptive) keyDropped(key string) {
	a.mem.keys.Remove(key)
	a.mem.shareSum -= a.shareFraction(key)
	if len(a.keys) == 0 {
		a.mem.shareSum = 0 // no rounding left behind
	}
}

// shrinkKeys copies the keys map into a new one when it holds under a
// quarter of its peak (a Go map keeps the slots of its largest size).
// Nothing depends on the map's order (Tick sorts the keys).
func (a *Adaptive) shrinkKeys() {
	a.keys = memsize.Shrink(a.keys, &a.mem.keys)
}

// MemoryBytes estimates the Go heap this node's adaptive state takes, in
// bytes (strategy.MemoryReporter; ours): the keys map's slots (sized by
// its peak since it was last rebuilt), per key its keyState, history ring
// and string, the shares and pending maps (their keys' strings taken at
// the keys' mean size), at the adaptor the reports it holds, and the
// ledger of the allowances the driver's fast path holds
// (strategy.AllowanceLedger.MemoryBytes). O(members): no key is walked.
func (a *Adaptive) MemoryBytes() int {
	n := a.mem.keys.Bytes(keysSlot, keyStateAlloc) + a.mem.keys.Len()*memsize.Alloc(a.slots*slotBytes) + a.lent.MemoryBytes()
	meanKey := 0
	if k := a.mem.keys.Len(); k > 0 {
		meanKey = a.mem.keys.KeyAlloc() / k
	}
	for _, m := range []map[string]share{a.shares, a.pending} {
		n += memsize.Map(len(m), shareSlot) + len(m)*meanKey
	}
	for node := range a.reports {
		n += a.mem.reports[node]
	}
	return n
}

var _ strategy.MemoryReporter = (*Adaptive)(nil)
