// Package strattest builds the strategy.Config that strategy unit tests
// drive one node with (gcounter, tbqueue, adaptive: their newNode helpers).
// Test-only: nothing outside _test files imports it.
package strattest

import (
	"math/rand/v2"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// Fataler is the part of testing.TB (and of rapid.T) Config needs.
type Fataler interface {
	Helper()
	Fatal(args ...any)
}

// Config is node self's configuration among members (names as strings)
// for the rule (rate, burst), with the strategy parameters params
// ("name=value") and a random source of fixed seed, so a test is
// reproducible. A bad parameter fails t.
func Config(t Fataler, self string, members []string, rate bucket.Rate, burst int64, params ...string) strategy.Config {
	t.Helper()
	p, err := strategy.ParseParams(params)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]strategy.NodeID, len(members))
	for i, m := range members {
		ids[i] = strategy.NodeID(m)
	}
	return strategy.Config{Self: strategy.NodeID(self), Members: ids, Rate: rate, Burst: burst,
		Rand: rand.New(rand.NewPCG(1, 2)), Params: p}
}
