package cluster

import (
	"context"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/rule"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// BenchmarkHolderCheck is one Check per op of a hot key at a node that
// does not own it, on a 3-node in-process cluster (MemNetwork), under a
// limit the checks never reach (1e9/s, burst 1e9): lease decides from the
// node's leases (with its allowances on the fast path since lease is a
// strategy.Allowancer, through the node's loop before), owner forwards
// every check to the key's owner; regionlease decides at a node of the
// key's region tier from its node leases (benchHolder: regions eu and us;
// allowances since it is a strategy.Allowancer at such a node). Run it
// with -cpu 1,2:
//
//	go test -run '^$' -bench HolderCheck -cpu 1,2 ./cluster
func BenchmarkHolderCheck(b *testing.B) {
	for _, strat := range []string{"lease", "owner", "regionlease"} {
		b.Run("strategy="+strat, func(b *testing.B) {
			r := rule.Rule{Name: "r", Rate: bucket.Rate{Tokens: 1e9, Per: 1e9}, Burst: 1e9, Strategy: strat, Params: []string{"hold=0s"}}
			_, n, key := benchHolder(b, strat, r)
			ctx := context.Background()
			for range 2000 { // warm up: leases granted, allowances open
				if _, err := n.Check(ctx, "r", key, 1); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if d, err := n.Check(ctx, "r", key, 1); err != nil || !d.Allowed {
						b.Errorf("check: %v, allowed %v", err, d.Allowed)
						return
					}
				}
			})
		})
	}
}

// BenchmarkHolderRefused is BenchmarkHolderCheck for a key far over its
// limit (100/s, burst 100, checked as fast as one goroutine can): nearly
// every check is refused. lease refuses on the fast path while the
// owner's dry hint lasts (refusal windows, strategy.Refuser); owner
// forwards every check to the key's owner; local decides from its lent
// bucket; regionlease, at a node of the key's region tier (benchHolder),
// refuses on the fast path while its regional owner's dry hint lasts.
// loop/op is the share of checks that reached the strategy.
func BenchmarkHolderRefused(b *testing.B) {
	for _, strat := range []string{"lease", "owner", "local", "regionlease"} {
		b.Run("strategy="+strat, func(b *testing.B) {
			r := rule.Rule{Name: "r", Rate: bucket.Rate{Tokens: 100, Per: time.Second}, Burst: 100, Strategy: strat}
			if strat != "local" {
				r.Params = []string{"hold=0s"}
			}
			_, n, key := benchHolder(b, strat, r)
			ctx := context.Background()
			for range 2000 { // warm up: the burst spent
				if _, err := n.Check(ctx, "r", key, 1); err != nil {
					b.Fatal(err)
				}
			}
			before := n.Stats().Rules["r"].Requests
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if _, err := n.Check(ctx, "r", key, 1); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(n.Stats().Rules["r"].Requests-before)/float64(b.N), "loop/op")
		})
	}
}

// newBenchCluster is newCluster for a benchmark: 3 nodes on one MemNetwork.
func newBenchCluster(b *testing.B, rules ...rule.Rule) *testCluster {
	b.Helper()
	return newBenchClusterOf(b, []strategy.NodeID{"n0", "n1", "n2"}, rules...)
}
