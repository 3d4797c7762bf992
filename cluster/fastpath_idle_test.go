package cluster

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/rule"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// TestFastPathIdleSweeps: an open allowance survives fastIdleSweeps-1
// sweeps in a row that find it untouched, a take resets the count, and
// the fastIdleSweeps-th untouched sweep in a row closes it and gives its
// tokens back. (With a close at the first untouched sweep, a key checked
// less often than every sweep period lost its allowance before nearly
// every check.) The sweeps run in one Inspect call, in the loop
// goroutine, so the node's own sweep timer cannot interleave.
func TestFastPathIdleSweeps(t *testing.T) {
	n := mustSoloNode(t, Config{Rules: []rule.Rule{{Name: "r", Rate: fastRate, Burst: fastBurst, Strategy: "local"}}})
	drainAndGrant(t, n, "r", "k")
	var failure string
	err := n.Peek(context.Background(), func(now time.Duration, _ rule.Rule, _ strategy.Strategy) {
		rs := n.rules["r"]
		a := rs.fast.keys["k"]
		if a == nil {
			failure = "no allowance for k"
			return
		}
		open := a.isOpen
		if !open() {
			failure = "the allowance of k is closed before the sweeps"
			return
		}
		for i := range fastIdleSweeps - 1 {
			n.fastSweep(now)
			if !open() {
				failure = "closed after " + strconv.Itoa(i+1) + " untouched sweeps, want " + strconv.Itoa(fastIdleSweeps)
				return
			}
		}
		if _, ok := rs.fast.take("k", 1); !ok {
			failure = "take from the open allowance failed"
			return
		}
		// The first sweep after the take finds the allowance touched;
		// then fastIdleSweeps-1 untouched ones leave it open.
		for i := range fastIdleSweeps {
			n.fastSweep(now)
			if !open() {
				failure = "closed " + strconv.Itoa(i+1) + " sweeps after a take, want " + strconv.Itoa(fastIdleSweeps+1)
				return
			}
		}
		returned := rs.c.returned.Load()
		n.fastSweep(now)
		if open() {
			failure = "still open after " + strconv.Itoa(fastIdleSweeps) + " untouched sweeps in a row"
			return
		}
		if rs.c.returned.Load() <= returned {
			failure = "closed as idle without giving its tokens back"
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if failure != "" {
		t.Fatal(failure)
	}
}

// TestSeenFilterPeriods: a period lasts fastIdleSweeps sweeps, a key is
// remembered for the current and the last period (no false negatives),
// and a period records at most seenFilterMaxKeys keys before the next
// one starts.
func TestSeenFilterPeriods(t *testing.T) {
	var f seenFilter
	if f.twice("a") {
		t.Fatal("a key seen for the first time reported as seen before")
	}
	for i := range 2*fastIdleSweeps - 1 {
		f.sweep()
		if i < fastIdleSweeps-1 && f.sweeps != i+1 {
			t.Fatalf("after %d sweeps the period counts %d", i+1, f.sweeps)
		}
	}
	if f.sweeps != fastIdleSweeps-1 {
		t.Fatalf("after %d sweeps the period counts %d, want %d (one rotation)", 2*fastIdleSweeps-1, f.sweeps, fastIdleSweeps-1)
	}
	// "a" was recorded in the period before this one: still remembered
	// (which records it again, in this period).
	if !f.twice("a") {
		t.Fatal("a key of the last period was forgotten")
	}
	for range 2 * fastIdleSweeps {
		f.sweep()
	}
	// Two rotations later "a" is forgotten, up to a false positive of a
	// filter holding one key (about 1e-11).
	if f.twice("a") {
		t.Fatal("a key not seen for two periods is still remembered")
	}
	for i := range 2*seenFilterMaxKeys + 10 {
		f.twice("k" + strconv.Itoa(i))
		if f.n > seenFilterMaxKeys {
			t.Fatalf("a period recorded %d keys, above %d", f.n, seenFilterMaxKeys)
		}
	}
	if f.sweeps != 0 {
		t.Fatalf("a period started by its key count kept %d sweeps", f.sweeps)
	}
}
