package lease

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
)

// memMembers is the view of the memory tests: n0 owns half the keys, n1
// holds them.
var memMembers = []strategy.NodeID{"n0", "n1"}

// memNode builds a node of memMembers (rate 10/s, burst 20, hold 0,
// min_lease 1: a key's first request asks for a lease).
func memNode(t testing.TB, self strategy.NodeID) *Lease {
	t.Helper()
	p, err := strategy.ParseParams([]string{"hold=0s", "min_lease=1"})
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

// ownedNames is n distinct keys that n0 owns in memMembers.
func ownedNames(n int) []string {
	out := make([]string, 0, n)
	for _, k := range memtest.Names(3 * n) {
		if rendezvous.Owner(k, memMembers) == "n0" {
			out = append(out, k)
			if len(out) == n {
				break
			}
		}
	}
	return out
}

// tickUntil ticks l every 100 ms from now to end, dropping its effects.
func tickUntil(l *Lease, now, end time.Duration, fx *strategy.Effects) {
	for ; now <= end; now += 100 * time.Millisecond {
		l.Tick(now, fx)
		fx.Reset()
	}
}

// TestMemoryBytesMatchesHeap holds MemoryBytes (tokenmesh_state_bytes) to
// the live heap a node's lease state grows by, at 100k keys
// (TOKENMESH_MEMKEYS): at an owner, a pool per key taken by a local
// request (marked dirty for the replicas) and a lease granted to a holder
// per key (lease records, their expiry heap, the asks' key strings); at a
// holder, a holding per key whose request was forwarded and answered and
// whose ask was granted (its sentTo and accepted maps, a lease, timers).
// Then every lease ends and every key goes idle: the sweep drops them,
// the maps are rebuilt, and the heap and the estimate fall back.
func TestMemoryBytesMatchesHeap(t *testing.T) {
	if testing.Short() {
		t.Skip("builds 100k keys on two nodes")
	}
	keys := memtest.Keys(t)
	names := ownedNames(keys)
	fx := &strategy.Effects{}

	t.Run("owner", func(t *testing.T) {
		var o *Lease
		growth := memtest.Growth(func() {
			o = memNode(t, "n0")
			for i, k := range names {
				if _, ok := o.Request(0, strategy.Request{ID: uint64(i), Key: memtest.Copy(k), Tokens: 1}, fx); !ok {
					t.Fatalf("request %d not decided at once", i)
				}
				if err := o.Receive(0, "n1", ask(k, 1, 4, 0), fx); err != nil {
					t.Fatal(err)
				}
				o.Tick(0, fx) // decides the ask (hold 0)
				fx.Reset()
			}
		})
		if len(o.pools) != keys || len(o.grants) != keys || len(o.dirty) != keys {
			t.Fatalf("%d pools, %d grants, %d dirty; want %d each", len(o.pools), len(o.grants), len(o.dirty), keys)
		}
		memtest.Compare(t, "owner", o.MemoryBytes(), growth)
		expireAll(t, o, fx, func() int { return len(o.pools) + len(o.grants) + len(o.dirty) })
	})

	t.Run("holder", func(t *testing.T) {
		var h *Lease
		growth := memtest.Growth(func() {
			h = memNode(t, "n1")
			for i, k := range names {
				if _, ok := h.Request(0, strategy.Request{ID: uint64(i), Key: memtest.Copy(k), Tokens: 1}, fx); ok {
					t.Fatalf("request %d decided at the holder: want it forwarded", i)
				}
				fx.Reset()
				v := msg(&peerv1.LeaseMessage{Body: &peerv1.LeaseMessage_Verdict{Verdict: &peerv1.LeaseVerdict{RequestId: uint64(i), Allowed: true}}})
				if err := h.Receive(0, "n0", v, fx); err != nil {
					t.Fatal(err)
				}
				g := msg(&peerv1.LeaseMessage{Body: &peerv1.LeaseMessage_Grant{Grant: &peerv1.LeaseGrant{Key: k, Seq: 1, Tokens: 4, ExpiresNs: int64(400 * time.Millisecond)}}})
				if err := h.Receive(0, "n0", g, fx); err != nil {
					t.Fatal(err)
				}
				fx.Reset()
			}
		})
		if len(h.keys) != keys || len(h.pending) != 0 {
			t.Fatalf("%d holdings, %d pending; want %d, 0", len(h.keys), len(h.pending), keys)
		}
		for _, k := range names[:10] {
			if hk := h.keys[k]; len(hk.leases) != 1 || len(hk.accepted) != 1 {
				t.Fatalf("%q: %d leases, %d accepted; want 1 each", k, len(hk.leases), len(hk.accepted))
			}
		}
		memtest.Compare(t, "holder", h.MemoryBytes(), growth)
		expireAll(t, h, fx, func() int { return len(h.keys) + len(h.returns) })
	})
	runtime.KeepAlive(names)
}

// expireAll ticks l for a minute (every lease ends, its return times out,
// every key goes idle and is swept) and requires left() to be 0, the
// estimate to fall to a few KiB and the heap to fall by at least 80% of
// the estimate it had (the per-key maps rebuilt).
func expireAll(t *testing.T, l *Lease, fx *strategy.Effects, left func() int) {
	t.Helper()
	peak := l.MemoryBytes()
	var shrunk float64
	shrunk = memtest.Growth(func() { tickUntil(l, 100*time.Millisecond, time.Minute, fx) })
	t.Logf("after expiry: MemoryBytes %d (was %d), heap %s", l.MemoryBytes(), peak, memtest.Sprint(shrunk))
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
// reads (memory.go) by a walk of the state: the entries of every per-key
// map, each pool's askers and each holding's maps and slices, and the
// timers' key strings; an error names the first count that differs from
// the one kept as the state changed.
func (l *Lease) CheckMemory() error {
	m := &l.mem
	for _, c := range []struct {
		what      string
		kept, got int
	}{
		{"pools", m.pools.Len(), len(l.pools)},
		{"holdings", m.holdings.Len(), len(l.keys)},
		{"records", m.records.Len(), len(l.records)},
		{"gave", m.gave.Len(), len(l.gave)},
		{"grants", m.grants.Len(), len(l.grants)},
		{"dirty", m.dirty.Len(), len(l.dirty)},
		{"askers", m.askers, sumPools(l.pools, func(p *pool) int {
			if p.askers == nil {
				return 0
			}
			return memsize.MapHeader + memsize.Map(len(p.askers), askerSlot)
		})},
		{"holding maps", m.holdMaps, sumPools(l.keys, func(h *holding) int {
			if len(h.accepted) > int(h.accPeak) {
				return -1 << 40 // a peak missed
			}
			return holdingMapBytes(h)
		})},
		{"timer keys", m.timerKeys, func() int {
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
	for _, err := range []error{checkOrder("pools", &l.poolOrder, l.pools), checkOrder("records", &l.recOrder, l.records),
		checkOrder("gave", &l.gaveOrder, l.gave), checkOrder("holdings", &l.holdOrder, l.keys)} {
		if err != nil {
			return fmt.Errorf("%s: %w", l.self, err)
		}
	}
	return nil
}

// checkOrder checks that o (counted in MemoryBytes) holds each key of m
// once, at the place its entry keeps.
func checkOrder[V sweptEntry](what string, o *keyorder.Order, m map[string]V) error {
	if o.Len() != len(m) {
		return fmt.Errorf("%s: the sweep's order holds %d keys, the map %d", what, o.Len(), len(m))
	}
	for k, v := range m {
		if pos := int(v.place().pos); pos >= o.Len() || o.Key(pos) != k {
			return fmt.Errorf("%s: key %q's place %d in the sweep's order holds another key", what, k, pos)
		}
	}
	return nil
}

func sumPools[V any](m map[string]V, f func(V) int) int {
	n := 0
	for _, v := range m {
		n += f(v)
	}
	return n
}
