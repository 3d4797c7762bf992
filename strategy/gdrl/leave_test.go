package gdrl_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/gdrl"
	"github.com/tokenmesh/tokenmesh/strategy/internal/remtest"
)

// leave makes node i leave gracefully: Leave, then (polling every 10 ms,
// as cluster.Node.Leave does) once Left reports true the node stops and
// the others' views drop it after the detection delay. leftAt records
// when.
func (h *harness) leave(i int, leftAt *time.Duration) {
	n := h.nodes[i]
	n.host.Leave(h.now, 0)
	var poll func()
	poll = func() {
		if !n.alive {
			return
		}
		if n.g.Left() {
			*leftAt = h.now
			h.crash(i) // stops, and views follow
			return
		}
		h.at(h.now+10*time.Millisecond, poll)
	}
	poll()
}

// leaveRun: n nodes with skewed demand on three keys (so that explicit
// shares exist and move), a faulty network, and one node that leaves
// gracefully at leaveAt while traffic goes on. Per key (and for a key
// never requested, which tests the default shares) sum C_i + in flight
// never exceeds C (B for burst) at any event; the leaver's hand-over
// completes; and once no transfer is pending, the survivors' shares sum
// to C and B exactly: the buddy did not count the leaver's shares twice
// (hand-over plus inherited record).
type leaveRun struct {
	n       int
	seed    uint64
	net     hnet
	rate    bucket.Rate
	burst   int64
	demand  [][]float64
	leaver  int
	leaveAt time.Duration
	graph   string
	// crashBuddy, if > 0: the leaver's buddy crashes this long before
	// the leave starts (before, while the views still hold it), or 2 s
	// plus this long after every view has dropped the leaver (otherwise),
	// in both cases once it is replicated (else the crash is a double
	// failure: see run); it restarts restart later if restart > 0. Not in
	// between: a leaver
	// that is gone and a buddy that crashes before it has inherited the
	// leaver's record and replicated that to its own buddy are two nodes
	// failing together (see the package documentation; after a complete
	// hand-over the record holds no share, but its duplicate filter is
	// lost, and a transfer paid to the leaver whose acknowledgement was
	// lost then stays in flight for ever).
	crashBuddy, restart time.Duration
	before              bool
	// founders: the nodes started at time 0 (0: all); node founders+k
	// joins at joins[k] with a zero default share.
	founders int
	joins    []time.Duration
	// active is how long requests come (0: 6 s); opts set the harness up
	// (fastpath_test.go).
	active time.Duration
	opts   []func(*harness)
}

func (r *leaveRun) run(fail func(string, ...any)) {
	params := []string{"graph=" + r.graph, "idle=1s"}
	var h *harness
	if r.founders > 0 && r.founders < r.n {
		h = newJoinHarness(r.n, r.founders, r.seed, r.net, r.rate, r.burst, params, fail, r.opts...)
		for k, at := range r.joins {
			i := r.founders + k
			h.at(at, func() { h.join(i) })
		}
	} else {
		h = newHarness(r.n, r.seed, r.net, r.rate, r.burst, params, fail, r.opts...)
	}
	C, _ := rateUnits(r.rate)
	B := r.burst * gdrl.UnitsPerToken
	keys := append([]string{"never"}, testKeys...)
	active := 6 * time.Second
	if r.active > 0 {
		active = r.active
	}
	for i := range r.n {
		for k, key := range testKeys {
			if r.demand[i][k] > 0 {
				h.poisson(i, key, r.demand[i][k], 1, active)
			}
		}
	}
	leftAt := time.Duration(-1)
	// crashBuddy crashes the leaver's buddy once it is replicated (its own
	// buddy acknowledged its record; polled every 10 ms, for up to 5 s),
	// restarts it restart later if restart > 0, and then runs then (if
	// not nil). A node that crashes before it is replicated has no replica
	// and loses its shares, which the package documentation counts as two
	// nodes failing together (a node whose new buddy has not yet
	// acknowledged its record): no leave can hand those over, and a
	// hand-over paid to it has no heir to settle it (found at 1,000
	// checks: a founder whose records were all lost crashed at 261 ms).
	crashBuddy := func(then func()) {
		deadline := h.now + 5*time.Second
		var try func()
		try = func() {
			b := h.index(h.nodes[r.leaver].g.Buddy())
			if b >= 0 && h.nodes[b].alive && !h.nodes[b].g.Replicated() {
				if h.now >= deadline {
					fail("the leaver's buddy %s is not replicated at %v:\n%s", h.nodes[b].id, h.now, h.describe("a"))
					return
				}
				h.at(h.now+10*time.Millisecond, try)
				return
			}
			if b >= 0 {
				h.crash(b)
				if r.restart > 0 {
					h.at(h.now+r.restart, func() { h.restart(b) })
				}
			}
			if then != nil {
				then()
			}
		}
		try()
	}
	leave := func() {
		h.leave(r.leaver, &leftAt)
		if r.crashBuddy > 0 && !r.before {
			var wait func()
			wait = func() { // until the leaver has left and every view dropped it
				if leftAt < 0 || h.now < leftAt+h.detection {
					h.at(h.now+10*time.Millisecond, wait)
					return
				}
				h.at(h.now+2*time.Second+r.crashBuddy, func() { crashBuddy(nil) })
			}
			wait()
		}
	}
	if r.crashBuddy > 0 && r.before {
		// The leave follows the crash by crashBuddy, however long the
		// crash waited for the buddy's replica.
		h.at(r.leaveAt-r.crashBuddy, func() {
			crashBuddy(func() { h.at(h.now+r.crashBuddy, leave) })
		})
	} else {
		h.at(r.leaveAt, leave)
	}
	failed := false
	h.afterEvent = func() {
		if failed {
			return
		}
		for _, key := range keys {
			held, heldB, inflight, inflightB, _ := h.audit(key)
			if held+inflight > C || heldB+inflightB > B {
				failed = true
				fail("t=%v key %s: created capacity: sum C_i %d + in flight %d > C %d, sum B_i %d + in flight %d > B %d\n%s",
					h.now, key, held, inflight, C, heldB, inflightB, B, h.describe(key))
				return
			}
		}
	}
	h.runUntil(active + 30*time.Second)
	if failed {
		return
	}
	if leftAt < 0 {
		fail("the leaver never reported Left:\n%s", h.describe("a"))
		return
	}
	deadline := h.now + 60*time.Second
	for h.anyPending(keys) && h.now < deadline && h.step() {
	}
	if h.anyPending(keys) {
		var desc []string
		for _, k := range keys {
			desc = append(desc, k+": "+h.describe(k))
		}
		fail("still transfers pending at %v:\n%s", h.now, strings.Join(desc, "\n"))
		return
	}
	var dc, db int64
	for _, n := range h.nodes {
		if n.alive {
			c, b := n.g.DefaultShare()
			dc, db = dc+c, db+b
		}
	}
	if dc != C || db != B {
		fail("survivors' default shares sum to (%d, %d), want (%d, %d)", dc, db, C, B)
	}
	// The default shares followed the membership (the leaver's went to
	// its buddy, joiners started at zero): every survivor holds its 1/N
	// split within a grain.
	live := h.aliveSet()
	for _, n := range h.nodes {
		if !n.alive {
			continue
		}
		i, _ := slices.BinarySearch(live, n.id)
		fc, fb := fair(C, B, len(live), i)
		c, b := n.g.DefaultShare()
		if abs(c-fc) > max(1, C/int64(100*len(live))) || abs(b-fb) > gdrl.UnitsPerToken {
			fail("after the leave and quiescence: %s's default share is (%d, %d), want its split (%d, %d) of %d live nodes within a grain",
				n.id, c, b, fc, fb, len(live))
		}
	}
	for _, key := range keys {
		held, heldB, _, _, _ := h.audit(key)
		if held != C || heldB != B {
			fail("key %s after the leave (left at %v) and quiescence: sum C_i = %d (C = %d), sum B_i = %d (B = %d)\n%s",
				key, leftAt, held, C, heldB, B, h.describe(key))
		}
	}
}

// TestLeaveConservesProperty: a graceful leave under loss, duplication
// and reordering hands everything over and conserves (C, B) exactly.
func TestLeaveConservesProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(2, 6).Draw(t, "nodes")
		r := &leaveRun{
			n:       n,
			seed:    rapid.Uint64().Draw(t, "seed"),
			net:     drawNet(t, 0.3),
			rate:    bucket.Rate{Tokens: int64(rapid.IntRange(1, 1000).Draw(t, "rate")), Per: time.Second},
			burst:   int64(rapid.IntRange(1, 50).Draw(t, "burst")),
			leaver:  rapid.IntRange(0, n-1).Draw(t, "leaver"),
			leaveAt: time.Duration(rapid.IntRange(500, 5000).Draw(t, "leaveAtMs")) * time.Millisecond,
			graph:   rapid.SampledFrom([]string{"ring", "full"}).Draw(t, "graph"),
		}
		r.net.maxDelay = r.net.minDelay + time.Duration(rapid.IntRange(0, 20).Draw(t, "jitterMs"))*time.Millisecond
		if n >= 3 && rapid.Bool().Draw(t, "crashBuddy") {
			r.before = rapid.Bool().Draw(t, "beforeLeave")
			r.crashBuddy = time.Duration(rapid.IntRange(1, 250).Draw(t, "crashBuddyMs")) * time.Millisecond
			if rapid.Bool().Draw(t, "restartBuddy") {
				r.restart = time.Duration(rapid.IntRange(50, 2000).Draw(t, "downMs")) * time.Millisecond
			}
		}
		// Some nodes may join later, with zero default shares, before,
		// during or after the leave. The leaver, if it is a joiner,
		// joins before it leaves, and a founder that started alone
		// leaves once its view holds a joiner (alone, it has no one to
		// hand over to). With a crash of the leaver's buddy, every join
		// is over a second before the crash: a node that crashes before
		// the buddy it chose at a view change (a joiner at its start, a
		// founder that started alone when the first joiner arrives)
		// holds its record fails together with it (see the package
		// documentation).
		r.founders = rapid.IntRange(1, n).Draw(t, "founders")
		if r.crashBuddy > 0 && r.founders < n {
			r.leaveAt = max(r.leaveAt, 1600*time.Millisecond)
		}
		for i := r.founders; i < n; i++ {
			hi := 6000 * time.Millisecond
			if i == r.leaver {
				hi = r.leaveAt - 50*time.Millisecond
			}
			if r.founders == 1 && r.leaver == 0 && i == 1 {
				// A founder alone in its view that leaves has no one
				// to hand over to: one joiner is in its view first.
				hi = r.leaveAt - 400*time.Millisecond
			}
			if r.crashBuddy > 0 {
				hi = min(hi, r.leaveAt-r.crashBuddy-time.Second)
			}
			r.joins = append(r.joins, time.Duration(rapid.IntRange(50, int(hi/time.Millisecond)).Draw(t, fmt.Sprintf("joinMs%d", i)))*time.Millisecond)
		}
		for i := range n {
			row := make([]float64, len(testKeys))
			for k := range row {
				row[k] = float64(rapid.IntRange(0, 30).Draw(t, fmt.Sprintf("demand%d%d", i, k)))
			}
			r.demand = append(r.demand, row)
		}
		r.run(t.Fatalf)
	})
}

// TestLeaveLossy: a fixed lossy scenario (30% loss, duplicates,
// reordering) where the leaver holds skewed shares of every key.
func TestLeaveLossy(t *testing.T) {
	for seed := uint64(1); seed <= 8; seed++ {
		r := &leaveRun{n: 4, seed: seed, net: hnet{loss: 0.3, dup: 0.1, reorder: 0.1, minDelay: time.Millisecond, maxDelay: 5 * time.Millisecond},
			rate: bucket.Rate{Tokens: 100, Per: time.Second}, burst: 20, leaver: int(seed % 4), leaveAt: 4 * time.Second, graph: "ring",
			demand: [][]float64{{40, 0, 5}, {0, 30, 5}, {0, 0, 5}, {20, 20, 5}}}
		r.run(t.Fatalf)
	}
}

// TestLeaveHandsOverAtOnce: without loss, the leaver hands everything
// over within a few round trips, before anyone's view changes: it holds
// nothing, and the others hold (or have in flight) all of (C, B).
func TestLeaveHandsOverAtOnce(t *testing.T) {
	h := newHarness(3, 1, hnet{minDelay: time.Millisecond, maxDelay: time.Millisecond}, bucket.Rate{Tokens: 30, Per: time.Second}, 9,
		[]string{"idle=1s"}, t.Fatalf)
	h.poisson(0, "a", 30, 1, 3*time.Second)
	h.runUntil(3 * time.Second)
	g := h.nodes[0].g
	if len(g.Keys()) == 0 {
		t.Fatal("no explicit share at n0 after its traffic")
	}
	var leftAt time.Duration = -1
	h.leave(0, &leftAt)
	h.runUntil(3*time.Second + 50*time.Millisecond)
	if leftAt < 0 {
		t.Fatalf("not left after 50 ms:\n%s", h.describe("a"))
	}
	if c, b := g.DefaultShare(); c != 0 || b != 0 || g.CapacityShare("a") > 0 || g.BurstShare("a") > 0 {
		t.Fatalf("leaver still holds default (%d, %d), a (%d, %d)", c, b, g.CapacityShare("a"), g.BurstShare("a"))
	}
	if !g.Leaving() {
		t.Fatal("Leaving() is false after Leave")
	}
	for _, key := range []string{"a", "never"} {
		held, heldB, inflight, inflightB, _ := h.audit(key) // n0 is stopped: the survivors only
		if held+inflight != 30*gdrl.UnitsPerToken || heldB+inflightB != 9*gdrl.UnitsPerToken {
			t.Fatalf("key %s: survivors hold (%d + %d in flight, %d + %d), want (%d, %d)\n%s", key, held, inflight, heldB, inflightB,
				30*gdrl.UnitsPerToken, 9*gdrl.UnitsPerToken, h.describe(key))
		}
	}
}

// TestLeaveAlone: a node with no peer has nothing to hand over.
func TestLeaveAlone(t *testing.T) {
	g, err := gdrl.New(remtest.Config(1, 5, nil))
	if err != nil {
		t.Fatal(err)
	}
	var fx strategy.Effects
	g.Start(0, &fx)
	if g.Left() {
		t.Fatal("Left before Leave")
	}
	g.Leave(0, &fx)
	if !g.Left() {
		t.Fatal("alone: not Left after Leave")
	}
}

// TestRemainingExact: the node's bucket (C_i, B_i) in request tokens;
// alone it holds the whole (r, b).
func TestRemainingExact(t *testing.T) {
	g, err := gdrl.New(remtest.Config(1, 5, nil))
	if err != nil {
		t.Fatal(err)
	}
	remtest.Exact(t, g, remtest.Script)
	// One of three founding members holds 2 of a burst of 5 (the first
	// one in NodeID order gets the remainder) at 1/3 token/s.
	g3, err := gdrl.New(remtest.Config(1, 5, []strategy.NodeID{"n0", "n1", "n2"}))
	if err != nil {
		t.Fatal(err)
	}
	remtest.Exact(t, g3, []remtest.Step{
		{At: 0, WantRemaining: 2},
		{At: 0, Tokens: 2, WantAllowed: true, WantRemaining: 0},
		{At: 2999 * time.Millisecond, WantRemaining: 0},
		{At: 3100 * time.Millisecond, WantRemaining: 1},
	})
}

func TestRemainingChangesNothing(t *testing.T) {
	remtest.Pure(t, 7, func() strategy.Strategy {
		g, err := gdrl.New(remtest.Config(10, 6, []strategy.NodeID{"n0", "n1", "n2"}, "idle=1s"))
		if err != nil {
			t.Fatal(err)
		}
		return g
	})
}

// TestCapacityShares: explicit keys only, C_i/C each.
func TestCapacityShares(t *testing.T) {
	g, err := gdrl.New(remtest.Config(3, 6, []strategy.NodeID{"n0", "n1", "n2"}))
	if err != nil {
		t.Fatal(err)
	}
	var fx strategy.Effects
	g.Start(0, &fx)
	if sum, keys := g.CapacityShares(); sum != 0 || keys != 0 {
		t.Fatalf("no keys: %v, %d", sum, keys)
	}
	g.Request(0, strategy.Request{ID: 1, Key: "a", Tokens: 1}, &fx)
	if sum, keys := g.CapacityShares(); sum != 1.0/3 || keys != 1 {
		t.Fatalf("one key at 1/3: %v, %d", sum, keys)
	}
}
