package concurrency

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"
	"github.com/tokenmesh/tokenmesh/rendezvous"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/internal/memsize"
	"github.com/tokenmesh/tokenmesh/strategy/internal/memsize/memtest"
)

// memMembers is the view of the memory tests: n0 owns the keys, n1
// forwards to it.
var memMembers = []strategy.NodeID{"n0", "n1"}

// memParams: limit 4, leases of 1 slot (a key is hot at n1 after one
// forward), permit_ttl 2 s, lease_ttl 1 s: a node grants from 3 s.
var memParams = []string{"limit=4", "lease=1", "permit_ttl=2s", "lease_ttl=1s"}

// memStart is when the memory tests' nodes may grant (permit_ttl +
// lease_ttl after their start, join_wait 0).
const memStart = 3 * time.Second

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

func memNode(t *testing.T, self strategy.NodeID) *Concurrency {
	c := newNode(t, self, memMembers, memParams...)
	c.Start(0, &strategy.Effects{})
	return c
}

func msgOf(m *peerv1.ConcurrencyMessage) []byte { return encode(m) }

// TestMemoryBytesMatchesHeap holds MemoryBytes (tokenmesh_state_bytes) to
// the live heap a node's concurrency state grows by, at 100k keys
// (TOKENMESH_MEMKEYS), each key decoded anew as a request's or message's
// is: at the owner, a permit per key taken by a local request and a lease
// of one slot granted to n1 per key (a permit table with its permits and
// leases maps); at n1, per key a forwarded acquire granted by its verdict
// (granted), a hot count, and the lease it asked for, with a permit
// granted from it. Then every permit and lease lapses: the sweeps drop
// them, the maps are rebuilt, and the heap and the estimate fall back.
func TestMemoryBytesMatchesHeap(t *testing.T) {
	if testing.Short() {
		t.Skip("builds 100k keys on two nodes")
	}
	names := ownedNames(memtest.Keys(t))
	t.Run("owner", func(t *testing.T) { memOwner(t, names) })
	t.Run("holder", func(t *testing.T) { memHolder(t, names) })
	runtime.KeepAlive(names)
}

// memOwner builds the owner's keys (TestMemoryBytesMatchesHeap).
func memOwner(t *testing.T, names []string) {
	keys := len(names)
	fx := &strategy.Effects{}
	var o *Concurrency
	growth := memtest.Growth(func() {
		o = memNode(t, "n0")
		for i, k := range names {
			if d, ok := o.Request(memStart, strategy.Request{ID: uint64(i), Key: memtest.Copy(k), Tokens: 1, Arrival: memStart}, fx); !ok || !d.Allowed {
				t.Fatalf("request %d: %+v, %v; want a permit at once", i, d, ok)
			}
			ask := msgOf(&peerv1.ConcurrencyMessage{Body: &peerv1.ConcurrencyMessage_LeaseAsk{LeaseAsk: &peerv1.ConcurrencyLeaseAsk{RequestId: 1, Key: k, Slots: 1}}})
			if err := o.Receive(memStart, "n1", ask, fx); err != nil {
				t.Fatal(err)
			}
			fx.Reset()
		}
	})
	for _, k := range names[:10] {
		if kp := o.keys[k]; kp == nil || len(kp.permits) != 1 || len(kp.leases) != 1 {
			t.Fatalf("%q: permit table %+v; want 1 permit and 1 lease", k, kp)
		}
	}
	if len(o.keys) != keys {
		t.Fatalf("%d permit tables; want %d", len(o.keys), keys)
	}
	checkMem(t, o)
	memtest.Compare(t, "owner", o.MemoryBytes(), growth)
	expireAll(t, o, fx, func() int { return len(o.keys) })
}

// memHolder builds n1's keys (TestMemoryBytesMatchesHeap).
func memHolder(t *testing.T, names []string) {
	keys := len(names)
	fx := &strategy.Effects{}
	var h *Concurrency
	growth := memtest.Growth(func() {
		h = memNode(t, "n1")
		for i, k := range names {
			id := uint64(2 * i)
			if _, ok := h.Request(memStart, strategy.Request{ID: id, Key: memtest.Copy(k), Tokens: 1, Arrival: memStart}, fx); ok {
				t.Fatalf("request %d decided at n1: want it forwarded", i)
			}
			fx.Reset()
			v := msgOf(&peerv1.ConcurrencyMessage{Body: &peerv1.ConcurrencyMessage_Verdict{Verdict: &peerv1.ConcurrencyVerdict{RequestId: id, Key: k, Granted: true, Permit: 7}}})
			if err := h.Receive(memStart, "n0", v, fx); err != nil {
				t.Fatal(err)
			}
			g := msgOf(&peerv1.ConcurrencyMessage{Body: &peerv1.ConcurrencyMessage_LeaseGrant{LeaseGrant: &peerv1.ConcurrencyLeaseGrant{RequestId: h.asks[k].id, Key: k, Lease: 9, Slots: 1}}})
			if err := h.Receive(memStart, "n0", g, fx); err != nil {
				t.Fatal(err)
			}
			if d, ok := h.Request(memStart, strategy.Request{ID: id + 1, Key: memtest.Copy(k), Tokens: 1, Arrival: memStart}, fx); !ok || !d.Allowed {
				t.Fatalf("request %d: %+v, %v; want a permit from the lease", i, d, ok)
			}
			fx.Reset()
		}
	})
	if len(h.granted) != keys || len(h.hot) != keys || len(h.leases) != keys || len(h.pending) != 0 {
		t.Fatalf("%d granted, %d hot, %d leases, %d pending; want %d, %d, %d, 0", len(h.granted), len(h.hot), len(h.leases), len(h.pending), keys, keys, keys)
	}
	checkMem(t, h)
	memtest.Compare(t, "holder", h.MemoryBytes(), growth)
	expireAll(t, h, fx, func() int { return len(h.granted) + len(h.hot) + len(h.leases) + len(h.asks) })
}

func checkMem(t *testing.T, c *Concurrency) {
	t.Helper()
	if err := c.CheckMemory(); err != nil {
		t.Fatal(err)
	}
}

// expireAll ticks c every 100 ms for a minute (every permit and lease
// lapses and is swept) and requires left() to be 0, the estimate to fall
// to a few KiB and the heap to fall by at least 80% of the estimate it
// had (the maps rebuilt).
func expireAll(t *testing.T, c *Concurrency, fx *strategy.Effects, left func() int) {
	t.Helper()
	peak := c.MemoryBytes()
	shrunk := memtest.Growth(func() {
		for now := memStart; now <= memStart+time.Minute; now += 100 * time.Millisecond {
			c.Tick(now, fx)
			fx.Reset()
		}
	})
	t.Logf("after expiry: MemoryBytes %d (was %d), heap %s", c.MemoryBytes(), peak, memtest.Sprint(shrunk))
	checkMem(t, c)
	if n := left(); n != 0 {
		t.Fatalf("%d entries left after every permit lapsed", n)
	}
	if c.MemoryBytes() > 16<<10 || -shrunk < 0.8*float64(peak) {
		t.Errorf("after every permit lapsed: MemoryBytes %d B, heap fell %s of the %s estimated",
			c.MemoryBytes(), memtest.Sprint(-shrunk), memtest.Sprint(float64(peak)))
	}
	runtime.KeepAlive(c)
}

// CheckMemory is, for tests, a recount of the heap accounting MemoryBytes
// reads (memory.go) by a walk of the state: the entries of every map, each
// permit table's and each lease's own bytes (a missed peak shows as a
// difference), the leases' slice arrays; an error names the first count
// that differs from the one kept as the state changed.
func (c *Concurrency) CheckMemory() error {
	m := &c.mem
	kpMaps, leaseMem := 0, 0
	for _, kp := range c.keys {
		if int(kp.permPeak) < len(kp.permits) || int(kp.leasePeak) < len(kp.leases) {
			return fmt.Errorf("%s: a permit table's peak was missed", c.self)
		}
		kpMaps += kpBytes(kp)
	}
	for _, ls := range c.leases {
		leaseMem += memsize.Alloc(cap(ls) * memsize.Pointer)
		for _, l := range ls {
			if int(l.permPeak) < len(l.permits) {
				return fmt.Errorf("%s: a lease's peak was missed", c.self)
			}
			leaseMem += leaseBytes(l)
		}
	}
	for _, x := range []struct {
		what      string
		kept, got int
	}{
		{"keys", m.keys.Len(), len(c.keys)},
		{"pending", m.pending.Len(), len(c.pending)},
		{"granted", m.granted.Len(), len(c.granted)},
		{"leases", m.leases.Len(), len(c.leases)},
		{"asks", m.asks.Len(), len(c.asks)},
		{"hot", m.hot.Len(), len(c.hot)},
		{"waiting", m.waiting.Len(), len(c.waiting)},
		{"keys with waiters", len(c.waiting), sumWaiting(c)},
		{"permit tables", m.kpMaps, kpMaps},
		{"leases held", m.leaseMem, leaseMem},
	} {
		if x.kept != x.got {
			return fmt.Errorf("%s: %s: memory accounting kept %d, a recount finds %d", c.self, x.what, x.kept, x.got)
		}
	}
	return nil
}

// sumWaiting is the number of permit tables with waiters, all of them in
// waiting (-1 when one is not).
func sumWaiting(c *Concurrency) int {
	n := 0
	for k, kp := range c.keys {
		if len(kp.waiters) > 0 {
			if _, ok := c.waiting[k]; !ok {
				return -1
			}
			n++
		}
	}
	return n
}
