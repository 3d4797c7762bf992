package regionlease

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"
	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/rendezvous"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/internal/keyorder"
	"github.com/tokenmesh/tokenmesh/strategy/internal/memsize"
	"github.com/tokenmesh/tokenmesh/strategy/internal/memsize/memtest"
	"github.com/tokenmesh/tokenmesh/strategy/internal/wire"
)

// The memory tests' cluster: two regions, a and b; the keys' global owner
// is b.g, their regional owner in region a is a.r, and a.n is a node of
// region a that holds leases from a.r.
const (
	memGlobal   strategy.NodeID = "b.g"
	memRegional strategy.NodeID = "a.r"
	memNode     strategy.NodeID = "a.n"
)

var memMembers = []strategy.NodeID{memRegional, memNode, memGlobal}

// memNames is n distinct keys whose global owner is memGlobal and whose
// regional owner in region a is memRegional.
func memNames(n int) []string {
	out := make([]string, 0, n)
	region := []strategy.NodeID{memRegional, memNode}
	for _, k := range memtest.Names(8 * n) {
		if rendezvous.Owner(k, memMembers) == memGlobal && rendezvous.Owner(k, region) == memRegional {
			out = append(out, k)
			if len(out) == n {
				break
			}
		}
	}
	return out
}

// newMemNode builds and starts a node of memMembers (rate 10/s, burst 20,
// min_lease 1: a key's first request asks for a lease; latency hint 1 ms;
// hold 0: a region holds a stock at this rate, and the global owner
// decides at once, not in its ordering buffer, order.go).
func newMemNode(t testing.TB, self strategy.NodeID) *RegionLease {
	t.Helper()
	p, err := strategy.ParseParams([]string{"min_lease=1", "hold=0"})
	if err != nil {
		t.Fatal(err)
	}
	l, err := New(strategy.Config{Self: self, Members: memMembers, Rate: bucket.Rate{Tokens: 10, Per: time.Second}, Burst: 20,
		Rand: rand.New(rand.NewPCG(1, 2)), Params: p, LatencyHint: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	l.Start(0, &strategy.Effects{})
	return l
}

func memMsg(m *peerv1.RegionLeaseMessage) []byte { return wire.MustMarshal(m) }

func memAsk(key string, seq uint64, tokens int64) []byte {
	return memMsg(&peerv1.RegionLeaseMessage{Body: &peerv1.RegionLeaseMessage_Ask{Ask: &peerv1.RegionLeaseAsk{
		Key: key, Seq: seq, Tokens: tokens, DemandMtps: 4000}}})
}

func memGrant(key string, seq uint64, tokens int64, expires time.Duration) []byte {
	return memMsg(&peerv1.RegionLeaseMessage{Body: &peerv1.RegionLeaseMessage_Grant{Grant: &peerv1.RegionLeaseGrant{
		Key: key, Seq: seq, Tokens: tokens, ExpiresNs: int64(expires)}}})
}

// receive hands l a message at time 0, dropping its effects.
func receive(t *testing.T, l *RegionLease, from strategy.NodeID, payload []byte, fx *strategy.Effects) {
	t.Helper()
	if err := l.Receive(0, from, payload, fx); err != nil {
		t.Fatal(err)
	}
	fx.Reset()
}

// TestMemoryBytesMatchesHeap holds MemoryBytes (tokenmesh_state_bytes) to
// the live heap a node's regionlease state grows by, at 100k keys
// (TOKENMESH_MEMKEYS), each key decoded anew as a request's or message's
// is, in the three roles of a key: its global owner (a pool per key
// taken by a local request, a region's stock lease granted per key with
// its records and expiry heap entries, a replica's fence record per key);
// its regional owner (a holding per key with its node's demand report, a
// stock lease asked for and granted, a node's lease granted out of it, a
// forward decided from the stock and remembered); a node of the region (a
// holding per key whose request was forwarded and answered and whose ask
// was granted). Then every lease ends and every key goes idle: the sweeps
// drop them, the maps are rebuilt, and the heap and the estimate fall
// back.
func TestMemoryBytesMatchesHeap(t *testing.T) {
	if testing.Short() {
		t.Skip("builds 100k keys on three nodes")
	}
	names := memNames(memtest.Keys(t))
	t.Run("global owner", func(t *testing.T) { memGlobalOwner(t, names) })
	t.Run("regional owner", func(t *testing.T) { memRegionalOwner(t, names) })
	t.Run("node", func(t *testing.T) { memHolderNode(t, names) })
	runtime.KeepAlive(names)
}

func memGlobalOwner(t *testing.T, names []string) {
	fx := &strategy.Effects{}
	var g *RegionLease
	growth := memtest.Growth(func() {
		g = newMemNode(t, memGlobal)
		for i, k := range names {
			if _, ok := g.Request(0, strategy.Request{ID: uint64(i), Key: memtest.Copy(k), Tokens: 1}, fx); !ok {
				t.Fatalf("request %d not decided at once at the global owner", i)
			}
			fx.Reset()
			receive(t, g, memRegional, memAsk(k, 1, 8), fx)
		}
	})
	if n := len(names); len(g.pools) != n || len(g.grants) != n || len(g.gfences) != n {
		t.Fatalf("%d pools, %d grants, %d fence records; want %d each", len(g.pools), len(g.grants), len(g.gfences), n)
	}
	memCompare(t, g, "global owner", growth, func() int { return len(g.pools) + len(g.grants) + len(g.gfences) })
}

func memRegionalOwner(t *testing.T, names []string) {
	fx := &strategy.Effects{}
	var r *RegionLease
	growth := memtest.Growth(func() {
		r = newMemNode(t, memRegional)
		for i, k := range names {
			receive(t, r, memNode, memAsk(k, 1, 4), fx) // the node's ask: the stock is asked for
			h := r.keys[k]
			if h == nil || !h.asking {
				t.Fatalf("%q: no stock asked for after a node's ask", k)
			}
			receive(t, r, memGlobal, memGrant(k, h.seq, 12, r.rttl), fx)
			f := memMsg(&peerv1.RegionLeaseMessage{Body: &peerv1.RegionLeaseMessage_Forward{Forward: &peerv1.RegionLeaseForward{RequestId: uint64(i), Key: k}}})
			receive(t, r, memNode, f, fx)
		}
	})
	for _, k := range names[:10] {
		if h := r.keys[k]; len(h.leases) != 1 || len(h.reports) != 1 || len(h.accepted) != 1 {
			t.Fatalf("%q: %d stock leases, %d reports, %d accepted; want 1 each", k, len(h.leases), len(h.reports), len(h.accepted))
		}
	}
	if n := len(names); len(r.keys) != n || len(r.grants) != n || r.rseen.Len() != n {
		t.Fatalf("%d holdings, %d grants, %d remembered forwards; want %d each", len(r.keys), len(r.grants), r.rseen.Len(), n)
	}
	memCompare(t, r, "regional owner", growth, func() int { return len(r.keys) + len(r.grants) + r.rseen.Len() + len(r.returns) })
}

func memHolderNode(t *testing.T, names []string) {
	fx := &strategy.Effects{}
	var n *RegionLease
	growth := memtest.Growth(func() {
		n = newMemNode(t, memNode)
		for i, k := range names {
			if _, ok := n.Request(0, strategy.Request{ID: uint64(i), Key: memtest.Copy(k), Tokens: 1}, fx); ok {
				t.Fatalf("request %d decided at the node: want it forwarded", i)
			}
			fx.Reset()
			v := memMsg(&peerv1.RegionLeaseMessage{Body: &peerv1.RegionLeaseMessage_Verdict{Verdict: &peerv1.RegionLeaseVerdict{RequestId: uint64(i), Allowed: true}}})
			receive(t, n, memRegional, v, fx)
			receive(t, n, memRegional, memGrant(k, n.keys[k].seq, 4, n.ttl), fx)
		}
	})
	for _, k := range names[:10] {
		if h := n.keys[k]; len(h.leases) != 1 || len(h.accepted) != 1 {
			t.Fatalf("%q: %d leases, %d accepted; want 1 each", k, len(h.leases), len(h.accepted))
		}
	}
	if len(n.keys) != len(names) || len(n.pending) != 0 {
		t.Fatalf("%d holdings, %d pending; want %d, 0", len(n.keys), len(n.pending), len(names))
	}
	memCompare(t, n, "node", growth, func() int { return len(n.keys) + len(n.returns) })
}

// memCompare checks l's accounting, compares its estimate with growth,
// then ticks l every 100 ms for two minutes (every lease ends, its return
// times out, every key goes idle and is swept) and requires left() to be
// 0, the estimate to fall to a few KiB and the heap to fall by at least
// 80% of the estimate it had (the maps rebuilt).
func memCompare(t *testing.T, l *RegionLease, what string, growth float64, left func() int) {
	t.Helper()
	if err := l.CheckMemory(); err != nil {
		t.Fatal(err)
	}
	memtest.Compare(t, what, l.MemoryBytes(), growth)
	peak := l.MemoryBytes()
	fx := &strategy.Effects{}
	shrunk := memtest.Growth(func() {
		for now := keyorder.StepEvery; now <= 2*time.Minute; now += keyorder.StepEvery { // the sweep's steps' wake-ups
			l.Tick(now, fx)
			fx.Reset()
		}
	})
	t.Logf("after expiry: MemoryBytes %d (was %d), heap %s", l.MemoryBytes(), peak, memtest.Sprint(shrunk))
	if err := l.CheckMemory(); err != nil {
		t.Fatal(err)
	}
	if n := left(); n != 0 {
		t.Fatalf("%d entries left after every key expired", n)
	}
	if l.MemoryBytes() > 16<<10 || -shrunk < 0.8*float64(peak) {
		t.Errorf("after every key expired: MemoryBytes %d B, heap fell %s of the %s estimated",
			l.MemoryBytes(), memtest.Sprint(-shrunk), memtest.Sprint(float64(peak)))
	}
	runtime.KeepAlive(l)
}

// CheckMemory is, for tests, a recount of the heap accounting MemoryBytes
// reads (memory.go) by a walk of the state: the entries and key strings of
// every per-key and per-request map, the fence records, each holding's
// maps and slices (a missed peak shows as a difference), and the timers'
// key strings; an error names the first count that differs from the one
// kept as the state changed.
func (l *RegionLease) CheckMemory() error {
	m := &l.mem
	for _, c := range []struct {
		what      string
		kept, got int
	}{
		{"pools", m.pools.Len(), len(l.pools)},
		{"pool keys", m.pools.KeyAlloc(), keyAllocs(l.pools, func(k string) string { return k })},
		{"grants", m.grants.Len(), len(l.grants)},
		{"grant keys", m.grants.KeyAlloc(), keyAllocs(l.grants, func(id grantID) string { return id.key })},
		{"holdings", m.holdings.Len(), len(l.keys)},
		{"holding keys", m.holdings.KeyAlloc(), keyAllocs(l.keys, func(k string) string { return k })},
		{"pending", m.pending.Len(), len(l.pending)},
		{"relays", m.relays.Len(), len(l.relays)},
		{"returns", m.returns.Len(), len(l.returns)},
		{"fence records' keys", m.gfences.Len(), len(l.gfences)},
		{"fence records", m.fenceRec, sumOf(l.gfences, func(fs map[strategy.NodeID]*fenceHolder) int { return len(fs) })},
		{"fences' keys", m.fences.Len(), len(l.fences)},
		{"push states", m.pushes.Len(), len(l.pushes)},
		{"push state keys", m.pushes.KeyAlloc(), keyAllocs(l.pushes, func(k string) string { return k })},
		{"warm-ups", l.wu.memF.Len(), len(l.wu.fetching)},
		{"warm-up keys", l.wu.memF.KeyAlloc(), keyAllocs(l.wu.fetching, func(k string) string { return k })},
		{"warm-ups' own", l.wu.bytes, sumOf(l.wu.fetching, func(w *warming) int {
			if len(w.got) > int(w.gotPeak) {
				return -1 << 40 // a peak missed
			}
			return warmingBytes(w)
		})},
		{"gave records", l.wu.memG.Len(), len(l.wu.gave)},
		{"gave keys", l.wu.memG.KeyAlloc(), keyAllocs(l.wu.gave, func(k string) string { return k })},
		{"fences", l.nfences, sumOf(l.fences, func(fs map[strategy.NodeID]time.Duration) int { return len(fs) })},
		{"holding maps", m.holdMaps, sumOf(l.keys, func(h *holding) int {
			if len(h.sentTo) > int(h.sentPeak) || len(h.accepted) > int(h.accPeak) || len(h.reports) > int(h.repPeak) {
				return -1 << 40 // a peak missed
			}
			return holdingBytes(h)
		})},
		{"ordering buffer keys", m.queueKey, func() int {
			n := 0
			for _, q := range l.queue.Items() {
				n += memsize.Alloc(len(q.key))
			}
			return n
		}()},
		{"timer keys", m.timerKey, func() int {
			n := 0
			for _, t := range l.timers.Items() {
				n += memsize.Alloc(len(t.key))
			}
			return n
		}()},
	} {
		if c.kept != c.got {
			return fmt.Errorf("%s: %s: memory accounting kept %d, a recount finds %d", l.self, c.what, c.kept, c.got)
		}
	}
	for _, err := range []error{checkIndex("pools", &l.order.pools, l.pools), checkIndex("holdings", &l.order.keys, l.keys),
		checkIndex("fences", &l.order.fences, l.fences), checkIndex("fence records", &l.order.gfences, l.gfences),
		checkIndex("pushes", &l.order.pushes, l.pushes)} {
		if err != nil {
			return fmt.Errorf("%s: %w", l.self, err)
		}
	}
	return nil
}

// checkIndex checks that x (the sweep's order, counted in MemoryBytes)
// holds the keys of m, each once.
func checkIndex[V any](what string, x *keyorder.Index, m map[string]V) error {
	if x.Len() != len(m) {
		return fmt.Errorf("%s: the sweep's order holds %d keys, the map %d", what, x.Len(), len(m))
	}
	for k := range m {
		if !x.Has(k) {
			return fmt.Errorf("%s: key %q not in the sweep's order", what, k)
		}
	}
	return nil
}

func sumOf[K comparable, V any](m map[K]V, f func(V) int) int {
	n := 0
	for _, v := range m {
		n += f(v)
	}
	return n
}

func keyAllocs[K comparable, V any](m map[K]V, key func(K) string) int {
	n := 0
	for k := range m {
		n += memsize.Alloc(len(key(k)))
	}
	return n
}
