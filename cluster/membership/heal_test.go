package membership

import (
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"maps"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"pgregory.net/rapid"

	"github.com/tokenmesh/tokenmesh/strategy"
)

// cutTransport is a memberlist NetTransport that drops what this member
// sends to the addresses in cut (packets vanish, streams fail to dial): a
// partition of the gossip plane, in process. Cutting both ends of a link
// cuts it both ways.
type cutTransport struct {
	*memberlist.NetTransport
	mu  sync.Mutex
	cut map[string]bool
}

func newCutTransport(t *testing.T) *cutTransport {
	t.Helper()
	nt, err := memberlist.NewNetTransport(&memberlist.NetTransportConfig{
		BindAddrs: []string{"127.0.0.1"}, Logger: log.New(io.Discard, "", 0)})
	if err != nil {
		t.Fatalf("NewNetTransport: %v", err)
	}
	return &cutTransport{NetTransport: nt, cut: map[string]bool{}}
}

var errCut = errors.New("cut by the test")

func (c *cutTransport) isCut(addr string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cut[addr]
}

func (c *cutTransport) set(addrs []string, cut bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, a := range addrs {
		if cut {
			c.cut[a] = true
		} else {
			delete(c.cut, a)
		}
	}
}

func (c *cutTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	if c.isCut(addr) {
		return time.Now(), nil
	}
	return c.NetTransport.WriteTo(b, addr)
}

func (c *cutTransport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	if c.isCut(a.Addr) {
		return time.Now(), nil
	}
	return c.NetTransport.WriteToAddress(b, a)
}

func (c *cutTransport) DialTimeout(addr string, d time.Duration) (net.Conn, error) {
	if c.isCut(addr) {
		return nil, errCut
	}
	return c.NetTransport.DialTimeout(addr, d)
}

func (c *cutTransport) DialAddressTimeout(a memberlist.Address, d time.Duration) (net.Conn, error) {
	if c.isCut(a.Addr) {
		return nil, errCut
	}
	return c.NetTransport.DialAddressTimeout(a, d)
}

// healNet is members on cut transports.
type healNet struct {
	key []byte // every member's SecretKey
	ms  []*Membership
	ts  []*cutTransport
}

// start starts a member on a cut transport with reconnect interval ri
// (negative: none) and seeds.
func (h *healNet) start(t *testing.T, name string, join, seeds []string, ri time.Duration) *Membership {
	t.Helper()
	tr := newCutTransport(t)
	cfg := testConfig(name, h.key, join, nil)
	cfg.ReconnectInterval = ri
	cfg.Seeds = seeds
	cfg.transport = tr
	m, err := New(cfg)
	if err != nil {
		t.Fatalf("New %s: %v", name, err)
	}
	t.Cleanup(func() { m.Shutdown() })
	h.ms = append(h.ms, m)
	h.ts = append(h.ts, tr)
	return m
}

// partition cuts (or, with cut false, heals) every link between a member
// of a and one of b, both ways.
func (h *healNet) partition(a, b []int, cut bool) {
	for _, i := range a {
		for _, j := range b {
			h.ts[i].set([]string{h.ms[j].LocalAddr()}, cut)
			h.ts[j].set([]string{h.ms[i].LocalAddr()}, cut)
		}
	}
}

func (h *healNet) sizes() []int {
	out := make([]int, len(h.ms))
	for i, m := range h.ms {
		out[i] = m.NumMembers()
	}
	return out
}

func (h *healNet) all(n int) bool {
	for _, s := range h.sizes() {
		if s != n {
			return false
		}
	}
	return true
}

// splitHeal runs the issue-11 scenario at test timers: three members, a
// partition a | b,c that outlives failure detection and memberlist's
// gossip to the dead (3 s at these timers), then a heal. It returns
// whether every member saw all three within within of the heal.
func splitHeal(t *testing.T, ri, within time.Duration) (bool, time.Duration) {
	// Encrypted gossip, as in production: the reconnect's join uses the
	// keyring too.
	h := &healNet{key: []byte("0123456789abcdef")}
	a := h.start(t, "a", nil, nil, ri)
	h.start(t, "b", []string{a.LocalAddr()}, nil, ri)
	h.start(t, "c", []string{a.LocalAddr()}, nil, ri)
	waitFor(t, 5*time.Second, "three members", func() bool { return h.all(3) })
	h.partition([]int{0}, []int{1, 2}, true)
	waitFor(t, 10*time.Second, "the partition seen: sizes 1, 2, 2", func() bool {
		s := h.sizes()
		return s[0] == 1 && s[1] == 2 && s[2] == 2
	})
	// Outlive GossipToTheDeadTime (30 probe intervals = 3 s), so that
	// memberlist has forgotten the other side: only a reconnect can merge.
	time.Sleep(3500 * time.Millisecond)
	h.partition([]int{0}, []int{1, 2}, false)
	healed := time.Now()
	for time.Since(healed) < within {
		if h.all(3) {
			return true, time.Since(healed)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("sizes %v after %v", h.sizes(), within)
	return false, 0
}

func TestPartitionHeals(t *testing.T) {
	ok, d := splitHeal(t, 200*time.Millisecond, 3*time.Second)
	if !ok {
		t.Fatal("the two sides did not merge within 3s of the heal")
	}
	t.Logf("whole again %v after the heal", d)
}

// TestPartitionWithoutReconnectStaysSplit is the control: without the
// reconnect loop (the bug it fixed: split sides that never merged) the sides do not merge, so
// TestPartitionHeals measures the loop and not memberlist.
func TestPartitionWithoutReconnectStaysSplit(t *testing.T) {
	if ok, d := splitHeal(t, -1, 2*time.Second); ok {
		t.Fatalf("merged %v after the heal without reconnects: the scenario does not exercise them", d)
	}
}

// TestFoundedApartMerge: two members that could not reach each other at
// start each found a cluster; b lists a as a seed and merges once the
// link is up.
func TestFoundedApartMerge(t *testing.T) {
	h := &healNet{}
	a := h.start(t, "a", nil, nil, 200*time.Millisecond)
	// b's link to a is cut before b starts: it founds alone, a its seed.
	tb := newCutTransport(t)
	tb.set([]string{a.LocalAddr()}, true)
	cfg := testConfig("b", nil, nil, nil)
	cfg.ReconnectInterval = 200 * time.Millisecond
	cfg.Seeds = []string{a.LocalAddr()}
	cfg.transport = tb
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Shutdown() })
	h.ms, h.ts = append(h.ms, b), append(h.ts, tb)
	h.partition([]int{0}, []int{1}, true)
	time.Sleep(time.Second)
	if s := h.sizes(); s[0] != 1 || s[1] != 1 {
		t.Fatalf("sizes %v while cut, want [1 1]", s)
	}
	h.partition([]int{0}, []int{1}, false)
	d := waitFor(t, 3*time.Second, "a and b merged after the heal", func() bool { return h.all(2) })
	t.Logf("merged %v after the heal", d)
}

func TestReconnectConfigErrors(t *testing.T) {
	cfg := testConfig("x", nil, nil, nil)
	cfg.ReconnectTimeout = -time.Second
	if _, err := New(cfg); err == nil {
		t.Error("negative ReconnectTimeout accepted")
	}
	cfg = testConfig("x", nil, nil, nil)
	cfg.Seeds = []string{"no-port"}
	if _, err := New(cfg); err == nil {
		t.Error("seed without a port accepted")
	}
}

// TestReconnectTargets: a round targets a failed member and every seed
// that is no live member's address, and none while leaving; a member
// failed for longer than ReconnectTimeout is not targeted, then forgotten.
func TestReconnectTargets(t *testing.T) {
	now := time.Unix(1000, 0)
	m := &Membership{reconnectTimeout: time.Minute, log: testLog(),
		failed: map[strategy.NodeID]failedMember{
			"old": {addr: "10.0.0.1:7946", since: now.Add(-2 * time.Minute)},
			"new": {addr: "10.0.0.2:7946", since: now.Add(-time.Second)},
		},
		addrs: map[strategy.NodeID]string{"self": "10.0.0.9:7946"},
		seeds: []string{"10.0.0.9:7946", "10.0.0.3:7946"}}
	got := m.reconnectTargets(now)
	want := []target{{addr: "10.0.0.2:7946", node: "new"}, {addr: "10.0.0.3:7946"}}
	if !slices.Equal(got, want) {
		t.Fatalf("targets %v, want %v (old expired, live seed skipped)", got, want)
	}
	if _, ok := m.failed["old"]; ok {
		t.Error("a member failed for longer than ReconnectTimeout is still remembered")
	}
	m.leaving = true
	if got := m.reconnectTargets(now); len(got) != 0 {
		t.Errorf("targets %v while leaving", got)
	}
}

func testLog() *slog.Logger { return slog.New(slog.DiscardHandler) }

// TestLeaveIsNotFailure: a member that leaves is not retried; one that
// crashes is.
func TestLeaveIsNotFailure(t *testing.T) {
	h := &healNet{}
	a := h.start(t, "a", nil, nil, time.Hour)
	b := h.start(t, "b", []string{a.LocalAddr()}, nil, time.Hour)
	c := h.start(t, "c", []string{a.LocalAddr()}, nil, time.Hour)
	waitFor(t, 5*time.Second, "three members", func() bool { return h.all(3) })
	if err := b.Leave(time.Second); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "b gone at a", func() bool { return a.NumMembers() == 2 })
	c.Shutdown()
	waitFor(t, 10*time.Second, "c gone at a", func() bool { return a.NumMembers() == 1 })
	a.mu.Lock()
	_, bFailed := a.failed["b"]
	_, cFailed := a.failed["c"]
	_, selfFailed := a.failed["a"]
	a.mu.Unlock()
	if bFailed || !cFailed || selfFailed {
		t.Errorf("failed members at a: b (left) %v, c (crashed) %v, a (self) %v; want false, true, false", bFailed, cFailed, selfFailed)
	}
	// The last agreed members (partition: conserve): the crashed c still
	// counts, the departed b does not.
	if got, want := a.Expected(), []strategy.NodeID{"a", "c"}; !slices.Equal(got, want) {
		t.Errorf("expected members at a %v, want %v", got, want)
	}
}

// Expected is the live members and the failed ones; a late leave intent
// and a give-up (reconnect_timeout) take a member out, and wake the
// delivery of OnExpected.
func TestExpectedMembers(t *testing.T) {
	now := time.Now()
	m := &Membership{self: "me", log: testLog(), reconnectTimeout: time.Minute, wake: make(chan struct{}, 1),
		members: map[strategy.NodeID]string{"me": "p0", "y": "p1"},
		left:    map[strategy.NodeID]time.Time{},
		failed: map[strategy.NodeID]failedMember{
			"x":   {addr: "10.0.0.1:1", since: now},
			"old": {addr: "10.0.0.2:1", since: now.Add(-2 * time.Minute)}}}
	if got, want := m.Expected(), []strategy.NodeID{"me", "old", "x", "y"}; !slices.Equal(got, want) {
		t.Fatalf("expected %v, want %v", got, want)
	}
	m.reconnectTargets(now)
	select {
	case <-m.wake:
	default:
		t.Error("giving up on a failed member did not signal")
	}
	m.leaveIntent("x")
	select {
	case <-m.wake:
	default:
		t.Error("a late leave intent did not signal")
	}
	if got, want := m.Expected(), []strategy.NodeID{"me", "y"}; !slices.Equal(got, want) {
		t.Errorf("after the give-up and the leave: expected %v, want %v", got, want)
	}
}

// A leave intent for a name that is too long, or this member's own, is
// ignored; intents are bounded.
func TestLeaveIntentBounds(t *testing.T) {
	m := &Membership{self: "me", left: map[strategy.NodeID]time.Time{}, failed: map[strategy.NodeID]failedMember{
		"x": {addr: "10.0.0.1:1"}}}
	m.leaveIntent("me")
	m.leaveIntent(string(make([]byte, maxNameBytes+1)))
	m.leaveIntent("")
	if len(m.left) != 0 {
		t.Errorf("left %v after bad intents", m.left)
	}
	m.leaveIntent("x")
	if _, ok := m.failed["x"]; ok || m.left["x"].IsZero() {
		t.Error("an intent after the failure did not turn it into a leave")
	}
	for i := range 2 * maxLeftIntents {
		m.leaveIntent(fmt.Sprint("n", i))
	}
	if len(m.left) > maxLeftIntents {
		t.Errorf("%d intents remembered, bound %d", len(m.left), maxLeftIntents)
	}
}

// FuzzNotifyMsg: any user message from a peer is a leave intent or
// ignored; nothing panics, and the remembered intents stay bounded and
// never name this member.
func FuzzNotifyMsg(f *testing.F) {
	f.Add([]byte(leaveIntentPrefix + "n1"))
	f.Add([]byte(leaveIntentPrefix))
	f.Add([]byte("tokenmesh-leave"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		m := &Membership{self: "me", left: map[strategy.NodeID]time.Time{}, failed: map[strategy.NodeID]failedMember{}}
		d := &delegate{m: m}
		d.NotifyMsg(b)
		d.NotifyMsg(append([]byte(leaveIntentPrefix), b...))
		if len(m.left) > 2 {
			t.Fatalf("%d intents from two messages", len(m.left))
		}
		for id := range m.left {
			if id == "me" || len(id) == 0 || len(id) > maxNameBytes {
				t.Fatalf("intent for %q remembered", id)
			}
		}
	})
}

// TestReconnectTargetsProperties: whatever the failed members, live
// members and seeds, a round targets at most one failed member, never
// one failed longer than ReconnectTimeout (those are forgotten), and
// every seed that is no live member's address, and no other seed.
func TestReconnectTargetsProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		now := time.Unix(10000, 0)
		timeout := time.Duration(rapid.IntRange(1, 100).Draw(t, "timeout_s")) * time.Second
		addr := func(i int) string { return fmt.Sprintf("10.0.0.%d:7946", i) }
		m := &Membership{reconnectTimeout: timeout, log: testLog(),
			failed: map[strategy.NodeID]failedMember{}, addrs: map[strategy.NodeID]string{}}
		nFailed := rapid.IntRange(0, 6).Draw(t, "failed")
		for i := range nFailed {
			age := time.Duration(rapid.IntRange(0, 200).Draw(t, "age_s")) * time.Second
			m.failed[strategy.NodeID(fmt.Sprint("f", i))] = failedMember{addr: addr(i), since: now.Add(-age)}
		}
		live := map[string]bool{}
		for i := range rapid.IntRange(0, 6).Draw(t, "live") {
			a := addr(10 + rapid.IntRange(0, 8).Draw(t, "live_addr"))
			m.addrs[strategy.NodeID(fmt.Sprint("l", i))] = a
			live[a] = true
		}
		for range rapid.IntRange(0, 6).Draw(t, "seeds") {
			m.seeds = append(m.seeds, addr(10+rapid.IntRange(0, 8).Draw(t, "seed_addr")))
		}
		before := maps.Clone(m.failed)
		got := m.reconnectTargets(now)
		var failedTargets, seedTargets int
		for _, tg := range got {
			if tg.node != "" {
				failedTargets++
				f, ok := before[tg.node]
				if !ok || now.Sub(f.since) > timeout || f.addr != tg.addr {
					t.Fatalf("target %v: not a remembered, unexpired failed member", tg)
				}
			} else {
				seedTargets++
				if live[tg.addr] {
					t.Fatalf("seed %s targeted though a live member has it", tg.addr)
				}
			}
		}
		wantSeeds := 0
		for _, s := range m.seeds {
			if !live[s] {
				wantSeeds++
			}
		}
		unexpired := 0
		for id, f := range before {
			_, kept := m.failed[id]
			if expired := now.Sub(f.since) > timeout; expired == kept {
				t.Fatalf("failed member %s (age %v, timeout %v): kept %v", id, now.Sub(f.since), timeout, kept)
			}
			if now.Sub(f.since) <= timeout {
				unexpired++
			}
		}
		if failedTargets != min(1, unexpired) || seedTargets != wantSeeds {
			t.Fatalf("targets %v: %d failed (want %d), %d seeds (want %d)", got, failedTargets, min(1, unexpired), seedTargets, wantSeeds)
		}
	})
}
