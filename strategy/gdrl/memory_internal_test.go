package gdrl

import (
	"fmt"
	"math"
	"runtime"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/internal/memsize/memtest"
	"github.com/tokenmesh/tokenmesh/strategy/internal/strattest"
)

func newMemNode(t testing.TB, self string, members []string, params ...string) *GDRL {
	t.Helper()
	g, err := New(strattest.Config(t, self, members, bucket.Rate{Tokens: 1000, Per: time.Second}, 1000, params...))
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestMemoryBytesMatchesHeap holds MemoryBytes (tokenmesh_state_bytes) to
// the live heap a single node's state grows by: 100k keys
// (TOKENMESH_MEMKEYS) taken by requests; then, idle, every share is
// dropped and seen forgets the keys, and the heap must fall back (the maps
// rebuilt) to what the node alone keeps of its changed keys, which the
// estimate holds within 20% too.
func TestMemoryBytesMatchesHeap(t *testing.T) {
	keys := memtest.Keys(t)
	names := memtest.Names(keys)
	var g *GDRL
	fx := &strategy.Effects{}
	growth := memtest.Growth(func() {
		g = newMemNode(t, "a", []string{"a"}, "idle=1s")
		g.Start(0, fx)
		fx.Reset()
		for i, k := range names {
			g.Request(0, strategy.Request{ID: uint64(i), Key: memtest.Copy(k), Tokens: 1}, fx)
			fx.Reset()
		}
	})
	memtest.Compare(t, "requests", g.MemoryBytes(), growth)
	peak := g.MemoryBytes()
	shrunk := memtest.Growth(func() {
		for now := time.Duration(0); now <= time.Minute; now += 100 * time.Millisecond {
			g.Tick(now, fx)
			fx.Reset()
		}
	})
	t.Logf("after expiry: %d shares, %d seen, MemoryBytes %d (was %d), heap %s", len(g.shares), len(g.seen), g.MemoryBytes(), peak, memtest.Sprint(shrunk))
	if len(g.shares) != 0 || len(g.seen) != 0 {
		t.Fatalf("%d shares, %d seen left after expiry", len(g.shares), len(g.seen))
	}
	// A node without a buddy (alone) keeps the keys it changed until a
	// buddy acknowledges a record (g.changed, replication.go): the
	// estimate counts them, and the rest of the heap must go (the shares
	// and seen maps rebuilt).
	// Keys that were never in a record (taken by requests only, never
	// changed) are dropped without a removal to replicate (share.inRecord):
	// then nothing is kept, and the heap must have fallen back.
	left := g.MemoryBytes()
	if len(g.changed) > 0 {
		memtest.Compare(t, "kept after expiry (changed keys)", left, growth+shrunk)
	} else if left != 0 {
		t.Errorf("no changed key kept, MemoryBytes %d B: want 0", left)
	}
	if -shrunk < 0.8*float64(peak-left) {
		t.Errorf("after every key expired: MemoryBytes %d B (%d changed keys), heap fell %s of the %s estimated: the maps did not shrink",
			left, len(g.changed), memtest.Sprint(-shrunk), memtest.Sprint(float64(peak-left)))
	}
	runtime.KeepAlive(g)
	runtime.KeepAlive(names)
}

// TestCapacitySharesIncremental runs three nodes exchanging capacity for
// keys of uneven demand and holds the kept CapacityShares to a walk of the
// shares at every step.
func TestCapacitySharesIncremental(t *testing.T) {
	members := []string{"a", "b", "c"}
	nodes := map[strategy.NodeID]*GDRL{}
	fx := &strategy.Effects{}
	for _, m := range members {
		g := newMemNode(t, m, members, "idle=2s", "graph=full")
		g.Start(0, fx)
		nodes[strategy.NodeID(m)] = g
	}
	queue := []strategy.Message(nil)
	from := []strategy.NodeID(nil)
	collect := func(id strategy.NodeID) {
		for _, m := range fx.Messages {
			queue, from = append(queue, m), append(from, id)
		}
		fx.Reset()
	}
	check := func(now time.Duration) {
		t.Helper()
		for id, g := range nodes {
			got, gk := g.CapacityShares()
			want := 0.0
			for _, sh := range g.shares {
				want += float64(sh.c) / float64(g.totalC)
			}
			if gk != len(g.shares) || math.Abs(got-want) > 1e-9*math.Max(1, math.Abs(want)) {
				t.Fatalf("%v: node %s: CapacityShares %v over %d keys, the walk %v over %d", now, id, got, gk, want, len(g.shares))
			}
		}
	}
	id := uint64(0)
	moved := false
	for now := time.Duration(0); now < 8*time.Second; now += 10 * time.Millisecond {
		for i, name := range []strategy.NodeID{"a", "b", "c"} {
			if now < 4*time.Second { // then idle: shares go back and are dropped
				for k := range 3 * (i + 1) {
					id++
					nodes[name].Request(now, strategy.Request{ID: id, Key: fmt.Sprintf("k%d", k), Tokens: int64(1 + i), Arrival: now}, fx)
				}
			}
			collect(name)
			nodes[name].Tick(now, fx)
			collect(name)
		}
		for len(queue) > 0 {
			m, f := queue[0], from[0]
			queue, from = queue[1:], from[1:]
			if err := nodes[m.To].Receive(now, f, m.Payload, fx); err != nil {
				t.Fatal(err)
			}
			collect(m.To)
		}
		check(now)
		for _, g := range nodes {
			for _, sh := range g.shares {
				moved = moved || sh.c != g.dc
			}
		}
	}
	if !moved {
		t.Error("no share moved from the default: the test did not exercise transfers")
	}
}
