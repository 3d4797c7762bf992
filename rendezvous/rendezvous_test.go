package rendezvous

import (
	"fmt"
	"testing"

	"github.com/tokenmesh/tokenmesh/strategy"
	"pgregory.net/rapid"
)

func members(n int) []strategy.NodeID {
	out := make([]strategy.NodeID, n)
	for i := range out {
		out[i] = strategy.NodeID(fmt.Sprintf("n%d", i))
	}
	return out
}

// Removing a node moves only its keys, each to the next node in its rank.
func TestMinimalDisruption(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(2, 30).Draw(t, "n")
		ms := members(n)
		gone := rapid.IntRange(0, n-1).Draw(t, "gone")
		rest := append(append([]strategy.NodeID{}, ms[:gone]...), ms[gone+1:]...)
		for k := 0; k < 200; k++ {
			key := fmt.Sprintf("key-%d", k)
			before := Owner(key, ms)
			after := Owner(key, rest)
			if before != ms[gone] && after != before {
				t.Fatalf("key %s moved from %s to %s when %s left", key, before, after, ms[gone])
			}
			if before == ms[gone] {
				if second := Rank(nil, key, ms, 2)[1]; after != second {
					t.Fatalf("key %s of the departed %s went to %s, not its second %s", key, before, after, second)
				}
			}
		}
	})
}

// Ownership is spread evenly: no node of 10 owns more than twice its share
// of 10,000 keys.
func TestBalance(t *testing.T) {
	ms := members(10)
	count := map[strategy.NodeID]int{}
	for k := 0; k < 10000; k++ {
		count[Owner(fmt.Sprintf("h%016x", k*7919), ms)]++
	}
	for _, m := range ms {
		if count[m] < 500 || count[m] > 2000 {
			t.Fatalf("node %s owns %d of 10000 keys; counts %v", m, count[m], count)
		}
	}
}

func TestOwnerIsRankFirstAndOrderFree(t *testing.T) {
	ms := members(7)
	rev := append([]strategy.NodeID{}, ms...)
	for i, j := 0, len(rev)-1; i < j; i, j = i+1, j-1 {
		rev[i], rev[j] = rev[j], rev[i]
	}
	for k := 0; k < 100; k++ {
		key := fmt.Sprint(k)
		if Owner(key, ms) != Rank(nil, key, ms, 1)[0] || Owner(key, ms) != Owner(key, rev) {
			t.Fatalf("owner of %s depends on member order", key)
		}
	}
	if Owner("x", nil) != "" {
		t.Fatal("owner among no members")
	}
}

func BenchmarkOwner10(b *testing.B) {
	ms := members(10)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		Owner("h0123456789abcdef", ms)
	}
}
