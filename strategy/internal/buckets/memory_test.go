package buckets

import (
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/internal/memsize/memtest"
)

func heapInuse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// TestMemoryBytesMatchesHeap creates keys in a table and compares the
// growth of the Go heap in use (runtime.MemStats.HeapInuse) with
// MemoryBytes and with the wire-encoding StateBytes. 100k keys by default
// (TOKENMESH_MEMKEYS=1000000 for the 1M-key measurement of
// docs/PERFORMANCE.md).
func TestMemoryBytesMatchesHeap(t *testing.T) {
	keys := 100_000
	if s := os.Getenv("TOKENMESH_MEMKEYS"); s != "" {
		var err error
		if keys, err = strconv.Atoi(s); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		keyLen   int
		tracking bool
	}{{12, false}, {40, false}, {12, true}, {40, true}} {
		keyLen := c.keyLen
		t.Run(fmt.Sprintf("key=%dB/tracking=%v", keyLen, c.tracking), func(t *testing.T) {
			names := make([]string, keys)
			for i := range names {
				names[i] = fmt.Sprintf("%0*d", keyLen, i)
			}
			tb, _ := New(bucket.Rate{Tokens: 1, Per: time.Minute}, 5)
			if c.tracking {
				// Snapshots of changes (changes.go): every key created
				// after the first is listed until the next.
				tb.ExportFull(0, nil, func(strategy.KeyState) {})
			}
			before := heapInuse()
			for _, k := range names {
				// The table keeps the key string the request carried: a
				// copy, as a decoded API request's key is.
				tb.Get(string([]byte(k)), 0).AllowN(0, 1)
			}
			growth := float64(heapInuse() - before)
			mem, wire := float64(tb.MemoryBytes()), float64(tb.StateBytes())
			t.Logf("%d keys of %d B: heap +%.1f MB (%.0f B/key); MemoryBytes %.1f MB (ratio %.2f); wire StateBytes %.1f MB (ratio %.2f)",
				keys, keyLen, growth/1e6, growth/float64(keys), mem/1e6, mem/growth, wire/1e6, wire/growth)
			if r := mem / growth; r < 0.8 || r > 1.2 {
				t.Errorf("MemoryBytes is %.2f times the heap growth; want within 20%%", r)
			}
			tb.Sweep(time.Hour)
			if c.tracking {
				// The next snapshot reports the dropped keys and lets
				// them go (but one array of the list); the list had given
				// up already when the drops outnumbered the keys left.
				tb.ExportChanges(time.Hour, nil, func(strategy.KeyState) {}, func(string) {})
			}
			after := heapInuse()
			left := float64(after) - float64(before)
			t.Logf("after expiry: MemoryBytes %d, heap %+.1f MB over the start", tb.MemoryBytes(), left/1e6)
			if tb.MemoryBytes() != 0 || left > 0.1*growth {
				t.Errorf("after every key expired: MemoryBytes %d, heap still %.1f MB above the start (the map did not shrink)", tb.MemoryBytes(), left/1e6)
			}
			runtime.KeepAlive(names)
			runtime.KeepAlive(tb)
			debug.FreeOSMemory()
		})
	}
}

// rssBytes is the process's resident set (Linux /proc/self/status
// VmRSS); 0 elsewhere.
func rssBytes() float64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb * 1024
		}
	}
	return 0
}

// TestRSSAfterExpiry measures what happens to the process's RSS when a
// million keys expire (TOKENMESH_MEMKEYS=1000000; skipped without it: it
// waits for Go's background scavenger): the table's map shrinks (the heap
// falls back), the runtime's background scavenger returns some of the
// freed pages to the OS within seconds, and debug.FreeOSMemory returns the
// rest at once. The numbers are in docs/PERFORMANCE.md.
func TestRSSAfterExpiry(t *testing.T) {
	s := os.Getenv("TOKENMESH_MEMKEYS")
	if s == "" || rssBytes() == 0 {
		t.Skip("a measurement: set TOKENMESH_MEMKEYS (Linux)")
	}
	keys, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	debug.FreeOSMemory()
	r0 := rssBytes()
	tb, _ := New(bucket.Rate{Tokens: 1, Per: time.Minute}, 5)
	for i := range keys {
		tb.Get("tenant-"+strconv.Itoa(i), 0).AllowN(0, 1)
	}
	runtime.GC()
	r1 := rssBytes()
	t.Logf("%d keys: RSS %+.1f MB (%.0f B/key), MemoryBytes %.1f MB", keys, (r1-r0)/1e6, (r1-r0)/float64(keys), float64(tb.MemoryBytes())/1e6)
	tb.Sweep(time.Hour)
	runtime.GC()
	r2 := rssBytes()
	wait := 5 * time.Second
	if w, err := time.ParseDuration(os.Getenv("TOKENMESH_RSSWAIT")); err == nil {
		wait = w
	}
	for step := time.Duration(0); step < wait; step += 5 * time.Second {
		time.Sleep(min(5*time.Second, wait-step))
		if os.Getenv("TOKENMESH_RSSGC") != "" {
			runtime.GC() // what allocation would trigger on a busy node
		}
		t.Logf("  %v after expiry: RSS %+.1f MB", step+min(5*time.Second, wait-step), (rssBytes()-r0)/1e6)
	}
	r3 := rssBytes()
	debug.FreeOSMemory()
	r4 := rssBytes()
	t.Logf("after expiry: RSS %+.1f MB at once, %+.1f MB %v later (background scavenger; TOKENMESH_RSSWAIT), %+.1f MB after debug.FreeOSMemory",
		(r2-r0)/1e6, (r3-r0)/1e6, wait, (r4-r0)/1e6)
	if r4-r0 > 0.25*(r1-r0) {
		t.Errorf("after expiry and FreeOSMemory RSS is still %.1f MB above the start (peak %.1f MB): the table keeps memory", (r4-r0)/1e6, (r1-r0)/1e6)
	}
	runtime.KeepAlive(tb)
}

// TestLenderMemoryBytesMatchesHeap lends the driver's fast path a bucket
// of every key of a table (Lend, as local and static do for each key they
// decide live) or an allowance of it (Grant, as owner does for its own
// keys), compares the heap growth with Lender.MemoryBytes, then takes
// every one back and checks that the estimate and the heap both fall
// back (the maps shrink). 100k keys (TOKENMESH_MEMKEYS as above).
func TestLenderMemoryBytesMatchesHeap(t *testing.T) {
	keys := memtest.Keys(t)
	for _, whole := range []bool{true, false} {
		t.Run(fmt.Sprintf("whole=%v", whole), func(t *testing.T) {
			names := make([]string, keys)
			for i := range names {
				names[i] = fmt.Sprintf("tenant-%08d", i)
			}
			tb, _ := New(bucket.Rate{Tokens: 1000, Per: time.Second}, 100)
			for _, k := range names {
				tb.Get(k, 0)
			}
			var l Lender
			if l.MemoryBytes() != 0 {
				t.Fatalf("an empty lender's MemoryBytes = %d, want 0", l.MemoryBytes())
			}
			lent := make([]bucket.Bucket, len(names))
			before := heapInuse()
			for i, k := range names {
				if whole {
					b, ok := l.Lend(tb, 0, k)
					if !ok {
						t.Fatalf("Lend %s refused", k)
					}
					lent[i] = b
				} else if g, _ := l.Grant(tb, 0, k, 3, 5); g != 3 {
					t.Fatalf("Grant %s = %d tokens, want 3", k, g)
				}
			}
			growth := float64(heapInuse() - before)
			mem := float64(l.MemoryBytes())
			t.Logf("%d keys lent: heap +%.1f MB, MemoryBytes %.1f MB (ratio %.2f)", keys, growth/1e6, mem/1e6, mem/growth)
			if r := mem / growth; r < 0.8 || r > 1.2 {
				t.Errorf("MemoryBytes is %.2f times the heap growth; want within 20%%", r)
			}
			for i, k := range names {
				if whole {
					l.Reclaim(tb, time.Second, k, lent[i])
				} else {
					l.Return(tb, time.Second, k, 1)
				}
			}
			left := float64(heapInuse()) - float64(before)
			t.Logf("all taken back: MemoryBytes %d, heap %+.1f MB over the start", l.MemoryBytes(), left/1e6)
			if float64(l.MemoryBytes()) > 0.01*mem || left > 0.1*growth {
				t.Errorf("all taken back: MemoryBytes %d, heap still %.1f MB above the start (the maps did not shrink)", l.MemoryBytes(), left/1e6)
			}
			runtime.KeepAlive(names)
			runtime.KeepAlive(tb)
			runtime.KeepAlive(lent)
		})
	}
}
