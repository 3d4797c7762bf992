package gcounter

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/internal/peerbound"
	"github.com/tokenmesh/tokenmesh/strategy/internal/strattest"
)

// foldWriter is one node instance's history for a key: its admissions in
// order, each (period, tokens), periods never decreasing.
type foldWriter struct {
	node strategy.NodeID
	inc  uint32
	ops  [][2]int64
}

// snapshot is the writer's segments after its first s admissions.
func (w foldWriter) snapshot(s int) []entry {
	var out []entry
	for _, op := range w.ops[:s] {
		name := strategy.NodeID(string(w.node) + segmentSep + strconv.FormatInt(op[0], 10))
		if n := len(out); n > 0 && out[n-1].node == name {
			out[n-1].consumed += op[1]
			continue
		}
		out = append(out, entry{node: name, incarnation: w.inc, consumed: op[1]})
	}
	return out
}

// final is how many of the writer's admissions fall in periods <= e.
func (w foldWriter) final(e int64) int {
	return len(slices.DeleteFunc(slices.Clone(w.ops), func(op [2]int64) bool { return op[0] > e }))
}

func drawWriters(t *rapid.T) []foldWriter {
	ws := []foldWriter{{node: "a", inc: 1}, {node: "b", inc: 2}, {node: "b", inc: 9}, {node: "c"}}
	for i := range ws {
		n := rapid.IntRange(0, 8).Draw(t, fmt.Sprintf("ops%d", i))
		q := int64(1)
		for range n {
			q += rapid.Int64Range(0, 1).Draw(t, "step")
			ws[i].ops = append(ws[i].ops, [2]int64{q, rapid.Int64Range(1, 3).Draw(t, "tokens")})
		}
	}
	return ws
}

// foldReplica is one copy of the key: it knows each writer's first known[i]
// admissions (a prefix, as copies do: see fold.go), and is folded to the
// epoch drawn, or, when exact, to the largest epoch <= it at which it
// knows every writer's final count of the folded periods (the rule's
// precondition).
func foldReplica(t *rapid.T, ws []foldWriter, label string, exact bool) (*bucketState, []int) {
	b := &bucketState{}
	known := make([]int, len(ws))
	for i, w := range ws {
		known[i] = rapid.IntRange(0, len(w.ops)).Draw(t, fmt.Sprintf("%s.known%d", label, i))
		b.counter = append(b.counter, w.snapshot(known[i])...)
	}
	slices.SortFunc(b.counter, cmpSlot)
	for _, e := range b.counter {
		b.consumed += e.consumed
	}
	if !rapid.Bool().Draw(t, label+".folds") {
		return b, known
	}
	e := rapid.Int64Range(0, 8).Draw(t, label+".epoch")
	for exact && e >= 0 && slices.ContainsFunc(ws, func(w foldWriter) bool {
		return known[slices.IndexFunc(ws, func(x foldWriter) bool { return x.node == w.node && x.inc == w.inc })] < w.final(e)
	}) {
		e--
	}
	if e >= 0 {
		before := b.consumed
		b.foldTo(e)
		if sum(b.counter) != before {
			t.Fatalf("%s: folding to %d changed the count %d -> %d", label, e, before, sum(b.counter))
		}
	}
	return b, known
}

func sum(c []entry) int64 {
	var n int64
	for _, e := range c {
		n += e.consumed
	}
	return n
}

// mergeFolded is what Receive does with a bucket: align the folds, merge.
func mergeFolded(a, b *bucketState) *bucketState {
	x, y := a.clone(), b.clone()
	alignFold(x, y)
	x.merge(y)
	return x
}

// Folding in the mix, some copies folded (to different epochs) and some
// not: the merge is commutative, associative and idempotent, every order
// of merging the copies gives the same state, and its count is exactly the
// tokens of the writers' latest known prefixes: none counted twice, none
// lost (fold.go, "Why no token is counted twice or lost"). A fold never
// changes a copy's count.
func TestFoldMergeLaws(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		reps, want := foldedReplicas(t, true)
		a, b, c := reps[0], reps[1], reps[2]
		if !mergeFolded(a, b).equal(mergeFolded(b, a)) {
			t.Fatal("not commutative")
		}
		if !mergeFolded(a, a).equal(a) {
			t.Fatal("not idempotent")
		}
		first := mergeFolded(mergeFolded(a, b), c)
		if !first.equal(mergeFolded(a, mergeFolded(b, c))) {
			t.Fatal("not associative")
		}
		for _, order := range [][3]int{{0, 2, 1}, {1, 2, 0}, {2, 1, 0}, {2, 0, 1}} {
			got := mergeFolded(mergeFolded(reps[order[0]], reps[order[1]]), reps[order[2]])
			if !got.equal(first) {
				t.Fatalf("order %v: %v, want %v", order, got.counter, first.counter)
			}
		}
		if first.consumed != want || sum(first.counter) != want {
			t.Fatalf("merged count %d (slots %d), want %d: slots %v", first.consumed, sum(first.counter), want, first.counter)
		}
	})
}

// foldedReplicas draws writers and three copies of their bucket, folded
// (foldReplica: with or without the precondition, exact), and returns them
// with the tokens of the writers' latest prefixes the copies know of.
func foldedReplicas(t *rapid.T, exact bool) (reps []*bucketState, want int64) {
	ws := drawWriters(t)
	latest := make([]int, len(ws))
	for r := range 3 {
		b, known := foldReplica(t, ws, fmt.Sprintf("r%d", r), exact)
		reps = append(reps, b)
		for i := range latest {
			latest[i] = max(latest[i], known[i])
		}
	}
	for i, w := range ws {
		want += sum(w.snapshot(latest[i]))
	}
	return reps, want
}

// Without the precondition (copies folded to any epoch, knowing stale
// counts of what they fold), a merge still never counts a token twice: its
// count is at most the tokens of the writers' latest known prefixes (it
// may lose the tokens a folder had not heard of).
func TestFoldNeverCountsTwice(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		reps, want := foldedReplicas(t, false)
		got := mergeFolded(mergeFolded(reps[0], reps[1]), reps[2])
		if got.consumed > want {
			t.Fatalf("merged count %d above the %d tokens admitted", got.consumed, want)
		}
	})
}

// churnCluster drives gcounter nodes by hand: every message is delivered
// at once, in the order sent.
type churnCluster struct {
	t     *testing.T
	nodes map[strategy.NodeID]*GCounter
	seed  uint64
	now   time.Duration
}

func (c *churnCluster) members() []strategy.NodeID {
	return slices.Sorted(func(yield func(strategy.NodeID) bool) {
		for id := range c.nodes {
			if !yield(id) {
				return
			}
		}
	})
}

// start adds a node instance (a new incarnation: its own seed) and tells
// every node the new members.
func (c *churnCluster) start(id strategy.NodeID, params ...string) {
	c.seed++
	cfg := strattest.Config(c.t, string(id), nil, testRate, testCapacity, params...)
	cfg.Members = append(c.members(), id)
	cfg.Rand = rand.New(rand.NewPCG(c.seed, c.seed))
	g, err := New(cfg)
	if err != nil {
		c.t.Fatal(err)
	}
	c.nodes[id] = g
	var fx strategy.Effects
	g.Start(c.now, &fx)
	c.deliver(id, &fx)
	c.setMembers()
}

func (c *churnCluster) stop(id strategy.NodeID) {
	delete(c.nodes, id)
	c.setMembers()
}

func (c *churnCluster) setMembers() {
	ms := c.members()
	for _, id := range ms {
		var fx strategy.Effects
		c.nodes[id].SetMembers(c.now, ms, &fx)
		c.nodes[id].SetExpected(c.now, ms, &fx)
		c.deliver(id, &fx)
	}
}

func (c *churnCluster) deliver(from strategy.NodeID, fx *strategy.Effects) {
	for _, m := range fx.Messages {
		if to := c.nodes[m.To]; to != nil {
			var out strategy.Effects
			if err := to.Receive(c.now, from, m.Payload, &out); err != nil {
				c.t.Fatal(err)
			}
			c.deliver(m.To, &out)
		}
	}
}

// run advances the time by d in gossip steps, each node asked for key k
// once per step, and returns the tokens admitted.
func (c *churnCluster) run(d time.Duration, keys []string) int64 {
	var admitted int64
	for end := c.now + d; c.now < end; c.now += 100 * time.Millisecond {
		for i, id := range c.members() {
			var fx strategy.Effects
			k := keys[(i+int(c.now/time.Second))%len(keys)]
			if dec, _ := c.nodes[id].Request(c.now, strategy.Request{Key: k, Tokens: 1, Arrival: c.now}, &fx); dec.Allowed {
				admitted++
			}
			fx.Reset()
			c.nodes[id].Tick(c.now, &fx)
			c.deliver(id, &fx)
		}
	}
	return admitted
}

// quiet lets the cluster gossip with no requests until every delta state
// is sent.
func (c *churnCluster) quiet(d time.Duration) {
	for end := c.now + d; c.now < end; c.now += 100 * time.Millisecond {
		for _, id := range c.members() {
			var fx strategy.Effects
			c.nodes[id].Tick(c.now, &fx)
			c.deliver(id, &fx)
		}
	}
}

// Under churn (every 90 s of a 90-minute run one of 4 nodes is replaced by
// a new instance, every other time under a new name), a key's slots stay
// bounded with fold=1m: at most a base plus 4 periods' segments per live
// node, where without fold they grow with every instance that ever
// admitted. Every node's count stays exactly the tokens admitted by the
// whole cluster (each instance is stopped after a quiet period, so that
// none dies with unsent deltas): folding loses none and counts none twice.
func TestFoldBounded(t *testing.T) {
	keys := []string{"k0", "k1", "k2"}
	for _, fold := range []string{"0", "1m"} {
		c := &churnCluster{t: t, nodes: map[strategy.NodeID]*GCounter{}}
		params := []string{"catch_up=true", "fold=" + fold, "idle=0"}
		for i := range 4 {
			c.start(strategy.NodeID(fmt.Sprintf("n%d", i)), params...)
		}
		var admitted int64
		maxSlots := 0
		for step := range 60 {
			admitted += c.run(80*time.Second, keys)
			c.quiet(5 * time.Second)
			old := c.members()[step%4]
			c.stop(old)
			id := old
			if step%2 == 1 {
				id = strategy.NodeID(fmt.Sprintf("m%d", step))
			}
			c.start(id, params...)
			c.quiet(5 * time.Second)
			for _, g := range c.nodes {
				var total int64
				for _, k := range keys {
					b := g.state[k]
					maxSlots = max(maxSlots, len(b.counter))
					total += b.consumed
				}
				if total != admitted {
					t.Fatalf("fold=%s step %d: %s counts %d tokens, the cluster admitted %d", fold, step, g.self, total, admitted)
				}
			}
		}
		t.Logf("fold=%s: %d tokens admitted over %v, at most %d slots per key", fold, admitted, c.now, maxSlots)
		if fold == "0" && maxSlots < 60 {
			t.Errorf("without fold, %d slots per key after 60 instances: the churn did not reach the counter", maxSlots)
		}
		if fold != "0" && maxSlots > 1+4*5 {
			t.Errorf("fold=%s: %d slots per key, above a base and 4 periods of 5 nodes", fold, maxSlots)
		}
	}
}

// A folded bucket (a base slot and segments: ordinary slots on the wire)
// is read without error by a node with fold off, which counts every token
// of it, as a node with fold does. (A build from before fold reads it the
// same way while the base is within its bound for one slot: see fold.go,
// "Versions"; here every slot is.)
func TestFoldReadWithoutFold(t *testing.T) {
	payload := foldedPayload(t)
	now := 10 * time.Minute
	for _, params := range [][]string{{"fold=0"}, {"fold=1m"}} {
		g := newNode(t, "a", []string{"a", "b"}, params...)
		var fx strategy.Effects
		if err := g.Receive(now, "b", payload, &fx); err != nil {
			t.Fatalf("%v: %v", params, err)
		}
		for _, k := range []string{"k0", "k1"} {
			bound := peerbound.Tokens(testRate, testCapacity, 0, now)
			for _, e := range g.state[k].counter {
				if e.consumed > bound {
					t.Fatalf("slot %q: %d tokens, above the bound %d of a build from before fold", e.node, e.consumed, bound)
				}
			}
			if c := g.state[k].consumed; c != 8 {
				t.Errorf("%v: key %s counts %d tokens, want 8 (2 in each of 4 periods)", params, k, c)
			}
			if _, i := g.state[k].baseEpoch(); i != 0 {
				t.Errorf("%v: key %s has no base slot: %v", params, k, g.state[k].counter)
			}
		}
	}
}
