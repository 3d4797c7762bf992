package quota

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/internal/memsize/memtest"
)

// memClients is the number of quota clients (Envoy proxies) of the memory
// test, each attached to the node with its share of the keys.
const memClients = 100

// TestMemoryBytesMatchesHeap holds MemoryBytes (tokenmesh_state_bytes) to
// the live heap a node's quota state grows by: 100k keys
// (TOKENMESH_MEMKEYS) owned by the node, each reported by one of 100
// clients attached there (a first report, then one a second later with a
// demand, each key decoded anew as a report's is): an allocation with its
// client's share, and the client's attached key. Then every client
// detaches: its shares end, every allocation goes idle and is dropped
// (the allocs map rebuilt), and the heap and the estimate fall back.
func TestMemoryBytesMatchesHeap(t *testing.T) {
	if testing.Short() {
		t.Skip("builds 100k keys")
	}
	keys := memtest.Keys(t)
	names := memtest.Names(keys)
	fx := &strategy.Effects{}
	var q *Quota
	growth := memtest.Growth(func() {
		var err error
		q, err = New(strategy.Config{Self: "n0", Members: []strategy.NodeID{"n0"}, Rate: bucketRate(100), Burst: 100, Rand: rand.New(rand.NewPCG(1, 2))})
		if err != nil {
			t.Fatal(err)
		}
		q.Start(0, fx)
		for round, now := range []time.Duration{0, time.Second} {
			for i, k := range names {
				u := strategy.QuotaUsage{Client: strategy.QuotaClient(1 + i%memClients), Key: memtest.Copy(k)}
				if round > 0 {
					u.Allowed, u.Elapsed = 5, time.Second
				}
				if err := q.Usage(now, u, fx); err != nil {
					t.Fatal(err)
				}
				fx.Reset()
			}
			q.Tick(now, fx)
			fx.Reset()
		}
	})
	if len(q.allocs) != keys || len(q.clients) != memClients {
		t.Fatalf("%d allocations, %d clients; want %d, %d", len(q.allocs), len(q.clients), keys, memClients)
	}
	for _, k := range names[:10] {
		if a := q.allocs[k]; len(a.shares) != 1 {
			t.Fatalf("%q: %d shares; want 1", k, len(a.shares))
		}
	}
	if err := q.CheckMemory(); err != nil {
		t.Fatal(err)
	}
	memtest.Compare(t, "allocations with clients", q.MemoryBytes(), growth)

	peak := q.MemoryBytes()
	shrunk := memtest.Growth(func() {
		now := 2 * time.Second
		for c := range memClients {
			q.Detach(now, strategy.QuotaClient(1+c), "", fx)
			fx.Reset()
		}
		for ; now <= time.Minute; now += 100 * time.Millisecond {
			q.Tick(now, fx)
			fx.Reset()
		}
	})
	t.Logf("after detach: %d allocations, MemoryBytes %d (was %d), heap %s", len(q.allocs), q.MemoryBytes(), peak, memtest.Sprint(shrunk))
	if len(q.clients) != 0 {
		t.Fatalf("%d clients left", len(q.clients))
	}
	if err := q.CheckMemory(); err != nil {
		t.Fatal(err)
	}
	// every allocation, its share settled, is dropped once its reserve has
	// refilled (shape.idleCheck's wake-up)
	if len(q.allocs) != 0 {
		t.Errorf("%d allocations left a minute after every client detached; want none", len(q.allocs))
	}
	if q.MemoryBytes() > 16<<10 || -shrunk < 0.8*float64(peak) {
		t.Errorf("after every client detached: MemoryBytes %d B, heap fell %s of the %s estimated",
			q.MemoryBytes(), memtest.Sprint(-shrunk), memtest.Sprint(float64(peak)))
	}
	runtime.KeepAlive(q)
	runtime.KeepAlive(names)
}

// CheckMemory is, for tests, a recount of the heap accounting MemoryBytes
// reads (memory.go) by a walk of the state; an error names the first
// count that differs from the one kept as the state changed. An
// allocation's shares and slices are recounted where its work is
// scheduled, so only the sum of what was counted is checked for them.
func (q *Quota) CheckMemory() error {
	m := &q.mem
	extra, records, clientKeys := 0, 0, 0
	for _, a := range q.allocs {
		extra += int(a.memBytes)
	}
	for _, r := range q.records {
		records += recordBytes(r)
	}
	for c, keys := range q.clients {
		k := m.clients[c]
		if k == nil || k.Len() != len(keys) {
			return fmt.Errorf("%s: client %d: %d keys attached, accounting has %v", q.self, c, len(keys), k)
		}
		clientKeys += clientMapBytes(k)
	}
	for _, c := range []struct {
		what      string
		kept, got int
	}{
		{"allocs", m.allocs.Len(), len(q.allocs)},
		{"alloc extra", m.allocExtra, extra},
		{"records", m.records.Len(), len(q.records)},
		{"record extra", m.recordExtra, records},
		{"answered", m.answered.Len(), len(q.answered)},
		{"gone", m.gone.Len(), len(q.gone)},
		{"warmed", m.warmed.Len(), len(q.warmed)},
		{"clients", len(m.clients), len(q.clients)},
		{"client keys", m.clientBytes, clientKeys},
	} {
		if c.kept != c.got {
			return fmt.Errorf("%s: %s: memory accounting kept %d, a recount finds %d", q.self, c.what, c.kept, c.got)
		}
	}
	return nil
}
