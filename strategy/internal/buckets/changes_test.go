package buckets

import (
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// changesModel is a store fed by a Table's snapshots: ExportFull replaces
// it, ExportChanges puts and deletes over it.
type changesModel struct {
	tb     *Table
	now    time.Duration
	stored map[string]strategy.KeyState
}

// snapshot applies one snapshot to the store (of changes unless full or
// the table cannot tell them) and checks that each key came once.
func (m *changesModel) snapshot(rt *rapid.T, full bool) {
	seen := map[string]bool{}
	once := func(k string) {
		if seen[k] {
			rt.Fatalf("key %q reported twice in one snapshot", k)
		}
		seen[k] = true
	}
	put := func(st strategy.KeyState) { once(st.Key); m.stored[st.Key] = st }
	gone := func(k string) { once(k); delete(m.stored, k) }
	if !full && m.tb.ExportChanges(m.now, nil, put, gone) {
		return
	}
	if len(seen) > 0 {
		rt.Fatalf("ExportChanges reported %d keys, then false", len(seen))
	}
	m.stored = map[string]strategy.KeyState{}
	m.tb.ExportFull(m.now, nil, put)
}

// check compares the store with the table at now: a key the table would
// export has the same level refilled to now in the store; a key the store
// holds beyond those is still in the table, full (dropped keys are
// deleted from the store).
func (m *changesModel) check(rt *rapid.T) {
	exported := map[string]strategy.KeyState{}
	m.tb.Export(m.now, nil, func(st strategy.KeyState) { exported[st.Key] = st })
	rate, burst := m.tb.Shape()
	level := func(st strategy.KeyState) int64 {
		b := bucket.MustNew(rate, burst, st.At)
		_ = b.SetLevelFloor(st.At, st.Level, st.TicksPerToken, strategy.MinKeyStateLevel)
		l, _, _ := b.LevelAt(m.now)
		return l
	}
	for k, want := range exported {
		got, ok := m.stored[k]
		if !ok || level(got) != level(want) {
			rt.Fatalf("key %q at %v: stored %+v (present %v, level %d), the table exports %+v (level %d)", k, m.now, got, ok, level(got), want, level(want))
		}
	}
	for k, st := range m.stored {
		if _, ok := exported[k]; ok {
			continue
		}
		e, ok := m.tb.m[k]
		if !ok {
			rt.Fatalf("key %q at %v: stored %+v, dropped from the table (not deleted from the store)", k, m.now, st)
		}
		if l, c, _ := e.b.LevelAt(m.now); l < c || level(st) < c {
			rt.Fatalf("key %q at %v: stored %+v (level %d), the table holds level %d of %d and exports nothing", k, m.now, st, level(st), l, c)
		}
	}
}

// checkMemory: MemoryBytes is its recount.
func checkMemory(rt *rapid.T, tb *Table) {
	if got, want := tb.MemoryBytes(), recount(tb); got != want {
		rt.Fatalf("MemoryBytes %d, recount %d", got, want)
	}
}

// recount is MemoryBytes recounted from the table's contents: the map,
// order and key strings as MemoryBytes counts them, the list's array, and
// the strings of the dropped keys it lists (every place of a key in the
// list is a drop, but the last of a key the table holds: its mark).
func recount(t *Table) int {
	keyAlloc := 0
	for k := range t.m {
		keyAlloc += allocBytes(len(k))
	}
	listed := map[string]int{}
	for _, chunk := range t.ch.chunks {
		for _, k := range chunk {
			listed[k]++
		}
	}
	goneAlloc := 0
	for k, n := range listed {
		if _, ok := t.m[k]; ok {
			n--
		}
		goneAlloc += n * allocBytes(len(k))
	}
	c := *t
	c.keyAlloc, c.ch = keyAlloc, changes{}
	return c.MemoryBytes() + len(t.ch.chunks)*changesChunk*16 + cap(t.ch.chunks)*24 + goneAlloc
}

// TestExportChangesProperty: a table driven with random requests (Get),
// clamps (Lookup), Deletes, sweeps in one go and in steps, re-ratings and
// passes of time, snapshotted into a store at random, of changes
// (ExportChanges) or whole (ExportFull, also whenever ExportChanges cannot
// tell): after each snapshot the store gives every key the table would
// export the same level refilled to now, holds no key the table dropped,
// and any other key it holds is full; no key is reported twice in one
// snapshot; MemoryBytes counts the list of changed keys (its array and
// the dropped keys' strings it keeps). Keys are drawn from 12, so drops
// and adds between snapshots repeat a key in the list.
func TestExportChangesProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		tb, err := New(bucket.Rate{Tokens: 1, Per: 100 * time.Millisecond}, 3)
		if err != nil {
			rt.Fatal(err)
		}
		m := &changesModel{tb: tb, stored: map[string]strategy.KeyState{}}
		key := func(rt *rapid.T) string {
			return fmt.Sprint("key-", rapid.IntRange(0, 11).Draw(rt, "key")) // fresh strings: the dropped ones' are counted
		}
		rt.Repeat(map[string]func(*rapid.T){
			"": func(rt *rapid.T) { checkMemory(rt, tb) },
			"request": func(rt *rapid.T) {
				tb.Get(key(rt), m.now).AllowN(m.now, rapid.Int64Range(0, 3).Draw(rt, "tokens"))
			},
			"charge": func(rt *rapid.T) {
				if b, ok := tb.Lookup(key(rt)); ok {
					b.Overdraw(m.now, rapid.Int64Range(1, 3).Draw(rt, "tokens"), 3)
				}
			},
			"delete": func(rt *rapid.T) { tb.Delete(key(rt)) },
			"sweep":  func(rt *rapid.T) { tb.Sweep(m.now) },
			"step":   func(rt *rapid.T) { tb.SweepStep(m.now, rapid.IntRange(1, 4).Draw(rt, "budget"), nil) },
			"rerate": func(rt *rapid.T) {
				if rapid.IntRange(0, 5).Draw(rt, "rare") == 0 {
					_ = tb.SetRate(m.now, bucket.Rate{Tokens: rapid.Int64Range(1, 3).Draw(rt, "r"), Per: 100 * time.Millisecond},
						rapid.Int64Range(1, 4).Draw(rt, "b"))
				}
			},
			"time": func(rt *rapid.T) {
				m.now += time.Duration(rapid.IntRange(0, 400).Draw(rt, "ms")) * time.Millisecond
			},
			"snapshot": func(rt *rapid.T) {
				m.snapshot(rt, rapid.IntRange(0, 4).Draw(rt, "full") == 0)
				m.check(rt)
			},
		})
	})
}

// TestChangesListBounded: the list of changed keys gives up (Tracking
// false, the memory given back) when drops and adds between two snapshots
// outnumber the keys held by changesSlack, and a full export starts it
// again.
func TestChangesListBounded(t *testing.T) {
	tb, _ := New(bucket.Rate{Tokens: 1, Per: time.Second}, 1)
	tb.ExportFull(0, nil, func(strategy.KeyState) {})
	for i := range changesSlack + 10 {
		k := fmt.Sprint("k", i)
		tb.Get(k, 0).AllowN(0, 1)
		tb.Delete(k)
	}
	if tb.Tracking() || tb.MemoryBytes() != recount(tb) || tb.ch.n != 0 || tb.ch.bytes() != 0 {
		t.Fatalf("after %d adds and drops of keys: tracking %v, %d keys listed, MemoryBytes %d", changesSlack+10, tb.Tracking(), tb.ch.n, tb.MemoryBytes())
	}
	if tb.ExportChanges(0, nil, func(strategy.KeyState) {}, func(string) {}) {
		t.Fatal("ExportChanges reported changes after the list was given up")
	}
	tb.ExportFull(0, nil, func(strategy.KeyState) {})
	if !tb.Tracking() {
		t.Fatal("a full export did not start the list again")
	}
}
