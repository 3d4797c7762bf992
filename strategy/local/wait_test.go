package local_test

import (
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/internal/remtest"
	"github.com/tokenmesh/tokenmesh/strategy/local"
)

// TestRequestWaitReserves: in waiting mode (SRTM §5.2) a node's
// (r, b) = (1 token/s, 2) bucket admits the burst at once, then one token
// per second of wait, first come first served, and refuses a request
// whose wait would exceed maxWait without reserving anything for it.
func TestRequestWaitReserves(t *testing.T) {
	l, err := local.New("local", remtest.Config(1, 2, nil))
	if err != nil {
		t.Fatal(err)
	}
	var fx strategy.Effects
	const maxWait = 1500 * time.Millisecond
	for i, want := range []struct {
		allowed bool
		delay   time.Duration
	}{
		{true, 0}, {true, 0}, // the burst
		{true, time.Second}, // 1 token at 1/s
		{false, 0},          // a 2 s wait is above maxWait
		{false, 0},          // and the refusal reserved nothing: still 2 s
	} {
		d, decided := l.RequestWait(0, strategy.Request{ID: uint64(i), Key: "k", Tokens: 1}, maxWait, &fx)
		if !decided || d.Allowed != want.allowed || d.Delay != want.delay {
			t.Fatalf("request %d: decided %v, allowed %v after %v; want allowed %v after %v", i, decided, d.Allowed, d.Delay, want.allowed, want.delay)
		}
	}
	// At 1 s the reservation made at 0 has taken the token that refilled:
	// the next one waits a further second.
	if d, _ := l.RequestWait(time.Second, strategy.Request{ID: 9, Key: "k", Tokens: 1, Arrival: time.Second}, maxWait, &fx); !d.Allowed || d.Delay != time.Second {
		t.Fatalf("at 1 s: allowed %v after %v, want allowed after 1s", d.Allowed, d.Delay)
	}
}

// TestSnapshotRestore: a node's drained bucket stays drained when restored
// into a new node, and refills at r from the time of the snapshot (ours:
// strategy.Snapshotter).
func TestSnapshotRestore(t *testing.T) {
	mk := func() *local.Local {
		l, err := local.New("local", remtest.Config(1, 3, nil))
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	a := mk()
	var fx strategy.Effects
	for i := range 3 {
		if d, _ := a.Request(0, strategy.Request{ID: uint64(i), Key: "k", Tokens: 1}, &fx); !d.Allowed {
			t.Fatalf("request %d refused", i)
		}
	}
	var states []strategy.KeyState
	a.Snapshot(0, func(s strategy.KeyState) { states = append(states, s) })
	if len(states) != 1 || states[0].Key != "k" {
		t.Fatalf("snapshot %+v, want the one drained key k", states)
	}
	b := mk()
	if err := b.Restore(2*time.Second, states); err != nil {
		t.Fatal(err)
	}
	if rem, _ := b.Remaining(2*time.Second, "k"); rem != 2 {
		t.Fatalf("restored 2 s after a drained snapshot: Remaining %d, want 2 (r * 2 s)", rem)
	}
	if err := mk().Restore(0, append(states, states[0])); err == nil {
		t.Fatal("a key given twice was restored")
	}
}
