package adaptive

import (
	"fmt"
	"math"
	"runtime"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/internal/memsize/memtest"
)

// TestMemoryBytesMatchesHeap holds MemoryBytes (tokenmesh_state_bytes) to
// the live heap a node's state grows by: 100k keys (TOKENMESH_MEMKEYS)
// taken by requests; then, idle for a window, every key is dropped and
// the heap must fall back (the keys map rebuilt).
func TestMemoryBytesMatchesHeap(t *testing.T) {
	keys := memtest.Keys(t)
	names := memtest.Names(keys)
	var a *Adaptive
	fx := &strategy.Effects{}
	growth := memtest.Growth(func() {
		a = newNode(t, "a", []string{"a"}, bucket.Rate{Tokens: 1000, Per: time.Second}, 1000)
		a.Start(0, fx)
		for i, k := range names {
			a.Request(0, strategy.Request{ID: uint64(i), Key: memtest.Copy(k), Tokens: 1}, fx)
			fx.Reset()
		}
	})
	memtest.Compare(t, "requests", a.MemoryBytes(), growth)
	peak := a.MemoryBytes()
	shrunk := memtest.Growth(func() {
		a.Tick(time.Hour, fx) // idle for a window, buckets full: dropped
		fx.Reset()
	})
	t.Logf("after expiry: %d keys, MemoryBytes %d (was %d), heap %s", len(a.keys), a.MemoryBytes(), peak, memtest.Sprint(shrunk))
	if len(a.keys) != 0 {
		t.Fatalf("%d keys left after expiry", len(a.keys))
	}
	if a.MemoryBytes() > 4096 || -shrunk < 0.8*float64(peak) {
		t.Errorf("after every key expired: MemoryBytes %d B, heap fell %s of the %s estimated: the keys map did not shrink",
			a.MemoryBytes(), memtest.Sprint(-shrunk), memtest.Sprint(float64(peak)))
	}
	runtime.KeepAlive(a)
	runtime.KeepAlive(names)
}

// walkShares is CapacityShares computed by walking every key (what it did
// before it was kept incrementally).
func walkShares(a *Adaptive) (sum float64, keys int) {
	for k := range a.keys {
		sum += a.shareFraction(k)
	}
	return sum, len(a.keys)
}

// TestCapacitySharesIncremental runs two nodes through epochs, keys
// created and dropped, a membership change and conserve's cap, and holds
// the kept CapacityShares to the walk at every step.
func TestCapacitySharesIncremental(t *testing.T) {
	members := []string{"a", "b"}
	nodes := map[strategy.NodeID]*Adaptive{}
	for _, m := range members {
		nodes[strategy.NodeID(m)] = newNode(t, m, members, bucket.Rate{Tokens: 100, Per: time.Second}, 100, "step=100ms", "window=500ms", "min_mean=0.1")
	}
	fx := &strategy.Effects{}
	var deliver func(now time.Duration, from strategy.NodeID)
	deliver = func(now time.Duration, from strategy.NodeID) {
		msgs := append([]strategy.Message(nil), fx.Messages...)
		fx.Reset()
		for _, m := range msgs {
			if to := nodes[m.To]; to != nil {
				if err := to.Receive(now, from, m.Payload, fx); err != nil {
					t.Fatal(err)
				}
				deliver(now, m.To)
			}
		}
	}
	check := func(now time.Duration, what string) {
		t.Helper()
		for id, a := range nodes {
			got, gk := a.CapacityShares()
			want, wk := walkShares(a)
			if gk != wk || math.Abs(got-want) > 1e-9*math.Max(1, want) {
				t.Fatalf("%v %s: node %s: CapacityShares %v over %d keys, the walk %v over %d", now, what, id, got, gk, want, wk)
			}
		}
	}
	id := uint64(0)
	for step := range 60 {
		now := time.Duration(step) * 50 * time.Millisecond
		for _, name := range []strategy.NodeID{"a", "b"} {
			n := 20
			if name == "b" {
				n = 5 + step%7
			}
			for i := range n {
				id++
				key := fmt.Sprintf("k%d", (i+step)%(30-step/3))
				nodes[name].Request(now, strategy.Request{ID: id, Key: key, Tokens: 1, Arrival: now}, fx)
			}
			fx.Reset()
			nodes[name].Tick(now, fx)
			deliver(now, name)
			check(now, "after a tick")
		}
		if step == 40 {
			nodes["a"].SetExpected(now, []strategy.NodeID{"a", "b", "c"}, fx)
			fx.Reset()
			check(now, "after SetExpected")
		}
	}
	for id, a := range nodes {
		if len(a.shares) == 0 {
			t.Errorf("node %s applied no shares: the test did not exercise the epochs", id)
		}
	}
}
