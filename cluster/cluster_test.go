package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/rendezvous"
	"github.com/tokenmesh/tokenmesh/rule"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/registry"
)

// slow refills one token per hour: within a test a bucket only drains.
var slow = bucket.Rate{Tokens: 1, Per: time.Hour}

type testCluster struct {
	net    *MemNetwork
	epoch  time.Time
	rules  []rule.Rule
	ids    []strategy.NodeID
	nodes  map[strategy.NodeID]*Node
	faulty map[strategy.NodeID]*Faulty
}

// soloNode starts cfg as node "n0" alone on a MemNetwork of its own
// (cfg.Self and cfg.Transport are set here), closed at the end of the
// test; New's error is returned, for the caller to expect or refuse.
func soloNode(tb testing.TB, cfg Config) (*Node, error) {
	tb.Helper()
	ep, err := NewMemNetwork().Endpoint("n0")
	if err != nil {
		tb.Fatal(err)
	}
	cfg.Self, cfg.Transport = "n0", ep
	n, err := New(cfg)
	if err == nil {
		tb.Cleanup(func() { n.Close() })
	}
	return n, err
}

// mustSoloNode is soloNode that fails the test when New fails.
func mustSoloNode(tb testing.TB, cfg Config) *Node {
	tb.Helper()
	n, err := soloNode(tb, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return n
}

// newCluster starts n nodes "n0".. on one MemNetwork with a shared epoch;
// with faulty, every endpoint is wrapped in a Faulty transport.
func newCluster(t *testing.T, n int, faulty bool, rules ...rule.Rule) *testCluster {
	t.Helper()
	net := NewMemNetwork()
	epoch := time.Now()
	c := &testCluster{net: net, epoch: epoch, rules: rules, nodes: map[strategy.NodeID]*Node{}, faulty: map[strategy.NodeID]*Faulty{}}
	for i := range n {
		c.ids = append(c.ids, strategy.NodeID(fmt.Sprintf("n%d", i)))
	}
	eps := map[strategy.NodeID]Transport{}
	for _, id := range c.ids { // attach all first: the first messages find every peer
		ep, err := net.Endpoint(id)
		if err != nil {
			t.Fatal(err)
		}
		eps[id] = ep
	}
	for i, id := range c.ids {
		ep := eps[id]
		if faulty {
			f := NewFaulty(ep, uint64(i)+1)
			c.faulty[id] = f
			ep = f
		}
		node, err := New(Config{Self: id, Members: c.ids, Rules: rules, Transport: ep, Seed: 7, Epoch: epoch})
		if err != nil {
			t.Fatal(err)
		}
		c.nodes[id] = node
		t.Cleanup(func() { node.Close() })
	}
	return c
}

func check(t *testing.T, n *Node, rule, key string, tokens int64) CheckResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	d, err := n.Check(ctx, rule, key, tokens)
	if err != nil {
		t.Fatalf("%s: Check(%s, %s, %d): %v", n.Self(), rule, key, tokens, err)
	}
	return d
}

// keyOwnedBy returns a key whose rendezvous owner among members is owner.
func keyOwnedBy(t testing.TB, owner strategy.NodeID, members []strategy.NodeID) string {
	t.Helper()
	for i := range 1000 {
		k := fmt.Sprintf("key-%d", i)
		if rendezvous.Owner(k, members) == owner {
			return k
		}
	}
	t.Fatalf("no key owned by %s", owner)
	return ""
}

func ownerRule(params ...string) rule.Rule {
	return rule.Rule{Name: "api", Rate: slow, Burst: 5, Strategy: "owner", Params: append([]string{"hold=0s"}, params...)}
}

func TestOwnerForwardsToOwner(t *testing.T) {
	// replicas=1: the message counts below are forwards and verdicts only.
	c := newCluster(t, 3, false, ownerRule("timeout=2s", "replicas=1"))
	n0, n2 := c.nodes["n0"], c.nodes["n2"]
	key := keyOwnedBy(t, "n1", c.ids)
	for i := range 5 {
		d := check(t, n0, "api", key, 1)
		if !d.Allowed || !d.Async {
			t.Fatalf("request %d via n0: %+v, want allowed by the owner n1 (async)", i, d)
		}
	}
	// The owner's bucket is empty: n0 and n2 both get its refusal.
	if d := check(t, n0, "api", key, 1); d.Allowed || !d.Async {
		t.Fatalf("6th request via n0: %+v, want refused by the owner", d)
	}
	if d := check(t, n2, "api", key, 1); d.Allowed || !d.Async {
		t.Fatalf("request via n2: %+v, want refused by the owner", d)
	}
	// The owner itself decides synchronously, with the same bucket.
	if d := check(t, c.nodes["n1"], "api", key, 1); d.Allowed || d.Async {
		t.Fatalf("request at the owner: %+v, want a synchronous refusal", d)
	}
	// A key n0 owns is decided at n0 without messages.
	own := keyOwnedBy(t, "n0", c.ids)
	before := n0.Stats().Rules["api"].MessagesSent
	if d := check(t, n0, "api", own, 5); !d.Allowed || d.Async {
		t.Fatalf("own key: %+v, want a synchronous admission", d)
	}
	st := n0.Stats().Rules["api"]
	if st.MessagesSent != before {
		t.Fatalf("own key sent %d messages", st.MessagesSent-before)
	}
	if st.MessagesSent != 6 || st.MessagesReceived != 6 || st.BytesSent == 0 || st.BytesReceived == 0 || st.Pending != 0 {
		t.Fatalf("n0 stats %+v, want 6 forwards and 6 verdicts", st)
	}
	if got := c.nodes["n1"].Stats().Rules["api"].MessagesReceived; got != 7 {
		t.Fatalf("owner received %d forwards, want 7", got)
	}
	// Deferred counts the forwarded checks, not those decided on the node.
	if st.Requests != 7 || st.Deferred != 6 {
		t.Fatalf("n0: %d requests, %d deferred; want 7 and the 6 forwarded", st.Requests, st.Deferred)
	}
	if st := c.nodes["n1"].Stats().Rules["api"]; st.Requests != 1 || st.Deferred != 0 {
		t.Fatalf("owner n1: %d requests, %d deferred; want 1 decided at once", st.Requests, st.Deferred)
	}
}

func TestOwnerConcurrentChecks(t *testing.T) {
	c := newCluster(t, 3, false, rule.Rule{Name: "api", Rate: slow, Burst: 30, Strategy: "owner", Params: []string{"hold=0s", "timeout=2s"}})
	key := keyOwnedBy(t, "n2", c.ids)
	var mu sync.Mutex
	allowed := 0
	var wg sync.WaitGroup
	for _, id := range c.ids {
		for range 4 {
			wg.Go(func() {
				for range 10 {
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					d, err := c.nodes[id].Check(ctx, "api", key, 1)
					cancel()
					if err != nil {
						t.Error(err)
						return
					}
					if d.Allowed {
						mu.Lock()
						allowed++
						mu.Unlock()
					}
				}
			})
		}
	}
	wg.Wait()
	if allowed != 30 {
		t.Fatalf("admitted %d of 120 requests, want exactly the burst of 30", allowed)
	}
}

func TestStaticShares(t *testing.T) {
	c := newCluster(t, 3, false, rule.Rule{Name: "s", Rate: slow, Burst: 9, Strategy: "static"})
	for _, id := range c.ids {
		admitted := 0
		for range 5 {
			if check(t, c.nodes[id], "s", "tenant", 1).Allowed {
				admitted++
			}
		}
		if admitted != 3 {
			t.Fatalf("%s admitted %d, want its share 3 of the burst 9", id, admitted)
		}
		if st := c.nodes[id].Stats().Rules["s"]; st.MessagesSent != 0 {
			t.Fatalf("static sent %d messages", st.MessagesSent)
		}
	}
}

func TestGCounterConverges(t *testing.T) {
	c := newCluster(t, 3, false, rule.Rule{Name: "g", Rate: slow, Burst: 5, Strategy: "gcounter", Params: []string{"gossip=20ms"}})
	n0, n1 := c.nodes["n0"], c.nodes["n1"]
	for i := range 5 {
		if !check(t, n0, "g", "k", 1).Allowed {
			t.Fatalf("request %d at n0 refused; the burst is 5", i)
		}
	}
	if check(t, n0, "g", "k", 1).Allowed {
		t.Fatal("6th request at n0 admitted")
	}
	// Every node gossips to one random neighbour each 20ms; after 25 rounds
	// n1 has heard (the chance it has not is below 2^-25).
	time.Sleep(500 * time.Millisecond)
	if check(t, n1, "g", "k", 1).Allowed {
		t.Fatal("n1 admitted a request for a key exhausted at n0, after gossip")
	}
	if st := n0.Stats().Rules["g"]; st.MessagesSent == 0 || st.BytesSent == 0 {
		t.Fatalf("n0 stats %+v: no gossip sent", st)
	}
}

func TestNodeClosedMidRun(t *testing.T) {
	c := newCluster(t, 3, false, ownerRule("timeout=300ms", "retries=1"))
	n0, n1, n2 := c.nodes["n0"], c.nodes["n1"], c.nodes["n2"]
	key := keyOwnedBy(t, "n2", c.ids)
	if d := check(t, n0, "api", key, 1); !d.Allowed || !d.Async {
		t.Fatalf("before the crash: %+v", d)
	}
	time.Sleep(100 * time.Millisecond) // n2 ships the level (4 of 5) to the key's replica within sync=10ms
	if err := n2.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := n2.Check(context.Background(), "api", key, 1); !errors.Is(err, ErrClosed) {
		t.Fatalf("Check on a closed node: %v, want ErrClosed", err)
	}
	// Before membership catches up, the forward goes nowhere: the timeout
	// answers with n0's local bucket (r/3, 2 of the burst of 5), which
	// starts empty and refills nothing at this rate: refused.
	d := check(t, n0, "api", key, 1)
	if d.Allowed || d.Wait < 250*time.Millisecond {
		t.Fatalf("owner gone, before SetMembers: %+v, want the local bucket's refusal after the timeout", d)
	}
	// n2 is suspected now: the next check is answered at once.
	if d := check(t, n0, "api", key, 1); d.Allowed || d.Wait > 100*time.Millisecond {
		t.Fatalf("suspected owner: %+v, want the local bucket's refusal at once", d)
	}
	live := []strategy.NodeID{"n0", "n1"}
	for _, n := range []*Node{n0, n1} {
		if err := n.SetMembers(live); err != nil {
			t.Fatal(err)
		}
	}
	newOwner := rendezvous.Owner(key, live)
	other := n0
	if newOwner == "n0" {
		other = n1
	}
	// The new owner was the key's replica: it continues from the level n2
	// shipped (4 of 5), not from a full bucket.
	for i := range 5 {
		d := check(t, other, "api", key, 1)
		if d.Allowed != (i < 4) || !d.Async || d.Wait > 250*time.Millisecond {
			t.Fatalf("request %d after SetMembers: %+v, want the new owner %s's verdict", i, d, newOwner)
		}
	}
	if err := n2.SetMembers(live); !errors.Is(err, ErrClosed) {
		t.Fatalf("SetMembers on a closed node: %v", err)
	}
	// n2 restarts (Join: its strategy starts now, not at time 0) and
	// membership brings it back: it owns the key again, and continues from
	// the drained level the others ship to it (or, until it arrives, from an
	// empty bucket: warm-up), not with a fresh burst.
	ep, err := c.net.Endpoint("n2")
	if err != nil {
		t.Fatal(err)
	}
	n2, err = New(Config{Self: "n2", Members: c.ids, Rules: c.rules, Transport: ep, Epoch: c.epoch, Join: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n2.Close() })
	for _, n := range []*Node{n0, n1} {
		if err := n.SetMembers(c.ids); err != nil {
			t.Fatal(err)
		}
	}
	if d := check(t, n0, "api", key, 1); d.Allowed || !d.Async {
		t.Fatalf("after the restart: %+v, want the restarted owner's refusal (no fresh burst)", d)
	}
}

func TestOwnerUnderFaults(t *testing.T) {
	c := newCluster(t, 3, true, rule.Rule{Name: "api", Rate: slow, Burst: 1000, Strategy: "owner",
		Params: []string{"hold=0s", "timeout=2s", "retries=19", "fail_open=false"}})
	for _, f := range c.faulty {
		if err := f.SetFaults(FrameFaults{Drop: 0.2, Duplicate: 0.3, Delay: time.Millisecond, Jitter: 3 * time.Millisecond}); err != nil {
			t.Fatal(err)
		}
	}
	n0 := c.nodes["n0"]
	keys := []string{keyOwnedBy(t, "n1", c.ids), keyOwnedBy(t, "n2", c.ids)}
	var wg sync.WaitGroup
	var mu sync.Mutex
	refused := 0
	for i := range 40 {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
			defer cancel()
			d, err := n0.Check(ctx, "api", keys[i%2], 1)
			if err != nil {
				t.Errorf("request %d: %v", i, err)
				return
			}
			if !d.Allowed {
				mu.Lock()
				refused++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	// fail_open=false: a request that timed out would be refused. An attempt
	// (forward and verdict) gets through with probability 0.8^2; 20 attempts
	// all fail with probability 0.36^20 ~ 1e-9, so every one gets its verdict.
	if refused > 0 {
		t.Fatalf("%d of 40 requests refused (timed out) under 20%% loss", refused)
	}
	var total FaultStats
	for _, f := range c.faulty {
		s := f.Stats()
		total.Dropped += s.Dropped
		total.Duplicated += s.Duplicated
		total.Delayed += s.Delayed
	}
	if total.Dropped == 0 || total.Duplicated == 0 || total.Delayed == 0 {
		t.Fatalf("faults not injected: %+v", total)
	}
	if st := n0.Stats().Rules["api"]; st.Pending != 0 || st.ReceiveErrors != 0 {
		t.Fatalf("n0 stats %+v", st)
	}
}

func TestPartitionAndClosePending(t *testing.T) {
	c := newCluster(t, 3, true, ownerRule("timeout=10s"))
	Partition(c.faulty, []strategy.NodeID{"n0"}, []strategy.NodeID{"n1", "n2"})
	n0 := c.nodes["n0"]
	key := keyOwnedBy(t, "n1", c.ids)
	// A context that ends first.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	_, err := n0.Check(ctx, "api", key, 1)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Check across a partition with a 50ms context: %v", err)
	}
	// Close fails a pending check.
	errc := make(chan error, 1)
	go func() {
		_, err := n0.Check(context.Background(), "api", key, 1)
		errc <- err
	}()
	time.Sleep(50 * time.Millisecond)
	n0.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("pending check after Close: %v, want ErrClosed", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("pending check not failed by Close")
	}
	if s := c.faulty["n0"].Stats(); s.Blocked == 0 {
		t.Fatalf("partition blocked nothing: %+v", s)
	}
	// Healed, the rest still work.
	Partition(c.faulty)
	if d := check(t, c.nodes["n2"], "api", key, 1); !d.Allowed || !d.Async {
		t.Fatalf("after heal: %+v", d)
	}
}

func TestBadInput(t *testing.T) {
	c := newCluster(t, 2, false, ownerRule(), rule.Rule{Name: "s", Rate: slow, Burst: 4, Strategy: "static"})
	n0 := c.nodes["n0"]
	ctx := context.Background()
	cases := []struct {
		rule, key string
		tokens    int64
		want      string
	}{
		{"nope", "k", 1, `rule "nope" is not defined`},
		{"s", "", 1, "key is empty"},
		{"s", strings.Repeat("x", MaxKeyBytes+1), 1, "key is 4097 bytes"},
		{"s", "tenant\x00p", 1, "key contains a NUL byte"},
		{"s", "k", 0, "tokens 0 must be positive"},
		{"s", "k", -3, "tokens -3 must be positive"},
		{"s", "k", DefaultMaxTokens + 1, "above the limit"},
	}
	for _, tc := range cases {
		_, err := n0.Check(ctx, tc.rule, tc.key, tc.tokens)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Check(%q, %.10q, %d): %v, want an error containing %q", tc.rule, tc.key, tc.tokens, err, tc.want)
		}
	}
	// None of it touched state: the share of 2 tokens is whole. A request
	// above the burst is a refusal, not an error.
	if d := check(t, n0, "s", "k", 3); d.Allowed {
		t.Fatal("3 tokens admitted from a share of 2")
	}
	if !check(t, n0, "s", "k", 2).Allowed {
		t.Fatal("the share of 2 was not whole after bad input")
	}
	// Frames for an unknown rule, and garbage for a known one, are counted
	// and dropped.
	n0.deliver(Frame{Rule: "nope", From: "n1", Payload: []byte{1}})
	n0.deliver(Frame{Rule: "api", From: "n1", Payload: []byte{0xff, 0xff, 0xff}})
	if err := n0.SetMembers([]strategy.NodeID{"n0", "n1"}); err != nil { // a barrier: the frames are handled
		t.Fatal(err)
	}
	st := n0.Stats()
	if st.UnknownRuleFrames != 1 || st.Rules["api"].ReceiveErrors != 1 {
		t.Fatalf("stats %+v, want 1 unknown-rule frame and 1 receive error", st)
	}
	if err := n0.SetMembers([]strategy.NodeID{""}); err == nil || !strings.Contains(err.Error(), "empty node name") {
		t.Fatalf("SetMembers with an empty name: %v", err)
	}
	if d := check(t, n0, "s", "other", 1); !d.Allowed {
		t.Fatal("node broken after bad input")
	}
}

func TestConfigErrors(t *testing.T) {
	net := NewMemNetwork()
	ep, err := net.Endpoint("a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := net.Endpoint("a"); err == nil {
		t.Fatal("attached a twice")
	}
	good := rule.Rule{Name: "r", Rate: slow, Burst: 1, Strategy: "local"}
	cases := []struct {
		cfg  Config
		want string
	}{
		{Config{Transport: ep, Rules: []rule.Rule{good}}, "Self is empty"},
		{Config{Self: "a", Rules: []rule.Rule{good}}, "Transport is nil"},
		{Config{Self: "a", Transport: ep}, "no rules"},
		{Config{Self: "a", Transport: ep, Rules: []rule.Rule{good, good}}, `rule "r" is defined twice`},
		{Config{Self: "a", Transport: ep, Rules: []rule.Rule{{Name: "r", Rate: slow, Burst: 1, Strategy: "magic"}}}, `unknown strategy "magic"`},
		{Config{Self: "a", Transport: ep, Rules: []rule.Rule{{Name: "r", Rate: slow, Burst: 1, Strategy: "gcounter", Params: []string{"gossip=fast"}}}}, "gossip"},
		{Config{Self: "a", Transport: ep, Rules: []rule.Rule{{Name: "r", Rate: slow, Burst: 1, Strategy: "owner", Params: []string{"bogus=1"}}}}, "bogus"},
		{Config{Self: "a", Transport: ep, Rules: []rule.Rule{{Name: "r", Rate: slow, Burst: -1, Strategy: "local"}}}, "burst -1"},
		{Config{Self: "a", Transport: ep, Rules: []rule.Rule{good}, Epoch: time.Now().Add(time.Hour)}, "Epoch"},
	}
	for _, tc := range cases {
		n, err := New(tc.cfg)
		if err == nil {
			n.Close()
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New: %v, want an error containing %q", err, tc.want)
		}
	}
	if err := (&Faulty{}).SetFaults(FrameFaults{Drop: 1.5}); err == nil {
		t.Error("Drop 1.5 accepted")
	}
	if err := ep.Send("zz", Frame{Rule: "r"}); err == nil || !strings.Contains(err.Error(), `"zz"`) {
		t.Errorf("send to an unknown peer: %v", err)
	}
}

func TestCloseIdempotent(t *testing.T) {
	c := newCluster(t, 1, false, rule.Rule{Name: "r", Rate: slow, Burst: 1, Strategy: "local"})
	n := c.nodes["n0"]
	if !check(t, n, "r", "k", 1).Allowed {
		t.Fatal("first request refused")
	}
	for range 2 {
		if err := n.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := n.Check(context.Background(), "r", "k", 1); !errors.Is(err, ErrClosed) {
		t.Fatalf("Check after Close: %v", err)
	}
}

// Every registered strategy runs under the live driver: it starts, decides
// requests at every node, exchanges its messages without receive errors,
// and stops.
func TestEveryStrategyRuns(t *testing.T) {
	for _, info := range registry.List() {
		t.Run(info.Name, func(t *testing.T) {
			var params []string
			if info.Name == "owner" {
				params = []string{"hold=1ms", "timeout=1s"}
			}
			if info.Name == "concurrency" {
				params = []string{"permit_ttl=1ms", "timeout=1s"} // it grants nothing for permit_ttl after its start
			}
			c := newCluster(t, 3, false, rule.Rule{Name: "r", Rate: bucket.Rate{Tokens: 100, Per: time.Second}, Burst: 30, Strategy: info.Name, Params: params})
			if info.Name == "concurrency" {
				time.Sleep(5 * time.Millisecond)
			}
			admitted := 0
			for i := range 30 {
				n := c.nodes[c.ids[i%3]]
				if check(t, n, "r", fmt.Sprintf("k%d", i%4), 1).Allowed {
					admitted++
				}
			}
			if admitted == 0 {
				t.Fatal("nothing admitted from a fresh burst of 30")
			}
			time.Sleep(30 * time.Millisecond)
			for _, id := range c.ids {
				n := c.nodes[id]
				if err := n.SetMembers(c.ids[:2]); err != nil && id != "n2" {
					t.Fatal(err)
				}
				if st := n.Stats().Rules["r"]; st.ReceiveErrors != 0 || st.SendErrors != 0 {
					t.Fatalf("%s: %+v", id, st)
				}
			}
		})
	}
}
