package cluster

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/rule"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/registry"
)

func checkBatch(t *testing.T, n *Node, items ...BatchItem) []BatchResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res, err := n.CheckBatch(ctx, items)
	if err != nil {
		t.Fatalf("%s: CheckBatch(%v): %v", n.Self(), items, err)
	}
	if len(res) != len(items) {
		t.Fatalf("%d results for %d items", len(res), len(items))
	}
	return res
}

// waitPending waits until rule of n has want checks waiting for an
// asynchronous decision.
func waitPending(t *testing.T, n *Node, rule string, want int64) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for n.Stats().Rules[rule].Pending != want {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d pending checks, want %d", n.Self(), n.Stats().Rules[rule].Pending, want)
		}
		time.Sleep(time.Millisecond)
	}
}

// Items of a batch are decided in order: a key's burst is used up by the
// earlier items, and later items of the same key see it.
func TestCheckBatchOrder(t *testing.T) {
	c := newCluster(t, 1, false, rule.Rule{Name: "r", Rate: slow, Burst: 5, Strategy: "local"},
		rule.Rule{Name: "o", Rate: slow, Burst: 3, Strategy: "owner", Params: []string{"hold=0s"}})
	n := c.nodes["n0"]
	res := checkBatch(t, n,
		BatchItem{Rule: "r", Key: "k", Tokens: 2}, BatchItem{Rule: "r", Key: "k", Tokens: 2}, BatchItem{Rule: "r", Key: "k", Tokens: 2}, // 4 of 5 used; 2 more do not fit
		BatchItem{Rule: "r", Key: "other", Tokens: 5}, BatchItem{Rule: "r", Key: "k", Tokens: 1}, BatchItem{Rule: "r", Key: "k", Tokens: 1},
		BatchItem{Rule: "o", Key: "k", Tokens: 3}, BatchItem{Rule: "o", Key: "k", Tokens: 1}, BatchItem{Rule: "r", Key: "k", Tokens: 6})
	want := []bool{true, true, false, true, true, false, true, false, false}
	for i, w := range want {
		r := res[i]
		if r.Err != nil || r.Allowed != w || r.Async || r.Wait < 0 {
			t.Errorf("item %d: %+v, want allowed=%v, synchronous, no error", i, r, w)
		}
	}
	// The batch charged the same buckets as Check: k and other are empty.
	if check(t, n, "r", "k", 1).Allowed || check(t, n, "r", "other", 1).Allowed || check(t, n, "o", "k", 1).Allowed {
		t.Fatal("a bucket the batch emptied admitted a check")
	}
	// The strategy decided items 0, 1 and 3 and the check of other: k's
	// bucket was lent to the fast path at its second check (item 1), and
	// the later items and checks of k were decided from it, in the loop
	// (the batch's order) and then in this goroutine.
	if got := n.Stats().Rules["r"].Requests; got != 4 {
		t.Errorf("rule r counted %d requests, want 4", got)
	}
}

// An invalid item fails the whole batch with an error naming its index,
// and no item is decided.
func TestCheckBatchInvalidItem(t *testing.T) {
	c := newCluster(t, 1, false, rule.Rule{Name: "r", Rate: slow, Burst: 3, Strategy: "local"})
	n := c.nodes["n0"]
	ok := BatchItem{Rule: "r", Key: "k", Tokens: 1}
	cases := []struct {
		bad  BatchItem
		want string
	}{
		{BatchItem{Rule: "nope", Key: "k", Tokens: 1}, `item 2: cluster: rule "nope" is not defined`},
		{BatchItem{Rule: "r", Key: "", Tokens: 1}, "item 2: cluster: rule \"r\": key is empty"},
		{BatchItem{Rule: "r", Key: strings.Repeat("x", MaxKeyBytes+1), Tokens: 1}, "item 2: cluster: rule \"r\": key is 4097 bytes"},
		{BatchItem{Rule: "r", Key: "k", Tokens: 0}, "item 2: cluster: rule \"r\": tokens 0 must be positive"},
		{BatchItem{Rule: "r", Key: "k", Tokens: -1}, "item 2: cluster: rule \"r\": tokens -1 must be positive"},
		{BatchItem{Rule: "r", Key: "k", Tokens: DefaultMaxTokens + 1}, "item 2: cluster: rule \"r\": tokens 1099511627777 is above the limit"},
	}
	for _, tc := range cases {
		res, err := n.CheckBatch(context.Background(), []BatchItem{ok, ok, tc.bad, ok})
		if err == nil || !strings.Contains(err.Error(), tc.want) || res != nil {
			t.Errorf("batch with %.20v: %v %v, want no results and an error containing %q", tc.bad, res, err, tc.want)
		}
	}
	if got := n.Stats().Rules["r"].Requests; got != 0 {
		t.Fatalf("invalid batches handed %d requests to the strategy", got)
	}
	// Nothing was charged: the key's whole burst is there.
	if !check(t, n, "r", "k", 3).Allowed {
		t.Fatal("an invalid batch charged the key")
	}
}

func TestCheckBatchEmpty(t *testing.T) {
	c := newCluster(t, 1, false, rule.Rule{Name: "r", Rate: slow, Burst: 3, Strategy: "local"})
	n := c.nodes["n0"]
	for _, items := range [][]BatchItem{nil, {}} {
		res, err := n.CheckBatch(context.Background(), items)
		if err == nil || !strings.Contains(err.Error(), "no items") || res != nil {
			t.Errorf("CheckBatch(%#v): %v %v, want a \"no items\" error", items, res, err)
		}
	}
	// A ctx ended before the call: the call fails and nothing is decided.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if res, err := n.CheckBatch(ctx, []BatchItem{{Rule: "r", Key: "k", Tokens: 3}}); !errors.Is(err, context.Canceled) || res != nil {
		t.Errorf("CheckBatch with a cancelled ctx: %v %v, want context.Canceled", res, err)
	}
	if !check(t, n, "r", "k", 3).Allowed {
		t.Fatal("a batch refused with a cancelled ctx charged the key")
	}
}

// pendingCluster is a 2-node owner cluster whose n0 cannot reach n1: a
// check at n0 of a key n1 owns stays pending (timeout 10s).
func pendingCluster(t *testing.T) (c *testCluster, local, remote string) {
	t.Helper()
	c = newCluster(t, 2, true, ownerRule("timeout=10s"))
	if err := c.faulty["n0"].SetFaults(FrameFaults{Blocked: []strategy.NodeID{"n1"}}); err != nil {
		t.Fatal(err)
	}
	return c, keyOwnedBy(t, "n0", c.ids), keyOwnedBy(t, "n1", c.ids)
}

// A batch whose ctx ends while an owner forward is pending returns at
// once: the decided items keep their decisions, the undecided one gets
// ctx's error.
func TestCheckBatchContextEndsWhilePending(t *testing.T) {
	for _, cancelled := range []bool{false, true} {
		name := "deadline"
		if cancelled {
			name = "cancel"
		}
		t.Run(name, func(t *testing.T) {
			c, local, remote := pendingCluster(t)
			n0 := c.nodes["n0"]
			var ctx context.Context
			var cancel context.CancelFunc
			if cancelled {
				ctx, cancel = context.WithCancel(context.Background())
				go func() {
					// The forward is the batch's last item: once it is
					// pending, the items before it are decided.
					for n0.Stats().Rules["api"].Pending != 1 {
						time.Sleep(time.Millisecond)
					}
					cancel()
				}()
			} else {
				ctx, cancel = context.WithTimeout(context.Background(), 100*time.Millisecond)
			}
			defer cancel()
			type answer struct {
				res []BatchResult
				err error
			}
			done := make(chan answer, 1)
			start := time.Now()
			go func() {
				items := []BatchItem{{Rule: "api", Key: local, Tokens: 1}, {Rule: "api", Key: remote, Tokens: 1}, {Rule: "api", Key: local, Tokens: 1}}
				if cancelled {
					items[1], items[2] = items[2], items[1]
				}
				res, err := n0.CheckBatch(ctx, items)
				done <- answer{res, err}
			}()
			var a answer
			select {
			case a = <-done:
			case <-time.After(3 * time.Second):
				t.Fatal("CheckBatch did not return after its ctx ended")
			}
			if a.err != nil {
				t.Fatal(a.err)
			}
			if el := time.Since(start); el > 2*time.Second {
				t.Errorf("CheckBatch returned after %v", el)
			}
			wantErr := context.DeadlineExceeded
			if cancelled {
				wantErr = context.Canceled
			}
			fwd, own := 1, []int{0, 2}
			if cancelled {
				fwd, own = 2, []int{0, 1}
			}
			if r := a.res[fwd]; !errors.Is(r.Err, wantErr) || r.Allowed || r.Remaining != -1 {
				t.Errorf("forwarded item %d: %+v, want Err %v", fwd, r, wantErr)
			}
			for _, i := range own {
				if r := a.res[i]; r.Err != nil || !r.Allowed || r.Async {
					t.Errorf("item %d owned by n0: %+v, want a synchronous admission", i, r)
				}
			}
			// The forward is still pending in the strategy (it may still be
			// decided later); the node goes on deciding.
			if p := n0.Stats().Rules["api"].Pending; p != 1 {
				t.Errorf("%d pending checks after the batch returned, want 1", p)
			}
			if d := check(t, n0, "api", local, 3); !d.Allowed {
				t.Errorf("n0 after the batch: %+v, want the 3 tokens left of its own key", d)
			}
		})
	}
}

// Closing the node fails the batch's undecided items with ErrClosed.
func TestCheckBatchClose(t *testing.T) {
	c, local, remote := pendingCluster(t)
	n0 := c.nodes["n0"]
	type answer struct {
		res []BatchResult
		err error
	}
	done := make(chan answer, 1)
	go func() {
		res, err := n0.CheckBatch(context.Background(), []BatchItem{{Rule: "api", Key: local, Tokens: 1}, {Rule: "api", Key: remote, Tokens: 1}})
		done <- answer{res, err}
	}()
	waitPending(t, n0, "api", 1)
	if err := n0.Close(); err != nil {
		t.Fatal(err)
	}
	var a answer
	select {
	case a = <-done:
	case <-time.After(3 * time.Second):
		t.Fatal("CheckBatch did not return after Close")
	}
	if a.err != nil {
		t.Fatal(a.err)
	}
	if r := a.res[0]; r.Err != nil || !r.Allowed {
		t.Errorf("item decided before Close: %+v", r)
	}
	if r := a.res[1]; !errors.Is(r.Err, ErrClosed) || r.Allowed || r.Remaining != -1 {
		t.Errorf("pending item at Close: %+v, want Err ErrClosed", r)
	}
	// After Close: either the call fails with ErrClosed, or (the batch
	// slipped into the queue before the loop stopped) every item does.
	res, err := n0.CheckBatch(context.Background(), []BatchItem{{Rule: "api", Key: local, Tokens: 1}})
	switch {
	case err != nil:
		if !errors.Is(err, ErrClosed) {
			t.Errorf("CheckBatch after Close: %v, want ErrClosed", err)
		}
	case len(res) != 1 || !errors.Is(res[0].Err, ErrClosed):
		t.Errorf("CheckBatch after Close: %+v, want ErrClosed", res)
	}
}

// noRemainer hides every method of a strategy but strategy.Strategy's (a
// strategy.Remainer among them).
type noRemainer struct{ strategy.Strategy }

// hideRemainer makes rule name of n run its strategy as a noRemainer. The swap
// happens in the node's loop (Inspect), the only reader of the strategy.
func hideRemainer(t *testing.T, n *Node, name string) {
	t.Helper()
	err := n.Inspect(context.Background(), func(_ time.Duration, r rule.Rule, s strategy.Strategy) {
		if r.Name == name {
			n.rules[name].s = noRemainer{s}
			// The Host makes the calls: it gets the swapped strategy too
			// (the same rules, each keeping its wake-ups).
			ss, from := make([]strategy.Strategy, len(n.order)), make([]int, len(n.order))
			for i, rs := range n.order {
				ss[i], from[i] = rs.s, i
			}
			if err := n.h.SetRules(ss, from); err != nil {
				t.Error(err)
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
}

// CheckResult.Remaining is -1 for a strategy that does not implement
// strategy.Remainer, from Check and CheckBatch alike, and for an
// asynchronous decision; a Remainer's synchronous decisions report what
// is left.
func TestDecisionRemaining(t *testing.T) {
	for _, info := range registry.List() {
		t.Run(info.Name, func(t *testing.T) {
			var params []string
			if info.Name == "owner" {
				params = []string{"hold=0s"}
			}
			if info.Name == "concurrency" {
				params = []string{"permit_ttl=1ms"} // it grants nothing for permit_ttl after its start
			}
			c := newCluster(t, 1, false, rule.Rule{Name: "r", Rate: slow, Burst: 30, Strategy: info.Name, Params: params},
				rule.Rule{Name: "hidden", Rate: slow, Burst: 30, Strategy: info.Name, Params: params})
			if info.Name == "concurrency" {
				time.Sleep(5 * time.Millisecond)
			}
			n := c.nodes["n0"]
			hideRemainer(t, n, "hidden")
			if d := check(t, n, "hidden", "k", 1); d.Remaining != -1 {
				t.Errorf("Check: %+v, want Remaining -1 without a Remainer", d)
			}
			for i, r := range checkBatch(t, n, BatchItem{Rule: "hidden", Key: "k", Tokens: 1}, BatchItem{Rule: "hidden", Key: "k2", Tokens: 40}) {
				if r.Err != nil || r.Remaining != -1 {
					t.Errorf("batch item %d: %+v, want Remaining -1 without a Remainer", i, r)
				}
			}
			// The same strategy, not hidden: when it is a Remainer and
			// knows the key, Remaining is what is left of the burst.
			var isRemainer bool
			if err := n.Inspect(context.Background(), func(_ time.Duration, r rule.Rule, s strategy.Strategy) {
				if r.Name == "r" {
					_, isRemainer = s.(strategy.Remainer)
				}
			}); err != nil {
				t.Fatal(err)
			}
			res := checkBatch(t, n, BatchItem{Rule: "r", Key: "k", Tokens: 1}, BatchItem{Rule: "r", Key: "k", Tokens: 4})
			for i, want := range []int64{29, 25} {
				r := res[i]
				switch {
				case r.Err != nil || !r.Allowed:
					t.Errorf("item %d: %+v, want allowed", i, r)
				case !isRemainer || r.Async:
					if r.Remaining != -1 {
						t.Errorf("item %d: %+v, want Remaining -1", i, r)
					}
				case r.Remaining != -1 && r.Remaining != want:
					t.Errorf("item %d: %+v, want Remaining %d (or -1: key unknown here)", i, r, want)
				}
			}
		})
	}
	// An asynchronous decision (owner forwarding) reports -1, though owner
	// is a Remainer at the owner.
	c := newCluster(t, 2, false, ownerRule("timeout=2s"))
	key := keyOwnedBy(t, "n1", c.ids)
	if d := check(t, c.nodes["n0"], "api", key, 1); !d.Async || d.Remaining != -1 {
		t.Errorf("forwarded decision: %+v, want Async with Remaining -1", d)
	}
}
