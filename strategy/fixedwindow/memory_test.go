package fixedwindow

import (
	"runtime"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/internal/keyorder"
	"github.com/tokenmesh/tokenmesh/strategy/internal/memsize/memtest"
)

// TestMemoryBytesMatchesHeap holds MemoryBytes (tokenmesh_state_bytes) to
// the live heap a single node's counters grow by: 100k keys
// (TOKENMESH_MEMKEYS) counted in one window; then the next window's sweep
// (in steps) drops them and the heap must fall back (the counts map rebuilt).
func TestMemoryBytesMatchesHeap(t *testing.T) {
	keys := memtest.Keys(t)
	names := memtest.Names(keys)
	var f *FixedWindow
	fx := &strategy.Effects{}
	growth := memtest.Growth(func() {
		f = newFW(t, "a", []strategy.NodeID{"a"}, 10, time.Second)
		f.Start(0, fx)
		fx.Reset()
		for i, k := range names {
			f.Request(0, strategy.Request{ID: uint64(i), Key: memtest.Copy(k), Tokens: 1}, fx)
			fx.Reset()
		}
	})
	memtest.Compare(t, "requests", f.MemoryBytes(), growth)
	peak := f.MemoryBytes()
	shrunk := memtest.Growth(func() {
		// A later window: every counter swept, in steps of
		// keyorder.Budget keys, a step every keyorder.StepEvery.
		for now := time.Minute; now < time.Minute+10*time.Second; now += keyorder.StepEvery {
			f.Tick(now, fx)
			fx.Reset()
		}
	})
	t.Logf("after the window: %d keys, MemoryBytes %d (was %d), heap %s", len(f.counts), f.MemoryBytes(), peak, memtest.Sprint(shrunk))
	if len(f.counts) != 0 {
		t.Fatalf("%d keys left after the window", len(f.counts))
	}
	if f.MemoryBytes() > 1024 || -shrunk < 0.8*float64(peak) {
		t.Errorf("after every key was swept: MemoryBytes %d B, heap fell %s of the %s estimated: the counts map did not shrink",
			f.MemoryBytes(), memtest.Sprint(-shrunk), memtest.Sprint(float64(peak)))
	}
	runtime.KeepAlive(f)
	runtime.KeepAlive(names)
}
