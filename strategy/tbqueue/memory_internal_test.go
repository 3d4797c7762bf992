package tbqueue

import (
	"maps"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/internal/memsize/memtest"
)

// TestMemoryBytesMatchesHeap holds MemoryBytes (tokenmesh_state_bytes) to
// the live heap a node's state grows by: 100k keys (TOKENMESH_MEMKEYS)
// taken by requests on a single node and on a node of three (whose delta
// states hold every key), then received from a peer; then every key
// expires and the heap must fall back (the local map rebuilt, the delta
// states replaced).
func TestMemoryBytesMatchesHeap(t *testing.T) {
	keys := memtest.Keys(t)
	names := memtest.Names(keys)
	for _, tc := range []struct {
		name    string
		members []string
	}{{"single", []string{"a"}}, {"three", []string{"a", "b", "c"}}} {
		t.Run(tc.name, func(t *testing.T) {
			var q *TBQueue
			fx := &strategy.Effects{}
			growth := memtest.Growth(func() {
				q = newNode(t, "a", tc.members)
				q.Start(0, fx)
				for i, k := range names {
					for range 2 { // two elements per key
						q.Request(0, strategy.Request{ID: uint64(i), Key: memtest.Copy(k), Tokens: 1, Arrival: time.Duration(i)}, fx)
					}
					fx.Reset()
				}
			})
			memtest.Compare(t, tc.name+": requests", q.MemoryBytes(), growth)
			if len(tc.members) > 1 {
				queues := q.localQueues()
				payload := q.encode(slices.Sorted(maps.Keys(queues)), queues, false)
				var b *TBQueue
				growth := memtest.Growth(func() {
					b = newNode(t, "b", tc.members)
					if err := b.Receive(time.Duration(keys), "a", payload, fx); err != nil {
						t.Fatal(err)
					}
				})
				memtest.Compare(t, tc.name+": received", b.MemoryBytes(), growth)
				runtime.KeepAlive(b)
				runtime.KeepAlive(payload)
			}
			peak := q.MemoryBytes()
			shrunk := memtest.Growth(func() {
				for nb := range q.delta { // gossiped: emptied
					clear(q.delta[nb])
					q.queued[nb] = 0
				}
				q.sweep(time.Hour)
			})
			t.Logf("after expiry: %d keys, MemoryBytes %d (was %d), heap %s", len(q.local), q.MemoryBytes(), peak, memtest.Sprint(shrunk))
			if len(q.local) != 0 {
				t.Fatalf("%d keys left after expiry", len(q.local))
			}
			if q.MemoryBytes() > 1024 || -shrunk < 0.8*float64(peak) {
				t.Errorf("after every key expired: MemoryBytes %d B, heap fell %s of the %s estimated: the maps did not shrink",
					q.MemoryBytes(), memtest.Sprint(-shrunk), memtest.Sprint(float64(peak)))
			}
			runtime.KeepAlive(q)
		})
	}
	runtime.KeepAlive(names)
}
