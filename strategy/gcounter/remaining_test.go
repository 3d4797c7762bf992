package gcounter_test

import (
	"testing"

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

// That Remaining changes no state is checked for every strategy by
// sim/conformance (TestGarbageAndReadOnlyCallsChangeNothing).
