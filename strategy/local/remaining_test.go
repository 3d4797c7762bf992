package local_test

import (
	"testing"

	"github.com/tokenmesh/tokenmesh/strategy/internal/remtest"
	"github.com/tokenmesh/tokenmesh/strategy/local"
)

// TestRemainingExact: local and central follow remtest.Script (burst 5 at
// 1 token/s) exactly.
func TestRemainingExact(t *testing.T) {
	for _, name := range []string{"local", "central"} {
		t.Run(name, func(t *testing.T) {
			s, err := local.New(name, remtest.Config(1, 5, nil))
			if err != nil {
				t.Fatal(err)
			}
			remtest.Exact(t, s, remtest.Script)
		})
	}
}

// That Remaining changes no state is checked for every strategy by
// sim/conformance (TestGarbageAndReadOnlyCallsChangeNothing).
