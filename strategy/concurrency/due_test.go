package concurrency

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/rendezvous"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/internal/keyorder"
)

// TestDueEventsAsEveryTickWalk: with leases (n1 forwards acquires of keys
// n0 owns, and is granted leases of them), acquires, releases at either
// node and Ticks at random times, every Tick leaves what the walks of
// every forward and every key with leases at each Tick left
// (checkTicked), and the memory accounting equals a recount.
func TestDueEventsAsEveryTickWalk(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		ttl := time.Duration(rapid.IntRange(20, 300).Draw(t, "ttl_ms")) * time.Millisecond
		leaseTTL := time.Duration(rapid.IntRange(10, 200).Draw(t, "lease_ttl_ms")) * time.Millisecond
		members := []strategy.NodeID{"n0", "n1"}
		nodes := map[strategy.NodeID]*Concurrency{}
		for i, id := range members {
			s, err := New(strategy.Config{Self: id, Members: members, Rate: bucket.Rate{Tokens: 1, Per: time.Second}, Burst: 4,
				Rand: rand.New(rand.NewPCG(uint64(i), 9)), Params: mustParams(t, "limit=4", "lease=2", "timeout=30ms",
					fmt.Sprint("permit_ttl=", ttl), fmt.Sprint("lease_ttl=", leaseTTL))})
			if err != nil {
				t.Fatal(err)
			}
			s.Start(0, &strategy.Effects{})
			nodes[id] = s
		}
		var keys []string
		for i := 0; len(keys) < 3; i++ {
			if k := fmt.Sprint("k", i); rendezvous.Owner(k, members) == "n0" {
				keys = append(keys, k)
			}
		}
		type hold struct {
			key    string
			permit uint64
		}
		var held []hold
		var net []strategy.Message
		var run func(from strategy.NodeID, fx *strategy.Effects)
		now := 2 * (ttl + leaseTTL) // the start's wait is over
		run = func(from strategy.NodeID, fx *strategy.Effects) {
			for _, d := range fx.Decisions {
				if d.Allowed {
					held = append(held, hold{keyOf(t, d, keys), d.Permit})
				}
			}
			for _, m := range fx.Messages {
				net = append(net, strategy.Message{To: m.To, Payload: m.Payload})
				_ = from
			}
		}
		deliver := func() {
			for len(net) > 0 {
				m := net[0]
				net = net[1:]
				from := members[0]
				if m.To == from {
					from = members[1]
				}
				var fx strategy.Effects
				if err := nodes[m.To].Receive(now, from, m.Payload, &fx); err != nil {
					t.Fatal(err)
				}
				run(m.To, &fx)
			}
		}
		reqKeys = map[uint64]string{}
		var id uint64
		for range rapid.IntRange(50, 300).Draw(t, "steps") {
			var fx strategy.Effects
			switch rapid.IntRange(0, 5).Draw(t, "op") {
			case 0, 1: // an acquire at n1
				id++
				k := rapid.SampledFrom(keys).Draw(t, "key")
				reqKeys[id] = k
				d, ok := nodes["n1"].Request(now, strategy.Request{ID: id, Key: k, Tokens: 1, Arrival: now}, &fx)
				if ok && d.Allowed {
					held = append(held, hold{k, d.Permit})
				}
				run("n1", &fx)
			case 2: // a release
				if len(held) == 0 {
					continue
				}
				i := rapid.IntRange(0, len(held)-1).Draw(t, "held")
				h := held[i]
				held = slices.Delete(held, i, i+1)
				at := rapid.SampledFrom(members).Draw(t, "release_at")
				nodes[at].Release(now, h.key, h.permit, &fx)
				run(at, &fx)
			case 3: // messages delivered
				deliver()
			default: // time passes, a node ticks
				now += time.Duration(rapid.IntRange(0, 40).Draw(t, "ms")) * time.Millisecond
				at := rapid.SampledFrom(members).Draw(t, "tick")
				nodes[at].Tick(now, &fx)
				if err := nodes[at].checkTicked(now); err != nil {
					t.Fatal(err)
				}
				run(at, &fx)
			}
			for _, s := range nodes {
				if err := s.CheckMemory(); err != nil {
					t.Fatal(err)
				}
			}
		}
	})
}

// reqKeys is the key of each request of TestDueEventsAsEveryTickWalk,
// for its forwarded decisions.
var reqKeys map[uint64]string

func keyOf(t *rapid.T, d strategy.Decision, keys []string) string {
	k, ok := reqKeys[d.RequestID]
	if !ok {
		t.Fatalf("decision for unknown request %d", d.RequestID)
	}
	return k
}

// TestSweepStepProperty: a sweep pass in steps of a drawn budget over an
// owner's permit tables, with grants and releases between the steps,
// drops only tables left with no permit, lease or waiter once what lapsed
// at the pass's beginning is freed (the sweep in one go then dropped
// them; a table touched since holds something newer), drops every such
// table not touched since by the pass's end, takes at most
// ceil(tables/budget)+1 steps (tables: held at the beginning or added
// since), and keeps the memory accounting equal to a recount.
func TestSweepStepProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		ttl := 100 * time.Millisecond
		s, err := New(strategy.Config{Self: "n0", Members: []strategy.NodeID{"n0"}, Rate: bucket.Rate{Tokens: 1, Per: time.Second}, Burst: 3,
			Rand: rand.New(rand.NewPCG(1, 2)), Params: mustParams(t, "limit=3", "permit_ttl=100ms", "join_wait=0")})
		if err != nil {
			t.Fatal(err)
		}
		fx := &strategy.Effects{}
		s.Start(0, fx)
		nkeys := rapid.IntRange(1, 40).Draw(t, "keys")
		type hold struct {
			key    string
			permit uint64
		}
		var held []hold
		id := uint64(0)
		acquire := func(now time.Duration, k string) {
			id++
			if d, ok := s.Request(now, strategy.Request{ID: id, Key: k, Tokens: 1, Arrival: now}, fx); ok && d.Allowed {
				held = append(held, hold{k, d.Permit})
			}
			fx.Reset()
		}
		now := ttl
		for range rapid.IntRange(0, 80).Draw(t, "requests") {
			now += time.Duration(rapid.IntRange(0, 10).Draw(t, "ms")) * time.Millisecond
			acquire(now, fmt.Sprint("k", rapid.IntRange(0, nkeys-1).Draw(t, "key")))
			if len(held) > 0 && rapid.IntRange(0, 3).Draw(t, "release") == 0 {
				i := rapid.IntRange(0, len(held)-1).Draw(t, "held")
				s.Release(now, held[i].key, held[i].permit, fx)
				fx.Reset()
				held = slices.Delete(held, i, i+1)
			}
		}
		now += time.Duration(rapid.IntRange(0, 150).Draw(t, "later")) * time.Millisecond
		s.passing, s.passAt = true, now
		droppable := map[string]bool{}
		for k, kp := range s.keys {
			n := 0
			for _, p := range kp.permits {
				if p.expires > now {
					n++
				}
			}
			droppable[k] = n == 0 && len(kp.leases) == 0 && len(kp.waiters) == 0
		}
		seen := len(s.keys)
		budget := rapid.IntRange(1, 7).Draw(t, "budget")
		for steps := 1; ; steps++ {
			if steps > (seen+budget-1)/budget+1 {
				t.Fatalf("pass not over after %d steps of %d over %d tables", steps-1, budget, seen)
			}
			before := map[string]int64{}
			for k := range s.keys {
				before[k] = s.InFlight(now, k)
			}
			over := s.sweepStep(budget)
			if err := s.CheckMemory(); err != nil {
				t.Fatal(err)
			}
			for k, n := range before {
				if _, ok := s.keys[k]; !ok && !droppable[k] {
					t.Fatalf("step %d dropped %q, not empty at the pass's beginning or touched since", steps, k)
				} else if s.InFlight(now, k) != n {
					t.Fatalf("step %d changed %q's permits in flight", steps, k)
				}
			}
			if over {
				break
			}
			if rapid.IntRange(0, 3).Draw(t, "touch") == 0 {
				k := fmt.Sprint("k", rapid.IntRange(0, nkeys+5).Draw(t, "touched"))
				if _, ok := s.keys[k]; !ok {
					seen++
				}
				acquire(now+time.Duration(steps)*keyorder.StepEvery, k)
				droppable[k] = false
			}
		}
		for k, ok := range droppable {
			if _, held := s.keys[k]; ok && held {
				t.Fatalf("table %q, empty at the pass's beginning and not touched since, kept after the pass", k)
			}
		}
		if s.order.Len() != len(s.keys) || s.order.Cursor() != 0 {
			t.Fatalf("order: %d keys, cursor %d; tables: %d", s.order.Len(), s.order.Cursor(), len(s.keys))
		}
		for k, kp := range s.keys {
			if s.order.Key(kp.pos) != k {
				t.Fatalf("%q's place %d holds %q", k, kp.pos, s.order.Key(kp.pos))
			}
		}
	})
}

// TestSweepInStepsAtTick: driven by Tick alone, an owner of 3,000 keys
// whose permits lapse drops every table within permit_ttl and a pass of
// steps after, never visiting more than keyorder.Budget tables per Tick.
func TestSweepInStepsAtTick(t *testing.T) {
	const keys = 3000
	s := newNode(t, "n0", []strategy.NodeID{"n0"}, "limit=3", "permit_ttl=1s", "join_wait=0")
	fx := &strategy.Effects{}
	s.Start(0, fx)
	now := time.Second
	for i := range keys {
		s.Request(now, strategy.Request{ID: uint64(i + 1), Key: fmt.Sprint("k", i), Tokens: 1, Arrival: now}, fx)
	}
	fx.Reset()
	pass := time.Duration(keys/keyorder.Budget+2) * keyorder.StepEvery
	late := now + 2*s.ttl + pass
	for t0 := now + keyorder.StepEvery; t0 <= 2*late; t0 += keyorder.StepEvery {
		before := s.order.Cursor()
		s.Tick(t0, fx)
		fx.Reset()
		if c := s.order.Cursor(); c-before > keyorder.Budget {
			t.Fatalf("at %v: one Tick visited %d tables", t0, c-before)
		}
		if t0 < now+s.ttl && len(s.keys) != keys {
			t.Fatalf("at %v: %d tables held, want all %d: dropped before the permits lapsed", t0, len(s.keys), keys)
		}
		if t0 >= late && len(s.keys) != 0 {
			t.Fatalf("at %v: %d tables held, want none", t0, len(s.keys))
		}
	}
	if s.order.Len() != 0 {
		t.Fatalf("%d keys left in the order", s.order.Len())
	}
}
