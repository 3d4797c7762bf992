package dedupe

import (
	"runtime"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/internal/memsize/memtest"
)

type memID struct {
	origin string
	id     uint64
}

type memVal struct{ a, b int64 }

// TestMemoryBytesMatchesHeap: a table of 100k entries (a pointer value
// each) against the heap it grows by; after all but a few expire and
// Shrink, the heap falls back by at least 80% of the estimate, the
// estimate falls with it, and what is left is still remembered, in order.
func TestMemoryBytesMatchesHeap(t *testing.T) {
	if testing.Short() {
		t.Skip("100k entries")
	}
	n := memtest.Keys(t)
	var fx strategy.Effects
	var tb *Table[memID, *memVal]
	growth := memtest.Growth(func() {
		tb = New[memID, *memVal](time.Second)
		for i := range n {
			tb.Add(time.Duration(i), memID{"n1", uint64(i)}, &memVal{a: int64(i)}, &fx)
		}
	})
	alloc := 16 // memVal: 16 bytes
	memtest.Compare(t, "table", tb.MemoryBytes(alloc), growth)
	peak := tb.MemoryBytes(alloc)
	shrunk := memtest.Growth(func() {
		tb.Expire(time.Second+time.Duration(n-11), &fx) // all but the last 10
		tb.Shrink()
	})
	if tb.Len() != 10 {
		t.Fatalf("%d entries left; want 10", tb.Len())
	}
	for i := n - 10; i < n; i++ {
		if v, ok := tb.Get(memID{"n1", uint64(i)}); !ok || v.a != int64(i) {
			t.Fatalf("entry %d lost by Shrink", i)
		}
	}
	if -shrunk < 0.8*float64(peak) || tb.MemoryBytes(alloc) > 4<<10 {
		t.Errorf("after Shrink: heap fell %s of %s estimated; estimate now %d B", memtest.Sprint(-shrunk), memtest.Sprint(float64(peak)), tb.MemoryBytes(alloc))
	}
	tb.Expire(time.Second+time.Duration(n-6), &fx)
	if tb.Len() != 5 {
		t.Fatalf("after Shrink, expiry by order left %d entries; want 5", tb.Len())
	}
	runtime.KeepAlive(tb)
}
