package gdrl_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/gdrl"
)

// A founding member is ready from Start; a node that joins (zero default
// share) is not, until a member has paid it its default share, which takes
// a few intervals, well before ReadyWait; from then on it admits a fresh
// key, where before it would have refused it for lack of a share. Issue
// 14: a cluster that reports ready refused a seventh of its first checks.
func TestJoinerReadyOnceItHoldsItsShare(t *testing.T) {
	for seed := uint64(1); seed <= 5; seed++ {
		net := hnet{minDelay: time.Millisecond, maxDelay: 3 * time.Millisecond}
		h := &harness{fail: t.Fatalf, rnd: rand.New(rand.NewPCG(seed, 1)), seed: seed, net: net,
			rate: bucket.Rate{Tokens: 1_000_000, Per: time.Second}, burst: 1000, detection: 300 * time.Millisecond}
		for i := range 3 {
			h.nodes = append(h.nodes, &hnode{id: strategy.NodeID(fmt.Sprintf("n%d", i))})
		}
		h.nodes[0].alive, h.nodes[0].view = true, []strategy.NodeID{"n0"}
		h.start(0)
		if !h.nodes[0].g.Ready(0) {
			t.Fatal("the founder is not ready at Start")
		}
		joinAt := time.Second
		readyAt := map[int]time.Duration{}
		for i := 1; i < 3; i++ {
			h.at(joinAt, func() {
				n := h.nodes[i]
				n.alive, n.view = true, []strategy.NodeID{"n0", n.id}
				h.start(i)
				if n.g.Ready(h.now) {
					t.Errorf("seed %d: %s ready at Start with default share %v", seed, n.id, fmt.Sprint(n.g.DefaultShare()))
				}
				var fx strategy.Effects
				if d, _ := n.g.Request(h.now, strategy.Request{ID: 1, Key: "early", Tokens: 1, Arrival: h.now}, &fx); d.Allowed {
					t.Errorf("seed %d: %s admitted with a zero share: the test shows nothing", seed, n.id)
				}
				h.push(hevent{at: h.now + h.detection, kind: evView})
			})
		}
		for at := joinAt; at < 3*time.Second; at += 5 * time.Millisecond {
			h.at(at, func() {
				for i := 1; i < 3; i++ {
					if _, done := readyAt[i]; !done && h.nodes[i].g != nil && h.nodes[i].g.Ready(h.now) {
						readyAt[i] = h.now
						dc, db := h.nodes[i].g.DefaultShare()
						if dc <= 0 || db <= 0 {
							t.Errorf("seed %d: n%d ready with default share (%d, %d)", seed, i, dc, db)
						}
						var fx strategy.Effects
						key := fmt.Sprintf("fresh%d", i)
						if d, _ := h.nodes[i].g.Request(h.now, strategy.Request{ID: 2, Key: key, Tokens: 1, Arrival: h.now}, &fx); !d.Allowed {
							t.Errorf("seed %d: n%d ready but refused a fresh key", seed, i)
						}
					}
				}
			})
		}
		h.runUntil(3 * time.Second)
		for i := 1; i < 3; i++ {
			at, ok := readyAt[i]
			if !ok {
				t.Fatalf("seed %d: n%d not ready 2 s after it joined", seed, i)
			}
			if at-joinAt >= gdrl.ReadyWait/5 {
				t.Errorf("seed %d: n%d ready %v after it joined: that is the timeout, not its share", seed, i, at-joinAt)
			}
			t.Logf("seed %d: n%d ready %v after it joined", seed, i, at-joinAt)
		}
	}
}

// A node that joins alone (no member to pay it) reports ready ReadyWait
// after it started, not before, and not never.
func TestJoinerAloneReadyAfterReadyWait(t *testing.T) {
	g, err := gdrl.New(strategy.Config{Self: "a", Members: []strategy.NodeID{"a"}, Rate: bucket.Rate{Tokens: 10, Per: time.Second},
		Burst: 10, Rand: rand.New(rand.NewPCG(1, 1))})
	if err != nil {
		t.Fatal(err)
	}
	start := 3 * time.Second
	if g.Ready(start) {
		t.Fatal("ready before Start")
	}
	var fx strategy.Effects
	g.Start(start, &fx)
	if g.Ready(start + gdrl.ReadyWait - 1) {
		t.Fatal("a joiner with no share is ready before ReadyWait")
	}
	if !g.Ready(start + gdrl.ReadyWait) {
		t.Fatal("not ready at ReadyWait")
	}
}
