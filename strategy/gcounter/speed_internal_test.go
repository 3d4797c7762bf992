package gcounter

import (
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/tokenmesh/tokenmesh/strategy"
)

// stateBytesUncached is StateBytes computed from scratch, without the
// per-bucket size cache.
func stateBytesUncached(g *GCounter) int {
	n := 0
	for k, b := range g.state {
		n += computeBucketSize(k, b)
	}
	for _, keys := range g.delta {
		for k := range keys {
			if b, ok := g.state[k]; ok {
				n += computeBucketSize(k, b)
			}
		}
	}
	return n
}

// The cached StateBytes equals the uncached one after any sequence of
// requests, merges, gossip rounds, sweeps and membership changes: every
// change of a bucket clears its cached size.
func TestStateBytesCacheExact(t *testing.T) {
	tt := t
	rapid.Check(t, func(t *rapid.T) {
		members := []string{"a", "b", "c"}
		idle := rapid.SampledFrom([]string{"0s", "3s"}).Draw(t, "idle")
		nodes := make([]*GCounter, len(members))
		for i, m := range members {
			nodes[i] = newNode(tt, m, members, "idle="+idle, "catch_up=true")
		}
		now := time.Duration(0)
		var inflight []strategy.Message
		var from []strategy.NodeID
		steps := rapid.IntRange(1, 80).Draw(t, "steps")
		for s := 0; s < steps; s++ {
			now += time.Duration(rapid.IntRange(0, 700).Draw(t, "gapMs")) * time.Millisecond
			i := rapid.IntRange(0, len(nodes)-1).Draw(t, "node")
			g := nodes[i]
			var fx strategy.Effects
			switch rapid.IntRange(0, 3).Draw(t, "op") {
			case 0, 1:
				key := fmt.Sprintf("k%d", rapid.IntRange(0, 4).Draw(t, "key"))
				// An arrival before the bucket's refill timestamp (a late
				// request) changes the counter without a refill.
				arrival := max(0, now-time.Duration(rapid.IntRange(0, 1500).Draw(t, "lateMs"))*time.Millisecond)
				g.Request(now, strategy.Request{ID: uint64(s), Key: key, Tokens: int64(rapid.IntRange(1, 3).Draw(t, "tokens")), Arrival: arrival}, &fx)
			case 2:
				g.Tick(now, &fx)
			case 3:
				if len(inflight) > 0 {
					m, src := inflight[0], from[0]
					inflight, from = inflight[1:], from[1:]
					to := nodes[int(m.To[0]-'a')]
					_ = to.Receive(now, src, m.Payload, &fx)
				}
			}
			for _, m := range fx.Messages {
				inflight, from = append(inflight, m), append(from, g.self)
			}
			for _, n := range nodes {
				if got, want := n.StateBytes(), stateBytesUncached(n); got != want {
					t.Fatalf("step %d: %s StateBytes %d, uncached %d", s, n.self, got, want)
				}
			}
		}
	})
}
