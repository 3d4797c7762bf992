// Package buddy picks the member that catches a newcomer up (gcounter's and
// tbqueue's catch_up, the CRDT thesis §3.5/§5.5: a node that joins or restarts is
// sent the full state by one established member, not by all of them). Ours:
// the rule (the first established member after the newcomer in NodeID
// order, wrapping) and that a node always counts itself.
package buddy

import (
	"slices"

	"github.com/tokenmesh/tokenmesh/strategy"
)

// Of returns the member that catches newcomer up, as node self computes
// it: the first node after newcomer in sorted order, wrapping, among
// members, that was in old too (an established member); "" if none.
//
// self is counted in both lists whatever they say: a node's own state is
// established, and every node must pick the same buddy from the same view
// (strategy.Strategy.SetMembers promises a view that includes the node,
// but a view that leaves it out must not leave the newcomer without a
// buddy because the node that should be it does not see itself).
// members and old may be unsorted and hold duplicates.
func Of(self, newcomer strategy.NodeID, members, old []strategy.NodeID) strategy.NodeID {
	ms := append(slices.Clone(members), self, newcomer)
	slices.Sort(ms)
	ms = slices.Compact(ms)
	i, _ := slices.BinarySearch(ms, newcomer)
	for k := 1; k < len(ms); k++ {
		m := ms[(i+k)%len(ms)]
		if m == self || slices.Contains(old, m) {
			return m
		}
	}
	return ""
}
