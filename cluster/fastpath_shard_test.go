package cluster

import (
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/rule"
	"github.com/tokenmesh/tokenmesh/strategy"
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

// TestFastPathLeaseCluster: three lease nodes; n1 and n2 check a key n0
// owns, hard. Each holder gets leases, and its driver takes allowances
// out of them (lease is a strategy.ExpiringAllowancer: each check reads
// the clock against the lease's expiry): the holders decide checks on the
// fast path, and the three together admit at most b + r*T.
func TestFastPathLeaseCluster(t *testing.T) {
	c := newCluster(t, 3, false, rule.Rule{Name: "r", Rate: fastRate, Burst: fastBurst, Strategy: "lease", Params: []string{"hold=0s"}})
	key := keyOwnedBy(t, "n0", c.ids)
	var wg sync.WaitGroup
	var adm [2]int64
	start := time.Now()
	for i, id := range []strategy.NodeID{"n1", "n2"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			adm[i], _, _ = hammer(t, c.nodes[id], "r", key, 4, 3000, 600*time.Millisecond)
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if limit := envelope(fastRate, fastBurst, elapsed); float64(adm[0]+adm[1]) > limit {
		t.Fatalf("admitted %d (n1 %d, n2 %d) in %v, above b + r*T = %.1f", adm[0]+adm[1], adm[0], adm[1], elapsed, limit)
	}
	var fast int64
	for _, id := range []strategy.NodeID{"n1", "n2"} {
		s := c.nodes[id].Stats().Rules["r"]
		fast += s.AllowanceTokens - s.AllowanceReturned
		t.Logf("%s: %d allowances, %d tokens taken from them, %d decisions in the loop", id, s.AllowanceGrants, s.AllowanceTokens-s.AllowanceReturned, s.Requests)
	}
	if fast <= 0 {
		t.Fatal("no token was taken from a holder's allowance: lease's fast path unused")
	}
	if s0 := c.nodes["n0"].Stats().Rules["r"]; s0.AllowanceGrants != 0 {
		t.Errorf("n0 (the owner) granted %d allowances; lease grants none at a key's owner", s0.AllowanceGrants)
	}
	t.Logf("admitted %d (n1 %d, n2 %d) in %v, b + r*T = %.1f", adm[0]+adm[1], adm[0], adm[1], elapsed, envelope(fastRate, fastBurst, elapsed))
}

// TestFastPathDeadline: under a strategy.ExpiringAllowancer a check takes
// nothing from an allowance once the clock reads its deadline, and a take
// that raced a new allowance with an earlier deadline, already past,
// drops what it took (the loop decides).
func TestFastPathDeadline(t *testing.T) {
	clk := &stepClock{t: time.Second}
	f := &fastPath{clock: clk.now, expiring: true}
	a := newFastEntry("k", 1)
	a.shards[0].tokens.Store(10)
	a.deadline.Store(int64(2 * time.Second))
	if _, ok := f.consume(a, 0, 1); !ok {
		t.Fatal("a take before the deadline failed")
	}
	clk.set(2 * time.Second)
	if _, ok := f.consume(a, 0, 1); ok {
		t.Fatal("a take at the deadline succeeded")
	}
	if got := a.shards[0].tokens.Load(); got != 9 {
		t.Fatalf("counter %d after a refused take, want 9 (nothing taken)", got)
	}
	a.deadline.Store(0) // not expiring: no clock read, the counter alone decides
	if _, ok := f.consume(a, 0, 1); !ok {
		t.Fatal("a take without a deadline failed")
	}
}
