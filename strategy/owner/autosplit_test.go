package owner

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/rendezvous"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// autoNet is a cluster of split=auto nodes over a network that delivers
// messages in any order, loses and duplicates them, driven step by step
// (no simulator: every interleaving rapid draws is possible).
type autoNet struct {
	t       *rapid.T
	members []strategy.NodeID
	nodes   map[strategy.NodeID]*Owner
	params  []string
	now     time.Duration
	inbox   []autoMsg
	nextID  uint64
	maxK    int // the largest K any node held
}

type autoMsg struct {
	from, to strategy.NodeID
	payload  []byte
}

var autoRate, autoBurst = bucket.Rate{Tokens: 20, Per: time.Second}, int64(20)

func (n *autoNet) newNode(self strategy.NodeID, now time.Duration) *Owner {
	p, err := strategy.ParseParams(n.params)
	if err != nil {
		n.t.Fatal(err)
	}
	o, err := New(strategy.Config{Self: self, Members: n.members, Rate: autoRate, Burst: autoBurst,
		Rand: rand.New(rand.NewPCG(1, 2)), Params: p, LatencyHint: time.Millisecond})
	if err != nil {
		n.t.Fatal(err)
	}
	fx := &strategy.Effects{}
	o.Start(now, fx)
	n.take(self, fx)
	return o
}

// take queues fx's messages from node from.
func (n *autoNet) take(from strategy.NodeID, fx *strategy.Effects) {
	for _, m := range fx.Messages {
		n.inbox = append(n.inbox, autoMsg{from: from, to: m.To, payload: m.Payload})
	}
}

// check is the invariant of autosplit.go: over the key's rendezvous order,
// the live sub-buckets' rates r/K_n sum to at most r, and their bursts to
// at most b.
func (n *autoNet) check(key string) {
	order := rendezvous.Rank(nil, key, n.members, len(n.members))
	var rate float64
	var burst int64
	for i, m := range order {
		st := n.nodes[m].autoState(key)
		n.maxK = max(n.maxK, st.k)
		if i < st.live {
			rate += 1 / float64(st.k)
			b, _ := bucket.SplitBurst(autoBurst, st.k, i)
			burst += b
		}
	}
	if rate > 1+1e-9 || burst > autoBurst {
		states := make([]string, len(order))
		for i, m := range order {
			st := n.nodes[m].autoState(key)
			states[i] = fmt.Sprintf("%s:(K=%d live=%d epoch=%d from=%s)", m, st.k, st.live, st.epoch, st.from)
		}
		n.t.Fatalf("at %v: live sub-buckets hold %.3f of the rate and %d of the burst %d: %v", n.now, rate, burst, autoBurst, states)
	}
}

// changeMembers removes a member (when more than 2 remain) or adds back
// one that left, as a fresh node started now, and gives every member the
// new view at once (ranks shift: a sub-bucket moves to the next node).
func (n *autoNet) changeMembers() {
	var gone []strategy.NodeID
	for m := range n.nodes {
		if !slices.Contains(n.members, m) {
			gone = append(gone, m)
		}
	}
	slices.Sort(gone)
	if len(gone) > 0 && (len(n.members) <= 2 || rapid.Bool().Draw(n.t, "join")) {
		back := rapid.SampledFrom(gone).Draw(n.t, "joiner")
		n.members = append(n.members, back)
		slices.Sort(n.members)
		n.nodes[back] = n.newNode(back, n.now)
	} else if len(n.members) > 2 {
		leaver := rapid.SampledFrom(n.members).Draw(n.t, "leaver")
		n.members = slices.DeleteFunc(slices.Clone(n.members), func(m strategy.NodeID) bool { return m == leaver })
	} else {
		return
	}
	for _, m := range n.members {
		fx := &strategy.Effects{}
		n.nodes[m].SetMembers(n.now, slices.Clone(n.members), fx)
		n.take(m, fx)
	}
}

func (n *autoNet) step(key string) {
	switch rapid.IntRange(0, 10).Draw(n.t, "action") {
	case 0, 1, 2: // requests at one node
		self := rapid.SampledFrom(n.members).Draw(n.t, "at")
		for range rapid.IntRange(1, 30).Draw(n.t, "requests") {
			fx := &strategy.Effects{}
			n.nextID++
			n.nodes[self].Request(n.now, strategy.Request{ID: n.nextID, Key: key, Tokens: 1, Arrival: n.now}, fx)
			n.take(self, fx)
		}
	case 3, 4: // time passes; every node ticks
		n.now += time.Duration(rapid.IntRange(1, 300).Draw(n.t, "advance_ms")) * time.Millisecond
		for _, m := range n.members {
			fx := &strategy.Effects{}
			n.nodes[m].Tick(n.now, fx)
			n.take(m, fx)
		}
	case 5: // a restart: a fresh node, started now (it may have missed rounds)
		self := rapid.SampledFrom(n.members).Draw(n.t, "restart")
		n.nodes[self] = n.newNode(self, n.now)
	case 6: // a membership change every node sees at once: one leaves or a fresh one joins
		n.changeMembers()
	default: // deliver, lose or duplicate one message, in any order
		if len(n.inbox) == 0 {
			return
		}
		i := rapid.IntRange(0, len(n.inbox)-1).Draw(n.t, "message")
		m := n.inbox[i]
		switch rapid.IntRange(0, 9).Draw(n.t, "fate") {
		case 0:
			n.inbox = slices.Delete(n.inbox, i, i+1) // lost
			return
		case 1: // duplicated: delivered, and kept for later
		default:
			n.inbox = slices.Delete(n.inbox, i, i+1)
		}
		if !slices.Contains(n.members, m.to) {
			return // to a node that left
		}
		fx := &strategy.Effects{}
		if err := n.nodes[m.to].Receive(n.now, m.from, m.payload, fx); err != nil {
			n.t.Fatalf("%s from %s: %v", m.to, m.from, err)
		}
		n.take(m.to, fx)
	}
}

// TestAutoSplitAgreementProperty: whatever the order in which round
// messages arrive, lost, duplicated, or met by restarted nodes that
// missed rounds, and across membership changes every node sees at once
// (a leave shifts the ranks; a fresh node joins), the nodes' (K, live)
// for a key never let the live
// sub-buckets hold more than the key's rate and burst (the invariant of
// autosplit.go's Agreement), while K does change (maxK over the runs).
func TestAutoSplitAgreementProperty(t *testing.T) {
	grew := 0
	rapid.Check(t, func(rt *rapid.T) {
		nn := rapid.IntRange(2, 5).Draw(rt, "nodes")
		n := &autoNet{t: rt, nodes: map[strategy.NodeID]*Owner{},
			params: []string{"hold=0s", "split=auto", "server_quota=20", "split_window=100ms"}}
		for i := range nn {
			n.members = append(n.members, strategy.NodeID(fmt.Sprintf("n%d", i)))
		}
		for _, m := range n.members {
			n.nodes[m] = n.newNode(m, 0)
		}
		for range rapid.IntRange(50, 400).Draw(rt, "steps") {
			n.step("k")
			n.check("k")
		}
		if n.maxK > 1 {
			grew++
		}
	})
	if grew == 0 {
		t.Fatal("no run split a key: the property tested nothing")
	}
	t.Logf("%d runs split the key", grew)
}

// TestResplitCreatesNoTokens: a node's re-split (any change of (K, live),
// as prepares and commits make) keeps the tokens of each sub-bucket below
// the new K, capped at its new burst, drops the others, and a sub-bucket
// created after it starts empty: the key's tokens at this node never grow.
func TestResplitCreatesNoTokens(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		p, _ := strategy.ParseParams([]string{"hold=0s", "split=auto", "server_quota=5"})
		o, err := New(strategy.Config{Self: "n0", Members: tenNodes(), Rate: autoRate, Burst: autoBurst,
			Rand: rand.New(rand.NewPCG(1, 2)), Params: p, LatencyHint: time.Millisecond})
		if err != nil {
			rt.Fatal(err)
		}
		now := time.Second
		total := func() float64 {
			st := o.autoState("k")
			sum := 0.0
			for i := range st.k {
				if b, ok := o.tables[autoIdx(st.k, i)].Lookup(subKey("k", i)); ok {
					sum += b.Tokens(now)
				}
			}
			return sum
		}
		for step := range rapid.IntRange(1, 20).Draw(rt, "changes") {
			now += time.Duration(rapid.IntRange(0, 2000).Draw(rt, fmt.Sprintf("later_%d", step))) * time.Millisecond
			st := o.autoState("k")
			// Take some tokens from some sub-buckets (creating them).
			for i := range st.k {
				if rapid.Bool().Draw(rt, fmt.Sprintf("touch_%d_%d", step, i)) {
					b := o.bucketFor(subKey("k", i), now)
					b.AllowN(now, rapid.Int64Range(0, b.Burst()).Draw(rt, fmt.Sprintf("take_%d_%d", step, i)))
				}
			}
			before := total()
			k := rapid.IntRange(1, 10).Draw(rt, fmt.Sprintf("k_%d", step))
			live := rapid.IntRange(1, k).Draw(rt, fmt.Sprintf("live_%d", step))
			o.setAutoState(now, "k", autoKey{k: k, live: live, epoch: int64(step + 1), from: "n0", prepK: k})
			if after := total(); after > before+1e-9 {
				rt.Fatalf("re-split to (K=%d, live=%d): %.3f tokens after, %.3f before", k, live, after, before)
			}
			if k == st.k && live == st.live {
				continue // no re-split: a new sub-bucket is full, as a key's first one
			}
			for i := range k {
				if _, ok := o.tables[autoIdx(k, i)].Lookup(subKey("k", i)); !ok {
					if got := o.bucketFor(subKey("k", i), now).Tokens(now); got > 0 {
						rt.Fatalf("sub-bucket %d created after the re-split holds %.3f tokens, want 0", i, got)
					}
				}
			}
		}
	})
}

// TestSplitAutoParams: split=auto needs server_quota, places on distinct
// nodes (split_placement=independent refused), refuses overdraft and
// partition: conserve and a split_window not positive; split is auto or
// an int in [1, 64]; server_quota with a numeric split stays an error.
func TestSplitAutoParams(t *testing.T) {
	for _, c := range []struct {
		params    []string
		partition strategy.PartitionMode
		ok        bool
	}{
		{[]string{"split=auto", "server_quota=5"}, strategy.PartitionAvailable, true},
		{[]string{"split=auto", "server_quota=5", "split_placement=distinct", "split_window=100ms"}, strategy.PartitionAvailable, true},
		{[]string{"split=auto"}, strategy.PartitionAvailable, false},
		{[]string{"split=auto", "server_quota=0"}, strategy.PartitionAvailable, false},
		{[]string{"split=auto", "server_quota=5", "split_placement=independent"}, strategy.PartitionAvailable, false},
		{[]string{"split=auto", "server_quota=5", "overdraft=true"}, strategy.PartitionAvailable, false},
		{[]string{"split=auto", "server_quota=5"}, strategy.PartitionConserve, false},
		{[]string{"split=auto", "server_quota=5", "split_window=0s"}, strategy.PartitionAvailable, false},
		{[]string{"split=Auto", "server_quota=5"}, strategy.PartitionAvailable, false},
		{[]string{"split=04"}, strategy.PartitionAvailable, false},
		{[]string{"split=65"}, strategy.PartitionAvailable, false},
		{[]string{"split=4", "server_quota=5"}, strategy.PartitionAvailable, false},
		{[]string{"split=4"}, strategy.PartitionAvailable, true},
	} {
		p, err := strategy.ParseParams(c.params)
		if err != nil {
			t.Fatal(err)
		}
		o, err := New(strategy.Config{Self: "n0", Members: tenNodes(), Rate: autoRate, Burst: autoBurst, Partition: c.partition,
			Rand: rand.New(rand.NewPCG(1, 2)), Params: p, LatencyHint: time.Millisecond})
		if (err == nil) != c.ok {
			t.Errorf("%v (partition %v): error %v, want ok=%v", c.params, c.partition, err, c.ok)
		}
		if err == nil && slices.Contains(c.params, "split=auto") && (o.auto == nil || !o.distinct || o.auto.maxK != int(autoBurst)) {
			t.Errorf("%v: not set up as auto on distinct nodes with maxK = burst %d", c.params, autoBurst)
		}
	}
}
