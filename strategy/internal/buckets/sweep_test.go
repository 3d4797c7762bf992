package buckets

import (
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/strategy/internal/keyorder"
)

// checkOrder is the sweep's bookkeeping checked against the map: every
// key once in order, at its entry's pos, and the cursor within it.
func checkOrder(t *Table) error {
	if t.order.Len() != len(t.m) || t.order.Cursor() < 0 || t.order.Cursor() > t.order.Len() {
		return fmt.Errorf("%d keys in order, %d in the map, cursor %d", t.order.Len(), len(t.m), t.order.Cursor())
	}
	for i := range t.order.Len() {
		k := t.order.Key(i)
		e, ok := t.m[k]
		if !ok || e.pos != i {
			return fmt.Errorf("order[%d] = %q: in the map %v, its pos %d", i, k, ok, e.pos)
		}
	}
	return nil
}

// TestSweepStepProperty: an incremental sweep (SweepStep with a budget of
// 1 to 6 keys) among random requests (which empty or touch buckets, or
// create them), Deletes and passes of time: a step drops a key only when
// its bucket is full at the step's now and it is not kept (no key early);
// every key whose bucket was full and untouched, and not kept, at the
// first step of a pass is gone when that pass ends (every expired key
// dropped within one pass of its expiry plus the wait for the next pass);
// a pass takes at most ceil((keys at its start + keys added during it) /
// budget) + 1 steps (the delay bounded in steps); the order stays one
// entry per key, visited keys before the cursor.
func TestSweepStepProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		tb, err := New(bucket.Rate{Tokens: 1, Per: 100 * time.Millisecond}, 2) // full 200 ms after empty
		if err != nil {
			rt.Fatal(err)
		}
		m := &sweepModel{tb: tb, budget: rapid.IntRange(1, 6).Draw(rt, "budget"), kept: map[string]bool{}, touched: map[string]bool{}}
		for i := range 4 {
			m.kept[fmt.Sprint("k", i*5)] = rapid.Bool().Draw(rt, fmt.Sprint("kept", i))
		}
		rt.Repeat(map[string]func(*rapid.T){
			"request": func(rt *rapid.T) {
				k := fmt.Sprint("k", rapid.IntRange(0, 19).Draw(rt, "key"))
				if _, ok := tb.Lookup(k); !ok {
					m.added++
				}
				tb.Get(k, m.now).AllowN(m.now, rapid.Int64Range(0, 2).Draw(rt, "tokens"))
				m.touched[k] = true
			},
			"delete": func(rt *rapid.T) {
				k := fmt.Sprint("k", rapid.IntRange(0, 19).Draw(rt, "key"))
				tb.Delete(k)
				m.touched[k] = true
			},
			"wait": func(rt *rapid.T) {
				m.now += time.Duration(rapid.IntRange(0, 150).Draw(rt, "ms")) * time.Millisecond
			},
			"step": m.step,
			"": func(rt *rapid.T) {
				if err := checkOrder(tb); err != nil {
					rt.Fatal(err)
				}
			},
		})
	})
}

// sweepModel is TestSweepStepProperty's state: the table, the pass under
// way and what it must drop.
type sweepModel struct {
	tb      *Table
	budget  int
	kept    map[string]bool
	now     time.Duration
	mustGo  []string        // full, untouched, not kept at the pass's first step
	touched map[string]bool // since the pass began
	steps   int             // of this pass
	start   int             // keys at its first step
	added   int             // keys added since
}

// step is one SweepStep, checked: nothing dropped early, the pass within
// its steps, and at its end every key of mustGo gone.
func (m *sweepModel) step(rt *rapid.T) {
	if m.steps == 0 { // a pass begins
		m.mustGo, m.touched, m.start, m.added = nil, map[string]bool{}, m.tb.Len(), 0
		for k, e := range m.tb.m {
			if e.b.Full(m.now) && !m.kept[k] {
				m.mustGo = append(m.mustGo, k)
			}
		}
	}
	before := map[string]bucket.Bucket{}
	for k, e := range m.tb.m {
		before[k] = e.b
	}
	done := m.tb.SweepStep(m.now, m.budget, func(k string) bool { return m.kept[k] })
	m.steps++
	for k, b := range before {
		if _, ok := m.tb.Lookup(k); !ok && (!b.Full(m.now) || m.kept[k]) {
			rt.Fatalf("at %v: %q dropped though not full (or kept %v)", m.now, k, m.kept[k])
		}
	}
	if most := (m.start+m.added+m.budget-1)/m.budget + 1; m.steps > most {
		rt.Fatalf("a pass of %d keys (+%d added) still under way after %d steps of %d", m.start, m.added, m.steps, m.budget)
	}
	if !done {
		return
	}
	for _, k := range m.mustGo {
		if _, ok := m.tb.Lookup(k); ok && !m.touched[k] {
			rt.Fatalf("at %v: %q was full at its pass's first step and is still held at the pass's end", m.now, k)
		}
	}
	m.steps = 0
}

// TestSweepDropsEveryFullKey: a table of 10,000 keys swept in steps of 64
// keys as a strategy does it (keyorder.Sweeper, a step per keyorder.StepEvery): the
// keys whose buckets were emptied stay until they are full; every key is
// gone within one pass (157 steps) once all are full; none before.
func TestSweepDropsEveryFullKey(t *testing.T) {
	tb, err := New(bucket.Rate{Tokens: 1, Per: time.Second}, 1)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10_000 {
		tb.Get(fmt.Sprint("k", i), 0).Allow(0) // empty: full at 1 s
	}
	steps := 0
	for ; steps < 1000 && tb.Len() > 0; steps++ {
		now := time.Duration(steps) * keyorder.StepEvery
		n := tb.Len()
		tb.SweepStep(now, 64, nil)
		if now < time.Second && tb.Len() != n {
			t.Fatalf("at %v: %d keys dropped before their buckets were full", now, n-tb.Len())
		}
	}
	full := int(time.Second / keyorder.StepEvery)
	if tb.Len() != 0 || steps > full+10_000/64+2 {
		t.Fatalf("%d keys left after %d steps (full at step %d; a pass is %d steps)", tb.Len(), steps, full, 10_000/64+1)
	}
	t.Logf("every key dropped %d steps (%v) after the buckets were full", steps-full, time.Duration(steps-full)*keyorder.StepEvery)
}
