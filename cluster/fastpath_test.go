package cluster

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/rule"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// fastRate gives allowances of up to 10 tokens (2000/s for 5 ms) with a
// burst of 100: both the fast path and the loop decide.
var fastRate = bucket.Rate{Tokens: 2000, Per: time.Second}

const fastBurst = 100

// hammer runs workers goroutines checking key under rule until each made
// perWorker checks or d passed, and returns the admitted tokens, the checks
// made, and the wall time from before the first check to after the last.
func hammer(t *testing.T, n *Node, rule, key string, workers, perWorker int, d time.Duration) (admitted, checks int64, elapsed time.Duration) {
	t.Helper()
	var adm, cnt atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(d)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < perWorker && time.Now().Before(deadline); i++ {
				dec, err := n.Check(context.Background(), rule, key, 1)
				if err != nil {
					t.Error(err)
					return
				}
				cnt.Add(1)
				if dec.Allowed {
					adm.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	return adm.Load(), cnt.Load(), time.Since(start)
}

// envelope is b + r*T in tokens for a rule.
func envelope(r bucket.Rate, burst int64, d time.Duration) float64 {
	return float64(burst) + r.PerSec()*d.Seconds()
}

// TestFastPathConcurrentEnvelope: many goroutines on one key of a local
// and a static rule, under -race in CI: the admitted tokens stay within
// b + r*T of the elapsed time (exact: allowances count as spent), most
// checks take the fast path (the strategy saw fewer requests than were
// made), and the key is not starved (at least the burst is admitted).
func TestFastPathConcurrentEnvelope(t *testing.T) {
	for _, strat := range []string{"local", "static"} {
		t.Run(strat, func(t *testing.T) {
			n := mustSoloNode(t, Config{Rules: []rule.Rule{{Name: "r", Rate: fastRate, Burst: fastBurst, Strategy: strat}}})
			admitted, checks, elapsed := hammer(t, n, "r", "hot", 8, 3000, 400*time.Millisecond)
			if limit := envelope(fastRate, fastBurst, elapsed); float64(admitted) > limit {
				t.Fatalf("admitted %d tokens in %v, above b + r*T = %.1f", admitted, elapsed, limit)
			}
			if admitted < fastBurst {
				t.Fatalf("admitted %d tokens in %v, below the burst %d", admitted, elapsed, fastBurst)
			}
			loop := n.Stats().Rules["r"].Requests
			if loop >= checks {
				t.Fatalf("the strategy decided %d of %d checks: the fast path took none", loop, checks)
			}
			t.Logf("%s: %d checks, %d admitted in %v (b + r*T = %.1f), %d through the loop", strat, checks, admitted, elapsed, envelope(fastRate, fastBurst, elapsed), loop)
		})
	}
}

// drainAndGrant checks key until a check is decided on the fast path
// (an allowance is open), and returns the tokens admitted.
func drainAndGrant(t *testing.T, n *Node, rule, key string) int64 {
	t.Helper()
	var adm int64
	for i := 0; i < 50; i++ {
		before := n.Stats().Rules[rule].Requests
		d := check(t, n, rule, key, 1)
		if d.Allowed {
			adm++
		}
		if n.Stats().Rules[rule].Requests == before {
			return adm // decided without the loop
		}
	}
	t.Fatal("no check was decided on the fast path")
	return adm
}

// TestFastPathReSplit: static's allowances go back before a re-split, so
// a node whose share halves admits at most its new share (no tokens of the
// old split left in an allowance).
func TestFastPathReSplit(t *testing.T) {
	n := mustSoloNode(t, Config{Rules: []rule.Rule{{Name: "r", Rate: fastRate, Burst: fastBurst, Strategy: "static"}}})
	drainAndGrant(t, n, "r", "k")
	if err := n.SetMembers([]strategy.NodeID{"n0", "n1"}); err != nil {
		t.Fatal(err)
	}
	// The new share is (1000/s, 50): the bucket holds at most 50.
	start := time.Now()
	var adm int64
	for range 200 {
		if check(t, n, "r", "k", 1).Allowed {
			adm++
		}
	}
	half := bucket.Rate{Tokens: 1000, Per: time.Second}
	if limit := envelope(half, fastBurst/2, time.Since(start)); float64(adm) > limit {
		t.Fatalf("after the re-split: admitted %d, above the new share's b + r*T = %.1f", adm, limit)
	}
}

// TestFastPathClose: a node closed with allowances open answers ErrClosed,
// never an admission from an allowance (they are dropped at Close).
func TestFastPathClose(t *testing.T) {
	n := mustSoloNode(t, Config{Rules: []rule.Rule{{Name: "r", Rate: fastRate, Burst: fastBurst, Strategy: "local"}}})
	drainAndGrant(t, n, "r", "k")
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	for range 20 {
		if _, err := n.Check(context.Background(), "r", "k", 1); !errors.Is(err, ErrClosed) {
			t.Fatalf("Check after Close: %v, want ErrClosed", err)
		}
	}
}

// TestFastPathSetRules: a changed rule's allowances are closed with it, and
// the new rule (burst 20) admits at most its own envelope.
func TestFastPathSetRules(t *testing.T) {
	n := mustSoloNode(t, Config{Rules: []rule.Rule{{Name: "r", Rate: fastRate, Burst: fastBurst, Strategy: "local"}}})
	drainAndGrant(t, n, "r", "k")
	if _, err := n.SetRules(context.Background(), []rule.Rule{{Name: "r", Rate: fastRate, Burst: 20, Strategy: "local"}}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var adm int64
	for range 200 {
		if check(t, n, "r", "k", 1).Allowed {
			adm++
		}
	}
	if limit := envelope(fastRate, 20, time.Since(start)); float64(adm) > limit {
		t.Fatalf("after the reload: admitted %d, above the new rule's b + r*T = %.1f", adm, limit)
	}
}

// TestFastPathLeave: after Leave every check goes through the strategy
// (the allowances were returned and no new ones are granted).
func TestFastPathLeave(t *testing.T) {
	n := mustSoloNode(t, Config{Rules: []rule.Rule{{Name: "r", Rate: fastRate, Burst: fastBurst, Strategy: "local"}}})
	drainAndGrant(t, n, "r", "k")
	if err := n.Leave(context.Background()); err != nil {
		t.Fatal(err)
	}
	before := n.Stats().Rules["r"].Requests
	for range 10 {
		check(t, n, "r", "k", 1)
	}
	if got := n.Stats().Rules["r"].Requests - before; got != 10 {
		t.Fatalf("after Leave the strategy decided %d of 10 checks, want all", got)
	}
}

// TestFastPathRemainingAndBadInput: fast decisions report the tokens left
// (the allowance's and the bucket's at its grant, decreasing), and bad
// input is refused as before, even for a key with an allowance open.
func TestFastPathRemainingAndBadInput(t *testing.T) {
	n := mustSoloNode(t, Config{Rules: []rule.Rule{{Name: "r", Rate: slow, Burst: fastBurst, Strategy: "local"}}})
	// One token per hour: no refill within the test, and no allowance
	// (the cap is 0): every remaining is the loop's, exact.
	prev := int64(fastBurst)
	for range 5 {
		d := check(t, n, "r", "k", 1)
		if d.Remaining != prev-1 {
			t.Fatalf("Remaining %d, want %d", d.Remaining, prev-1)
		}
		prev = d.Remaining
	}
	m := mustSoloNode(t, Config{Rules: []rule.Rule{{Name: "r", Rate: fastRate, Burst: fastBurst, Strategy: "local"}}})
	drainAndGrant(t, m, "r", "k")
	for range 5 {
		d := check(t, m, "r", "k", 1)
		if d.Remaining < 0 || d.Remaining > fastBurst {
			t.Fatalf("Remaining %d outside [0, %d]", d.Remaining, fastBurst)
		}
	}
	for _, tc := range []struct {
		key    string
		tokens int64
	}{{"k", 0}, {"k", -1}, {"k", DefaultMaxTokens + 1}, {"", 1}, {"\xff", 1}} {
		if _, err := m.Check(context.Background(), "r", tc.key, tc.tokens); err == nil {
			t.Fatalf("Check(%q, %d): no error", tc.key, tc.tokens)
		}
	}
}

// TestFastPathBatch: a batch whose items the key's allowance covers is
// decided without the loop; a batch with an item it cannot cover sends
// that item and the later ones to the loop, and every item is decided.
func TestFastPathBatch(t *testing.T) {
	n := mustSoloNode(t, Config{Rules: []rule.Rule{{Name: "r", Rate: fastRate, Burst: fastBurst, Strategy: "local"}}})
	drainAndGrant(t, n, "r", "k")
	before := n.Stats().Rules["r"].Requests
	res := checkBatch(t, n, BatchItem{Rule: "r", Key: "k", Tokens: 1})
	if !res[0].Allowed || n.Stats().Rules["r"].Requests != before {
		t.Fatalf("a one-token batch on an open allowance: %+v, %d loop requests; want admitted on the fast path",
			res[0], n.Stats().Rules["r"].Requests-before)
	}
	// "other" has no allowance: it and the item after it go to the loop,
	// which hands other to the strategy and decides the item of k from
	// k's allowance (in the batch's order).
	res = checkBatch(t, n, BatchItem{Rule: "r", Key: "k", Tokens: 1}, BatchItem{Rule: "r", Key: "other", Tokens: 1}, BatchItem{Rule: "r", Key: "k", Tokens: 1})
	for i, r := range res {
		if r.Err != nil || !r.Allowed {
			t.Fatalf("item %d: %+v, want admitted", i, r)
		}
	}
	if got := n.Stats().Rules["r"].Requests - before; got != 1 {
		t.Fatalf("the strategy decided %d items, want 1 (the key without an allowance)", got)
	}
}

// TestFastPathOwnerCluster: three owner nodes; the key's owner n0 decides
// its own checks from allowances while n1 forwards checks of the same key
// to it (decided by the strategy while n0's allowance is open): together
// they admit at most b + r*T, and n0 took some on the fast path; n1 none
// (it does not own the key).
func TestFastPathOwnerCluster(t *testing.T) {
	c := newCluster(t, 3, false, rule.Rule{Name: "r", Rate: fastRate, Burst: fastBurst, Strategy: "owner", Params: []string{"hold=0s"}})
	key := keyOwnedBy(t, "n0", c.ids)
	var wg sync.WaitGroup
	var adm [2]int64
	var checks [2]int64
	start := time.Now()
	// n0 opens an allowance first: once the key is saturated, an admitted
	// check leaves no whole token to grant, and n1's forwards may get there
	// first.
	warm := drainAndGrant(t, c.nodes["n0"], "r", key)
	for i, id := range []strategy.NodeID{"n0", "n1"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			adm[i], checks[i], _ = hammer(t, c.nodes[id], "r", key, 4, 1500, 400*time.Millisecond)
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	total := warm + adm[0] + adm[1]
	if limit := envelope(fastRate, fastBurst, elapsed); float64(total) > limit {
		t.Fatalf("admitted %d (n0 %d, n1 %d) in %v, above b + r*T = %.1f", total, adm[0], adm[1], elapsed, limit)
	}
	s0, s1 := c.nodes["n0"].Stats().Rules["r"], c.nodes["n1"].Stats().Rules["r"]
	if fast := s0.AllowanceTokens - s0.AllowanceReturned; s0.AllowanceGrants == 0 || fast <= 0 {
		t.Fatalf("n0 (the owner): %d grants, %d tokens taken from them; want the fast path used", s0.AllowanceGrants, fast)
	}
	if s1.AllowanceGrants != 0 {
		t.Fatalf("n1 (not the owner) granted %d allowances", s1.AllowanceGrants)
	}
	t.Logf("admitted %d (n0 %d of %d, n1 %d of %d) in %v, b + r*T = %.1f; n0: %d grants, %d loop decisions",
		total, adm[0], checks[0], adm[1], checks[1], elapsed, envelope(fastRate, fastBurst, elapsed), s0.AllowanceGrants, s0.Requests)
}

// TestRuleRefFollowsReloads: a RuleRef decides as Check does, and looks its
// rule up again after SetRules (removed: an error; back: decided again, by
// the new rule's strategy).
func TestRuleRefFollowsReloads(t *testing.T) {
	n := mustSoloNode(t, Config{Rules: []rule.Rule{{Name: "r", Rate: fastRate, Burst: fastBurst, Strategy: "local"}, {Name: "other", Rate: slow, Burst: 1, Strategy: "local"}}})
	ref := n.Ref("r")
	ctx := context.Background()
	for range 20 {
		if ok, err := ref.Allow(ctx, "k", 1); !ok || err != nil {
			t.Fatalf("Allow = %v, %v; want admitted", ok, err)
		}
	}
	if _, err := n.Ref("nope").Allow(ctx, "k", 1); err == nil {
		t.Fatal("Allow of an unknown rule: no error")
	}
	if _, err := ref.Allow(ctx, "k", 0); err == nil {
		t.Fatal("Allow of 0 tokens: no error")
	}
	if _, err := n.SetRules(ctx, []rule.Rule{{Name: "other", Rate: slow, Burst: 1, Strategy: "local"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := ref.Allow(ctx, "k", 1); err == nil {
		t.Fatal("Allow of a removed rule: no error")
	}
	if _, err := n.SetRules(ctx, []rule.Rule{{Name: "r", Rate: slow, Burst: 2, Strategy: "local"}}); err != nil {
		t.Fatal(err)
	}
	var adm int
	for range 5 {
		if ok, err := ref.Allow(ctx, "k", 1); err != nil {
			t.Fatal(err)
		} else if ok {
			adm++
		}
	}
	if adm != 2 {
		t.Fatalf("the reloaded rule (burst 2, no refill) admitted %d of 5, want 2", adm)
	}
	if d, err := n.Ref("r").Check(ctx, "k2", 1); err != nil || !d.Allowed {
		t.Fatalf("RuleRef.Check = %+v, %v; want admitted", d, err)
	}
}

// TestFastPathKeyBound: a rule keeps allowances for at most its bound of
// keys (fastMaxKeys, lowered to 100 here); checks of more keys are decided
// in the loop, correctly.
func TestFastPathKeyBound(t *testing.T) {
	n := mustSoloNode(t, Config{Rules: []rule.Rule{{Name: "r", Rate: fastRate, Burst: fastBurst, Strategy: "local"}}})
	n.fastMaxKeys = 100 // before the first check: the check's hand-over orders it before the loop's read
	ref := n.Ref("r")
	ctx := context.Background()
	for pass := range 2 { // a key gets an allowance at its second check
		for i := range 300 {
			if ok, err := ref.Allow(ctx, "k"+strconv.Itoa(i), 1); !ok || err != nil {
				t.Fatalf("pass %d, key %d: %v, %v; want admitted", pass, i, ok, err)
			}
		}
	}
	var kept int
	// Peek's function runs in the loop goroutine, the owner of the table.
	if err := n.Peek(ctx, func(time.Duration, rule.Rule, strategy.Strategy) { kept = n.fastKept() }); err != nil {
		t.Fatal(err)
	}
	if kept > 100 || kept == 0 {
		t.Fatalf("%d keys kept, want 1..100", kept)
	}
}

// TestFastPathSeenTwice: a key gets an allowance at its second check, not
// its first, so a stream of ever-new keys costs no grants (up to the seen
// filter's false positives, a few percent), also after the filter's
// periods have turned over several times without any grant.
func TestFastPathSeenTwice(t *testing.T) {
	n := mustSoloNode(t, Config{Rules: []rule.Rule{{Name: "r", Rate: fastRate, Burst: fastBurst, Strategy: "local"}}})
	ref := n.Ref("r")
	ctx := context.Background()
	deadline := time.Now().Add(350 * time.Millisecond) // three sweep periods and more
	unique := 0
	for ; unique < 200000 && time.Now().Before(deadline); unique++ {
		if ok, err := ref.Allow(ctx, "u"+strconv.Itoa(unique), 1); !ok || err != nil {
			t.Fatalf("key %d: %v, %v", unique, ok, err)
		}
	}
	if g := n.Stats().Rules["r"].AllowanceGrants; g*10 > int64(unique) {
		t.Fatalf("%d grants for %d keys each checked once, want under 10%%", g, unique)
	}
	before := n.Stats().Rules["r"].AllowanceGrants
	for range 2 {
		if ok, err := ref.Allow(ctx, "twice", 1); !ok || err != nil {
			t.Fatal(ok, err)
		}
	}
	if g := n.Stats().Rules["r"].AllowanceGrants - before; g != 1 {
		t.Fatalf("a key checked twice got %d allowances, want 1 (at its second check)", g)
	}
	t.Logf("%d unique keys, %d grants", unique, before)
}

// TestFastPathLentBucketRace: checks refilling lent buckets in many
// goroutines (Check, RuleRef.Allow, batches) while the loop takes them
// back and lends them again (Inspect, sweeps, waits and refunds, which
// the loop decides after reclaiming the bucket), under -race in CI: the
// admitted tokens of each key stay within b + r*T of the elapsed time
// (the lent bucket, its counter and the strategy's copy are one bucket),
// the key is not starved, and checks were decided on the lent buckets,
// refusals included, without the loop.
func TestFastPathLentBucketRace(t *testing.T) {
	n := mustSoloNode(t, Config{Rules: []rule.Rule{{Name: "r", Rate: fastRate, Burst: fastBurst, Strategy: "local"}}})
	keys := []string{"a", "b"}
	var admitted [2]atomic.Int64
	var checks atomic.Int64
	var stop atomic.Bool
	var wg sync.WaitGroup
	ctx := context.Background()
	ref := n.Ref("r")
	start := time.Now()
	for w := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				k := i % 2
				var ok bool
				var err error
				switch w % 3 {
				case 0:
					var d CheckResult
					d, err = n.Check(ctx, "r", keys[k], 1)
					ok = d.Allowed
				case 1:
					ok, err = ref.Allow(ctx, keys[k], 1)
				default:
					var res []BatchResult
					res, err = n.CheckBatch(ctx, []BatchItem{{Rule: "r", Key: keys[k], Tokens: 1}})
					if err == nil {
						ok, err = res[0].Allowed, res[0].Err
					}
				}
				if err != nil {
					t.Error(err)
					return
				}
				checks.Add(1)
				if ok {
					admitted[k].Add(1)
				}
			}
		}()
	}
	wg.Add(1)
	go func() { // the loop's side: reclaims, sweeps, waits, refunds of 0
		defer wg.Done()
		for i := 0; !stop.Load(); i++ {
			switch i % 3 {
			case 0:
				if err := n.Inspect(ctx, func(time.Duration, rule.Rule, strategy.Strategy) {}); err != nil {
					t.Error(err)
					return
				}
			case 1:
				if err := n.Peek(ctx, func(now time.Duration, _ rule.Rule, _ strategy.Strategy) { n.fastSweep(now) }); err != nil {
					t.Error(err)
					return
				}
			default:
				d, err := n.CheckWait(ctx, "r", keys[i%2], 1, time.Millisecond)
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					admitted[i%2].Add(1)
				}
			}
			time.Sleep(time.Millisecond)
		}
	}()
	time.Sleep(300 * time.Millisecond)
	stop.Store(true)
	wg.Wait()
	elapsed := time.Since(start)
	loop := n.Stats().Rules["r"].Requests
	for k := range keys {
		adm := admitted[k].Load()
		if limit := envelope(fastRate, fastBurst, elapsed); float64(adm) > limit {
			t.Fatalf("key %s: admitted %d tokens in %v, above b + r*T = %.1f", keys[k], adm, elapsed, limit)
		}
		if adm < fastBurst {
			t.Fatalf("key %s: admitted %d tokens in %v, below the burst %d", keys[k], adm, elapsed, fastBurst)
		}
	}
	if loop*2 >= checks.Load() {
		t.Fatalf("the strategy decided %d of %d checks: the lent buckets decided few", loop, checks.Load())
	}
	t.Logf("%d checks, admitted %d and %d in %v (b + r*T = %.1f), %d through the loop, %d lends",
		checks.Load(), admitted[0].Load(), admitted[1].Load(), elapsed, envelope(fastRate, fastBurst, elapsed), loop, n.Stats().Rules["r"].BucketsLent)
}
