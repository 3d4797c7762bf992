package lease

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/internal/keyorder"
)

// TestSweepStepProperty: a sweep pass in steps of a drawn budget over a
// node's pools (keys it owns) and holdings (keys n1 owns, forwarded and
// asked for), with requests between the steps, drops only what the sweep
// in one go at the pass's beginning dropped (its conditions, as they
// were: a pool full at passAt - sweepLag, untouched since and with no
// request queued; a holding not asking, with no lease or dry hint and no
// request for 2*window + ttl before passAt) and a key touched since never;
// drops every such key not touched since by the end of its table's pass;
// takes at most ceil(keys/budget)+1 steps per table (keys: held at the
// beginning or added since); and keeps the memory accounting and the
// orders equal to a recount (CheckMemory).
func TestSweepStepProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p, err := strategy.ParseParams([]string{"hold=0s", "min_lease=1", "window=200ms", "ttl=300ms"})
		if err != nil {
			t.Fatal(err)
		}
		l, err := New(strategy.Config{Self: "n0", Members: memMembers, Rate: bucket.Rate{Tokens: 10, Per: time.Second}, Burst: 3,
			Rand: rand.New(rand.NewPCG(1, 2)), Params: p, LatencyHint: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		fx := &strategy.Effects{}
		l.Start(0, fx)
		nkeys := rapid.IntRange(1, 30).Draw(t, "keys")
		id := uint64(0)
		request := func(now time.Duration, k string) {
			id++
			l.Request(now, strategy.Request{ID: id, Key: k, Tokens: 1, Arrival: now}, fx)
			fx.Reset()
		}
		now := time.Duration(0)
		for range rapid.IntRange(0, 60).Draw(t, "requests") {
			now += time.Duration(rapid.IntRange(0, 100).Draw(t, "ms")) * time.Millisecond
			request(now, fmt.Sprint("k", rapid.IntRange(0, nkeys-1).Draw(t, "key")))
			if rapid.IntRange(0, 4).Draw(t, "tick") == 0 {
				l.Tick(now, fx)
				fx.Reset()
			}
		}
		now += time.Duration(rapid.IntRange(0, 3000).Draw(t, "later")) * time.Millisecond
		l.Tick(now, fx) // forwards and asks time out
		fx.Reset()
		l.beginPass(now)
		queued := l.queuedKeys()
		at := now - l.sweepLag
		dropPool, dropHolding := map[string]bool{}, map[string]bool{}
		for k, p := range l.pools {
			cp := *p
			dropPool[k] = !queued[k] && p.Last <= at && l.sh.full(&cp, at)
		}
		for k, h := range l.keys {
			dropHolding[k] = !(h.asking || len(h.leases) > 0 || h.emptyUntil > now || now < h.lastRequestAt+2*l.window+l.ttl)
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
				over := l.sweepStep(now, tc.table, &b)
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
					k := fmt.Sprint("k", rapid.IntRange(0, nkeys+5).Draw(t, "touched"))
					n := len(tc.m())
					request(now+time.Duration(steps)*keyorder.StepEvery, k)
					seen += len(tc.m()) - n
					tc.drop[k], dropPool[k], dropHolding[k] = false, false, false
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

// TestSweepInStepsDropsIdleKeys: driven by Tick alone, an owner of 3,000
// keys drops their pools within a sweep interval, sweepLag and a pass of
// steps after they refilled, and never visits more than keyorder.Budget
// of them in one Tick.
func TestSweepInStepsDropsIdleKeys(t *testing.T) {
	const keys = 3000
	l := memNode(t, "n0")
	fx := &strategy.Effects{}
	names := ownedNames(keys)
	for i, k := range names {
		l.Request(0, strategy.Request{ID: uint64(i + 1), Key: k, Tokens: 1}, fx)
	}
	fx.Reset()
	full := 100 * time.Millisecond // one token at 10/s
	pass := time.Duration(keys/keyorder.Budget+2) * keyorder.StepEvery
	late := full + l.sweepLag + 2*l.sweepEvery + pass
	for now := keyorder.StepEvery; now <= 2*late; now += keyorder.StepEvery {
		before := l.poolOrder.Cursor()
		l.Tick(now, fx)
		fx.Reset()
		if c := l.poolOrder.Cursor(); c-before > keyorder.Budget {
			t.Fatalf("at %v: one Tick visited %d pools", now, c-before)
		}
		if now < full && len(l.pools) != keys {
			t.Fatalf("at %v: %d pools held, want %d: dropped before full", now, len(l.pools), keys)
		}
		if now >= late && len(l.pools) != 0 {
			t.Fatalf("at %v: %d pools held, want none", now, len(l.pools))
		}
	}
	if err := l.CheckMemory(); err != nil {
		t.Fatal(err)
	}
}
