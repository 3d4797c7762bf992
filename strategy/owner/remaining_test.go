package owner_test

import (
	"testing"

	"github.com/tokenmesh/tokenmesh/rendezvous"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/internal/remtest"
	"github.com/tokenmesh/tokenmesh/strategy/owner"
)

// TestRemainingExact: alone (so the owner of every key) with hold 0, the
// owner decides at once and Remaining is its bucket's.
func TestRemainingExact(t *testing.T) {
	s, err := owner.New(remtest.Config(1, 5, nil, "hold=0"))
	if err != nil {
		t.Fatal(err)
	}
	remtest.Exact(t, s, remtest.Script)
}

// TestRemainingOnlyAtOwner: a key owned by another node, or any key with
// an ordering buffer, has no local view.
func TestRemainingOnlyAtOwner(t *testing.T) {
	members := []strategy.NodeID{"n0", "n1"}
	s, err := owner.New(remtest.Config(1, 5, members, "hold=0"))
	if err != nil {
		t.Fatal(err)
	}
	var mine, theirs string
	for i := 0; mine == "" || theirs == ""; i++ {
		k := string(rune('a'+i%26)) + string(rune('a'+i/26))
		if rendezvous.Owner(k, members) == "n0" {
			mine = k
		} else {
			theirs = k
		}
	}
	if v, ok := s.Remaining(0, mine); !ok || v != 5 {
		t.Fatalf("own key %q: Remaining = %d, %v; want 5, true", mine, v, ok)
	}
	if v, ok := s.Remaining(0, theirs); ok || v != 0 {
		t.Fatalf("n1's key %q: Remaining = %d, %v; want 0, false", theirs, v, ok)
	}
	held, err := owner.New(remtest.Config(1, 5, nil, "hold=5ms"))
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := held.Remaining(0, mine); ok {
		t.Fatalf("hold=5ms: Remaining = %d, true; want unknown", v)
	}
}

func TestRemainingChangesNothing(t *testing.T) {
	remtest.Pure(t, 3, func() strategy.Strategy {
		s, err := owner.New(remtest.Config(2, 4, []strategy.NodeID{"n0", "n1"}, "hold=0"))
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}
