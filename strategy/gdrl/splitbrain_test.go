package gdrl_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/tokenmesh/tokenmesh/bucket"
)

// splitRun is a randomized netsplit run: n nodes with demand on random
// keys, over a lossy network, with failure detection that is asymmetric
// (every ordered pair of nodes notices a change after its own delay, so
// the sides' views disagree and change one node at a time), netsplits into
// two or three sides, heals, crashes and restarts (also during a split),
// then a final heal. During a split each side may hold up to C (see the
// package documentation, "Split brain"); once the heal has settled (every
// view is whole again and settleAfter has passed) the shares plus the
// capacity in flight never exceed C + 1 unit at any event, and once no
// transfer is pending they sum to C within one unit.
type splitRun struct {
	n        int
	seed     uint64
	net      hnet
	detectLo time.Duration // pairwise detection delays are drawn in [detectLo, detectHi]
	detectHi time.Duration
	demand   [][]float64 // [node][key] requests per second
	episodes []episode
	params   []string

	worstDuring  float64 // the largest (sum C_i + in flight) / C seen during a split or before the heal settled
	worstSplit   float64 // the same while some node is cut off (before the last heal)
	worstSettled int64   // the largest sum C_i + in flight - C after the heal settled
	settledAfter time.Duration
	crashed      bool  // a node crashed during a split
	lost         int64 // C - sum C_i at the end, when a crash lost shares
	debug        func(h *harness)
	trace        func(h *harness)
	// rate and burst are the rule's (zero: 10/s, 20); opts set the
	// harness up (fastpath_test.go).
	rate  bucket.Rate
	burst int64
	opts  []func(*harness)
}

type episode struct {
	at, length time.Duration
	groups     []int       // per node: its side
	crashes    []crashPlan // during the split (at: offset from its start)
}

const (
	settleAfter = 3 * time.Second
	crashGap    = 5 * time.Second
)

func (r *splitRun) run(fail func(string, ...any)) {
	rate, burst := bucket.Rate{Tokens: 10, Per: time.Second}, int64(20)
	if r.burst > 0 {
		rate, burst = r.rate, r.burst
	}
	h := newHarness(r.n, r.seed, r.net, rate, burst, r.params, fail, r.opts...)
	dr := rand.New(rand.NewPCG(r.seed, 0x646574))
	h.pairDetect = func(i, j int) time.Duration {
		return r.detectLo + time.Duration(dr.Int64N(int64(r.detectHi-r.detectLo)+1))
	}
	C, _ := rateUnits(rate)
	keys := append(slices.Clone(testKeys), "never")
	end := time.Duration(0)
	for _, e := range r.episodes {
		end = max(end, e.at+e.length)
		for _, c := range e.crashes {
			end = max(end, e.at+c.at+c.restart)
		}
	}
	for i := range r.n {
		for k, key := range testKeys {
			if r.demand[i][k] > 0 {
				h.poisson(i, key, r.demand[i][k], 1, end+5*time.Second)
			}
		}
	}
	lastCrash := time.Duration(-1)
	for _, e := range r.episodes {
		h.at(e.at, func() { h.split(e.groups) })
		for _, c := range e.crashes {
			h.at(e.at+c.at, func() {
				alive := 0
				for _, n := range h.nodes {
					if n.alive {
						alive++
					}
				}
				// Crashes at least crashGap apart: two nodes that fail
				// together (a node and its buddy) lose their shares.
				if alive <= 2 || !h.nodes[c.node].alive || (lastCrash >= 0 && h.now-lastCrash < crashGap) {
					return
				}
				lastCrash = h.now
				r.crashed = true
				h.crash(c.node)
				if c.restart > 0 {
					h.at(h.now+c.restart, func() { h.restart(c.node) })
				}
			})
		}
		h.at(e.at+e.length, func() { h.heal() })
	}
	settled := time.Duration(-1) // when the last heal settled
	failed := false
	h.afterEvent = func() {
		if r.trace != nil {
			r.trace(h)
		}
		if failed {
			return
		}
		split := false
		for _, n := range h.nodes {
			split = split || n.group != 0
		}
		for _, key := range keys {
			held, _, inflight, _, _ := h.audit(key)
			if split {
				r.worstSplit = max(r.worstSplit, float64(held+inflight)/float64(C))
			}
			if split || settled < 0 || h.now < settled {
				r.worstDuring = max(r.worstDuring, float64(held+inflight)/float64(C))
				continue
			}
			if over := held + inflight - C; over > r.worstSettled {
				r.worstSettled = over
			}
			if held+inflight > C+1 {
				failed = true
				fail("seed %d: t=%v (heal settled at %v) key %s: sum C_i %d + in flight %d > C %d + 1\n%s",
					r.seed, h.now, settled, key, held, inflight, C, h.describe(key))
				return
			}
		}
	}
	// The heal has settled once every view is whole and settleAfter passed.
	h.runUntil(end)
	for !h.viewsSettled() && h.step() {
	}
	settled = h.now + settleAfter
	r.settledAfter = settled - end
	h.runUntil(end + 20*time.Second)
	deadline := h.now + 60*time.Second
	for h.anyPending(keys) && h.now < deadline && h.step() {
	}
	if r.debug != nil {
		r.debug(h)
	}
	if failed {
		return
	}
	if h.anyPending(keys) && !r.crashed {
		// (With a crash during the split, a transfer to an incarnation
		// whose record nobody holds, its buddy having crashed on the
		// other side of the cut, stays in flight: a loss, see run's end.)
		fail("seed %d: still transfers pending at %v:\n%s", r.seed, h.now, h.describe("a"))
		return
	}
	for _, key := range keys {
		held, _, _, _, _ := h.audit(key)
		if r.crashed && held < C {
			// A node that crashes during a split loses what it changed
			// since the split if no buddy on its side holds its record
			// (alone on its side, or its new buddy had not acknowledged):
			// two failures at once (the cut and the crash), a loss, never
			// a creation (see the package documentation, "Limits").
			r.lost = max(r.lost, C-held)
			continue
		}
		if abs(held-C) > 1 {
			fail("seed %d: after the heal and quiescence at %v: key %s: sum C_i - C = %d (C = %d)\n%s",
				r.seed, h.now, key, held-C, C, h.describe(key))
			return
		}
	}
}

// drawer draws a run's parameters: from rapid (shrinkable) or from a
// seeded generator (a fixed sample).
type drawer interface {
	intRange(lo, hi int, label string) int
}

type rapidDrawer struct{ t *rapid.T }

func (d rapidDrawer) intRange(lo, hi int, label string) int {
	return rapid.IntRange(lo, hi).Draw(d.t, label)
}

type randDrawer struct{ r *rand.Rand }

func (d randDrawer) intRange(lo, hi int, _ string) int { return lo + d.r.IntN(hi-lo+1) }

// drawSplitRun draws a run of 1 to maxEpisodes netsplits (2 or 3 sides,
// each with up to two crashes, every crashed node restarting), the next
// one starting up to 8 s after the previous heal (possibly before it has
// settled).
func drawSplitRun(d drawer, seed uint64, maxEpisodes int) *splitRun {
	pick := func(xs []float64, label string) float64 { return xs[d.intRange(0, len(xs)-1, label)] }
	n := d.intRange(2, 6, "nodes")
	r := &splitRun{n: n, seed: seed, params: []string{"idle=2s"}}
	r.net = hnet{
		loss:     pick([]float64{0, 0.05, 0.2}, "loss"),
		dup:      pick([]float64{0, 0.1}, "dup"),
		reorder:  pick([]float64{0, 0.1}, "reorder"),
		minDelay: time.Millisecond,
	}
	r.net.maxDelay = r.net.minDelay + time.Duration(d.intRange(0, 20, "jitterMs"))*time.Millisecond
	r.detectLo = time.Duration(d.intRange(50, 1000, "detectLoMs")) * time.Millisecond
	r.detectHi = r.detectLo + time.Duration(d.intRange(0, 3000, "detectSpreadMs"))*time.Millisecond
	for i := range n {
		row := make([]float64, len(testKeys))
		for k := range row {
			row[k] = pick([]float64{0, 0, 2, 10, 30}, fmt.Sprintf("demand%d%d", i, k))
		}
		r.demand = append(r.demand, row)
	}
	at := time.Duration(d.intRange(500, 4000, "firstMs")) * time.Millisecond
	for e := d.intRange(1, maxEpisodes, "episodes"); e > 0; e-- {
		ep := episode{at: at, length: time.Duration(d.intRange(200, 12000, "lengthMs")) * time.Millisecond}
		sides := d.intRange(2, 3, "sides")
		for i := range n {
			ep.groups = append(ep.groups, d.intRange(0, sides-1, fmt.Sprintf("side%d", i)))
		}
		for c := d.intRange(0, 2, "crashes"); c > 0; c-- {
			plan := crashPlan{at: time.Duration(d.intRange(0, int(ep.length/time.Millisecond), "crashMs")) * time.Millisecond,
				node: d.intRange(0, n-1, "victim")}
			// Crashed nodes come back (a new incarnation), after the
			// failure detector noticed: an incarnation inherited on two
			// sides of a split is reconciled once it is known dead (see
			// the package documentation, "Split brain").
			plan.restart = r.detectHi + 100*time.Millisecond + time.Duration(d.intRange(0, 3000, "downMs"))*time.Millisecond
			ep.crashes = append(ep.crashes, plan)
		}
		r.episodes = append(r.episodes, ep)
		at += ep.length + time.Duration(d.intRange(0, 8000, "gapMs"))*time.Millisecond
	}
	return r
}

// TestSplitBrainProperty: whatever the netsplit (two or three sides),
// crashes and restarts during it, and however asymmetric the failure
// detection, once the heal has settled the cluster never holds more than
// C + 1 unit, and once the network is quiet it holds C within one unit (or
// less, when a crash during the split lost shares: see run). Before the
// split-brain rule (fences named by the inheritance, a fenced node dropping
// the tombstones its heir took over, heirs of a dead incarnation fencing
// into the latest one) 48 of 300 such runs (a fixed sample) held more than
// C + 1 after the heal settled.
func TestSplitBrainProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		drawSplitRun(rapidDrawer{t}, rapid.Uint64().Draw(t, "seed"), 1).run(t.Fatalf)
	})
}

// Under partition: conserve no node inherits a failed member while it is
// expected (here: for the whole run, as with a long reconnect_timeout; a
// restarted member's new incarnation releases its old record), so the
// shares plus the capacity in flight never exceed C + 1 unit while the
// network is cut, where available lets each side hold up to C; and the heal
// property of TestSplitBrainProperty holds as well. The bound is checked in
// runs without a crash: a node that crashes after its record was
// replicated to two buddies (one per side of an earlier cut) and restarts
// says hello to both, both inherit, and the fences reconcile them a few
// retransmit intervals later (as under available: see "Limits"); the heal
// property is checked in every run.
func TestConserveSplitNeverAboveC(t *testing.T) {
	worstAvailable := 0.0
	rapid.Check(t, func(t *rapid.T) {
		seed := rapid.Uint64().Draw(t, "seed")
		r := drawSplitRun(rapidDrawer{t}, seed, 2)
		avail := *r
		r.params = append(r.params, "partition=conserve")
		r.run(t.Fatalf)
		C, _ := rateUnits(bucket.Rate{Tokens: 10, Per: time.Second})
		if !r.crashed && r.worstSplit > 1+1/float64(C) {
			t.Fatalf("seed %d: under conserve the shares plus in flight reached %.4f C during a split", seed, r.worstSplit)
		}
		avail.run(t.Fatalf)
		worstAvailable = max(worstAvailable, avail.worstSplit)
	})
	if worstAvailable <= 1.01 {
		t.Errorf("available never held more than %.3f C during a split: the test does not tell the modes apart", worstAvailable)
	}
}

// TestRepeatedSplits runs a fixed sample of 100 runs of up to three
// netsplits one after the other, the next often starting before the
// previous heal has settled, against the property of
// TestSplitBrainProperty. Before the split-brain rule, 24 of these 100 runs
// broke it (23 held more than C + 1 after the last heal settled); and 48
// of 300 runs of one split each.
func TestRepeatedSplits(t *testing.T) {
	if testing.Short() {
		t.Skip("100 runs of repeated netsplits")
	}
	for seed := uint64(1); seed <= 100; seed++ {
		drawSplitRun(randDrawer{rand.New(rand.NewPCG(seed, 0x73706c6974))}, seed, 3).run(t.Errorf)
	}
}

// The measured bug, in its simplest form: three nodes, n0 | n1,n2. n0 (n2's
// buddy) inherits n2's share at the split; n2 chooses n1 as its new buddy,
// crashes and restarts, so n1 inherits n2's later record as well. At the
// heal n2's old incarnation is dead (its new incarnation answers n0's
// fence), and before the split-brain rule n2's share stayed counted by both
// heirs: sum C_i = 4/3 C for good. Now n0, whose record of n2 is the
// earlier one, fences into n1, and the cluster holds C again.
func TestSplitBrainCrashInheritedTwice(t *testing.T) {
	rate := bucket.Rate{Tokens: 9, Per: time.Second}
	h := newHarness(3, 1, hnet{minDelay: time.Millisecond, maxDelay: 3 * time.Millisecond}, rate, 9, []string{"idle=2s"}, t.Fatalf)
	C, _ := rateUnits(rate)
	for i := range 3 {
		h.poisson(i, "a", 5, 1, 30*time.Second)
	}
	h.at(time.Second, func() { h.partition(0) })
	h.at(3*time.Second, func() {
		if b := h.nodes[2].g.Buddy(); b != "n1" {
			t.Fatalf("n2's buddy during the split is %s, want n1 (the scenario needs it)", b)
		}
		h.crash(2)
	})
	h.at(5*time.Second, func() { h.restart(2) })
	h.at(10*time.Second, func() { h.heal() })
	h.runUntil(10*time.Second + h.detection + settleAfter)
	h.afterEvent = func() {
		for _, key := range []string{"a", "never"} {
			if held, _, inflight, _, _ := h.audit(key); held+inflight > C+1 {
				t.Fatalf("at %v, after the heal settled: key %s: sum C_i %d + in flight %d > C %d + 1\n%s", h.now, key, held, inflight, C, h.describe(key))
			}
		}
	}
	h.runUntil(40 * time.Second)
	for deadline := h.now + 30*time.Second; h.anyPending([]string{"a"}) && h.now < deadline && h.step(); {
	}
	for _, key := range []string{"a", "never"} {
		if held, _, _, _, _ := h.audit(key); abs(held-C) > 1 {
			t.Errorf("key %s at %v: sum C_i = %d, want C = %d\n%s", key, h.now, held, C, h.describe(key))
		}
	}
}

// listDrawer replays a recorded run's draws (from a rapid failure's log).
type listDrawer struct {
	draws []int
	next  *int
}

func (d listDrawer) intRange(lo, hi int, label string) int {
	x := d.draws[*d.next]
	*d.next++
	if x < lo || x > hi {
		panic(fmt.Sprintf("recorded draw %s = %d outside [%d, %d]", label, x, lo, hi))
	}
	return x
}

// replaySplitRun replays a run of at most 2 netsplits drawn from draws (a
// rapid failure's log) with the harness seed seed, under both partition
// modes, and fails as TestConserveSplitNeverAboveC does.
func replaySplitRun(t *testing.T, draws []int, seed uint64) {
	t.Helper()
	for _, mode := range []string{"available", "conserve"} {
		next := 0
		r := drawSplitRun(listDrawer{draws, &next}, seed, 2)
		if next != len(draws) {
			t.Fatalf("the run drew %d of the %d recorded values", next, len(draws))
		}
		r.params = append(r.params, "partition="+mode)
		r.run(t.Fatalf)
		t.Logf("%s: worst after the heal settled C + %d units, lost %d", mode, r.worstSettled, r.lost)
	}
}

// A run rapid found (TestConserveSplitNeverAboveC, seed 12041575005551151748;
// it failed in the run under `partition: available` that the test makes
// alongside): 5 nodes, n0 (n4's buddy) inherits n4 across a first split
// while its own transfer T to n4 is in flight, and n0's record at that
// version (T still in its outbox, a tombstone of n4 that has not credited
// it) goes to n2 across a second split. n0 then settles T itself as n4's
// heir, and n2 settles it again with its copy of that tombstone. n0's
// credit came after the version n2 inherited, so n2's fence did not take
// it back: sum C_i stayed at C + T (C + 373,894 units) for good. Now the
// fence names what the heir's copies of the fenced node's tombstones
// credited, and the fenced node gives up what its own tombstones (also
// those of incarnations that answered alive since) credited of those
// after that version.
func TestSplitBrainTransferSettledByTombstoneCopy(t *testing.T) {
	draws := []int{5, 1, 0, 1, 11, 129, 43, 0, 1, 2, 2, 1, 2, 0, 1, 4, 0, 0, 2, 2, 3, 3, 2953, 2, 200, 3, 1, 0, 1, 0, 2, 1, 45, 3, 274, 1, 221, 3, 2, 2, 0, 1, 2, 2, 221, 1, 2392, 221, 3, 1833, 27}
	replaySplitRun(t, draws, 0)
}

// A second run rapid found (TestConserveSplitNeverAboveC), under
// `partition: conserve`: 6 nodes, n5's buddy n0 is across a first split,
// so n5 replicates to n2 from then on, while n0 (which does not inherit an
// expected ward) kept n5's record as it was then. After the heal, n5 gave
// its share of key c away; a second split, n5 crashes and restarts on n0's
// side, and n0 inherited its stale record at the hello: one default share
// (C/6) created for good, n2 holding n5's real record without inheriting
// it. Now a node says hello to a former buddy back in its view, and a node
// drops the record it holds of a ward whose hello names another buddy.
func TestConserveStaleRecordOfFormerBuddy(t *testing.T) {
	draws := []int{6, 0, 0, 0, 0, 50, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 500, 2, 200, 2, 0, 0, 1, 0, 0, 1, 2, 0, 3, 0, 0, 0, 0, 6162, 348, 2, 1, 0, 0, 0, 1, 1, 1, 8, 5, 0, 1}
	replaySplitRun(t, draws, 0)
}

// A third run rapid found (TestConserveSplitNeverAboveC, under
// `partition: conserve`): 5 nodes, n2 replicates to n0 once n3 (its
// buddy) is across a first split, crashes, and restarts across a second
// split from n0, beside n3. n3 inherits the record it had of n2 from
// before the first split at n2's hello, but n0, which held the later one,
// was not in n2's view at the restart and got no hello when it came back
// into view: nothing inherited the later record, n3's tombstone found no
// later one to fence into, and what n2 gave away after the earlier record
// stayed counted twice. Now a node says hello to every member that comes
// into its view without having acknowledged it.
func TestConserveHelloToMemberBackInView(t *testing.T) {
	draws := []int{5, 0, 0, 0, 0, 50, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3, 1462, 2, 200, 3, 0, 0, 0, 1, 1, 1, 126, 2, 27, 72, 201, 2, 1, 0, 0, 0, 1, 1, 7, 1, 7, 2}
	replaySplitRun(t, draws, 7)
}

// Runs rapid found with seeds 13 and 14 (TestConserveSplitNeverAboveC at
// -rapid.checks=300; both failed in the run under `partition: available`
// the test makes alongside), no crash in either. The first: 5 nodes, a
// first split n0,n1 | n2,n3,n4 in which n0 inherits n4 (tombstone X at
// n4's record version 1), then a second split n0,n3 | n1,n2,n4 that
// starts before the views of the first heal settled, and in which n1
// inherits n0's record (holding a copy X' of X). X' fences n4 first (n4
// gives up the inheritance); n0's X then credits a transfer to n4 that n4
// had credited itself (n2's, adopted from n2's record by n3, sent to n4's
// heir), after the version n1 took; and n1's fence of n0 drops X, whose
// credit no copy knew of: C + 1,299,987 units for good. The second (6
// nodes, splits n0,n2,n3,n4 | n1,n5 and n0,n1,n4 | n2,n3,n5) is the same
// chain with n5, n4 and n1. Now a tombstone dropped that way keeps fencing
// its incarnation for what it credited after that version (draining), and
// the incarnation reconciles each credit once per inheritance, whichever
// copy of the tombstone names it.
func TestSplitBrainDroppedTombstoneCredit(t *testing.T) {
	t.Run("seed13", func(t *testing.T) {
		replaySplitRun(t, []int{5, 1, 0, 0, 1, 50, 7, 0, 1, 1, 0, 0, 4, 3, 4, 4, 3, 0, 1, 3, 3, 0, 505, 2, 5516, 3, 0, 0, 2, 2, 2, 0, 1, 268, 2, 1, 0, 0, 1, 0, 0, 4}, 0)
	})
	t.Run("seed14", func(t *testing.T) {
		replaySplitRun(t, []int{6, 1, 0, 0, 8, 57, 3, 2, 3, 0, 0, 1, 0, 4, 4, 1, 2, 0, 3, 1, 1, 1, 3, 1, 0, 2537, 2, 202, 3, 0, 1, 0, 0, 0, 1, 0, 13, 214, 2, 0, 0, 1, 1, 0, 1, 0, 3}, 394255)
	})
}

// A run rapid found with seed 15 (TestConserveSplitNeverAboveC at
// -rapid.checks=300), under `partition: conserve`: 4 nodes, n3 pays n0
// just before a first split cuts it off alone (n3 | n0,n1,n2), so n0, its
// buddy, holds n3's record from before that payment. Alone in its view,
// n3 had no buddy, and a node without a buddy released its messages
// without replicating anything: the payment went out (retransmitted
// across the cut) with no record of it anywhere. A second split puts n3
// with n0 again and n3 crashes at once; the payment in flight reaches n0,
// and at n3's restart n0 inherits the record from before it: the payment
// counted twice (C + 468,484 units) for good. Now a node without a buddy
// releases nothing that leaves it (it still settles what it can settle
// itself), so n3's payment waits for a buddy to hold it.
func TestConserveAloneReleasesNothing(t *testing.T) {
	replaySplitRun(t, []int{4, 1, 1, 1, 1, 53, 722, 4, 2, 1, 3, 4, 2, 4, 2, 0, 0, 1, 2, 676, 2, 10635, 2, 1, 1, 1, 0, 0, 5, 200, 2, 1, 1, 0, 1, 2, 36, 0, 7, 0, 3, 3000, 3}, 926)
}

// Runs rapid found with seeds 7, 8 and 10 (TestConserveSplitNeverAboveC
// at -rapid.checks=300, under `partition: available`; 7 and 10 failed
// before the fixes above as well). In each, a tombstone of an incarnation
// known dead (its newer incarnation answered the fence) credits a
// transfer after an heir took the record it is in; the heir fences its
// holder, which drops it, and the heir's copy, which knows nothing of that
// credit, settles the transfer again when its payer (which never got the
// acknowledgement, sent to another node that had adopted the transfer)
// retransmits it (seed 8: C + 81,144 units). Now the holder gives such a
// credit up and sends the transfer again under its own name, so whoever
// settles the dead incarnation's transfers credits it once.
func TestSplitBrainDeadTombstoneCreditRedelivered(t *testing.T) {
	t.Run("seed7", func(t *testing.T) {
		replaySplitRun(t, []int{6, 1, 0, 0, 0, 60, 0, 3, 1, 1, 2, 4, 2, 1, 0, 3, 3, 3, 2, 1, 3, 1, 2, 0, 2, 528, 2, 5321, 2, 0, 1, 0, 0, 1, 0, 2, 6, 0, 0, 1047, 3, 8, 4, 250, 3, 0, 0, 1, 1, 1, 2, 1, 20, 3, 2, 43}, 1)
	})
	t.Run("seed8", func(t *testing.T) {
		replaySplitRun(t, []int{5, 1, 1, 1, 14, 50, 7, 3, 1, 1, 2, 2, 1, 3, 0, 0, 1, 1, 2, 1, 3, 0, 3688, 2, 218, 3, 1, 1, 1, 2, 2, 2, 218, 2, 60, 0, 4, 2, 101, 729, 2, 0, 1, 1, 1, 0, 1, 450, 1, 0, 1741}, 9293)
	})
	t.Run("seed10", func(t *testing.T) {
		replaySplitRun(t, []int{5, 1, 1, 0, 0, 625, 3, 0, 0, 0, 3, 4, 0, 0, 1, 1, 2, 1, 4, 3, 1, 2, 517, 2, 12000, 2, 1, 0, 0, 1, 0, 0, 612, 200, 3, 2, 1, 2, 0, 0, 2, 1, 4, 723, 11, 1, 6, 2294}, 0)
	})
}

// A run rapid found with seed 9 (TestConserveSplitNeverAboveC at
// -rapid.checks=300, under `partition: available`; it failed before the
// fixes above as well): 6 nodes, n3 inherits n2 across a first split and
// its tombstone credits a transfer n1 paid n2; n4 inherits n3's record
// from before that credit across a second split, and its copy of the
// tombstone credits the transfer again. n2 answers the copy's fence alive
// (the copy retires) before n4's fence of n3, which named what the copies
// that came with n3's record credited only while they were live: n3 never
// heard of the second credit and kept its own (C + 287,170 units). Now the
// fence names what retired and draining copies credited too.
func TestSplitBrainFenceNamesRetiredCopies(t *testing.T) {
	replaySplitRun(t, []int{6, 2, 1, 0, 18, 54, 44, 0, 0, 1, 1, 1, 1, 3, 3, 1, 0, 0, 1, 1, 4, 3, 1, 4, 0, 2518, 2, 207, 2, 1, 1, 0, 1, 1, 0, 0, 3, 432, 3, 0, 1, 2, 2, 1, 2, 0, 30}, 348891298)
}

// A run rapid found with seed 18 (TestConserveSplitNeverAboveC at
// -rapid.checks=300, under `partition: available`, with crashes): n0 is
// inherited twice while alive, by n1 (its record at version 29) and by n2
// (version 64), and both tombstones credit a transfer n2 paid n0 that n0
// never credited. n2's fence named the transfer first and n0 recorded it
// as settled elsewhere; n1's tombstone (draining once n1 was fenced in
// turn) named it again and n0 did nothing: C + 1,100,000 units for good. Now an
// incarnation gives up a transfer that a second inheritance's fence names
// as credited.
func TestSplitBrainTwoInheritancesCreditOnce(t *testing.T) {
	replaySplitRun(t, []int{6, 2, 0, 1, 20, 87, 2, 0, 0, 2, 1, 1, 3, 4, 0, 4, 0, 2, 4, 3, 4, 1, 3, 3, 1, 3695, 2, 1989, 2, 1, 0, 1, 1, 1, 0, 2, 100, 0, 10, 4, 3, 1, 1, 200, 3, 0, 2, 1, 2, 2, 0, 0, 9}, 2)
}

// Runs rapid found with seeds 10 and 21 (TestConserveSplitNeverAboveC at
// -rapid.checks=300, after the fixes above; both failed at the branch
// point too), where the audit, not the cluster, was off: a transfer to a
// dead incarnation credited by one heir, whose tombstone then fenced into
// the heir of a later record (which absorbed it: it keeps the transfer
// among those credited on the incarnation's behalf, settled elsewhere),
// stayed in its payer's outbox, and no live node reported it applied, so
// it counted as in flight beside the credit (C + 23,005 and C + 360,000
// units). Applied now also reports what a tombstone lists as credited on
// the incarnation's behalf.
func TestSplitBrainAbsorbedCreditApplied(t *testing.T) {
	t.Run("seed10", func(t *testing.T) {
		replaySplitRun(t, []int{4, 1, 1, 1, 3, 54, 0, 4, 2, 0, 1, 0, 1, 0, 3, 3, 1, 0, 2, 4000, 1, 1849, 3, 2, 0, 2, 0, 1, 1512, 0, 835, 167}, 339311889)
	})
	t.Run("seed21", func(t *testing.T) {
		replaySplitRun(t, []int{5, 0, 1, 1, 13, 90, 6, 4, 1, 1, 1, 2, 1, 1, 1, 2, 0, 3, 2, 4, 3, 3, 1462, 2, 211, 3, 0, 2, 1, 0, 1, 0, 19, 419, 2, 0, 1, 0, 1, 0, 1, 1, 0, 55, 5905}, 66871949)
	})
}

// The conformance swarm's seed 7495 , in its simplest form: five
// nodes, n0,n4 | n1,n2,n3. n1 (n0's buddy) inherits n0's record at the
// split; n0 replicates to n4 from then on and crashes during the split,
// so n4 inherits a later record of it. n0 never restarts, so no newer
// incarnation answers a fence and nothing told the two heirs of each
// other: n0's share stayed counted on both sides after the heal (C + C/5
// for good; the swarm measured 19.7 tokens beyond the fault bound). Now
// an heir whose incarnation stays out of its view after the heal looks
// for a later heir as for a dead incarnation, n1 fences into n4, and the
// cluster holds C again.
func TestSplitBrainDeadNodeInheritedOnBothSides(t *testing.T) {
	rate := bucket.Rate{Tokens: 10, Per: time.Second}
	h := newHarness(5, 7495, hnet{minDelay: time.Millisecond, maxDelay: 3 * time.Millisecond}, rate, 10, []string{"idle=2s"}, t.Fatalf)
	C, _ := rateUnits(rate)
	for i := range 5 {
		h.poisson(i, "a", 5, 1, 30*time.Second)
	}
	h.at(2*time.Second, func() { h.partition(0, 4) })
	h.at(4*time.Second, func() {
		if b := h.nodes[0].g.Buddy(); b != "n4" {
			t.Fatalf("n0's buddy during the split is %s, want n4 (the scenario needs it)", b)
		}
		h.crash(0)
	})
	h.at(8*time.Second, func() { h.heal() })
	h.runUntil(8*time.Second + h.detection + 2*time.Second + settleAfter) // the heal, heirGrace (2 s), settled
	h.afterEvent = func() {
		for _, key := range []string{"a", "never"} {
			if held, _, inflight, _, _ := h.audit(key); held+inflight > C+1 {
				t.Fatalf("at %v, after the heal settled: key %s: sum C_i %d + in flight %d > C %d + 1\n%s", h.now, key, held, inflight, C, h.describe(key))
			}
		}
	}
	h.runUntil(40 * time.Second)
	for deadline := h.now + 30*time.Second; h.anyPending([]string{"a"}) && h.now < deadline && h.step(); {
	}
	for _, key := range []string{"a", "never"} {
		if held, _, _, _, _ := h.audit(key); abs(held-C) > 1 {
			t.Errorf("key %s at %v: sum C_i = %d, want C = %d\n%s", key, h.now, held, C, h.describe(key))
		}
	}
}

// The run rapid found with seed 79 (TestConserveSplitNeverAboveC at
// -rapid.checks=300, under `partition: available`, no crash; shrunk): 5
// nodes, buddies n0->n1->n2->n3->n4->n0. A first split n0,n3 | n1,n2,n4:
// n1 inherits n0 (its record at version 36), n3 inherits n2 (tombstone T
// at version 42), and n2 replicates to n4 from then on. At 10.77 s the
// split heals and a second one, n0,n1,n4 | n2,n3, starts in the same
// instant. n3 sees n2 again and fences it with T: n2 gives up that
// inheritance. But n3's record that still held T (its fence not yet
// answered) had gone to n0, which inherits it when n3 leaves its view,
// with a copy T' of T; and n4 inherits n2's record (version 183, taken
// before n2 gave T up). n2 stays out of n0's view for heirGrace, so T'
// looks for a later heir of n2's incarnation, finds n4's tombstone and
// fences into it: n4 gives up n2's inheritance at version 42 a second
// time, as n2 would have (had it not done so already). At the second heal
// n4 fences n2 with version 183, and the inheritance stays given up
// twice. The same happened to n0 (inherited by n1 at version 36, given up
// by n0 itself and again by n3, the heir of n0's later record): C - 52%
// for good. Now a give-up by a later heir is kept on its tombstone and
// named in its fences (GdrlAbsorbed), and an incarnation that had given
// that inheritance up itself undoes the second give-up.
func TestSplitBrainCopyFencedIntoLaterHeir(t *testing.T) {
	replaySplitRun(t, []int{5, 1, 1, 1, 1, 54, 19, 1, 1, 4, 2, 3, 1, 3, 4, 0, 1, 3, 0, 0, 3, 0, 2072, 2, 8693, 2, 1, 0, 0, 1, 0, 0, 0, 12000, 3, 1, 1, 0, 0, 1, 0, 8000}, 0)
}

// The run rapid found with seed 90 (TestConserveSplitNeverAboveC at
// -rapid.checks=300, under `partition: conserve`; shrunk): 6 nodes,
// buddies n0->n1->...->n5->n0. A first split n0,n2,n4,n5 | n1,n3 (under
// conserve nobody inherits an expected member): n3, whose buddy n4 is
// across the cut, replicates to n1, while n4 keeps n3's record as of
// version 106. At 5.26 s the split heals and a second one, n1,n4 |
// n0,n2,n3,n5, starts in the same instant; n3 crashes 3 ms later, before
// it sees n4 again (no hello ever told n4 its record is stale), and
// restarts on the other side. n1 holds n3's latest record (version 162),
// frozen and in its memory only; it crashes at 11.96 s and restarts, and
// n4 inherits n1's record, which did not name it. At the heal n3's new
// incarnation says hello to n4, which inherits its stale record of n3:
// what n3 had paid during the first split (452,447 units of key c) counted
// twice, for good. Now a node's record names the records it holds of
// wards out of its view (GdrlHeldRecord), and n4, inheriting n1 once n1 is
// known dead, drops its stale record of n3 (n3's share is lost with n1,
// which held its later record: a loss, never a creation).
func TestConserveHeldRecordOfCrashedHolder(t *testing.T) {
	replaySplitRun(t, []int{6, 0, 1, 1, 1, 51, 2, 1, 4, 4, 1, 3, 4, 3, 4, 1, 2, 1, 3, 3, 4, 1, 4, 4, 4, 2965, 2, 2297, 2, 0, 1, 0, 1, 0, 0, 0, 0, 7244, 2, 1, 0, 1, 1, 0, 1, 2, 3, 3, 299, 6696, 1, 125, 2}, 9865)
}

// A run rapid found with seed 79 at 3,000 checks (its 1,263rd run, under
// `partition: conserve`) when an heir took the records a dead ward held
// over, rather than only learning their versions: 3 nodes, buddies
// n0->n1->n2->n0. n1 crashes as a first split n0,n2 | n1 starts and
// restarts alone; n2 keeps n1's record (version 1) frozen, and its own
// record at n0 names it. A second split n0 | n1,n2: n2 hears of n1's new
// incarnation and inherits that record, then crashes; n1 inherits n2's
// later record (with the tombstone of n1's version 1). At n2's restart n0
// inherits n2's earlier record and took over n1's version 1 from it,
// inheriting it too: one version inherited twice, which no fence between
// heirs reconciles (they take a tombstone of the same version for a copy):
// C + C/3 for good. Now n0 only learns that version (a lost tombstone).
func TestConserveHeldRecordOfDeadHolderInheritedOnce(t *testing.T) {
	replaySplitRun(t, []int{3, 0, 0, 0, 0, 50, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 500, 2, 4903, 2, 1, 0, 1, 1, 0, 1, 0, 0, 200, 2, 1, 0, 0, 1, 97, 2, 0, 0}, 0)
}

// A run rapid found with seed 79 at 3,000 checks (TestConserveSplitNeverAboveC,
// its 1,219th run, under `partition: available`; shrunk), once the fixes
// above let it show: 6 nodes. In a first split (0.86 s) n4 inherits n3
// (tombstone T) and pays it a transfer X of key c (33,332 units). A second
// split starts 10 ms after the first heals: n1 inherits n4's record, with
// a copy T' of T and X in the outbox, settles X with T' (one credit), and
// fences n3, which answers alive: T' retires at n1, kept so that a fence
// of n4 would name its credit. On its side n4 settles X with T (a second
// credit). n1 crashes at 6.20 s, before it could fence n4, and its retired
// T' was not replicated: n3 inherits n1's record without it. At the heal
// n3's copy of n1's tombstone of n4 fences n4 naming no credit of X, so n4
// keeps its own and drains it to n3, which had reconciled X with the copy's
// fence already and takes it for the same credit: C + 33,332 for good
// (masked before the fixes above by a loss in the same run). Now a record
// carries its retired and draining tombstones (GdrlRecord.retired,
// .draining), n3 takes n1's over, and its fence of n4 names the copy's credit.
// The run probes every interval (max_probe_gap=100ms, the interval), as
// every node did when it was found: with the probe backoff its schedule
// differs, and a crash during the split then loses 133,328 units (a
// documented limit, "Limits"), where this run checks that nothing is lost.
func TestSplitBrainRetiredCopyOfCrashedHeir(t *testing.T) {
	draws := []int{6, 2, 1, 1, 2, 60, 3, 1, 1, 3, 0, 3, 4, 0, 3, 0, 0, 2, 1, 0, 4, 1, 0, 2, 4, 855, 2, 201, 2, 1, 0, 0, 1, 0, 1, 2, 13, 5, 3, 31, 1, 2016, 10, 6068, 3, 2, 0, 1, 0, 1, 1, 2, 5130, 1, 2227, 67, 1, 2562, 1}
	for _, mode := range []string{"available", "conserve"} {
		next := 0
		r := drawSplitRun(listDrawer{draws, &next}, 110, 2)
		r.params = append(r.params, "partition="+mode, "max_probe_gap=100ms")
		r.run(t.Fatalf)
		if r.lost != 0 {
			t.Errorf("%s: %d units lost", mode, r.lost)
		}
	}
}

// A run rapid found with `make soak` (TestConserveSplitNeverAboveC at
// 1,000 checks, its 174th run, seed 31863400 of the harness, under
// `partition: conserve`): 6 nodes, buddies n0->n1->...->n5->n0. A first
// split n1,n2,n4 | n0,n3,n5: n2, whose buddy n3 is across the cut,
// replicates to n4 from then on, while n3 keeps n2's record as of version
// 1 (under conserve nobody inherits an expected member). The split heals
// at 8.74 s and a second one, n1,n2,n5 | n0,n3,n4, starts in the same
// instant; n2 crashes 6 ms later, before it sees n3 again (no hello told
// n3 that its record is stale), and restarts at 9.11 s after the second
// heal. At its hello n3 inherits version 1 and n4 version 18: one default
// share (C/6) counted by two heirs until n3 fences into n4. n3's tombstone
// asked the members whether one holds a later tombstone of n2 at 9.20 s;
// n4 had not inherited yet and answered no, but its answer went out only
// once n4's buddy held its record, at 9.25 s, after n4 had inherited and
// its own query had told n3 that n4 ranks higher. n3 took the late answer
// at its word and never asked n4 again, and n4 (the later heir) waits for
// the earlier one to fence into it: sum C_i = C + 1,666,667 for good. Now
// a member whose query showed a later tombstone is fenced into, whatever
// answers to queries say (heirLater); an answer to that fence that
// absorbs nothing makes the tombstone ask again rather than conclude; and
// a late Absorbed answer drops the tombstone.
func TestConserveLateNoLaterHeirAnswer(t *testing.T) {
	replaySplitRun(t, []int{6, 2, 1, 1, 0, 185, 41, 2, 3, 1, 0, 2, 1, 2, 0, 1, 2, 4, 1, 3, 4, 0, 3, 4, 0, 716, 2, 8028, 2, 1, 0, 0, 1, 0, 1, 1, 1, 5, 2141, 0, 201, 3, 2, 0, 0, 2, 2, 0, 2, 10, 5, 32, 6, 2, 36, 728}, 31863400)
}
