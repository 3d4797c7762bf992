// Package gossipgraph is the gossip topology of gcounter and tbqueue (their
// `topology` parameter): which members a node keeps delta states for, and
// which of them it sends to in a gossip round.
//
// Source: the CRDT thesis runs flat gossip on a fully connected network
// (Table 4.1, "Network topology: Fully connected": every gossip interval a
// node sends its delta state to one neighbour chosen uniformly at random,
// §3.1) and leaves other topologies open (§5.5: "it is unknown how the queue
// would perform compared to the baseline in other network topologies than a
// fully connected one"). The ring is GDRL's (001 Fig. 2, §III-A: each node
// has two neighbours); random-d peers per round is ours, the usual gossip
// fan-out. The topologies:
//
//   - full: every other member is a neighbour; one neighbour per round,
//     uniformly at random (the thesis; what the strategies did before this
//     parameter, draw for draw).
//   - ring: the predecessor and successor of the node in NodeID order over
//     its view (one neighbour with two members); one of them per round,
//     uniformly at random. A change travels around the ring one hop per
//     relay: a node passes what it merged to its neighbours other than the
//     sender (listing 3.3), so with N members a change needs about N/2 hops.
//   - random:d (d >= 1): every other member is a neighbour; each round d
//     distinct neighbours drawn uniformly at random (all of them when there
//     are at most d), each sent its own delta state. random:1 draws exactly
//     as full does.
//
// Ours: the graph is computed by every node from its own view, as gdrl's
// (strategy/gdrl.Neighbours) is; with views that differ (during a
// partition or a failure detector's delay) two nodes may disagree on an
// edge, and a delta state sent along a one-sided edge is merged and relayed
// like any other.
package gossipgraph

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"

	"github.com/tokenmesh/tokenmesh/strategy"
)

// The topology names (Topology.Kind).
const (
	Full   = "full"
	Ring   = "ring"
	Random = "random"
)

// Doc describes the parameter, for the strategies' ParamSpec.
const Doc = "the gossip topology: full (every other member is a neighbour, one at random per round: the thesis, Table 4.1), ring (the predecessor and successor in NodeID order, one of them at random per round: GDRL's ring, 001 §III-A) or random:d (d distinct members at random per round, each sent its delta state; random:1 draws as full does); the thesis §5.5 leaves topologies other than full open."

// Topology is a parsed `topology` parameter.
type Topology struct {
	Kind string // Full, Ring or Random
	D    int    // peers per round (Random only; >= 1)
}

// Parse reads "full", "ring" or "random:d" with d a whole number >= 1.
func Parse(s string) (Topology, error) {
	switch {
	case s == Full:
		return Topology{Kind: Full}, nil
	case s == Ring:
		return Topology{Kind: Ring}, nil
	case strings.HasPrefix(s, Random+":"):
		d, err := strconv.Atoi(strings.TrimPrefix(s, Random+":"))
		if err != nil || d < 1 {
			return Topology{}, fmt.Errorf("topology %q: random:d needs a whole number d >= 1 of peers per round", s)
		}
		return Topology{Kind: Random, D: d}, nil
	}
	return Topology{}, fmt.Errorf("topology %q: want full, ring or random:d", s)
}

// String is the parameter's text.
func (t Topology) String() string {
	if t.Kind == Random {
		return Random + ":" + strconv.Itoa(t.D)
	}
	return t.Kind
}

// Neighbours returns self's neighbours among members (sorted, without
// self): every other member, or for a ring its predecessor and successor
// in NodeID order over members and self. members may be unsorted, hold
// duplicates and leave self out.
func (t Topology) Neighbours(self strategy.NodeID, members []strategy.NodeID) []strategy.NodeID {
	ms := slices.Clone(members)
	slices.Sort(ms)
	ms = slices.Compact(ms)
	if t.Kind != Ring {
		return slices.DeleteFunc(ms, func(m strategy.NodeID) bool { return m == self })
	}
	i, found := slices.BinarySearch(ms, self)
	if !found {
		ms = slices.Insert(ms, i, self)
	}
	n := len(ms)
	if n < 2 {
		return nil
	}
	out := []strategy.NodeID{ms[(i+n-1)%n], ms[(i+1)%n]}
	slices.Sort(out)
	return slices.Compact(out)
}

// Pick returns the neighbours to send to this round, appended to dst[:0]:
// one of neighbours uniformly at random (full, ring: one rnd.IntN draw,
// the draw the strategies made before topologies existed), or for
// random:d min(d, len(neighbours)) distinct ones uniformly at random
// (a partial Fisher-Yates shuffle: its first draw is full's, so random:1
// is full; no draw when all are sent), in the order drawn. None without
// neighbours.
func (t Topology) Pick(rnd *rand.Rand, neighbours, dst []strategy.NodeID) []strategy.NodeID {
	dst = dst[:0]
	n := len(neighbours)
	if n == 0 {
		return dst
	}
	if t.Kind != Random {
		return append(dst, neighbours[rnd.IntN(n)])
	}
	if t.D >= n {
		return append(dst, neighbours...)
	}
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	for i := 0; i < t.D; i++ {
		j := i + rnd.IntN(n-i)
		idx[i], idx[j] = idx[j], idx[i]
		dst = append(dst, neighbours[idx[i]])
	}
	return dst
}
