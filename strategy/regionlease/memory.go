package regionlease

import (
	"unsafe"

	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/internal/forwarding"
	"github.com/tokenmesh/tokenmesh/strategy/internal/memsize"
)

// Heap sizes of regionlease's state (64-bit Go), from the structures
// themselves.
var (
	poolAlloc      = int(unsafe.Sizeof(pool{}))                                                  // a key's *pool at its global owner
	grantAlloc     = int(unsafe.Sizeof(grantRec{}))                                              // a lease granted (*grantRec)
	holdingAlloc   = int(unsafe.Sizeof(holding{}))                                               // a key's *holding
	pendingAlloc   = memsize.Alloc(int(unsafe.Sizeof(forwarding.Pending{}))) + memsize.Alloc(16) // a forward (*Pending) and its SentTo array of one node
	relayAlloc     = int(unsafe.Sizeof(relay{}))                                                 // a relay to the global owner (*relay)
	returningAlloc = int(unsafe.Sizeof(returning{}))                                             // a return being resent (*returning)
	fenceAlloc     = int(unsafe.Sizeof(fenceHolder{}))                                           // a replica's fence record at the global owner
	verdictAlloc   = int(unsafe.Sizeof(verdict{}))                                               // a remembered forward's *verdict

	heldBytes     = int(unsafe.Sizeof(held{}))     // a lease in a holding's leases slice
	timerBytes    = int(unsafe.Sizeof(timer{}))    // an entry of the timer heap
	queuedBytes   = int(unsafe.Sizeof(queued{}))   // an entry of the ordering buffer (order.go)
	grantExpBytes = int(unsafe.Sizeof(grantExp{})) // an entry of the grant expiry heap

	grantSlot  = int(unsafe.Sizeof(grantID{})) + memsize.Pointer // a slot of grants and of returns
	sentToSlot = 8 + int(unsafe.Sizeof(strategy.NodeID("")))     // a slot of a holding's sentTo (seq, node)
	acceptSlot = 8 + 8                                           // a slot of a holding's accepted (seq, expiry)
	reportSlot = int(unsafe.Sizeof(struct {
		k strategy.NodeID
		v report
	}{}))
	fenceSlot = int(unsafe.Sizeof(strategy.NodeID(""))) + 8 // a slot of a key's fence map (node, *fenceHolder or fence)

	// fenceMapBytes is a key's map of fences by node (gfences' and
	// fences' values): its header and one group of 8 slots, as long as a
	// key has at most 8 owners' or replicas' fences (replicas <= 7).
	fenceMapBytes = memsize.MapHeader + memsize.Map(1, fenceSlot)

	// pushAlloc is a key's push state at its global owner (pushState,
	// push.go): the struct and its three maps by asker, each a header and
	// one group of 8 slots (a key has an asker per region's owner and per
	// node of the owner's region asking it, a handful), the out map's
	// slices of seqs and its dated pushes not settled (dated.go: about
	// push_ahead/push_every+1 per region pushed to, while contended) not
	// counted.
	pushAlloc = int(unsafe.Sizeof(pushState{})) + 3*memsize.MapHeader +
		memsize.Map(1, int(unsafe.Sizeof(strategy.NodeID("")))+int(unsafe.Sizeof(asker{}))) +
		memsize.Map(1, int(unsafe.Sizeof(strategy.NodeID("")))+8) +
		memsize.Map(1, int(unsafe.Sizeof(strategy.NodeID("")))+int(unsafe.Sizeof([]uint64(nil))))
)

// keySlot is a slot of the maps keyed by a key whose values are pointers
// or maps (pools, keys, gfences, fences).
const keySlot = memsize.StringHeader + memsize.Pointer

// idSlot is a slot of the maps keyed by a request id whose values are
// pointers (pending, relays).
const idSlot = 8 + memsize.Pointer

// memory is regionlease's heap accounting, kept as the state changes
// (O(1) per key created, grown or dropped: setPool, dropPool, holding,
// holdingChanged, dropHolding, putID, dropID, pushTimer, popTimer, the
// fence maps' adds and drops) so that MemoryBytes walks no key.
type memory struct {
	pools    memsize.Keys // the pools map: its keys, entries and peak
	grants   memsize.Keys // the grants map, counted by its ids' key strings
	holdings memsize.Keys // the keys map (holdings)
	holdMaps int          // the holdings' own maps and slices, bytes (sum of holding.mem)
	pending  memsize.Keys // the pending map (request ids: no key strings)
	relays   memsize.Keys // the relays map
	returns  memsize.Keys // the returns map (its ids' key strings are the holdings' or timers': not counted)
	gfences  memsize.Keys // the gfences map (its key strings are the pools')
	fenceRec int          // the fence records in gfences' maps
	fences   memsize.Keys // the fences map (the fences held, counted in nfences)
	timerKey int          // the key strings of the timers in the heap, bytes (each counted as its own)
	queueKey int          // the key strings of the requests in the ordering buffer, bytes (each counted as its own)
	pushes   memsize.Keys // the pushes map (a global owner's push state per key, push.go)
}

// putID sets m[id] = v, counting a new entry in k by key (the key string
// its id holds, "" for none of its own).
func putID[K comparable, V any](m map[K]V, k *memsize.Keys, id K, key string, v V) {
	if _, ok := m[id]; !ok {
		k.Add(key)
	}
	m[id] = v
}

// dropID deletes id from m and from k's count, if m holds it.
func dropID[K comparable, V any](m map[K]V, k *memsize.Keys, id K, key string) {
	if _, ok := m[id]; ok {
		k.Remove(key)
		delete(m, id)
	}
}

// pushTimer pushes t on the timer heap, counting its key string.
func (l *RegionLease) pushTimer(t timer) {
	l.mem.timerKey += memsize.Alloc(len(t.key))
	l.timers.Push(t)
}

// popTimer pops the first timer of the heap, giving its key string back.
func (l *RegionLease) popTimer() timer {
	t := l.timers.Pop()
	l.mem.timerKey -= memsize.Alloc(len(t.key))
	return t
}

// holdingBytes is the heap of h's own maps and slices, bytes: the sentTo,
// accepted and reports maps (headers, and their slots by the most entries
// each held: a Go map keeps them) and the backing arrays of leases and
// askSpent. It records the maps' peaks in h.
func holdingBytes(h *holding) int {
	h.sentPeak = memsize.Peak16(h.sentPeak, len(h.sentTo))
	h.accPeak = memsize.Peak16(h.accPeak, len(h.accepted))
	h.repPeak = memsize.Peak16(h.repPeak, len(h.reports))
	return 3*memsize.MapHeader + memsize.Map(int(h.sentPeak), sentToSlot) + memsize.Map(int(h.accPeak), acceptSlot) +
		memsize.Map(int(h.repPeak), reportSlot) + memsize.Alloc(cap(h.leases)*heldBytes) + memsize.Alloc(cap(h.askSpent)*8) + memsize.Alloc(cap(h.dated)*int(unsafe.Sizeof(datedHold{})))
}

// holdingChanged recounts h's maps and slices after they changed (O(1)).
func (l *RegionLease) holdingChanged(h *holding) {
	memsize.Recount(&l.mem.holdMaps, &h.mem, holdingBytes(h))
}

// dropHolding deletes key's holding h from the count and the map.
func (l *RegionLease) dropHolding(key string, h *holding) {
	l.mem.holdings.Remove(key)
	l.mem.holdMaps -= int(h.mem)
	l.order.keys.Remove(key)
	delete(l.keys, key)
}

// setPool puts p as key's pool, counting a new key.
func (l *RegionLease) setPool(key string, p *pool) {
	if old, ok := l.pools[key]; !ok {
		l.order.pools.Add(key)
	} else if old != p {
		l.clearDated(key)
	}
	memsize.Put(l.pools, &l.mem.pools, key, p)
}

// dropPool deletes key's pool, if any.
func (l *RegionLease) dropPool(key string) {
	l.clearDated(key)
	l.order.pools.Remove(key)
	memsize.Delete(l.pools, &l.mem.pools, key)
}

// shrinkMaps copies the per-key and per-request maps into new ones when
// the sweep left one under a quarter of its peak
// (memsize.Keys.ShouldRebuild), the timer and grant expiry heaps into new
// arrays when they hold under a quarter of their capacity, and the
// remembered forwards likewise (dedupe.Table.Shrink). Every walk of these
// maps whose order could matter goes by sortedKeys or is a set of deletes,
// and a heap's array keeps its order, so this changes no outcome.
func (l *RegionLease) shrinkMaps() {
	m := &l.mem
	l.pools = memsize.Shrink(l.pools, &m.pools)
	l.grants = memsize.Shrink(l.grants, &m.grants)
	l.keys = memsize.Shrink(l.keys, &m.holdings)
	l.pending = memsize.Shrink(l.pending, &m.pending)
	l.relays = memsize.Shrink(l.relays, &m.relays)
	l.returns = memsize.Shrink(l.returns, &m.returns)
	l.gfences = memsize.Shrink(l.gfences, &m.gfences)
	l.fences = memsize.Shrink(l.fences, &m.fences)
	l.pushes = memsize.Shrink(l.pushes, &m.pushes)
	l.timers.Shrink()
	l.queue.Shrink()
	l.gexp.Shrink()
	l.gseen.Shrink()
	l.rseen.Shrink()
}

// MemoryBytes estimates the Go heap this node's regionlease state takes,
// in bytes (strategy.MemoryReporter; ours). Counted, kept as keys change:
// as global owner, the pools map (slots by its peak since it was last
// rebuilt) and a pool per key, the leases granted (grants: slot, record,
// key string) and the grant expiry heap's array, the fence records per
// key and replica (gfences) and the fences held for other owners (fences:
// a map of at most 8 owners per key); as holder (a node, or a regional
// owner holding its region's stock), the keys map, a holding per key with
// its sentTo, accepted and reports maps (slots by their peaks) and its
// leases and askSpent arrays; the forwards pending, the relays, the
// returns being resent, the remembered forwards (gseen, rseen:
// dedupe.Table.MemoryBytes), the timer heap's array and its timers' key
// strings (each as its own allocation, as a key decoded from a grant is;
// one sharing a holding's string is counted twice), and the key strings
// of pools, holdings, grants and fences; the push state per key a global
// owner pushes (pushAlloc: its maps as one group each); the warm-ups
// under way and the states given up (warmMemoryBytes, warmup.go: per key
// its record, its asked, got and waiting arrays and map, not the decoded
// messages it holds). Not counted: the strings a
// forward, relay or return shares with its request or holding, the
// membership history (changes, O(members) each) and pools kept alive
// only by the grant records pointing to them after they were dropped.
// O(1): no key is walked. Measured within 20% of the heap growth at 100k
// keys (TestMemoryBytesMatchesHeap).
func (l *RegionLease) MemoryBytes() int {
	m := &l.mem
	n := m.pools.Bytes(keySlot, poolAlloc) + m.grants.Bytes(grantSlot, grantAlloc)
	n += memsize.Alloc(cap(l.gexp.Items()) * grantExpBytes)
	n += m.gfences.Bytes(keySlot, 0) + m.gfences.Len()*fenceMapBytes + m.fenceRec*memsize.Alloc(fenceAlloc)
	n += m.fences.Bytes(keySlot, 0) + m.fences.Len()*fenceMapBytes
	n += m.holdings.Bytes(keySlot, holdingAlloc) + m.holdMaps
	n += m.pending.Bytes(idSlot, 0) + m.pending.Len()*pendingAlloc
	n += m.relays.Bytes(idSlot, relayAlloc) + m.returns.Bytes(grantSlot, returningAlloc)
	n += l.gseen.MemoryBytes(verdictAlloc) + l.rseen.MemoryBytes(verdictAlloc)
	n += m.pushes.Bytes(keySlot, pushAlloc)
	n += l.warmMemoryBytes()
	n += l.order.bytes()
	n += memsize.Alloc(cap(l.queue.Items())*queuedBytes) + m.queueKey
	return n + memsize.Alloc(cap(l.timers.Items())*timerBytes) + m.timerKey
}

var _ strategy.MemoryReporter = (*RegionLease)(nil)
