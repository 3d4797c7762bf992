package tbqueue

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/internal/keyorder"
	"github.com/tokenmesh/tokenmesh/strategy/internal/strattest"
)

// TestSweepStepProperty: a sweep pass in steps of a drawn budget, with
// requests (and gossip rounds emptying delta states) between the steps,
// drops nothing the sweep in one go at the pass's beginning would not
// have dropped (every element of the key's local queue and of its delta
// states gone a sweep interval before; a key touched since is kept, its
// queue as the request left it), drops every such key not touched since
// by the pass's end (local map, order and delta states), takes at most
// ceil(keys/budget)+1 steps (keys: held at the beginning or added
// since), and keeps the memory estimate equal to a recount.
func TestSweepStepProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		q, err := New(strattest.Config(t, "a", []string{"a", "b", "c"}, testRate, testCapacity,
			"safe_margin="+rapid.SampledFrom([]string{"0", "300ms"}).Draw(t, "margin")))
		if err != nil {
			t.Fatal(err)
		}
		fx := &strategy.Effects{}
		q.Start(0, fx)
		nkeys := rapid.IntRange(1, 30).Draw(t, "keys")
		key := func(i int) string { return fmt.Sprint("k", i) }
		id := uint64(0)
		request := func(now time.Duration, k string) {
			id++
			q.Request(now, strategy.Request{ID: id, Key: k, Tokens: 1, Arrival: now}, fx)
			fx.Reset()
		}
		for i, n := 0, rapid.IntRange(0, 60).Draw(t, "requests"); i < n; i++ {
			now := time.Duration(rapid.IntRange(0, 20_000).Draw(t, "at")) * time.Millisecond
			now = max(now, time.Duration(i)) // non-decreasing enough: arrivals may go back, as from peers
			request(now, key(rapid.IntRange(0, nkeys-1).Draw(t, "key")))
			if rapid.IntRange(0, 9).Draw(t, "gossip") == 0 {
				q.gossipOnce(fx)
				fx.Reset()
			}
		}
		start := 20*time.Second + time.Duration(rapid.IntRange(0, 20_000).Draw(t, "start"))*time.Millisecond
		q.passAt = start
		droppable := map[string]bool{}
		for k, e := range q.local {
			all := q.idle(e.q)
			for _, nb := range q.neighbours {
				if dq, ok := q.delta[nb][k]; ok && !q.idle(dq) {
					all = false
				}
			}
			droppable[k] = all
		}
		seen := len(q.local)
		budget := rapid.IntRange(1, 7).Draw(t, "budget")
		for steps := 1; ; steps++ {
			if steps > (seen+budget-1)/budget+1 {
				t.Fatalf("pass not over after %d steps of %d over %d keys", steps-1, budget, seen)
			}
			before := maps.Clone(q.local)
			over := q.sweepStep(budget)
			if err := q.checkMemory(); err != nil {
				t.Fatal(err)
			}
			for k, e := range before {
				after, ok := q.local[k]
				switch {
				case !ok && !droppable[k]:
					t.Fatalf("step %d dropped %q, not idle at the pass's beginning or touched since", steps, k)
				case ok && !slices.Equal(after.q, e.q):
					t.Fatalf("step %d changed %q's queue", steps, k)
				}
			}
			if over {
				break
			}
			if rapid.IntRange(0, 3).Draw(t, "touch") == 0 {
				k := key(rapid.IntRange(0, nkeys+5).Draw(t, "touched"))
				if _, ok := q.local[k]; !ok {
					seen++
				}
				request(start+time.Duration(steps)*keyorder.StepEvery, k)
				droppable[k] = false
			}
		}
		for k, ok := range droppable {
			if ok {
				if _, held := q.local[k]; held {
					t.Fatalf("%q, idle at the pass's beginning and not touched since, kept after the pass", k)
				}
				for _, nb := range q.neighbours {
					if _, held := q.delta[nb][k]; held {
						t.Fatalf("%q's delta state for %s, idle at the pass's beginning, kept after the pass", k, nb)
					}
				}
			}
		}
		if q.order.Len() != len(q.local) || q.order.Cursor() != 0 {
			t.Fatalf("order: %d keys, cursor %d; local map: %d keys", q.order.Len(), q.order.Cursor(), len(q.local))
		}
		for k, e := range q.local {
			if q.order.Key(e.pos) != k {
				t.Fatalf("%q's place %d holds %q", k, e.pos, q.order.Key(e.pos))
			}
		}
	})
}

// checkMemory recounts the local map's share of the estimate (keys and
// queue slices) from the state.
func (q *TBQueue) checkMemory() error {
	alloc, keys := 0, 0
	for k, e := range q.local {
		alloc += queueBytes(cap(e.q))
		keys += len(k)
	}
	if alloc != q.mem.queueAlloc || len(q.local) != q.mem.keys.Len() {
		return fmt.Errorf("memory: queues %d B counted %d; keys %d counted %d", alloc, q.mem.queueAlloc, len(q.local), q.mem.keys.Len())
	}
	return nil
}

// TestSweepInStepsDropsIdleKeys: driven by Tick alone, a node of 5,000
// idle keys drops them all within a sweep interval and a pass of steps
// after they went idle, keeps a key used meanwhile, and never holds the
// loop for more than keyorder.Budget keys' visits per Tick.
func TestSweepInStepsDropsIdleKeys(t *testing.T) {
	const keys = 5000
	q := newNode(t, "a", []string{"a"})
	fx := &strategy.Effects{}
	q.Start(0, fx)
	for i := range keys {
		q.Request(0, strategy.Request{ID: uint64(i + 1), Key: fmt.Sprint("k", i), Tokens: 1}, fx)
	}
	fx.Reset()
	// Every element is gone at 1 s (rate 1/s); a sweep drops it a sweep
	// interval after that, at the first pass beginning then.
	pass := time.Duration(keys/keyorder.Budget+2) * keyorder.StepEvery
	late := time.Second + 2*q.sweepEvery + pass
	for now := keyorder.StepEvery; now <= 2*late; now += keyorder.StepEvery {
		if now == q.sweepEvery {
			q.Request(now, strategy.Request{ID: keys + 1, Key: "k7", Tokens: 1, Arrival: now}, fx)
		}
		before := q.order.Cursor()
		q.Tick(now, fx)
		fx.Reset()
		if c := q.order.Cursor(); c-before > keyorder.Budget {
			t.Fatalf("at %v: one Tick visited %d keys", now, c-before)
		}
		switch {
		case now < time.Second+q.sweepEvery && len(q.local) != keys:
			t.Fatalf("at %v: %d keys held, want all %d: dropped before idle for a sweep interval", now, len(q.local), keys)
		case now < q.sweepEvery+time.Second+q.sweepEvery && q.local["k7"].q == nil:
			t.Fatalf("at %v: k7, used at %v, dropped early", now, q.sweepEvery)
		case now >= late && now < 2*q.sweepEvery+time.Second && len(q.local) != 1:
			t.Fatalf("at %v: %d keys held, want only k7: idle keys kept beyond %v", now, len(q.local), late)
		}
	}
	if len(q.local) != 0 || q.order.Len() != 0 {
		t.Fatalf("%d keys (%d in the order) left at %v", len(q.local), q.order.Len(), 2*late)
	}
}
