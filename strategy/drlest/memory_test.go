package drlest

import (
	"runtime"
	"slices"
	"testing"
	"time"

	peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/internal/memsize/memtest"
	"github.com/tokenmesh/tokenmesh/strategy/internal/wire"
)

// TestMemoryBytesMatchesHeap holds MemoryBytes (tokenmesh_state_bytes) to
// the live heap a node's state grows by: 100k keys (TOKENMESH_MEMKEYS)
// requested at an fps node, then estimates of every key received from
// two peers (a peers map per key); then every key idles out and the heap
// must fall back (the keys map rebuilt).
func TestMemoryBytesMatchesHeap(t *testing.T) {
	keys := memtest.Keys(t)
	names := memtest.Names(keys)
	d := newNode(t, FPS, "n0")
	fx := &strategy.Effects{}
	growth := memtest.Growth(func() {
		for i, k := range names {
			d.Request(0, strategy.Request{ID: uint64(i), Key: memtest.Copy(k), Tokens: 1}, fx)
			fx.Reset()
		}
	})
	memtest.Compare(t, "requests", d.MemoryBytes(), growth)
	// The peers' reports: keys sorted, at most maxDemandsPerReport each.
	sorted := append([]string(nil), names...)
	slices.Sort(sorted)
	var payloads [][]byte
	for len(sorted) > 0 {
		part := sorted[:min(len(sorted), maxDemandsPerReport)]
		sorted = sorted[len(part):]
		m := &peerv1.DrlEstReport{Interval: 1}
		for _, k := range part {
			m.Demands = append(m.Demands, &peerv1.DrlEstDemand{Key: k, MilliTokensPerS: 1000})
		}
		payloads = append(payloads, wire.MustMarshal(m))
	}
	before := d.MemoryBytes()
	growth = memtest.Growth(func() {
		for _, from := range []strategy.NodeID{"n1", "n2"} {
			for _, p := range payloads {
				if err := d.Receive(0, from, p, fx); err != nil {
					t.Fatal(err)
				}
			}
		}
	})
	memtest.Compare(t, "peers' estimates", d.MemoryBytes()-before, growth)
	runtime.KeepAlive(payloads)
	peak := d.MemoryBytes()
	shrunk := memtest.Growth(func() {
		for now := time.Duration(0); now <= 5*time.Minute; now += 100 * time.Millisecond {
			d.Tick(now, fx)
			fx.Reset()
		}
	})
	t.Logf("after idling: %d keys, MemoryBytes %d (was %d), heap %s", len(d.keys), d.MemoryBytes(), peak, memtest.Sprint(shrunk))
	if len(d.keys) != 0 {
		t.Fatalf("%d keys left after idling", len(d.keys))
	}
	if d.MemoryBytes() > 1024 || -shrunk < 0.8*float64(peak) {
		t.Errorf("after every key idled out: MemoryBytes %d B, heap fell %s of the %s estimated: the keys map did not shrink",
			d.MemoryBytes(), memtest.Sprint(-shrunk), memtest.Sprint(float64(peak)))
	}
	runtime.KeepAlive(d)
	runtime.KeepAlive(names)
}
