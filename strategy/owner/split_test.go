package owner

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/rendezvous"
	"github.com/tokenmesh/tokenmesh/strategy"
)

func tenNodes() []strategy.NodeID {
	ms := make([]strategy.NodeID, 10)
	for i := range ms {
		ms[i] = strategy.NodeID(fmt.Sprintf("n%d", i))
	}
	return ms
}

// splitNode is node self of ms with split=k and the given placement.
func splitNode(t testing.TB, self strategy.NodeID, ms []strategy.NodeID, k int, placement string) *Owner {
	t.Helper()
	p, err := strategy.ParseParams([]string{"hold=0s", fmt.Sprintf("split=%d", k), "split_placement=" + placement})
	if err != nil {
		t.Fatal(err)
	}
	o, err := New(strategy.Config{Self: self, Members: ms, Rate: bucket.Rate{Tokens: 100, Per: time.Second}, Burst: 100,
		Rand: rand.New(rand.NewPCG(1, 2)), Params: p, LatencyHint: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	o.Start(0, &strategy.Effects{})
	return o
}

// subOwners is the primary of each of key's k sub-buckets in o's view.
func subOwners(o *Owner, key string, k int) []strategy.NodeID {
	out := make([]strategy.NodeID, k)
	for i := range k {
		out[i] = o.primary(subKey(key, i))
	}
	return out
}

// TestDistinctPlacementIsTheKeysRank: under split_placement=distinct the
// K sub-buckets of every key are owned by the key's first K nodes in
// rendezvous order, sub-bucket i by the i-th (the throttling article's K
// servers per tenant). The old placement (independent picks) fails this on
// the same keys: with K=4 of 10 nodes about half the keys have two
// sub-buckets on one node, and the test says so.
func TestDistinctPlacementIsTheKeysRank(t *testing.T) {
	ms := tenNodes()
	const k = 4
	dist := splitNode(t, "n0", ms, k, "distinct")
	ind := splitNode(t, "n0", ms, k, "independent")
	shared := 0
	for j := range 500 {
		key := fmt.Sprintf("tenant-%d", j)
		want := rendezvous.Rank(nil, key, ms, k)
		if got := subOwners(dist, key, k); !slices.Equal(got, want) {
			t.Fatalf("distinct: key %s sub-bucket owners %v, want its rendezvous order %v", key, got, want)
		}
		got := subOwners(ind, key, k)
		sorted := slices.Clone(got)
		slices.Sort(sorted)
		if len(slices.Compact(sorted)) < k {
			shared++
		}
	}
	// P(all 4 distinct of 10) = 10*9*8*7/10^4 = 0.504: about 248 of 500.
	if shared < 150 || shared > 350 {
		t.Fatalf("independent: %d of 500 keys have two sub-buckets on one node; want about 248", shared)
	}
}

// TestDistinctPlacementMoreThanNodes: with K > N each node owns
// floor(K/N) or ceil(K/N) of a key's sub-buckets.
func TestDistinctPlacementMoreThanNodes(t *testing.T) {
	ms := []strategy.NodeID{"n0", "n1", "n2"}
	o := splitNode(t, "n0", ms, 7, "distinct")
	for j := range 100 {
		count := map[strategy.NodeID]int{}
		for _, n := range subOwners(o, fmt.Sprint(j), 7) {
			count[n]++
		}
		for _, m := range ms {
			if c := count[m]; c < 2 || c > 3 {
				t.Fatalf("key %d: node %s owns %d of 7 sub-buckets (%v)", j, m, c, count)
			}
		}
	}
}

// TestDistinctForwardsGoToDistinctNodes: a node with split=4 distinct
// sends a key's requests 0..3 (sub-bucket = request ID mod K) to four
// different nodes, or decides one itself, never two on one node.
func TestDistinctForwardsGoToDistinctNodes(t *testing.T) {
	ms := tenNodes()
	o := splitNode(t, "n0", ms, 4, "distinct")
	for j := range 50 {
		key := fmt.Sprintf("t%d", j)
		seen := map[strategy.NodeID]bool{}
		for id := range uint64(4) {
			fx := &strategy.Effects{}
			rid := uint64(j)*4 + id
			o.Request(time.Second, strategy.Request{ID: rid, Key: key, Tokens: 1, Arrival: time.Second}, fx)
			to := strategy.NodeID("n0")
			if len(fx.Messages) > 0 {
				to = fx.Messages[0].To
			}
			if seen[to] {
				t.Fatalf("key %s: two sub-buckets decided on %s", key, to)
			}
			seen[to] = true
		}
	}
}

// TestDistinctReplicaTakesOver: sub-bucket i's replicas are the nodes
// after its primary in the key's order, so when the primary leaves the new
// primary is the node that held its replica.
func TestDistinctReplicaTakesOver(t *testing.T) {
	ms := tenNodes()
	o := splitNode(t, "n0", ms, 4, "distinct")
	for j := range 200 {
		key := fmt.Sprintf("t%d", j)
		for i := range 4 {
			sk := subKey(key, i)
			reps := slices.Clone(o.replicasOf(sk, ms))
			rest := slices.DeleteFunc(slices.Clone(ms), func(m strategy.NodeID) bool { return m == reps[0] })
			if got := o.ownerIn(sk, rest); got != reps[1] {
				t.Fatalf("%q: primary %s left; new primary %s, want its replica %s", sk, reps[0], got, reps[1])
			}
		}
	}
}

// TestServerQuotaSetsSplit: the throttling article's example, a tenant
// allowed 400 RPS with a per-server quota of 100, gets K = 4; 320 RPS gets 4
// sub-buckets of 80 (the article's second method); a quota above the rate
// gives 1; bad quotas, K above maxSplit and server_quota with split are
// errors.
func TestServerQuotaSetsSplit(t *testing.T) {
	for _, c := range []struct {
		rate  int64
		quota string
		want  int // 0: an error
	}{
		{400, "100", 4}, {320, "100", 4}, {100, "100", 1}, {50, "100", 1}, {401, "100", 5},
		{1000, "15.625", 64}, {1000, "15", 0}, {400, "0", 0}, {400, "-1", 0}, {400, "+Inf", 0},
	} {
		p, err := strategy.ParseParams([]string{"server_quota=" + c.quota})
		if err != nil {
			t.Fatal(err)
		}
		o, err := New(strategy.Config{Self: "n0", Members: members, Rate: bucket.Rate{Tokens: c.rate, Per: time.Second}, Burst: 1000,
			Rand: rand.New(rand.NewPCG(1, 2)), Params: p, LatencyHint: time.Millisecond})
		switch {
		case c.want == 0 && err == nil:
			t.Errorf("rate %d, server_quota=%s: accepted with split %d, want an error", c.rate, c.quota, o.split)
		case c.want != 0 && err != nil:
			t.Errorf("rate %d, server_quota=%s: %v", c.rate, c.quota, err)
		case c.want != 0 && o.split != c.want:
			t.Errorf("rate %d, server_quota=%s: split %d, want %d", c.rate, c.quota, o.split, c.want)
		}
	}
	p, err := strategy.ParseParams([]string{"server_quota=100", "split=2"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(strategy.Config{Self: "n0", Members: members, Rate: bucket.Rate{Tokens: 400, Per: time.Second}, Burst: 100,
		Rand: rand.New(rand.NewPCG(1, 2)), Params: p, LatencyHint: time.Millisecond}); err == nil {
		t.Fatal("split and server_quota together accepted")
	}
}

// TestDistinctPlacementMatchesFullRank: placement ranks only as much of
// the key's order as it needs; it equals the full order read from the
// sub-bucket's index on, wrapping around, for any number of members, split
// and holders (also more than the members).
func TestDistinctPlacementMatchesFullRank(t *testing.T) {
	for nm := 1; nm <= 12; nm++ {
		ms := tenNodes()
		for len(ms) < nm {
			ms = append(ms, strategy.NodeID(fmt.Sprintf("n%d", len(ms))))
		}
		ms = ms[:nm]
		for _, k := range []int{2, 3, 7, 13} {
			o := splitNode(t, ms[0], ms, k, "distinct")
			for j := range 20 {
				key := fmt.Sprintf("key%d", j)
				full := rendezvous.Rank(nil, key, ms, nm)
				for i := range k {
					for n := 1; n <= 4; n++ {
						var want []strategy.NodeID
						for x := range min(n, nm) {
							want = append(want, full[(i+x)%nm])
						}
						if got := o.placement(subKey(key, i), ms, n); !slices.Equal(got, want) {
							t.Fatalf("%d members, split %d, %q, %d holders: %v, want %v", nm, k, subKey(key, i), n, got, want)
						}
						if got := o.ownerIn(subKey(key, i), ms); got != want[0] {
							t.Fatalf("%d members, split %d, %q: owner %s, want %s", nm, k, subKey(key, i), got, want[0])
						}
					}
				}
			}
		}
	}
}
