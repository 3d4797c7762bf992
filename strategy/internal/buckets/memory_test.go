package buckets

import (
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
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
	for _, keyLen := range []int{12, 40} {
		t.Run(fmt.Sprintf("key=%dB", keyLen), func(t *testing.T) {
			names := make([]string, keys)
			for i := range names {
				names[i] = fmt.Sprintf("%0*d", keyLen, i)
			}
			tb, _ := New(bucket.Rate{Tokens: 1, Per: time.Minute}, 5)
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
			if r := mem / growth; r < 0.5 || r > 2 {
				t.Errorf("MemoryBytes is %.2f times the heap growth; want within 2x", r)
			}
			tb.Sweep(time.Hour)
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
