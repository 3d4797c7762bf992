package quota

import (
	"time"
	"unsafe"

	"github.com/tokenmesh/tokenmesh/internal/minheap"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/internal/memsize"
)

// Heap sizes of quota's state (64-bit Go), from the structures themselves.
var (
	allocAlloc    = int(unsafe.Sizeof(alloc{}))                              // a key's *alloc at its owner
	shareAlloc    = int(unsafe.Sizeof(share{}))                              // a client's *share
	releaseBytes  = int(unsafe.Sizeof(release{}))                            // an entry of a pending slice
	recordAlloc   = int(unsafe.Sizeof(record{}))                             // a replicated allocation (*record)
	attachedAlloc = int(unsafe.Sizeof(attached{}))                           // an attached client's key (*attached)
	warmupAlloc   = int(unsafe.Sizeof(warmup{}))                             // a warm-up under way (*warmup)
	heldWorkBytes = int(unsafe.Sizeof(heldWork{}))                           // a request or report a warm-up holds
	keyWakeBytes  = int(unsafe.Sizeof(keyWake{}))                            // an entry of the wakes heap
	earlyBytes    = int(unsafe.Sizeof(earlyUsage{}) + unsafe.Sizeof(held{})) // an early report (clientid.go) and what it holds

	pendingSlot = int(unsafe.Sizeof(struct {
		k uint64
		v forward
	}{}))
	markSlot = int(unsafe.Sizeof(struct {
		k string
		v time.Duration
	}{}))
	clientSlot = int(unsafe.Sizeof(strategy.QuotaClient(0))) + memsize.Pointer // a slot of clients: the client and its keys map
)

// keySlot is a slot of the maps keyed by a key whose values are pointers
// (allocs, records, warming, a client's keys): the string header and the
// pointer.
const keySlot = memsize.StringHeader + memsize.Pointer

// memory is quota's heap accounting, kept as the state changes (O(1) per
// key created or dropped, O(shares) per allocation changed) so that
// MemoryBytes walks no key.
type memory struct {
	allocs      memsize.Keys // the allocs map: its keys, entries and peak
	allocExtra  int          // the allocations' shares and slices, bytes (sum of alloc.memBytes)
	records     memsize.Keys // the records map
	recordExtra int          // the records' shares and slices, bytes
	// the marks: answered, gone and warmed (their keys, entries and peaks)
	answered, gone, warmed memsize.Keys
	// attached clients: each client's keys map (its keys, entries and
	// peak) and their sum in bytes (clientBytes of each)
	clients     map[strategy.QuotaClient]*memsize.Keys
	clientBytes int
}

// allocExtraBytes is the heap of a's own slices and shares, bytes: the
// shares' pointer array and one *share each (with its client id, if any:
// one string each, at most strategy.MaxQuotaClientIDBytes), the pending
// releases' array and the last replica's encoding.
func allocExtraBytes(a *alloc) int {
	return memsize.Alloc(cap(a.shares)*memsize.Pointer) + len(a.shares)*memsize.Alloc(shareAlloc) + cidBytes(a.shares) +
		memsize.Alloc(cap(a.pending)*releaseBytes) + memsize.Alloc(cap(a.replBytes))
}

// cidBytes is the heap of the shares' client ids, bytes (an id of a local
// client shares its stream's string: counted anyway, an over-estimate).
func cidBytes(shares []*share) int {
	n := 0
	for _, s := range shares {
		n += memsize.Alloc(len(s.cid))
	}
	return n
}

// setAlloc puts a as key's allocation, counting a new key (an allocation
// replaced gives its count back).
func (q *Quota) setAlloc(key string, a *alloc) {
	if old := q.allocs[key]; old != nil {
		if old != a {
			q.mem.allocExtra -= int(old.memBytes)
		}
	} else {
		q.mem.allocs.Add(key)
	}
	q.allocs[key] = a
	q.allocChanged(a)
}

// dropAlloc deletes key's allocation, if any.
func (q *Quota) dropAlloc(key string) {
	if a := q.allocs[key]; a != nil {
		q.mem.allocs.Remove(key)
		q.mem.allocExtra -= int(a.memBytes)
		delete(q.allocs, key)
	}
}

// allocChanged recounts a's shares and slices (O(shares)): called where
// a's work is scheduled (schedule, after every change of a key at its
// owner) and where it is put in the map.
func (q *Quota) allocChanged(a *alloc) {
	n := allocExtraBytes(a)
	q.mem.allocExtra += n - int(a.memBytes)
	a.memBytes = int32(n)
}

// recordBytes is the heap of r besides its slot and key, bytes (records
// are not changed once kept: a newer one replaces them).
func recordBytes(r *record) int {
	return memsize.Alloc(recordAlloc) + memsize.Alloc(cap(r.shares)*memsize.Pointer) + len(r.shares)*memsize.Alloc(shareAlloc) +
		cidBytes(r.shares) + memsize.Alloc(cap(r.pending)*releaseBytes)
}

// clientMapBytes is the heap of a client's keys map, bytes: its header,
// its slots (by its peak), an *attached per key and two strings of each
// key (the map's, and the last report's, its own allocation once a second
// report came).
func clientMapBytes(k *memsize.Keys) int {
	return memsize.MapHeader + k.Bytes(keySlot, attachedAlloc) + k.KeyAlloc()
}

// attachedKey counts key, just put in client's keys map.
func (q *Quota) attachedKey(client strategy.QuotaClient, key string) {
	k := q.mem.clients[client]
	if k == nil {
		k = &memsize.Keys{}
		q.mem.clients[client] = k
		q.mem.clientBytes += clientMapBytes(k) // its header
	}
	before := clientMapBytes(k)
	k.Add(key)
	q.mem.clientBytes += clientMapBytes(k) - before
}

// detachedKey counts key, just deleted from client's keys map.
func (q *Quota) detachedKey(client strategy.QuotaClient, key string) {
	if k := q.mem.clients[client]; k != nil {
		before := clientMapBytes(k)
		k.Remove(key)
		q.mem.clientBytes += clientMapBytes(k) - before
	}
}

// droppedClient counts client's keys map, just deleted from clients.
func (q *Quota) droppedClient(client strategy.QuotaClient) {
	if k := q.mem.clients[client]; k != nil {
		q.mem.clientBytes -= clientMapBytes(k)
		delete(q.mem.clients, client)
	}
}

// shrinkAllocs copies the allocs map into a new one when dropping idle
// allocations left it under a quarter of its peak
// (memsize.Keys.ShouldRebuild), and the wakes heap into a new array when
// it holds under a quarter of its capacity (pushed in array order, which
// is heap order: the same sequence, the same pops). Go randomizes map
// iteration order, and every walk of allocs whose order could matter goes
// by sortedKeys, so this changes no outcome.
func (q *Quota) shrinkAllocs() {
	q.allocs = memsize.Shrink(q.allocs, &q.mem.allocs)
	if items := q.wakes.Items(); cap(items) >= 1024 && len(items) < cap(items)/4 {
		h := minheap.New(keyWakeLess)
		for _, w := range items {
			h.Push(w)
		}
		q.wakes = h
	}
}

// keyWakeLess orders the wakes heap.
func keyWakeLess(a, b keyWake) bool { return a.at < b.at }

// shrinkMarks copies a marks map into a new one when pruning left it
// under a quarter of its peak.
func (q *Quota) shrinkMarks() {
	q.answered = memsize.Shrink(q.answered, &q.mem.answered)
	q.gone = memsize.Shrink(q.gone, &q.mem.gone)
	q.warmed = memsize.Shrink(q.warmed, &q.mem.warmed)
}

// MemoryBytes estimates the Go heap this node's quota state takes, in
// bytes (strategy.MemoryReporter; ours). Counted, kept as keys change: at
// the key's owner, the allocs map (slots by its peak since it was last
// rebuilt), an alloc per key with its shares (one *share each and the
// pointer array), its pending releases' array and its last replica's
// encoding (recounted whenever the key's work is scheduled); the
// replicated allocations (records, with their shares and releases); the
// warm-up marks (answered, gone, warmed); per client attached here, its
// keys map, an *attached per key and two strings of each key (the map's
// and the last report's); and the key strings of allocs, records and
// marks (each its own allocation, as a key decoded from a message is).
// Counted from the current lengths (their slots at the current size):
// the clients map, forwarded requests (pending) and warm-ups under way
// (a fixed estimate each); the wakes heap by its array's capacity. Not
// counted: an assignment's key string held by an attached client (the
// allocation's at the owner when the client is attached there), strings
// shared with a counted key (wakes' keys, node names), the membership
// history (changes) and message buffers. O(clients attached here): no
// key is walked. Measured within 20% of the heap growth at 100k keys
// (TestMemoryBytesMatchesHeap).
func (q *Quota) MemoryBytes() int {
	m := &q.mem
	n := m.allocs.Bytes(keySlot, allocAlloc) + m.allocExtra
	n += memsize.Map(m.records.Peak(), keySlot) + m.records.KeyAlloc() + m.recordExtra
	n += m.answered.Bytes(markSlot, 0) + m.gone.Bytes(markSlot, 0) + m.warmed.Bytes(markSlot, 0)
	n += memsize.Map(len(q.clients), clientSlot) + m.clientBytes
	n += memsize.Map(len(q.pending), pendingSlot)
	n += memsize.Map(len(q.warming), keySlot) + len(q.warming)*warmupBytes
	n += memsize.Alloc(cap(q.early) * earlyBytes) // their keys and ids: the decoded messages' strings, not counted
	return n + memsize.Alloc(cap(q.wakes.Items())*keyWakeBytes)
}

// warmupBytes is a fixed estimate of one warm-up under way: its *warmup,
// its queried and got maps (one group each), and a few nodes asked and
// held requests.
var warmupBytes = memsize.Alloc(warmupAlloc) + 2*(memsize.MapHeader+memsize.Map(1, memsize.StringHeader+8)) +
	memsize.Alloc(2*memsize.StringHeader) + memsize.Alloc(2*heldWorkBytes)

var _ strategy.MemoryReporter = (*Quota)(nil)
