package gdrl_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// joinRun is one run of the founder-alone scenario (see
// TestFounderAloneJoinersAdmit): per node, the requests admitted in each
// second.
type joinRun struct {
	h       *harness
	perSec  [][]int // [node][second]
	crashAt time.Duration
}

// runFounderAlone starts n0 alone at time 0 (its view is just itself, so it
// holds the whole share), n1, n2, ... join it at the given times with zero
// shares (views [n0, self], then everyone's view is all of them after the
// detection delay), every live node requests key "hot" every 20 ms, and n2
// crashes at crashAt (never if 0). Like `tokenmesh serve` with a gdrl rule
// of 10/s burst 10.
func runFounderAlone(t *testing.T, seed uint64, net hnet, joins []time.Duration, crashAt, end time.Duration) *joinRun {
	rate, burst := bucket.Rate{Tokens: 10, Per: time.Second}, int64(10)
	h := &harness{fail: t.Fatalf, rnd: rand.New(rand.NewPCG(seed, 0x6a6f696e)), seed: seed, net: net,
		rate: rate, burst: burst, detection: 300 * time.Millisecond}
	n := 1 + len(joins)
	for i := range n {
		h.nodes = append(h.nodes, &hnode{id: strategy.NodeID(fmt.Sprintf("n%d", i))})
	}
	r := &joinRun{h: h, perSec: make([][]int, n), crashAt: crashAt}
	secs := int(end / time.Second)
	for i := range r.perSec {
		r.perSec[i] = make([]int, secs)
	}
	// The founder, alone.
	h.nodes[0].alive = true
	h.nodes[0].view = []strategy.NodeID{"n0"}
	h.start(0)
	// The joiners, started at a time other than 0: zero shares.
	join := func(i int, at time.Duration) {
		h.at(at, func() {
			n := h.nodes[i]
			n.alive = true
			n.view = []strategy.NodeID{"n0", n.id}
			h.start(i)
			h.push(hevent{at: h.now + h.detection, kind: evView})
		})
	}
	for i, at := range joins {
		join(1+i, at)
	}
	var reqID uint64
	for i := range n {
		for t0 := 20 * time.Millisecond; t0 < end; t0 += 20 * time.Millisecond {
			at := t0 + time.Duration(i)*3*time.Millisecond
			h.at(at, func() {
				n := h.nodes[i]
				if !n.alive || n.g == nil {
					return
				}
				reqID++
				d, ok := n.host.Request(h.now, 0, strategy.Request{ID: reqID, Key: "hot", Tokens: 1, Arrival: h.now}, 0)
				if !ok {
					t.Fatalf("gdrl decided no request synchronously")
				}
				if d.Allowed {
					r.perSec[i][int(h.now/time.Second)]++
				}
			})
		}
	}
	if crashAt > 0 {
		h.at(crashAt, func() { h.crash(2) })
	}
	h.runUntil(end)
	return r
}

// sum is the admissions of the given nodes in seconds [from, to).
func (r *joinRun) sum(nodes []int, from, to int) (n int) {
	for _, i := range nodes {
		for s := from; s < to; s++ {
			n += r.perSec[i][s]
		}
	}
	return n
}

func (r *joinRun) String() string {
	var b strings.Builder
	for i, row := range r.perSec {
		fmt.Fprintf(&b, "n%d admitted per second %v; ", i, row)
	}
	for _, n := range r.h.nodes {
		if n.alive {
			fmt.Fprintf(&b, "\n%s C=%d B=%d default=", n.id, n.g.CapacityShare("hot"), n.g.BurstShare("hot"))
			dc, db := n.g.DefaultShare()
			fmt.Fprintf(&b, "(%d,%d) pending=%v", dc, db, n.g.Pending("hot"))
		}
	}
	return b.String()
}

// A cluster founded by one node alone (`tokenmesh serve` where n0's
// initial member list is just itself), which n1 and n2 join with zero
// shares, must give every node with demand for a hot key a usable share:
// each of three nodes requesting the key every 20 ms admits about a third
// of the rate, and once n2 has crashed the two survivors admit the whole
// rate between them. The pair of joiners (both default shares zero) was
// not "skewed" (that needed the other end to hold a default share), so it
// relaxed towards zero defaults, and relax's ring rule moved n1's whole
// share forward to n2 whenever their shares came within two grains; n0
// kept its burst for itself (see TestLateJoinerGetsBurst). n1 admitted
// nothing for the whole run, and after the crash held half the capacity
// and no burst (the live symptom: shares 0.5/0.5, n1 admitting 0).
func TestFounderAloneJoinersAdmit(t *testing.T) {
	net := hnet{minDelay: time.Millisecond, maxDelay: 3 * time.Millisecond}
	const end = 30 * time.Second
	for seed := uint64(1); seed <= 10; seed++ {
		r := runFounderAlone(t, seed, net, []time.Duration{40 * time.Millisecond, 70 * time.Millisecond}, 15*time.Second, end)
		t.Logf("seed %d: %s", seed, r)
		// Before the crash: all three admit (from 5 s on, each at least
		// 1.5 tokens/s of its third), about 10/s together.
		for i := range 3 {
			if got := r.sum([]int{i}, 5, 15); got < 15 {
				t.Errorf("seed %d: n%d admitted %d requests in [5s, 15s), want about 33 (a third of 10/s)", seed, i, got)
			}
		}
		if got := r.sum([]int{0, 1, 2}, 5, 15); got < 90 {
			t.Errorf("seed %d: the cluster admitted %d requests in [5s, 15s), want about 100", seed, got)
		}
		// After the crash: the survivors admit the whole rate again, each
		// at least a third of it.
		for i := range 2 {
			if got := r.sum([]int{i}, 20, 30); got < 30 {
				t.Errorf("seed %d: survivor n%d admitted %d requests in [20s, 30s), want about 50", seed, i, got)
			}
		}
		if got := r.sum([]int{0, 1}, 20, 30); got < 90 {
			t.Errorf("seed %d: the survivors admitted %d requests in [20s, 30s), want about 100", seed, got)
		}
		held, heldB, _, _, _ := r.h.audit("hot")
		if held != 10_000_000 || heldB != 10_000_000 {
			t.Errorf("seed %d: after the crash sum C_i = %d, sum B_i = %d, want 10000000 each", seed, held, heldB)
		}
		if t.Failed() {
			return
		}
	}
}

// A joiner that arrives once the founder's demand estimate is up must get
// burst too. The founder kept the burst its own demand needs capped at its
// default burst share, which for a founder that started alone is the whole
// burst: it gave the joiner capacity (the fill ratios equalised) but never
// a token of burst, and the joiner, with half the rate and no burst,
// admitted nothing.
func TestLateJoinerGetsBurst(t *testing.T) {
	net := hnet{minDelay: time.Millisecond, maxDelay: 3 * time.Millisecond}
	for seed := uint64(1); seed <= 5; seed++ {
		r := runFounderAlone(t, seed, net, []time.Duration{10 * time.Second}, 0, 25*time.Second)
		t.Logf("seed %d: %s", seed, r)
		for i := range 2 {
			if got := r.sum([]int{i}, 15, 25); got < 30 {
				t.Errorf("seed %d: n%d admitted %d requests in [15s, 25s), want about 50 (half of 10/s)", seed, i, got)
			}
		}
		if b := r.h.nodes[1].g.BurstShare("hot"); b < 3_000_000 {
			t.Errorf("seed %d: the joiner's burst share is %d units, want about half the burst (5000000)", seed, b)
		}
		if t.Failed() {
			return
		}
	}
}
