package cluster

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"

	"pgregory.net/rapid"
)

// TestFastMapModel: random stores and deletes (through growth, tombstones
// and shrinking) leave fastMap holding exactly what a Go map holds.
func TestFastMapModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		m := newFastMap()
		model := map[string]*fastEntry{}
		keys := rapid.IntRange(1, 400).Draw(t, "keys")
		for range rapid.IntRange(1, 2000).Draw(t, "steps") {
			k := fmt.Sprintf("k%d", rapid.IntRange(0, keys-1).Draw(t, "key"))
			switch rapid.IntRange(0, 2).Draw(t, "op") {
			case 0:
				if model[k] == nil {
					e := &fastEntry{key: k}
					m.store(e)
					model[k] = e
				}
			case 1:
				m.delete(k)
				delete(model, k)
			case 2:
				if got := m.load(k); got != model[k] {
					t.Fatalf("load(%q) = %p, want %p", k, got, model[k])
				}
			}
		}
		if m.live != len(model) {
			t.Fatalf("live %d, want %d", m.live, len(model))
		}
		for k, e := range model {
			if m.load(k) != e {
				t.Fatalf("load(%q) lost its entry", k)
			}
		}
		if m.load("absent") != nil || m.load("") != nil {
			t.Fatal("load of an absent key found an entry")
		}
	})
}

// TestFastMapConcurrentReaders: readers looking keys up while the writer
// stores, deletes and rebuilds (run under -race) always find a stable
// key's entry, never another key's.
func TestFastMapConcurrentReaders(t *testing.T) {
	m := newFastMap()
	stable := &fastEntry{key: "stable"}
	m.store(stable)
	var stop atomic.Bool
	var wg sync.WaitGroup
	for r := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				if m.load("stable") != stable {
					t.Error("the stable key's entry was not found")
					return
				}
				k := fmt.Sprintf("c%d", (i+r)%3000)
				if e := m.load(k); e != nil && e.key != k {
					t.Errorf("load(%q) found %q", k, e.key)
					return
				}
			}
		}()
	}
	for range 3 {
		for i := range 3000 {
			m.store(&fastEntry{key: fmt.Sprintf("c%d", i)})
		}
		for i := range 3000 {
			m.delete(fmt.Sprintf("c%d", i))
		}
	}
	stop.Store(true)
	wg.Wait()
}

// TestFastEntryLayout: an entry is 192 bytes (a size class of the Go
// allocator that is a multiple of the cache line, so entries start on
// line boundaries) and what every check reads, the key, the level and
// the counters' slice, is in its first line, apart from what refills and
// the loop write; a counter (fastShard) is a pair of cache lines.
func TestFastEntryLayout(t *testing.T) {
	if s := unsafe.Sizeof(fastShard{}); s != 128 {
		t.Errorf("fastShard is %d bytes, want 128 (a pair of cache lines: the adjacent-line prefetcher's unit)", s)
	}
	var e fastEntry
	if o := unsafe.Offsetof(e.mask); o >= 64 {
		t.Errorf("fastEntry.mask at offset %d, want in the first cache line", o)
	}
	if s := unsafe.Sizeof(e); s != 192 {
		t.Errorf("fastEntry is %d bytes, want 192", s)
	}
	if o := unsafe.Offsetof(e.mu); o != 64 {
		t.Errorf("fastEntry.mu at offset %d, want 64 (the second cache line)", o)
	}
	if o := unsafe.Offsetof(e.level); o >= 64 {
		t.Errorf("fastEntry.level at offset %d, want in the first cache line", o)
	}
}
