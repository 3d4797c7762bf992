package gcounter

import (
	"runtime"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/internal/keyorder"
	"github.com/tokenmesh/tokenmesh/strategy/internal/memsize/memtest"
)

// TestMemoryBytesMatchesHeap holds MemoryBytes (tokenmesh_state_bytes) to
// the live heap a node's state grows by: 100k keys (TOKENMESH_MEMKEYS)
// taken by requests on a single node, then on a node of three (whose delta
// states for its two neighbours hold every key), then received from a
// peer; then every key expires and the heap must fall back (the state map
// rebuilt) and the estimate with it.
func TestMemoryBytesMatchesHeap(t *testing.T) {
	keys := memtest.Keys(t)
	names := memtest.Names(keys)
	for _, tc := range []struct {
		name    string
		members []string
	}{{"single", []string{"a"}}, {"three", []string{"a", "b", "c"}}} {
		t.Run(tc.name, func(t *testing.T) {
			var g *GCounter
			fx := &strategy.Effects{}
			growth := memtest.Growth(func() {
				g = newNode(t, "a", tc.members, "idle=10s")
				g.Start(0, fx)
				for i, k := range names {
					g.Request(0, strategy.Request{ID: uint64(i), Key: memtest.Copy(k), Tokens: 1}, fx)
					fx.Reset()
				}
			})
			memtest.Compare(t, tc.name+": requests", g.MemoryBytes(), growth)
			if len(tc.members) > 1 {
				// A peer receives the keys in the gossip of a (one delta
				// state of every key, as a catch-up would send).
				payload := g.encode(g.allKeys(), false)
				var b *GCounter
				growth := memtest.Growth(func() {
					b = newNode(t, "b", tc.members, "idle=10s")
					if err := b.Receive(0, "a", payload, fx); err != nil {
						t.Fatal(err)
					}
				})
				memtest.Compare(t, tc.name+": received", b.MemoryBytes(), growth)
				runtime.KeepAlive(b)
				runtime.KeepAlive(payload) // alive across the measurement: not counted as freed
				for nb := range g.delta {  // delivered: the sweep may drop the keys
					g.dropPending(g.delta[nb])
					clear(g.delta[nb])
				}
			}
			peak := g.MemoryBytes()
			shrunk := memtest.Growth(func() {
				// Past idle, full again: swept, in steps of
				// keyorder.Budget keys, a step every keyorder.StepEvery.
				for now := time.Minute; now < time.Minute+10*time.Second; now += keyorder.StepEvery {
					g.Tick(now, fx)
					fx.Reset()
				}
			})
			t.Logf("after expiry: %d keys, MemoryBytes %d (was %d), heap %s", len(g.state), g.MemoryBytes(), peak, memtest.Sprint(shrunk))
			if len(g.state) != 0 {
				t.Fatalf("%d keys left after expiry", len(g.state))
			}
			if g.MemoryBytes() > 1024 || -shrunk < 0.8*float64(peak) {
				t.Errorf("after every key expired: MemoryBytes %d B, heap fell %s of the %s estimated: the state map did not shrink",
					g.MemoryBytes(), memtest.Sprint(-shrunk), memtest.Sprint(float64(peak)))
			}
			runtime.KeepAlive(g)
		})
	}
	runtime.KeepAlive(names)
}

// BenchmarkScrapeRead is what a /metrics scrape costs the node's loop for
// one gcounter rule of 100k keys (TOKENMESH_MEMKEYS): the wire size it
// read before (StateBytes, a walk of every key) against the heap estimate
// it reads now (MemoryBytes, kept incrementally).
func BenchmarkScrapeRead(b *testing.B) {
	keys := memtest.Keys(b)
	g := newNode(b, "a", []string{"a"})
	fx := &strategy.Effects{}
	for i, k := range memtest.Names(keys) {
		g.Request(0, strategy.Request{ID: uint64(i), Key: k, Tokens: 1}, fx)
		fx.Reset()
	}
	b.Run("StateBytes", func(b *testing.B) {
		for b.Loop() {
			_ = g.StateBytes()
		}
	})
	b.Run("MemoryBytes", func(b *testing.B) {
		for b.Loop() {
			_ = g.MemoryBytes()
		}
	})
}
