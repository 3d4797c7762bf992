package gdrl_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/gdrl"
)

// newJoinHarness is newHarness for a cluster that grows: the first
// `founders` nodes start at time 0 with a view of the founders only (so
// they split the rule 1/founders), the others are not started; join(i)
// starts one of them later, with a zero default share (004 §3.3), and the
// views follow after the detection delay.
func newJoinHarness(n, founders int, seed uint64, net hnet, rate bucket.Rate, burst int64, params []string, fail func(string, ...any), opts ...func(*harness)) *harness {
	h := &harness{fail: fail, rnd: rand.New(rand.NewPCG(seed, 0x68617273)), seed: seed, net: net, params: params,
		rate: rate, burst: burst, detection: 300 * time.Millisecond}
	for i := range n {
		h.nodes = append(h.nodes, &hnode{id: strategy.NodeID(fmt.Sprintf("n%d", i)), alive: i < founders})
	}
	for _, o := range opts {
		o(h)
	}
	all := h.aliveSet()
	for i := range founders {
		h.nodes[i].view = slices.Clone(all)
		h.start(i)
	}
	return h
}

// join starts node i (not running) now, as a joiner: its view is the
// reachable live nodes, everyone's view follows after the detection delay.
func (h *harness) join(i int) { h.restart(i) }

// fair is member i's 1/N split of (C, B) among n, as the founders of an
// n-node cluster get it.
func fair(C, B int64, n, i int) (int64, int64) {
	split := func(t int64) int64 {
		s := t / int64(n)
		if int64(i) < t%int64(n) {
			s++
		}
		return s
	}
	return split(C), split(B/gdrl.UnitsPerToken) * gdrl.UnitsPerToken
}

// A cluster founded by n0 alone (its view is just itself, so its default
// share is the whole rule), which n1 and n2 join with zero default
// shares: the default shares follow the membership, so that after a few
// intervals every node holds its 1/3 split as its default share, and a
// key never requested before, requested evenly at all three nodes, is
// admitted at about the full rate from its first second at every node.
// Before, every key's shares relaxed back towards the founder, and a
// joiner got a key's share only once demand evidence moved it, key by
// key (the live service admitted half of what the simulator did).
func TestFounderAloneDefaultsBalance(t *testing.T) {
	for _, tc := range []struct {
		name     string
		n, found int
		joins    []time.Duration
		net      hnet
	}{
		{"alone+2", 3, 1, []time.Duration{40 * time.Millisecond, 70 * time.Millisecond}, hnet{minDelay: time.Millisecond, maxDelay: 3 * time.Millisecond}},
		{"alone+2 lossy", 3, 1, []time.Duration{40 * time.Millisecond, 2 * time.Second}, hnet{loss: 0.2, dup: 0.1, reorder: 0.1, minDelay: time.Millisecond, maxDelay: 5 * time.Millisecond}},
		{"3+2 scale-out", 5, 3, []time.Duration{time.Second, 1500 * time.Millisecond}, hnet{minDelay: time.Millisecond, maxDelay: 3 * time.Millisecond}},
		{"alone+4 staggered", 5, 1, []time.Duration{100 * time.Millisecond, 900 * time.Millisecond, 1700 * time.Millisecond, 2500 * time.Millisecond}, hnet{loss: 0.1, minDelay: time.Millisecond, maxDelay: 5 * time.Millisecond}},
	} {
		for seed := uint64(1); seed <= 5; seed++ {
			rate, burst := bucket.Rate{Tokens: 10, Per: time.Second}, int64(10)
			h := newJoinHarness(tc.n, tc.found, seed, tc.net, rate, burst, nil, t.Fatalf)
			C, B := int64(10_000_000), burst*gdrl.UnitsPerToken
			grain := C / int64(100*tc.n)
			for k, at := range tc.joins {
				i := tc.found + k
				h.at(at, func() { h.join(i) })
			}
			// Converged within a few intervals (10) after the last view
			// change (a joiner asks one member per interval).
			settle := tc.joins[len(tc.joins)-1] + h.detection + time.Second
			h.runUntil(settle)
			for i, n := range h.nodes {
				dc, db := n.g.DefaultShare()
				fc, fb := fair(C, B, tc.n, i)
				if abs(dc-fc) > grain || abs(db-fb) > gdrl.UnitsPerToken {
					t.Errorf("%s seed %d: at %v %s's default share is (%d, %d), want its split (%d, %d) within a grain",
						tc.name, seed, h.now, n.id, dc, db, fc, fb)
				}
			}
			// A fresh key, requested evenly: every node 20 times a second
			// (more than the rate), for 2 s.
			admitted := make([]int, tc.n)
			start := h.now
			var id uint64
			for i := range tc.n {
				for t0 := start + time.Duration(i)*3*time.Millisecond; t0 < start+2*time.Second; t0 += 50 * time.Millisecond {
					h.at(t0, func() {
						id++
						d, _ := h.nodes[i].host.Request(h.now, 0, strategy.Request{ID: id, Key: "fresh", Tokens: 1, Arrival: h.now}, 0)
						if d.Allowed {
							admitted[i]++
						}
					})
				}
			}
			h.runUntil(start + 2*time.Second)
			// The whole rule over 2 s: the burst plus two seconds of rate,
			// 30 tokens; each node its split of that.
			total := 0
			for i, a := range admitted {
				total += a
				fc, fb := fair(C, B, tc.n, i)
				want := (2*fc + fb) / gdrl.UnitsPerToken
				if float64(a) < 0.8*float64(want) {
					t.Errorf("%s seed %d: %s admitted %d requests of the fresh key in its first 2 s, want about %d (its split)",
						tc.name, seed, h.nodes[i].id, a, want)
				}
			}
			if total < 30-tc.n { // a bucket may miss up to a token of refill at the end
				t.Errorf("%s seed %d: the cluster admitted %d requests of the fresh key in its first 2 s, want about 30 (burst 10 + 2 s at 10/s): %v",
					tc.name, seed, total, admitted)
			}
			// Conservation of the fresh key and of a key never requested.
			h.runUntil(h.now + 10*time.Second)
			for _, key := range []string{"fresh", "never"} {
				held, heldB, inflight, inflightB, _ := h.audit(key)
				if held+inflight != C || heldB+inflightB != B {
					t.Errorf("%s seed %d: key %s: sum C_i %d + in flight %d, sum B_i %d + in flight %d, want %d and %d",
						tc.name, seed, key, held, inflight, heldB, inflightB, C, B)
				}
			}
			if t.Failed() {
				return
			}
		}
	}
}

// With every node a founding member, every default share is its split
// already: no default-share transfer is ever made, so a cluster with no
// requests sends nothing but its start-up messages.
func TestFoundersMoveNoDefault(t *testing.T) {
	rate := bucket.Rate{Tokens: 7, Per: time.Second}
	h := newHarness(4, 1, hnet{minDelay: time.Millisecond, maxDelay: 2 * time.Millisecond}, rate, 5, nil, t.Fatalf)
	h.runUntil(2 * time.Second)
	before := h.messages
	h.runUntil(10 * time.Second)
	if h.messages != before {
		t.Errorf("an idle cluster of founders sent %d messages after start-up", h.messages-before)
	}
	for i, n := range h.nodes {
		dc, db := n.g.DefaultShare()
		fc, fb := fair(7_000_000, 5_000_000, 4, i)
		if dc != fc || db != fb {
			t.Errorf("%s's default share is (%d, %d), want (%d, %d)", n.id, dc, db, fc, fb)
		}
	}
}

// A transfer paid to a node that then leaves, whose acknowledgement was
// lost, goes to the leaver's heir. Here the leaver (n5, a joiner) had
// announced n0 as its buddy; n0 crashed just before the leave, so n5 chose
// n1, handed over to it and left; n0 restarted. The payer, n3, had not
// heard from n5 since, took n0 (back in view, a new incarnation without
// n5's record) for the heir, and the transfer stayed in flight for ever.
// Found by TestLeaveConservesProperty with joins.
func TestLeaveHeirAfterBuddyRestart(t *testing.T) {
	r := &leaveRun{n: 6, seed: 0x1c04,
		net:  hnet{loss: 0.3, dup: 5.417289225443323e-08, reorder: 0.004723604022942486, minDelay: time.Millisecond, maxDelay: 19 * time.Millisecond},
		rate: bucket.Rate{Tokens: 192, Per: time.Second}, burst: 1, leaver: 5, leaveAt: 1600 * time.Millisecond, graph: "full",
		crashBuddy: 13 * time.Millisecond, restart: 417 * time.Millisecond, before: true,
		founders: 5, joins: []time.Duration{306 * time.Millisecond},
		demand: [][]float64{{3, 19, 17}, {7, 22, 16}, {1, 20, 30}, {6, 10, 6}, {4, 0, 10}, {1, 1, 1}}}
	r.run(t.Fatalf)
}

// Two founders choose each other as buddies (as a founder that started
// alone and its first joiner do). n0 crashed just before n1, its heir,
// left; n1 chose n2, handed over everything and left. A payer (n4) that
// had last heard n1 announce n0 followed n0 -> n1 -> n0 and found no heir:
// its transfers to n0 and n1, whose acknowledgements were lost, stayed in
// flight for ever. The cycle now ends at the ring successor (n2, which
// inherited n1 and, with its record, n0's tombstone). Found by
// TestLeaveConservesProperty with joins.
func TestLeaveHeirCycle(t *testing.T) {
	r := &leaveRun{n: 6, seed: 0x8512e3e6,
		net:  hnet{loss: 0.3, reorder: 0.016422515403596936, maxDelay: 11 * time.Millisecond},
		rate: bucket.Rate{Tokens: 3, Per: time.Second}, burst: 2, leaver: 1, leaveAt: 1600 * time.Millisecond, graph: "full",
		crashBuddy: 7 * time.Millisecond, before: true,
		founders: 2, joins: []time.Duration{52 * time.Millisecond, 462 * time.Millisecond, 231 * time.Millisecond, 487 * time.Millisecond},
		demand: [][]float64{{12, 16, 4}, {3, 6, 0}, {15, 2, 30}, {22, 10, 2}, {16, 4, 0}, {10, 2, 2}}}
	r.run(t.Fatalf)
}

// The leaver's buddy crashed first: n1 (a joiner whose buddy was n2) left
// after n2 crashed, having chosen its ring successor n3, which inherited
// it. The founder n0, which had paid n1 its default share and not heard
// from it since, followed n2's announcement to n2's heir n5, which holds
// nothing of n1: the transfer stayed in flight for ever. The destination's
// ring successor is now tried too. Found by TestLeaveConservesProperty
// with joins.
func TestLeaveHeirBuddyGoneFirst(t *testing.T) {
	r := &leaveRun{n: 6, seed: 0x4c,
		net:  hnet{loss: 0.3, dup: 1.627595407489293e-14, minDelay: time.Millisecond, maxDelay: 5 * time.Millisecond},
		rate: bucket.Rate{Tokens: 208, Per: time.Second}, burst: 49, leaver: 1, leaveAt: 1600 * time.Millisecond, graph: "ring",
		crashBuddy: time.Millisecond, before: true,
		founders: 1, joins: []time.Duration{479 * time.Millisecond, 76 * time.Millisecond, 122 * time.Millisecond, 466 * time.Millisecond, 51 * time.Millisecond},
		demand: [][]float64{{2, 3, 5}, {19, 0, 2}, {11, 2, 29}, {17, 6, 13}, {3, 23, 1}, {30, 2, 23}}}
	r.run(t.Fatalf)
}

// Four founders on the ring (n0 .. n3, each 1/4 of the rule) and two
// joiners, n5 at 50 ms and n4 at 75 ms; n4 leaves at 375 ms, before any
// member paid it (the founders' views held neither joiner until 350 ms).
// n5 takes its 1/6 split from n3 and n0; then the views drop n4, the split
// becomes 1/5, and n5, n0 and n3 ask: n1 pays n5 and part of n0's deficit,
// n2 pays n3, and n0 is left 1/60 of the rule short while n2 holds 1/60
// more than its split. n2 is n0's neighbour on neither side of the ring,
// founders never say hello to each other, and n0 asks only the members
// whose incarnation it knows (n1, n3 and n5, at their split), while no
// one asks n2 (those that know it are at their split): before
// offerDefault, n0 stayed at 183,333 of its 200,000 and n2 at 216,667 for
// good (the class of TestLeaveConservesProperty's fail files of
// 2026-12-06, seeds 517098855 and 597934783, found under loss). The test
// checks that the run reaches that state (n0 short, n2 above its split
// and unknown to n0), and that seconds later every node holds its split
// within a grain, the default shares sum to the rule and a key never
// requested is held whole.
func TestShortFounderAsksNonNeighbour(t *testing.T) {
	for _, lat := range []time.Duration{time.Millisecond, 2 * time.Millisecond} {
		rate, burst := bucket.Rate{Tokens: 1, Per: time.Second}, int64(6)
		net := hnet{minDelay: lat, maxDelay: lat}
		h := newJoinHarness(6, 4, 1, net, rate, burst, []string{"graph=ring"}, t.Fatalf)
		C, B := int64(1_000_000), burst*gdrl.UnitsPerToken
		h.at(50*time.Millisecond, func() { h.join(5) })
		h.at(75*time.Millisecond, func() { h.join(4) })
		leftAt := time.Duration(-1)
		h.at(375*time.Millisecond, func() { h.leave(4, &leftAt) })
		stuck := false // n0 short, n2 above its split and unknown to n0
		h.afterEvent = func() {
			n0, n2 := h.nodes[0].g, h.nodes[2].g
			if leftAt < 0 || len(h.nodes[0].view) != 5 || len(h.nodes[2].view) != 5 {
				return
			}
			c0, _ := n0.DefaultShare()
			c2, _ := n2.DefaultShare()
			f0, _ := fair(C, B, 5, 0)
			f2, _ := fair(C, B, 5, 2)
			if c0 < f0 && c2 > f2 && !n0.KnowsIncForTest("n2") && !slices.Contains(n0.Neighbours(), "n2") {
				stuck = true
			}
		}
		h.runUntil(10 * time.Second)
		if leftAt < 0 {
			t.Fatalf("latency %v: n4 never left", lat)
		}
		if !stuck {
			t.Errorf("latency %v: the run never reached the state it tests (n0 short of its split, n2 above it and unknown to n0)", lat)
		}
		live := h.aliveSet()
		var sumC, sumB int64
		for _, n := range h.nodes {
			if !n.alive {
				continue
			}
			i, _ := slices.BinarySearch(live, n.id)
			dc, db := n.g.DefaultShare()
			sumC, sumB = sumC+dc, sumB+db
			if fc, fb := fair(C, B, len(live), i); abs(dc-fc) > C/int64(100*len(live)) || abs(db-fb) > gdrl.UnitsPerToken {
				t.Errorf("latency %v: after n4's leave %s's default share is (%d, %d), want its split (%d, %d) of %d live nodes within a grain",
					lat, n.id, dc, db, fc, fb, len(live))
			}
		}
		if sumC != C || sumB != B {
			t.Errorf("latency %v: the default shares sum to (%d, %d), want (%d, %d)", lat, sumC, sumB, C, B)
		}
		if held, heldB, inflight, inflightB, _ := h.audit("never"); held != C || heldB != B || inflight != 0 || inflightB != 0 {
			t.Errorf("latency %v: key never: held (%d, %d), in flight (%d, %d), want (%d, %d) held", lat, held, heldB, inflight, inflightB, C, B)
		}
	}
}
