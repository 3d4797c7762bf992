package tbqueue_test

import (
	"testing"

	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/internal/remtest"
	"github.com/tokenmesh/tokenmesh/strategy/tbqueue"
)

// TestRemainingExact: capacity minus the live tokens of the local queue,
// as admission counts them.
func TestRemainingExact(t *testing.T) {
	s, err := tbqueue.New(remtest.Config(1, 5, nil))
	if err != nil {
		t.Fatal(err)
	}
	remtest.Exact(t, s, remtest.Script)
}

func TestRemainingChangesNothing(t *testing.T) {
	// The defaults are sim/conformance's; these are our options.
	for _, params := range [][]string{{"gossip=50ms", "safe_margin=1s", "unique_ids=true", "coalesce=false"}} {
		remtest.Pure(t, 5, func() strategy.Strategy {
			s, err := tbqueue.New(remtest.Config(2, 4, []strategy.NodeID{"n0", "n1", "n2"}, params...))
			if err != nil {
				t.Fatal(err)
			}
			return s
		})
	}
}
