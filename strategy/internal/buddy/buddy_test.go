package buddy

import (
	"fmt"
	"slices"
	"testing"

	"pgregory.net/rapid"

	"github.com/tokenmesh/tokenmesh/strategy"
)

func ids(s ...string) []strategy.NodeID {
	out := make([]strategy.NodeID, len(s))
	for i, x := range s {
		out[i] = strategy.NodeID(x)
	}
	return out
}

func TestOf(t *testing.T) {
	for _, tc := range []struct {
		self, newcomer strategy.NodeID
		members, old   []strategy.NodeID
		want           strategy.NodeID
	}{
		// The next established member after the newcomer, wrapping.
		{"n0", "n1", ids("n0", "n1", "n2"), ids("n0", "n2"), "n2"},
		{"n0", "n2", ids("n0", "n1", "n2"), ids("n0", "n1"), "n0"},
		// A member that is new too is skipped.
		{"n0", "n1", ids("n0", "n1", "n2", "n3"), ids("n0", "n3"), "n3"},
		// Self counts even when its own view leaves it out: n0 and n2 must
		// agree that n0 is n3's buddy.
		{"n0", "n3", ids("n1", "n2", "n3"), ids("n1", "n2"), "n0"},
		{"n2", "n3", ids("n0", "n1", "n2", "n3"), ids("n0", "n1", "n2"), "n0"},
		// Unsorted input, duplicates.
		{"n1", "n0", ids("n2", "n0", "n1", "n2"), ids("n2", "n1"), "n1"},
		// Nobody established but self.
		{"n5", "n1", ids("n1", "n5"), nil, "n5"},
	} {
		if got := Of(tc.self, tc.newcomer, tc.members, tc.old); got != tc.want {
			t.Errorf("Of(%s, %s, %v, %v) = %q, want %q", tc.self, tc.newcomer, tc.members, tc.old, got, tc.want)
		}
	}
}

// Every established member of one shared view computes the same buddy,
// whether or not its own copy of the view lists itself, and that buddy is
// an established member: a newcomer is caught up by exactly one node.
func TestOneBuddyPerNewcomer(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(2, 8).Draw(t, "n")
		var view, old []strategy.NodeID
		for i := range n {
			id := strategy.NodeID(fmt.Sprintf("n%d", i))
			view = append(view, id)
			if rapid.Bool().Draw(t, "established") {
				old = append(old, id)
			}
		}
		if len(old) == 0 || len(old) == n {
			return
		}
		for _, nb := range view {
			if slices.Contains(old, nb) {
				continue
			}
			claims := 0
			for _, m := range old {
				mine := view
				if rapid.Bool().Draw(t, "view without self") {
					mine = slices.DeleteFunc(slices.Clone(view), func(x strategy.NodeID) bool { return x == m })
				}
				if Of(m, nb, mine, old) == m {
					claims++
				}
			}
			if claims != 1 {
				t.Fatalf("newcomer %s in %v (established %v): %d buddies", nb, view, old, claims)
			}
		}
	})
}
