package gdrl_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/gdrl"
)

func members(n int) []strategy.NodeID {
	out := make([]strategy.NodeID, n)
	for i := range out {
		out[i] = strategy.NodeID(fmt.Sprintf("m%03d", i))
	}
	return out
}

// Graphs are symmetric, connected, deterministic for a member set, and the
// ring and regular graphs have the promised degrees.
func TestGraphs(t *testing.T) {
	for _, c := range []struct {
		graph  string
		degree int
		n      int
		want   int // exact degree for ring/full; upper bound for regular
	}{
		{"ring", 0, 1, 0}, {"ring", 0, 2, 1}, {"ring", 0, 10, 2}, {"full", 0, 7, 6},
		{"regular", 2, 10, 2}, {"regular", 4, 10, 4}, {"regular", 8, 100, 8}, {"regular", 4, 4, 3},
	} {
		ms := members(c.n)
		adj := map[strategy.NodeID][]strategy.NodeID{}
		total := 0
		for _, m := range ms {
			nb, err := gdrl.Neighbours(c.graph, c.degree, ms, m)
			if err != nil {
				t.Fatal(err)
			}
			adj[m] = nb
			total += len(nb)
			if len(nb) > c.want || (c.graph != "regular" && len(nb) != c.want) {
				t.Errorf("%s d=%d N=%d: %s has %d neighbours", c.graph, c.degree, c.n, m, len(nb))
			}
		}
		for a, nbs := range adj {
			for _, b := range nbs {
				if !slices.Contains(adj[b], a) {
					t.Errorf("%s: %s -> %s but not back", c.graph, a, b)
				}
			}
		}
		seen := map[strategy.NodeID]bool{ms[0]: true}
		for queue := []strategy.NodeID{ms[0]}; len(queue) > 0; queue = queue[1:] {
			for _, b := range adj[queue[0]] {
				if !seen[b] {
					seen[b] = true
					queue = append(queue, b)
				}
			}
		}
		if len(seen) != c.n {
			t.Errorf("%s d=%d N=%d: not connected", c.graph, c.degree, c.n)
		}
		if c.graph == "regular" {
			t.Logf("regular d=%d N=%d: mean degree %.2f", c.degree, c.n, float64(total)/float64(c.n))
		}
	}
	// The member set's order does not matter.
	ms := members(20)
	rev := slices.Clone(ms)
	slices.Reverse(rev)
	a, _ := gdrl.Neighbours("regular", 4, ms, "m007")
	b, _ := gdrl.Neighbours("regular", 4, rev, "m007")
	if !slices.Equal(a, b) {
		t.Errorf("regular graph depends on member order: %v vs %v", a, b)
	}
}
