package lease

import (
	"unsafe"

	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/internal/forwarding"
	"github.com/tokenmesh/tokenmesh/strategy/internal/memsize"
)

// Heap sizes of lease's state (64-bit Go), from the structures themselves.
var (
	poolAlloc      = int(unsafe.Sizeof(pool{}))               // a key's *pool at its owner
	holdingAlloc   = int(unsafe.Sizeof(holding{}))            // a key's *holding at a holder
	recordAlloc    = int(unsafe.Sizeof(record{}))             // a replicated state (*record)
	gaveAlloc      = int(unsafe.Sizeof(gave{})) + recordAlloc // a state given up (*gave) and its *record, counted as always set
	grantAlloc     = int(unsafe.Sizeof(grantRec{}))           // a lease record at the owner (*grantRec)
	returningAlloc = int(unsafe.Sizeof(returning{}))          // a holder's unacknowledged return (*returning)
	pendingAlloc   = int(unsafe.Sizeof(forwarding.Pending{})) // a forwarded request (*forwarding.Pending)
	verdictAlloc   = int(unsafe.Sizeof(verdict{}))            // a remembered forward's *verdict
	fetchAlloc     = int(unsafe.Sizeof(fetch{}))              // a warm-up under way (*fetch)

	heldBytes     = int(unsafe.Sizeof(held{}))     // a lease in a holding's leases slice
	usedBytes     = int(unsafe.Sizeof(usedRec{}))  // a partly used lease in a holding's askUsed slice
	queuedBytes   = int(unsafe.Sizeof(queued{}))   // an entry of the ordering buffer (queue)
	timerBytes    = int(unsafe.Sizeof(timer{}))    // an entry of the holder's timer heap
	grantExpBytes = int(unsafe.Sizeof(grantExp{})) // an entry of the owner's grant expiry heap

	grantSlot  = int(unsafe.Sizeof(grantID{})) + memsize.Pointer // a slot of grants and of returns
	idSlot     = int(unsafe.Sizeof(uint64(0))) + memsize.Pointer // a slot of pending
	sentToSlot = int(unsafe.Sizeof(struct {
		k uint64
		v strategy.NodeID
	}{}))
	acceptedSlot = 2 * 8 // uint64 seq, time.Duration expiry
	askerSlot    = int(unsafe.Sizeof(struct {
		k strategy.NodeID
		v askRec
	}{}))
	dirtySlot = int(unsafe.Sizeof(struct {
		k string
		v bool
	}{}))
)

// keySlot is a slot of the maps keyed by a key whose values are pointers
// (pools, keys, records, gave, fetching): the string header and the pointer.
const keySlot = memsize.StringHeader + memsize.Pointer

// memory is lease's heap accounting, kept as the state changes (O(1) per
// key created, grown or dropped: setPool, dropPool, newHolding,
// holdingChanged, dropHolding, setRecord, dropRecord, ...) so that
// MemoryBytes walks no key.
type memory struct {
	pools     memsize.Keys // the pools map: its keys, entries and peak
	askers    int          // the pools' askers maps, bytes (sum of pool.askMem)
	holdings  memsize.Keys // the keys map (holdings): its keys, entries and peak
	holdMaps  int          // the holdings' own maps and slices, bytes (sum of holding.memBytes)
	records   memsize.Keys // the records map
	gave      memsize.Keys // the gave map
	grants    memsize.Keys // the grants map, counted by its records' key strings
	dirty     memsize.Keys // the dirty map (its key strings are the pools': not counted)
	timerKeys int          // the key strings of the timers in the heap, bytes (each counted as its own)
}

// pushTimer pushes t on the timer heap, counting its key string.
func (l *Lease) pushTimer(t timer) {
	l.mem.timerKeys += memsize.Alloc(len(t.key))
	l.timers.Push(t)
}

// popTimer pops the first timer of the heap, giving its key string back.
func (l *Lease) popTimer() timer {
	t := l.timers.Pop()
	l.mem.timerKeys -= memsize.Alloc(len(t.key))
	return t
}

// setPool puts p as key's pool, counting it (a pool replaced gives its
// askers' count back).
func (l *Lease) setPool(key string, p *pool) {
	if old := l.pools[key]; old != nil {
		if old != p {
			l.mem.askers -= int(old.askMem)
		}
	} else {
		l.mem.pools.Add(key)
	}
	putKey(&l.poolOrder, l.pools, key, p, l.pass)
	l.pools[key] = p
	l.askersChanged(p)
}

// dropPool deletes key's pool, if any, from the count and the map.
func (l *Lease) dropPool(key string) {
	if p := l.pools[key]; p != nil {
		l.mem.pools.Remove(key)
		l.mem.askers -= int(p.askMem)
		dropKey(&l.poolOrder, l.pools, p)
		delete(l.pools, key)
	}
}

// askersChanged recounts p's askers map after it changed (O(askers)).
func (l *Lease) askersChanged(p *pool) {
	n := 0
	if p.askers != nil {
		n = memsize.MapHeader + memsize.Map(len(p.askers), askerSlot)
	}
	l.mem.askers += n - int(p.askMem)
	p.askMem = int32(n)
}

// holdingMapBytes is the heap of h's own maps and slices, bytes: the
// sentTo and accepted maps (headers, and their slots: sentTo holds at most
// 8 recent asks, accepted's are sized by its peak) and the backing arrays
// of leases, askSpent and askUsed.
func holdingMapBytes(h *holding) int {
	return 2*memsize.MapHeader + memsize.Map(len(h.sentTo), sentToSlot) + memsize.Map(int(h.accPeak), acceptedSlot) +
		memsize.Alloc(cap(h.leases)*heldBytes) + memsize.Alloc(cap(h.askSpent)*8) + memsize.Alloc(cap(h.askUsed)*usedBytes)
}

// newHolding counts h, just put in the keys map as key's holding.
func (l *Lease) newHolding(key string, h *holding) {
	h.pos, h.set = int32(l.holdOrder.Add(key)), l.pass
	l.mem.holdings.Add(key)
	l.holdingChanged(h)
}

// holdingChanged recounts h's maps and slices after they changed.
func (l *Lease) holdingChanged(h *holding) {
	h.accPeak = memsize.Peak16(h.accPeak, len(h.accepted))
	memsize.Recount(&l.mem.holdMaps, &h.memBytes, holdingMapBytes(h))
}

// dropHolding deletes key's holding h from the count and the map.
func (l *Lease) dropHolding(key string, h *holding) {
	l.mem.holdings.Remove(key)
	l.mem.holdMaps -= int(h.memBytes)
	dropKey(&l.holdOrder, l.keys, h)
	delete(l.keys, key)
}

// setRecord puts r as key's replicated state, counting a new key.
func (l *Lease) setRecord(key string, r *record) {
	putKey(&l.recOrder, l.records, key, r, l.pass)
	memsize.Put(l.records, &l.mem.records, key, r)
}

// dropRecord deletes key's replicated state, if any.
func (l *Lease) dropRecord(key string) {
	if r := l.records[key]; r != nil {
		dropKey(&l.recOrder, l.records, r)
	}
	memsize.Delete(l.records, &l.mem.records, key)
}

// setGave puts g as what this node gave up of key (a new entry).
func (l *Lease) setGave(key string, g *gave) {
	putKey(&l.gaveOrder, l.gave, key, g, l.pass)
	memsize.Put(l.gave, &l.mem.gave, key, g)
}

// dropGave deletes what this node gave up of key, if anything.
func (l *Lease) dropGave(key string) {
	if g := l.gave[key]; g != nil {
		dropKey(&l.gaveOrder, l.gave, g)
	}
	memsize.Delete(l.gave, &l.mem.gave, key)
}

// setDirty marks key dirty (replica.go), counting a new entry.
func (l *Lease) setDirty(key string) { memsize.Put(l.dirty, &l.mem.dirty, key, true) }

// dropDirty unmarks key, if marked.
func (l *Lease) dropDirty(key string) { memsize.Delete(l.dirty, &l.mem.dirty, key) }

// shrinkMaps copies the per-key maps (pools, keys, records, gave, grants) into new
// ones when the sweep left one under a quarter of its peak
// (memsize.Keys.ShouldRebuild), the timer, grant expiry and queue
// heaps into new arrays when they hold under a quarter of their capacity
// (minheap.Heap.Shrink: same order), and the remembered forwards when
// they hold under a quarter of their peak (dedupe.Table.Shrink). Go randomizes map iteration order, and every
// walk of these maps whose order could matter goes by sortedKeys, so this
// changes no outcome.
func (l *Lease) shrinkMaps() {
	l.pools = memsize.Shrink(l.pools, &l.mem.pools)
	l.keys = memsize.Shrink(l.keys, &l.mem.holdings)
	l.records = memsize.Shrink(l.records, &l.mem.records)
	l.gave = memsize.Shrink(l.gave, &l.mem.gave)
	l.grants = memsize.Shrink(l.grants, &l.mem.grants)
	l.timers.Shrink()
	l.gexpiry.Shrink()
	l.queue.Shrink()
	l.seen.Shrink()
}

// heapBytes is the backing array of a heap (or slice) of capacity c and
// entries of size b, bytes.
func heapBytes(c, b int) int { return memsize.Alloc(c * b) }

// MemoryBytes estimates the Go heap this node's lease state takes, in
// bytes (strategy.MemoryReporter; ours). Counted, kept as keys change:
// as owner, the pools map (slots by its peak since it was last rebuilt),
// a pool per key with its askers map, the lease records (grants: slot,
// record, key string) and the grant expiry heap's array; as holder, the
// keys map, a holding per key with its sentTo and accepted maps and its
// leases and askSpent arrays; the replicated states (records) and the
// states given up (gave, each counted with a state), the dirty map's
// slots, and the key strings of pools, holdings, records, gave and
// grants (each its own allocation, as a key decoded from a message is);
// the sweep's orders of pools, records, gave and holdings (a string
// header per slot of their arrays); the remembered forwards (seen:
// dedupe.Table.MemoryBytes, its map's slots by its peak).
// Counted from the current lengths (their slots at the current size, not
// the peak): the forwarded requests (pending), unacknowledged returns,
// warm-ups under way (fetching, a fixed estimate each); the ordering buffer and timer heap by their arrays'
// capacity, and the timers' key strings (each as its own allocation, as
// a key decoded from a grant or a later request is; one sharing a
// holding's string is counted twice); the on_timeout=local fallback buckets
// (buckets.Table.MemoryBytes). Not counted: strings shared with a counted
// key (a request's or timer's key, node names), the membership history
// (changes, O(members) each), pools kept alive only by the grant records
// pointing to them after they were dropped, and message buffers.
// O(members) (a pool's askers are recounted when they change, never
// here): no key is walked. Measured within 20% of the heap growth at 100k
// keys (TestMemoryBytesMatchesHeap).
func (l *Lease) MemoryBytes() int {
	m := &l.mem
	n := m.pools.Bytes(keySlot, poolAlloc) + m.askers
	n += m.holdings.Bytes(keySlot, holdingAlloc) + m.holdMaps
	n += m.records.Bytes(keySlot, recordAlloc) + m.gave.Bytes(keySlot, gaveAlloc)
	n += m.grants.Bytes(grantSlot, grantAlloc) + heapBytes(cap(l.gexpiry.Items()), grantExpBytes)
	n += memsize.Map(m.dirty.Peak(), dirtySlot)
	n += memsize.Map(len(l.pending), idSlot) + len(l.pending)*(memsize.Alloc(pendingAlloc)+memsize.Alloc(memsize.StringHeader))
	n += memsize.Map(len(l.returns), grantSlot) + len(l.returns)*memsize.Alloc(returningAlloc)
	n += memsize.Map(len(l.fetching), keySlot) + len(l.fetching)*fetchBytes
	n += l.seen.MemoryBytes(verdictAlloc)
	n += l.poolOrder.Bytes() + l.recOrder.Bytes() + l.gaveOrder.Bytes() + l.holdOrder.Bytes()
	n += heapBytes(cap(l.queue.Items()), queuedBytes) + heapBytes(cap(l.timers.Items()), timerBytes) + m.timerKeys
	return n + l.local.MemoryBytes()
}

// fetchBytes is a fixed estimate of one warm-up under way: its *fetch,
// its queried and got maps (one group each), its merged *pool, and a few
// waiting requests and nodes asked.
var fetchBytes = memsize.Alloc(fetchAlloc) + 2*(memsize.MapHeader+memsize.Map(1, memsize.StringHeader+8)) +
	memsize.Alloc(poolAlloc) + memsize.Alloc(2*queuedBytes) + memsize.Alloc(2*memsize.StringHeader)

var _ strategy.MemoryReporter = (*Lease)(nil)
