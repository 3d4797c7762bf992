package cluster

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/rule"
	"github.com/tokenmesh/tokenmesh/strategy"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestEstimatorFloorAndQuantile(t *testing.T) {
	e := NewLatencyEstimator(2 * time.Millisecond)
	if h := e.Hint(t0); h != 0 {
		t.Fatalf("hint without samples = %v, want 0 (no peer to wait for)", h)
	}
	// 100 samples of 1..100 ms RTT over two peers: p90 of RTT/2 = 90ms/2.
	for i := 1; i <= 100; i++ {
		peer := strategy.NodeID(fmt.Sprintf("p%d", i%2))
		e.Observe(peer, time.Duration(i)*time.Millisecond, t0.Add(time.Duration(i)*time.Millisecond))
	}
	at := t0.Add(time.Second)
	if h, want := e.Hint(at), 45*time.Millisecond; h != want {
		t.Fatalf("hint = %v, want p90 of RTT/2 = %v", h, want)
	}
	pl := e.PeerLatency(at)
	if len(pl) != 2 || pl["p0"] != 45*time.Millisecond || pl["p1"] != 89*time.Millisecond/2 {
		t.Fatalf("per-peer latency = %v, want p0 45ms (p90 of 2..100 even ms, /2), p1 44.5ms", pl)
	}
	// Small RTTs: the floor wins.
	f := NewLatencyEstimator(5 * time.Millisecond)
	f.Observe("p", 300*time.Microsecond, t0)
	if h := f.Hint(t0); h != 5*time.Millisecond {
		t.Fatalf("hint with a 0.3ms RTT = %v, want the floor 5ms", h)
	}
}

func TestEstimatorWindow(t *testing.T) {
	e := NewLatencyEstimator(0)
	e.Observe("p", 80*time.Millisecond, t0)
	e.Observe("p", 2*time.Millisecond, t0.Add(HintWindow/2))
	if h := e.Hint(t0.Add(HintWindow / 2)); h != 40*time.Millisecond {
		t.Fatalf("hint with both samples in the window = %v, want 40ms", h)
	}
	if h := e.Hint(t0.Add(HintWindow + time.Second)); h != time.Millisecond {
		t.Fatalf("hint once the 80ms sample left the window = %v, want 1ms", h)
	}
	if h := e.Hint(t0.Add(3 * HintWindow)); h != 0 {
		t.Fatalf("hint once every sample left the window = %v, want 0", h)
	}
	if pl := e.PeerLatency(t0.Add(3 * HintWindow)); len(pl) != 0 {
		t.Fatalf("per-peer latency with no recent sample = %v, want none", pl)
	}
}

func TestEstimatorBounds(t *testing.T) {
	e := NewLatencyEstimator(time.Millisecond)
	// A forged or huge RTT (a peer holding its acks back) is clamped.
	e.Observe("evil", time.Hour, t0)
	if h := e.Hint(t0); h != MaxLatencyHint {
		t.Fatalf("hint after a 1h RTT = %v, want it clamped to %v", h, MaxLatencyHint)
	}
	e.Observe("evil", -time.Second, t0) // ignored
	e.Observe("", time.Second, t0)      // ignored
	if n := len(e.peers["evil"].samples); n != 1 || len(e.peers) != 1 {
		t.Fatalf("%d samples of evil, %d peers after a negative RTT and an empty peer, want 1 and 1", n, len(e.peers))
	}
	// Samples per peer are bounded: the newest are kept.
	g := NewLatencyEstimator(0)
	for i := range 3 * HintSamplesPerPeer {
		rtt := time.Millisecond
		if i < HintSamplesPerPeer { // the oldest: 100ms, pushed out
			rtt = 100 * time.Millisecond
		}
		g.Observe("p", rtt, t0.Add(time.Duration(i)*time.Millisecond))
	}
	if n := len(g.peers["p"].samples); n != HintSamplesPerPeer {
		t.Fatalf("%d samples kept, want %d", n, HintSamplesPerPeer)
	}
	if h := g.Hint(t0.Add(time.Second)); h != time.Millisecond/2 {
		t.Fatalf("hint = %v, want 0.5ms (the 100ms samples were the oldest and are gone)", h)
	}
	// Peers are bounded: the one heard from least recently goes.
	for i := range HintMaxPeers + 10 {
		g.Observe(strategy.NodeID(fmt.Sprintf("q%d", i)), time.Millisecond, t0.Add(time.Duration(i+1)*time.Second))
	}
	if len(g.peers) != HintMaxPeers {
		t.Fatalf("%d peers tracked, want %d", len(g.peers), HintMaxPeers)
	}
	if _, ok := g.peers["p"]; ok {
		t.Fatal("the peer heard from least recently is still tracked")
	}
}

func TestMoved(t *testing.T) {
	for _, c := range []struct {
		applied, measured time.Duration
		want              bool
	}{
		{5 * time.Millisecond, 5 * time.Millisecond, false},
		{5 * time.Millisecond, 7 * time.Millisecond, false},
		{5 * time.Millisecond, 8 * time.Millisecond, true},
		{6 * time.Millisecond, 4 * time.Millisecond, false},
		{6 * time.Millisecond, 3 * time.Millisecond, true},
		{0, time.Microsecond, true},
		{0, 0, false},
	} {
		if got := HintMoved(c.applied, c.measured); got != c.want {
			t.Errorf("HintMoved(%v, %v) = %v, want %v", c.applied, c.measured, got, c.want)
		}
	}
}

// ownerSync reports whether a check of the owner rule on n was decided
// synchronously: with hold 0 owner decides its own keys at once, with a
// hold it buffers them (async, Remaining unknown).
func ownerSync(t *testing.T, n *Node, key string) bool {
	t.Helper()
	d, err := n.Check(context.Background(), "r", key, 1)
	if err != nil {
		t.Fatal(err)
	}
	return !d.Async
}

// SetLatencyHint reaches the strategies through the node's loop: owner's
// hold follows it (a parameter would win: see strategy/owner), and rules
// added later are built with it.
func TestNodeSetLatencyHint(t *testing.T) {
	n := mustSoloNode(t, Config{Rules: []rule.Rule{{Name: "r", Rate: bucket.Rate{Tokens: 1000, Per: time.Second}, Burst: 1000, Strategy: "owner"}}})
	if !ownerSync(t, n, "a") || n.LatencyHint() != 0 {
		t.Fatalf("hint %v: owner with hint 0 decides its own keys at once", n.LatencyHint())
	}
	if err := n.SetLatencyHint(context.Background(), 2*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if ownerSync(t, n, "b") || n.LatencyHint() != 2*time.Millisecond {
		t.Fatalf("after SetLatencyHint(2ms) (hint %v): owner must buffer for hold = 2ms", n.LatencyHint())
	}
	if err := n.SetLatencyHint(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	if !ownerSync(t, n, "c") {
		t.Fatal("after SetLatencyHint(0): owner decides at once again")
	}
	for _, bad := range []time.Duration{-time.Millisecond, MaxLatencyHint + 1} {
		if err := n.SetLatencyHint(context.Background(), bad); err == nil {
			t.Errorf("SetLatencyHint(%v) accepted", bad)
		}
	}
	if n.LatencyHint() != 0 {
		t.Fatalf("a refused hint changed the node's to %v", n.LatencyHint())
	}
}

// An attached estimator hands the node a hint that moved by more than
// HintFactor, and not one that did not.
func TestEstimatorAttach(t *testing.T) {
	n := mustSoloNode(t, Config{Rules: []rule.Rule{{Name: "r", Rate: slow, Burst: 10, Strategy: "owner"}}})
	e := NewLatencyEstimator(time.Millisecond)
	e.Attach(n)
	waitHint := func(want time.Duration) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		// the node has the hint before the estimator records it as applied
		for n.LatencyHint() != want || e.Applied() != want {
			if time.Now().After(deadline) {
				t.Fatalf("node hint %v, applied %v 5s after the measured hint moved to %v", n.LatencyHint(), e.Applied(), want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	e.Observe("p", 2600*time.Microsecond, time.Now()) // first peer measured: 1.3ms one way
	waitHint(1300 * time.Microsecond)
	e.Observe("p", 3400*time.Microsecond, time.Now()) // p90 1.7ms: within 1.5x of 1.3ms
	time.Sleep(50 * time.Millisecond)
	if h := n.LatencyHint(); h != 1300*time.Microsecond {
		t.Fatalf("hint %v after a sample within the hysteresis, want 1.3ms kept", h)
	}
	e.Observe("p", 20*time.Millisecond, time.Now()) // p90 of {2.6, 3.4, 20} ms RTT: 10ms one way
	waitHint(10 * time.Millisecond)
	reg := prometheus.NewRegistry()
	reg.MustRegister(e)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			name := f.GetName()
			for _, l := range m.GetLabel() {
				name += "{" + l.GetName() + "=" + l.GetValue() + "}"
			}
			got[name] = m.GetGauge().GetValue()
		}
	}
	if got["tokenmesh_peer_latency_seconds{peer=p}"] != 0.01 || len(got) != 1 {
		t.Fatalf("metrics %v, want tokenmesh_peer_latency_seconds{peer=p} 0.01", got)
	}
}
