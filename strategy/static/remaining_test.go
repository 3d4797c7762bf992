package static_test

import (
	"math"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/internal/remtest"
	"github.com/tokenmesh/tokenmesh/strategy/static"
)

// TestRemainingExact: with 2 members, (r, b) = (2/s, 10) gives n0 the
// sub-bucket (1/s, 5), and Remaining follows it exactly.
func TestRemainingExact(t *testing.T) {
	s, err := static.New(remtest.Config(2, 10, []strategy.NodeID{"n0", "n1"}))
	if err != nil {
		t.Fatal(err)
	}
	remtest.Exact(t, s, []remtest.Step{
		{At: 0, Tokens: 2, WantAllowed: true, WantRemaining: 3},
		{At: 0, Tokens: 4, WantAllowed: false, WantRemaining: 3},
		{At: 1500 * time.Millisecond, WantRemaining: 4},
		{At: 1500 * time.Millisecond, Tokens: 4, WantAllowed: true, WantRemaining: 0},
		{At: 2500 * time.Millisecond, WantRemaining: 1},
		{At: 10 * time.Second, WantRemaining: 5},
		{At: 10 * time.Second, Key: "new", WantRemaining: 5},
	})
}

// That Remaining changes no state is checked for every strategy by
// sim/conformance (TestGarbageAndReadOnlyCallsChangeNothing).

// TestCapacityShares: 1/N per key held, following membership.
func TestCapacityShares(t *testing.T) {
	s, err := static.New(remtest.Config(2, 10, []strategy.NodeID{"n0", "n1"}))
	if err != nil {
		t.Fatal(err)
	}
	var fx strategy.Effects
	s.Start(0, &fx)
	if sum, keys := s.CapacityShares(); sum != 0 || keys != 0 {
		t.Fatalf("no keys: CapacityShares = %v, %d", sum, keys)
	}
	for _, k := range []string{"a", "b"} {
		s.Request(0, strategy.Request{ID: 1, Key: k, Tokens: 1}, &fx)
	}
	if sum, keys := s.CapacityShares(); sum != 1 || keys != 2 {
		t.Fatalf("2 keys, 2 members: CapacityShares = %v, %d; want 1, 2", sum, keys)
	}
	s.SetMembers(0, []strategy.NodeID{"n0", "n1", "n2"}, &fx)
	if sum, keys := s.CapacityShares(); math.Abs(sum-2.0/3) > 1e-12 || keys != 2 {
		t.Fatalf("2 keys, 3 members: CapacityShares = %v, %d; want 2/3, 2", sum, keys)
	}
}
