package local_test

import (
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/internal/remtest"
	"github.com/tokenmesh/tokenmesh/strategy/local"
)

// script is burst 5 at 1 token/s: 2 taken at 0 leave 3; 4 more are
// refused; 1.5 s later 4.5 are there (4 whole); taking 4 leaves 0.5 (0),
// 1 again at 2 s;
// long after, the bucket is full (5), and a key never seen is full too.
var script = []remtest.Step{
	{At: 0, Tokens: 2, WantAllowed: true, WantRemaining: 3},
	{At: 0, Tokens: 4, WantAllowed: false, WantRemaining: 3},
	{At: 1500 * time.Millisecond, WantRemaining: 4},
	{At: 1500 * time.Millisecond, Tokens: 4, WantAllowed: true, WantRemaining: 0},
	{At: 1999 * time.Millisecond, WantRemaining: 0},
	{At: 2 * time.Second, WantRemaining: 1},
	{At: 10 * time.Second, WantRemaining: 5},
	{At: 10 * time.Second, Key: "new", WantRemaining: 5},
}

func TestRemainingExact(t *testing.T) {
	for _, name := range []string{"local", "central"} {
		t.Run(name, func(t *testing.T) {
			s, err := local.New(name, remtest.Config(1, 5, nil))
			if err != nil {
				t.Fatal(err)
			}
			remtest.Exact(t, s, script)
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
