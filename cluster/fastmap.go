package cluster

import (
	"hash/maphash"
	"sync/atomic"
)

// fastMap is the fast path's key -> allowance table: an open-addressing
// hash table (linear probing) that any goroutine may read without a lock
// and only the node's loop writes. A slot holds the key's hash and a
// pointer to its entry (an immutable key and the allowance). A reader
// loads the current table (one atomic pointer), then the slots along the
// key's probe sequence, and compares a key only where the hash matches,
// so a probe past another key's slot reads no other entry (no cache line
// of a key another core is checking). The loop inserts into an empty or
// deleted slot (the hash, then the pointer), deletes by storing a
// tombstone, and grows or cleans the table by building a new one with
// the same entries and publishing it: a reader still on the old table
// finds the same *fastEntry, whose counter is the one that matters. A
// reader racing a slot's reuse may miss its key (a stale hash beside a
// new pointer): that check goes to the loop, which decides it anyway.
// Ours.
type fastMap struct {
	seed  maphash.Seed
	table atomic.Pointer[fastTable]
	// Loop goroutine only.
	live, dead int // entries and tombstones in the current table
}

type fastTable struct {
	slots []fastSlot
	mask  uint64
}

// fastSlot is one slot: the entry's key hash (written before the entry)
// and the entry (nil: empty; tombstone: deleted).
type fastSlot struct {
	hash  atomic.Uint64
	entry atomic.Pointer[fastEntry]
}

// tombstone marks a deleted slot: probes go on past it.
var tombstone = &fastEntry{}

const fastMapMinSlots = 64

func newFastMap() *fastMap {
	m := &fastMap{seed: maphash.MakeSeed()}
	m.table.Store(&fastTable{slots: make([]fastSlot, fastMapMinSlots), mask: fastMapMinSlots - 1})
	return m
}

// load returns key's entry, or nil (any goroutine).
func (m *fastMap) load(key string) *fastEntry {
	t := m.table.Load()
	h := maphash.String(m.seed, key)
	for i := h & t.mask; ; i = (i + 1) & t.mask {
		s := &t.slots[i]
		e := s.entry.Load()
		if e == nil {
			return nil
		}
		if s.hash.Load() == h && e != tombstone && e.key == key {
			return e
		}
	}
}

// store adds e, whose key is not in m (loop goroutine).
func (m *fastMap) store(e *fastEntry) {
	t := m.table.Load()
	if (m.live+m.dead+1)*4 > len(t.slots)*3 {
		t = m.rebuild(t, m.live+1)
	}
	h := maphash.String(m.seed, e.key)
	for i := h & t.mask; ; i = (i + 1) & t.mask {
		s := &t.slots[i]
		if cur := s.entry.Load(); cur == nil || cur == tombstone {
			if cur == tombstone {
				m.dead--
			}
			s.hash.Store(h)
			s.entry.Store(e)
			m.live++
			return
		}
	}
}

// delete removes key's entry, if any (loop goroutine).
func (m *fastMap) delete(key string) {
	t := m.table.Load()
	h := maphash.String(m.seed, key)
	for i := h & t.mask; ; i = (i + 1) & t.mask {
		s := &t.slots[i]
		e := s.entry.Load()
		if e == nil {
			return
		}
		if s.hash.Load() == h && e != tombstone && e.key == key {
			s.entry.Store(tombstone)
			m.live--
			m.dead++
			if len(t.slots) > fastMapMinSlots && m.live*8 < len(t.slots) {
				m.rebuild(t, m.live) // mostly empty: shrink
			}
			return
		}
	}
}

// rebuild publishes a table sized for want entries (at most half full)
// holding t's live entries, without tombstones, and returns it.
func (m *fastMap) rebuild(t *fastTable, want int) *fastTable {
	size := fastMapMinSlots
	for size < 2*want {
		size *= 2
	}
	nt := &fastTable{slots: make([]fastSlot, size), mask: uint64(size - 1)}
	for i := range t.slots {
		s := &t.slots[i]
		e := s.entry.Load()
		if e == nil || e == tombstone {
			continue
		}
		h := s.hash.Load()
		j := h & nt.mask
		for nt.slots[j].entry.Load() != nil {
			j = (j + 1) & nt.mask
		}
		nt.slots[j].hash.Store(h)
		nt.slots[j].entry.Store(e)
	}
	m.table.Store(nt)
	m.dead = 0
	return nt
}
