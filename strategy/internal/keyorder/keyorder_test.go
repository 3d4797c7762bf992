package keyorder

import (
	"fmt"
	"testing"

	"pgregory.net/rapid"

	"github.com/tokenmesh/tokenmesh/strategy"
)

// TestOrderProperty: random adds, removes (anywhere: by the cursor, behind
// or ahead of it) and sweep visits against a model (the keys and each
// key's position, updated by Remove's moved callback): every key held is
// in the order once at the position its value keeps; a pass (Next,
// Visited until Next says done) visits every key held at its start and
// not removed since exactly once, and every key added during it.
func TestOrderProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		var o Order
		pos := map[string]int{}     // the model: key -> its value's position
		visited := map[string]int{} // this pass
		mustVisit := map[string]bool{}
		moved := func(k string, p int) { pos[k] = p }
		next := 0
		rt.Repeat(map[string]func(*rapid.T){
			"add": func(rt *rapid.T) {
				k := fmt.Sprint("k", next)
				next++
				pos[k] = o.Add(k)
				mustVisit[k] = true
			},
			"remove": func(rt *rapid.T) {
				if len(pos) == 0 {
					rt.Skip("empty")
				}
				k := o.Key(rapid.IntRange(0, o.Len()-1).Draw(rt, "pos"))
				o.Remove(pos[k], moved)
				delete(pos, k)
				delete(mustVisit, k)
			},
			"visit": func(rt *rapid.T) {
				k, ok := o.Next()
				if !ok {
					for m := range mustVisit {
						if visited[m] == 0 {
							rt.Fatalf("pass over without visiting %q", m)
						}
					}
					o.EndPass()
					visited, mustVisit = map[string]int{}, map[string]bool{}
					for m := range pos {
						mustVisit[m] = true
					}
					return
				}
				if visited[k]++; visited[k] > 1 {
					rt.Fatalf("%q visited twice in a pass", k)
				}
				if rapid.Bool().Draw(rt, "drop") { // a sweep drops the key at the cursor
					o.Remove(pos[k], moved)
					delete(pos, k)
					delete(mustVisit, k)
					return
				}
				o.Visited()
			},
			"": func(rt *rapid.T) {
				if o.Len() != len(pos) || o.Cursor() > o.Len() {
					rt.Fatalf("%d keys in the order, %d held, cursor %d", o.Len(), len(pos), o.Cursor())
				}
				for k, p := range pos {
					if o.Key(p) != k {
						rt.Fatalf("%q kept at %d, the order has %q there", k, p, o.Key(p))
					}
				}
			},
		})
	})
}

// TestSweeperSteps: a pass begins at Start + Every, takes one step per
// call with a wake-up StepEvery later, moves to the next table when a
// table's pass is over, and the next pass begins Every after this one
// began (the old cadence).
func TestSweeperSteps(t *testing.T) {
	s := Sweeper{Every: 100 * StepEvery}
	fx := &strategy.Effects{}
	s.Start(0, fx)
	var calls []int
	left := []int{2, 1} // steps each table needs
	step := func(i int) bool { calls = append(calls, i); left[i]--; return left[i] == 0 }
	s.Step(s.Every-1, fx, 2, nil, step)
	if len(calls) != 0 || s.Passing() {
		t.Fatalf("a step before the pass was due: %v", calls)
	}
	begun := 0
	now := s.Every
	for range 3 {
		fx.Reset()
		s.Step(now, fx, 2, func() { begun++ }, step)
		now += StepEvery
	}
	if fmt.Sprint(calls) != "[0 0 1]" || begun != 1 || s.Passing() {
		t.Fatalf("steps %v, %d beginnings, passing %v; want [0 0 1], 1, false", calls, begun, s.Passing())
	}
	if want := 2 * s.Every; len(fx.Wakeups) != 1 || fx.Wakeups[0] != want {
		t.Fatalf("wake-ups after the pass: %v, want [%v]", fx.Wakeups, want)
	}
}

// TestStepProperty: a pass by Step in steps of a drawn budget over an
// Index of drawn keys, each visit removing the key or keeping it as drawn
// (a removal at the cursor moves the last key there), visits every key
// exactly once, reports the pass over only after the last visit and then
// at once (EndPass: the next pass visits the kept keys again), takes
// ceil(keys/budget) steps or one more, and uses the budget it is given:
// every step but the last visits exactly budget keys.
func TestStepProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		var x Index
		n := rapid.IntRange(0, 60).Draw(rt, "keys")
		remove := map[string]bool{}
		for i := range n {
			k := fmt.Sprint("k", i)
			x.Add(k)
			remove[k] = rapid.Bool().Draw(rt, "remove")
		}
		budget := rapid.IntRange(1, 20).Draw(rt, "budget")
		seen := map[string]int{}
		steps := 0
		for over := false; !over; {
			if steps++; steps > n/budget+2 {
				rt.Fatalf("%d steps of %d for %d keys and the pass is not over", steps, budget, n)
			}
			b := budget
			over = Step(&x, &b, func(k string) bool {
				seen[k]++
				if remove[k] {
					x.Remove(k)
					return true
				}
				return false
			})
			if !over && b != 0 {
				rt.Fatalf("a step that did not end the pass left %d of its budget %d", b, budget)
			}
		}
		kept := 0
		for i := range n {
			k := fmt.Sprint("k", i)
			if seen[k] != 1 {
				rt.Fatalf("%s visited %d times in one pass", k, seen[k])
			}
			if !remove[k] {
				kept++
			}
		}
		if x.Len() != kept || x.Cursor() != 0 {
			rt.Fatalf("after the pass: %d keys (want %d), cursor %d (want 0)", x.Len(), kept, x.Cursor())
		}
	})
}

// TestStepTables: tables of drawn sizes stepped through with a budget
// visit every key once, move on to the next table within one call while
// the budget lasts, and end the pass with the cursor back at the first
// table; a pass of fewer keys than the budget is one call.
func TestStepTables(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		sizes := rapid.SliceOfN(rapid.IntRange(0, 30), 1, 5).Draw(rt, "sizes")
		budget := rapid.IntRange(1, 40).Draw(rt, "budget")
		orders := make([]Order, len(sizes))
		total := 0
		for i, s := range sizes {
			for j := range s {
				orders[i].Add(fmt.Sprint(i, "/", j))
			}
			total += s
		}
		visits, calls, at := 0, 0, 0
		for over := false; !over; {
			if calls++; calls > total+len(sizes)+1 {
				rt.Fatalf("%d calls and the pass is not over", calls)
			}
			over = StepTables(&at, len(orders), budget, func(i int, b *int) bool {
				return Step(&orders[i], b, func(string) bool { visits++; return false })
			})
		}
		if visits != total || at != 0 {
			rt.Fatalf("%d visits of %d keys, cursor at table %d (want 0)", visits, total, at)
		}
		if total < budget && calls != 1 {
			rt.Fatalf("%d keys under a budget of %d took %d calls, want 1", total, budget, calls)
		}
	})
}
