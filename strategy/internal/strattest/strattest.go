// Package strattest holds what the unit tests of several strategies share:
// the strategy.Config they drive one node with (gcounter, tbqueue,
// adaptive: their newNode helpers), catch_up's buddy check (gcounter,
// tbqueue) and Relay, a few nodes behind strategy/host on a zero-latency
// network (lease), so that no test carries an effects loop of its own. Test-only: nothing outside _test files imports it.
package strattest

import (
	"math/rand/v2"
	"testing"
	"time"

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

// CatchUpBuddy checks catch_up's choice of sender (strategy/internal/buddy)
// on node n0 of a strategy built by newNode(self, members, params...):
// with catch_up=true, after admitting a request, n0 among n0, n2, n4 must
// send its full state to n5 when n5 joins (n5's buddy is n0, wrapping),
// also when the view n0 is given leaves n0 itself out (the other nodes,
// whose views list n0, count on it), and must send n3 nothing (n3's buddy
// is n4).
func CatchUpBuddy(t testing.TB, newNode func(self string, members []string, params ...string) strategy.Strategy) {
	t.Helper()
	for _, tc := range []struct {
		view     []strategy.NodeID
		newcomer strategy.NodeID
		want     bool
	}{
		{[]strategy.NodeID{"n0", "n2", "n4", "n5"}, "n5", true},
		{[]strategy.NodeID{"n2", "n4", "n5"}, "n5", true},
		{[]strategy.NodeID{"n0", "n2", "n3", "n4"}, "n3", false},
		{[]strategy.NodeID{"n2", "n3", "n4"}, "n3", false},
	} {
		s := newNode("n0", []string{"n0", "n2", "n4"}, "catch_up=true")
		var fx strategy.Effects
		s.Start(0, &fx)
		fx.Reset()
		if d, ok := s.Request(time.Millisecond, strategy.Request{ID: 1, Key: "k", Tokens: 1, Arrival: time.Millisecond}, &fx); !ok || !d.Allowed {
			t.Fatalf("first request: %v, %v", d, ok)
		}
		fx.Reset()
		s.SetMembers(2*time.Millisecond, tc.view, &fx)
		sent := false
		for _, m := range fx.Messages {
			if m.To == tc.newcomer {
				sent = true
			}
		}
		if sent != tc.want {
			t.Errorf("view %v: full state sent to %s %v, want %v", tc.view, tc.newcomer, sent, tc.want)
		}
	}
}
