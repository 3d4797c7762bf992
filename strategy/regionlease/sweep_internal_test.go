package regionlease

import (
	"math/rand/v2"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/internal/keyorder"
)

// TestSweepStepProperty: a sweep pass in steps of a drawn budget over
// the global owner's pools and a node's holdings (memMembers: b.g owns
// the keys globally, a.n forwards them), with requests between the steps,
// drops only what the sweep in one go at the pass's beginning dropped
// (its conditions, as they were: a pool full at passAt - sweepLag and
// untouched since; a holding not asking, with no lease, dry hint or
// report and no request for 2*window + region_ttl before passAt) and a
// key touched since never; drops every such key not touched since by the
// end of its table's pass; takes at most ceil(keys/budget)+1 steps per
// table (keys: held at the beginning or added since); and keeps the
// memory accounting and the orders equal to a recount (CheckMemory).
func TestSweepStepProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		// hold=0: the global owner decides at once (no ordering buffer,
		// order.go), as the steps below expect.
		p, err := strategy.ParseParams([]string{"min_lease=1", "hold=0"})
		if err != nil {
			t.Fatal(err)
		}
		self := rapid.SampledFrom([]strategy.NodeID{memGlobal, memNode}).Draw(t, "node")
		l, err := New(strategy.Config{Self: self, Members: memMembers, Rate: bucket.Rate{Tokens: 10, Per: time.Second}, Burst: 3,
			Rand: rand.New(rand.NewPCG(1, 2)), Params: p, LatencyHint: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		fx := &strategy.Effects{}
		l.Start(0, fx)
		names := memNames(rapid.IntRange(1, 20).Draw(t, "keys") + 6)
		nkeys := len(names) - 6
		id := uint64(0)
		request := func(now time.Duration, k string) {
			id++
			l.Request(now, strategy.Request{ID: id, Key: k, Tokens: 1, Arrival: now}, fx)
			fx.Reset()
		}
		now := time.Duration(0)
		for range rapid.IntRange(0, 60).Draw(t, "requests") {
			now += time.Duration(rapid.IntRange(0, 200).Draw(t, "ms")) * time.Millisecond
			request(now, names[rapid.IntRange(0, nkeys-1).Draw(t, "key")])
			if rapid.IntRange(0, 4).Draw(t, "tick") == 0 {
				l.Tick(now, fx)
				fx.Reset()
			}
		}
		now += time.Duration(rapid.IntRange(0, 20_000).Draw(t, "later")) * time.Millisecond
		l.Tick(now, fx) // forwards and asks time out
		fx.Reset()
		l.passAt = now
		at := now - l.sweepLag
		dropPool, dropHolding := map[string]bool{}, map[string]bool{}
		for k, p := range l.pools {
			cp := *p
			dropPool[k] = p.Last <= at && l.sh.Full(&cp, at)
		}
		for k, h := range l.keys {
			reports := 0
			for _, r := range h.reports {
				if r.at+2*l.window > now {
					reports++
				}
			}
			dropHolding[k] = !(h.asking || len(h.leases) > 0 || h.emptyUntil > now || now < h.lastRequestAt+2*l.window+l.rttl || reports > 0)
		}
		budget := rapid.IntRange(1, 7).Draw(t, "budget")
		for _, tc := range []struct {
			table int
			m     func() map[string]bool // the keys held
			drop  map[string]bool
		}{
			{sweepPools, func() map[string]bool { return keysOf(l.pools) }, dropPool},
			{sweepHoldings, func() map[string]bool { return keysOf(l.keys) }, dropHolding},
		} {
			seen := len(tc.m())
			for steps := 1; ; steps++ {
				if steps > (seen+budget-1)/budget+1 {
					t.Fatalf("table %d: pass not over after %d steps of %d over %d keys", tc.table, steps-1, budget, seen)
				}
				before := tc.m()
				b := budget
				over := l.sweepStep(tc.table, &b)
				if err := l.CheckMemory(); err != nil {
					t.Fatal(err)
				}
				after := tc.m()
				for k := range before {
					if !after[k] && !tc.drop[k] {
						t.Fatalf("table %d: step %d dropped %q, which the sweep in one go at the pass's beginning kept (or touched since)", tc.table, steps, k)
					}
				}
				if over {
					break
				}
				if rapid.IntRange(0, 3).Draw(t, "touch") == 0 {
					k := names[rapid.IntRange(0, len(names)-1).Draw(t, "touched")]
					n := len(tc.m())
					request(now+time.Duration(steps)*keyorder.StepEvery, k)
					seen += max(len(tc.m())-n, 0)
					dropPool[k], dropHolding[k] = false, false
				}
			}
			for k, d := range tc.drop {
				if d && tc.m()[k] {
					t.Fatalf("table %d: %q, dropped by the sweep in one go at the pass's beginning and not touched since, kept after the pass", tc.table, k)
				}
			}
		}
	})
}

func keysOf[V any](m map[string]V) map[string]bool {
	out := make(map[string]bool, len(m))
	for k := range m {
		out[k] = true
	}
	return out
}
