package gcounter_test

import (
	"testing"

	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/gcounter"
	"github.com/tokenmesh/tokenmesh/strategy/internal/remtest"
)

// TestRemainingExact: limit - consumed, refilled to now, rounded down and
// clamped to [0, burst]; one node alone is a token bucket.
func TestRemainingExact(t *testing.T) {
	s, err := gcounter.New(remtest.Config(1, 5, nil))
	if err != nil {
		t.Fatal(err)
	}
	remtest.Exact(t, s, remtest.Script)
}

func TestRemainingChangesNothing(t *testing.T) {
	remtest.Pure(t, 4, func() strategy.Strategy {
		s, err := gcounter.New(remtest.Config(2, 4, []strategy.NodeID{"n0", "n1", "n2"}, "gossip=50ms"))
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}
