package adaptive

import (
	"testing"
	"time"

	peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// TestRequestWaitReserves: with max_wait (SRTM §5.2's waiting mode) node
// n0 of 2 reserves in its sub-token bucket (r/2, b_0) = (0.5/s, 2) of
// (1/s, 4): its burst at once, then one token per 2 s of wait, up to the
// smaller of the request's max wait and the parameter; without the
// parameter a check with a max wait is a plain one. An epoch that lowers
// the share keeps the debt and delays its raises by max_wait too.
func TestRequestWaitReserves(t *testing.T) {
	var fx strategy.Effects
	plain := newNode(t, "n0", nodeNames(2), testRate, 4)
	for i := range 3 {
		d, _ := plain.RequestWait(0, strategy.Request{ID: uint64(i), Key: "k", Tokens: 1}, 5*time.Second, &fx)
		if d.Allowed != (i < 2) || d.Delay != 0 {
			t.Fatalf("max_wait 0, request %d: allowed %v after %v; want a plain decision", i, d.Allowed, d.Delay)
		}
	}
	a := newNode(t, "n0", nodeNames(2), testRate, 4, "max_wait=3s", "raise_after=10ms")
	for i, want := range []struct {
		allowed bool
		delay   time.Duration
	}{
		{true, 0}, {true, 0}, // b_0 = 2
		{true, 2 * time.Second}, // one token at 0.5/s
		{false, 0},              // 4 s: above max_wait (the request accepts 5 s)
	} {
		d, _ := a.RequestWait(0, strategy.Request{ID: uint64(i), Key: "k", Tokens: 1}, 5*time.Second, &fx)
		if d.Allowed != want.allowed || d.Delay != want.delay {
			t.Fatalf("request %d: allowed %v after %v; want allowed %v after %v", i, d.Allowed, d.Delay, want.allowed, want.delay)
		}
	}
	if got := a.keys["k"].b.Tokens(0); got != -1 {
		t.Fatalf("level %v after the reservation, want -1", got)
	}
	// An epoch halves n0's rate: the debt stays (a full token short), and
	// the raise the same epoch holds waits raise_after + max_wait.
	a.apply(0, &peerv1.AdaptiveShares{Epoch: 1, Members: a.memHash,
		Shares: []*peerv1.AdaptiveShare{{Key: "k", RateUnits: a.units / 4, Burst: 1}}}, &fx)
	if got := a.keys["k"].b.Tokens(0); got != -1 {
		t.Fatalf("level %v after the decrease, want the debt -1 kept", got)
	}
	if want := 10*time.Millisecond + 3*time.Second; a.pendAt != want {
		t.Fatalf("raises pending until %v, want raise_after + max_wait = %v", a.pendAt, want)
	}
}
