package gdrl

import (
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/tokenmesh/tokenmesh/strategy"
)

// Neighbours returns self's neighbours, sorted, in the communication graph
// over members (self included; order does not matter) that every node with
// the same member set computes alike:
//   - ring: the predecessor and successor in NodeID order (d = 2; 001 Fig. 2,
//     004 §2.3);
//   - regular: the union of degree/2 Hamiltonian cycles over the members:
//     the member ring (NodeID order), which idle keys settle along, and
//     degree/2 - 1 random ones drawn from a generator seeded with a hash of
//     the sorted member names (001 §III-C's random d-regular graphs; ours:
//     cycles that coincide on an edge leave a node with fewer than degree
//     distinct neighbours, and each cycle alone keeps the graph connected).
//     With degree >= N-1 it is the full graph;
//   - full: every other member.
//
// Errors: an unknown graph, or for regular a degree that is odd or below 2.
func Neighbours(graph string, degree int, members []strategy.NodeID, self strategy.NodeID) ([]strategy.NodeID, error) {
	sorted := slices.Clone(members)
	slices.Sort(sorted)
	sorted = slices.Compact(sorted)
	i, found := slices.BinarySearch(sorted, self)
	if !found {
		sorted = slices.Insert(sorted, i, self)
	}
	n := len(sorted)
	var out []strategy.NodeID
	switch graph {
	case GraphRing:
		if n > 1 {
			out = append(out, sorted[(i+n-1)%n], sorted[(i+1)%n])
		}
	case GraphRegular:
		if degree < 2 || degree%2 != 0 {
			return nil, fmt.Errorf("gdrl: parameter degree=%d: a regular graph needs an even degree >= 2", degree)
		}
		if degree >= n-1 {
			return Neighbours(GraphFull, 0, sorted, self)
		}
		out = regularNeighbours(sorted, i, degree)
	case GraphFull:
		for _, m := range sorted {
			if m != self {
				out = append(out, m)
			}
		}
	default:
		return nil, fmt.Errorf("gdrl: parameter graph=%q: want %s, %s or %s", graph, GraphRing, GraphRegular, GraphFull)
	}
	slices.Sort(out)
	out = slices.Compact(out)
	out = slices.DeleteFunc(out, func(m strategy.NodeID) bool { return m == self })
	return out, nil
}

// regularNeighbours returns the neighbours, with repeats, of the member at
// index i of sorted in the union of degree/2 Hamiltonian cycles: the member
// ring, then random ones seeded by the members (see Neighbours).
func regularNeighbours(sorted []strategy.NodeID, i, degree int) []strategy.NodeID {
	n := len(sorted)
	var out []strategy.NodeID
	rnd := rand.New(rand.NewPCG(memberHash(sorted), 0x67647266)) // "gdrf"
	for c := 0; c < degree/2; c++ {
		perm := rnd.Perm(n)
		if c == 0 {
			for k := range perm {
				perm[k] = k // the member ring, which idle keys settle along
			}
		}
		for k := range perm {
			a, b := perm[k], perm[(k+1)%n]
			if a == i {
				out = append(out, sorted[b])
			} else if b == i {
				out = append(out, sorted[a])
			}
		}
	}
	return out
}

// memberHash is 64-bit FNV-1a over the sorted member names, each followed
// by a zero byte.
func memberHash(sorted []strategy.NodeID) uint64 {
	h := uint64(14695981039346656037)
	for _, m := range sorted {
		for j := 0; j < len(m); j++ {
			h ^= uint64(m[j])
			h *= 1099511628211
		}
		h ^= 0
		h *= 1099511628211
	}
	return h
}

// successor is the member after n in NodeID order among members plus n
// ("" when there is no other).
func successor(members []strategy.NodeID, n strategy.NodeID) strategy.NodeID {
	i, found := slices.BinarySearch(members, n)
	if found {
		i++
	}
	for k := 0; k < len(members); k++ {
		m := members[(i+k)%len(members)]
		if m != n {
			return m
		}
	}
	return ""
}
