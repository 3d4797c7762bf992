package adaptive_test

import (
	"testing"

	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/adaptive"
	"github.com/tokenmesh/tokenmesh/strategy/internal/remtest"
)

// TestRemainingExact: with 2 members and no epoch yet, (2/s, 10) is split
// statically and n0's sub-bucket is (1/s, 5).
func TestRemainingExact(t *testing.T) {
	s, err := adaptive.New(remtest.Config(2, 10, []strategy.NodeID{"n0", "n1"}))
	if err != nil {
		t.Fatal(err)
	}
	remtest.Exact(t, s, remtest.Script)
	if sum, keys := s.CapacityShares(); sum != 0.5 || keys != 1 {
		t.Fatalf("CapacityShares = %v, %d; want 0.5, 1 (key k on the static split)", sum, keys)
	}
}

// That Remaining changes no state is checked for every strategy by
// sim/conformance (TestGarbageAndReadOnlyCallsChangeNothing).
