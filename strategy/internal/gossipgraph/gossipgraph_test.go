package gossipgraph

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/tokenmesh/tokenmesh/strategy"
)

func ids(s ...string) []strategy.NodeID {
	out := make([]strategy.NodeID, len(s))
	for i, x := range s {
		out[i] = strategy.NodeID(x)
	}
	return out
}

func TestParse(t *testing.T) {
	for in, want := range map[string]Topology{"full": {Kind: Full}, "ring": {Kind: Ring}, "random:3": {Kind: Random, D: 3}} {
		got, err := Parse(in)
		if err != nil || got != want || got.String() != in {
			t.Errorf("Parse(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "star", "random", "random:0", "random:-1", "random:x", "ring:2"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) accepted", bad)
		}
	}
}

func TestNeighbours(t *testing.T) {
	members := ids("n3", "n0", "n1", "n2", "n4", "n1")
	ring := Topology{Kind: Ring}
	for self, want := range map[string][]strategy.NodeID{
		"n0": ids("n1", "n4"), "n2": ids("n1", "n3"), "n4": ids("n0", "n3"),
		"n5": ids("n0", "n4"), // not in the view: placed in NodeID order
	} {
		if got := ring.Neighbours(strategy.NodeID(self), members); !slices.Equal(got, want) {
			t.Errorf("ring, %s: %v, want %v", self, got, want)
		}
	}
	if got := ring.Neighbours("a", ids("a", "b")); !slices.Equal(got, ids("b")) {
		t.Errorf("ring of two: %v", got)
	}
	if got := ring.Neighbours("a", ids("a")); len(got) != 0 {
		t.Errorf("ring of one: %v", got)
	}
	for _, tp := range []Topology{{Kind: Full}, {Kind: Random, D: 2}} {
		if got := tp.Neighbours("n2", members); !slices.Equal(got, ids("n0", "n1", "n3", "n4")) {
			t.Errorf("%v: %v", tp, got)
		}
	}
}

// random:1 draws exactly as full: the same peers from the same seed, and
// the random source left in the same state.
func TestRandomOneIsFull(t *testing.T) {
	nb := ids("a", "b", "c", "d", "e", "f", "g")
	r1, r2 := rand.New(rand.NewPCG(1, 2)), rand.New(rand.NewPCG(1, 2))
	var b1, b2 []strategy.NodeID
	for range 200 {
		b1 = Topology{Kind: Full}.Pick(r1, nb, b1)
		b2 = Topology{Kind: Random, D: 1}.Pick(r2, nb, b2)
		if !slices.Equal(b1, b2) {
			t.Fatalf("full picked %v, random:1 %v", b1, b2)
		}
	}
	if r1.Uint64() != r2.Uint64() {
		t.Fatal("the sources diverged")
	}
}

// random:d picks d distinct neighbours, each about equally often; all of
// them when d >= their number.
func TestRandomPick(t *testing.T) {
	nb := ids("a", "b", "c", "d", "e", "f", "g", "h", "i", "j")
	rnd := rand.New(rand.NewPCG(3, 4))
	tp := Topology{Kind: Random, D: 3}
	count := map[strategy.NodeID]int{}
	var buf []strategy.NodeID
	const rounds = 30000
	for range rounds {
		buf = tp.Pick(rnd, nb, buf)
		if len(buf) != 3 {
			t.Fatalf("picked %v", buf)
		}
		s := slices.Clone(buf)
		slices.Sort(s)
		if len(slices.Compact(s)) != 3 {
			t.Fatalf("not distinct: %v", buf)
		}
		for _, p := range buf {
			count[p]++
		}
	}
	for _, p := range nb {
		if c := count[p]; c < rounds*3/10*9/10 || c > rounds*3/10*11/10 {
			t.Errorf("%s picked %d times of %d rounds, want about %d", p, c, rounds, rounds*3/10)
		}
	}
	if got := (Topology{Kind: Random, D: 20}).Pick(rnd, nb[:4], nil); !slices.Equal(got, nb[:4]) {
		t.Errorf("d above the neighbours: %v", got)
	}
	if got := (Topology{Kind: Ring}).Pick(rnd, nil, nil); len(got) != 0 {
		t.Errorf("no neighbours: %v", got)
	}
}
