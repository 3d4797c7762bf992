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

	worstDuring  float64 // the largest (sum C_i + in flight) / C seen during a split
	worstSettled int64   // the largest sum C_i + in flight - C after the heal settled
	settledAfter time.Duration
	debug        func(h *harness)
	trace        func(h *harness)
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
	rate := bucket.Rate{Tokens: 10, Per: time.Second}
	const burst = 20
	h := newHarness(r.n, r.seed, r.net, rate, burst, r.params, fail)
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
	h.runUntil(end + 60*time.Second)
	deadline := h.now + 60*time.Second
	for h.anyPending(keys) && h.now < deadline && h.step() {
	}
	if r.debug != nil {
		r.debug(h)
	}
	if failed {
		return
	}
	if h.anyPending(keys) {
		fail("seed %d: still transfers pending at %v:\n%s", r.seed, h.now, h.describe("a"))
		return
	}
	for _, key := range keys {
		held, _, _, _, _ := h.audit(key)
		if abs(held-C) > 1 {
			fail("seed %d: after the heal and quiescence at %v: key %s: sum C_i - C = %d (C = %d)\n%s",
				r.seed, h.now, key, held-C, C, h.describe(key))
			return
		}
	}
}

func drawSplitRun(t *rapid.T) *splitRun {
	n := rapid.IntRange(2, 6).Draw(t, "nodes")
	r := &splitRun{n: n, seed: rapid.Uint64().Draw(t, "seed"), params: []string{"idle=2s"}}
	r.net = hnet{
		loss:     rapid.SampledFrom([]float64{0, 0.05, 0.2}).Draw(t, "loss"),
		dup:      rapid.SampledFrom([]float64{0, 0.1}).Draw(t, "dup"),
		reorder:  rapid.SampledFrom([]float64{0, 0.1}).Draw(t, "reorder"),
		minDelay: time.Millisecond,
	}
	r.net.maxDelay = r.net.minDelay + time.Duration(rapid.IntRange(0, 20).Draw(t, "jitterMs"))*time.Millisecond
	r.detectLo = time.Duration(rapid.IntRange(50, 1000).Draw(t, "detectLoMs")) * time.Millisecond
	r.detectHi = r.detectLo + time.Duration(rapid.IntRange(0, 3000).Draw(t, "detectSpreadMs"))*time.Millisecond
	for i := range n {
		row := make([]float64, len(testKeys))
		for k := range row {
			row[k] = float64(rapid.SampledFrom([]int{0, 0, 2, 10, 30}).Draw(t, fmt.Sprintf("demand%d%d", i, k)))
		}
		r.demand = append(r.demand, row)
	}
	at := time.Duration(rapid.IntRange(500, 4000).Draw(t, "firstMs")) * time.Millisecond
	for e := rapid.IntRange(1, 3).Draw(t, "episodes"); e > 0; e-- {
		ep := episode{at: at, length: time.Duration(rapid.IntRange(200, 12000).Draw(t, "lengthMs")) * time.Millisecond}
		sides := rapid.IntRange(2, 3).Draw(t, "sides")
		for i := range n {
			ep.groups = append(ep.groups, rapid.IntRange(0, sides-1).Draw(t, fmt.Sprintf("side%d", i)))
		}
		for c := rapid.IntRange(0, 2).Draw(t, "crashes"); c > 0; c-- {
			plan := crashPlan{at: time.Duration(rapid.IntRange(0, int(ep.length/time.Millisecond)).Draw(t, "crashMs")) * time.Millisecond,
				node: rapid.IntRange(0, n-1).Draw(t, "victim")}
			// Crashed nodes come back (a new incarnation): an incarnation
			// inherited on two sides of a split is reconciled once it is
			// known dead (see the package documentation, "Split brain").
			plan.restart = time.Duration(rapid.IntRange(50, 3000).Draw(t, "downMs")) * time.Millisecond
			ep.crashes = append(ep.crashes, plan)
		}
		r.episodes = append(r.episodes, ep)
		at += ep.length + time.Duration(rapid.IntRange(0, 8000).Draw(t, "gapMs"))*time.Millisecond
	}
	return r
}

// TestSplitBrainProperty: whatever the netsplits, heals, crashes and
// restarts, and however asymmetric the failure detection, once the last
// heal has settled the cluster never holds more than C + 1 unit, and once
// the network is quiet it holds C within one unit.
func TestSplitBrainProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		r := drawSplitRun(t)
		r.run(t.Fatalf)
	})
}
