package cluster

import (
	"runtime"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/rule"
)

// TestFastPathCountersPerP: a lent bucket's tokens split over per-P
// counters (fastShard) are all spent before a key is refused, on
// whichever P the refused check runs. With the clock stopped, checks on
// P 0 (one, which fills its counter) and then on P 1 (until refused),
// then on P 0 again, admit exactly the burst: P 1's refill takes P 0's
// counter back before it refuses (fastPath.settleOthers), and nothing is
// admitted twice. Before settleOthers, P 1 was refused while P 0's
// counter held tokens.
func TestFastPathCountersPerP(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2)) // two counters per key, on any machine
	const burst = 40
	clk := &stepClock{t: time.Second}
	n := mustSoloNode(t, Config{Rules: []rule.Rule{{Name: "r", Rate: bucket.Rate{Tokens: 1000, Per: time.Second}, Burst: burst, Strategy: "local"}}, testClock: clk.now})
	var admitted int64
	for range 2 { // the key's bucket is lent at its second check
		if check(t, n, "r", "k", 1).Allowed {
			admitted++
		}
	}
	rs := (*n.rulesView.Load())["r"]
	a := rs.fast.m.load("k")
	if a == nil || len(a.shards) != 2 {
		t.Fatalf("entry of k: %v, want one lent, with 2 counters", a)
	}
	take := func(p int) bool {
		d, ok := rs.fast.takeOn(a, p, 1)
		if !ok {
			t.Fatalf("check on P %d went to the loop; want it decided on the lent bucket", p)
		}
		if d.Allowed {
			admitted++
		}
		return d.Allowed
	}
	if !take(0) {
		t.Fatal("the first check on P 0 was refused")
	}
	if a.shards[0].tokens.Load() <= 0 {
		t.Fatalf("P 0's counter holds %d tokens after its refill, want some", a.shards[0].tokens.Load())
	}
	for i := 0; take(1); i++ {
		if i > burst {
			t.Fatal("P 1 admitted more than the burst")
		}
	}
	if left := a.shards[0].tokens.Load(); left != 0 {
		t.Errorf("P 1 was refused while P 0's counter held %d tokens", left)
	}
	for take(0) {
	}
	if admitted != burst {
		t.Errorf("admitted %d tokens with the clock stopped, want the burst, %d", admitted, burst)
	}
}
