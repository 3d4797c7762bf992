package cluster

import (
	"hash/maphash"
	"sync/atomic"
)

// fastMap is the fast path's key -> allowance table: an open-addressing
// hash table (linear probing) of pointers that any goroutine may read
// without a lock and only the node's loop writes. A reader loads the
// current table (one atomic pointer), then the slots along the key's
// probe sequence (atomic pointers to immutable keys). The loop inserts
// into an empty or deleted slot with one atomic store, deletes by storing
// a tombstone, and grows or cleans the table by building a new one with
// the same entries and publishing it: a reader still on the old table
// finds the same *fastEntry, whose counter is the one that matters.
// Ours; 20-22 ns a lookup on 10k keys where a sync.Map takes 26-34
// (BenchmarkFastMapLoad), with no interface conversion of the key.
type fastMap struct {
	seed  maphash.Seed
	table atomic.Pointer[fastTable]
	// Loop goroutine only.
	live, dead int // entries and tombstones in the current table
}

type fastTable struct {
	slots []atomic.Pointer[fastEntry]
	mask  uint64
}

// fastEntry is one key's allowance. The key is written once, before the
// entry is published; the counter sits on its own cache line, so checks
// of other keys (and the key comparison of this one) do not bounce it
// between cores.
type fastEntry struct {
	key string
	_   [48]byte
	allowance
}

// tombstone marks a deleted slot: probes go on past it.
var tombstone = &fastEntry{}

const fastMapMinSlots = 64

func newFastMap() *fastMap {
	m := &fastMap{seed: maphash.MakeSeed()}
	m.table.Store(&fastTable{slots: make([]atomic.Pointer[fastEntry], fastMapMinSlots), mask: fastMapMinSlots - 1})
	return m
}

// load returns key's entry, or nil (any goroutine).
func (m *fastMap) load(key string) *fastEntry {
	t := m.table.Load()
	i := maphash.String(m.seed, key) & t.mask
	for {
		e := t.slots[i].Load()
		if e == nil {
			return nil
		}
		if e.key == key && e != tombstone {
			return e
		}
		i = (i + 1) & t.mask
	}
}

// store adds e, whose key is not in m (loop goroutine).
func (m *fastMap) store(e *fastEntry) {
	t := m.table.Load()
	if (m.live+m.dead+1)*4 > len(t.slots)*3 {
		t = m.rebuild(t, m.live+1)
	}
	i := maphash.String(m.seed, e.key) & t.mask
	for {
		s := t.slots[i].Load()
		if s == nil || s == tombstone {
			if s == tombstone {
				m.dead--
			}
			t.slots[i].Store(e)
			m.live++
			return
		}
		i = (i + 1) & t.mask
	}
}

// delete removes key's entry, if any (loop goroutine).
func (m *fastMap) delete(key string) {
	t := m.table.Load()
	i := maphash.String(m.seed, key) & t.mask
	for {
		e := t.slots[i].Load()
		if e == nil {
			return
		}
		if e.key == key && e != tombstone {
			t.slots[i].Store(tombstone)
			m.live--
			m.dead++
			if len(t.slots) > fastMapMinSlots && m.live*8 < len(t.slots) {
				m.rebuild(t, m.live) // mostly empty: shrink
			}
			return
		}
		i = (i + 1) & t.mask
	}
}

// rebuild publishes a table sized for want entries (at most half full)
// holding t's live entries, without tombstones, and returns it.
func (m *fastMap) rebuild(t *fastTable, want int) *fastTable {
	size := fastMapMinSlots
	for size < 2*want {
		size *= 2
	}
	nt := &fastTable{slots: make([]atomic.Pointer[fastEntry], size), mask: uint64(size - 1)}
	for i := range t.slots {
		e := t.slots[i].Load()
		if e == nil || e == tombstone {
			continue
		}
		j := maphash.String(m.seed, e.key) & nt.mask
		for nt.slots[j].Load() != nil {
			j = (j + 1) & nt.mask
		}
		nt.slots[j].Store(e)
	}
	m.table.Store(nt)
	m.dead = 0
	return nt
}
