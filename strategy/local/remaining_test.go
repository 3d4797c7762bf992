package local_test

import (
	"testing"

	"github.com/tokenmesh/tokenmesh/strategy"
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

func TestRemainingChangesNothing(t *testing.T) {
	remtest.Pure(t, 1, func() strategy.Strategy {
		s, err := local.New("local", remtest.Config(2, 4, nil))
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}
