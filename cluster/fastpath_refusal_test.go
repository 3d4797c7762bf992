package cluster

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/rule"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// TestFastPathRefusalWindows: lease at a holder, a key checked far over
// its limit from 4 goroutines: the owner's dry hints open refusal windows
// (strategy.Refuser), most refusals are decided on the fast path (fewer
// checks reach the strategy than were refused), the key's admissions stay
// within b + r*T, and the refusals reach the strategy as demand
// (RefusedInWindows). Then, in the loop goroutine: a window the strategy
// ends (RefusalEnded) refuses nothing more, and a sweep after a window's
// end reports what was refused in it and keeps no window. Under -race it
// also checks the windows' fields are shared correctly.
func TestFastPathRefusalWindows(t *testing.T) {
	r := rule.Rule{Name: "r", Rate: bucket.Rate{Tokens: 50, Per: time.Second}, Burst: 10, Strategy: "lease", Params: []string{"hold=0s"}}
	c := newCluster(t, 3, false, r)
	key := keyOwnedBy(t, "n0", c.ids)
	n := c.nodes["n1"]
	start := time.Now()
	var admitted, refused atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 100000 && time.Since(start) < 300*time.Millisecond; i++ {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				d, err := n.Check(ctx, "r", key, 1)
				cancel()
				if err != nil {
					t.Errorf("check: %v", err)
					return
				}
				if d.Allowed {
					admitted.Add(1)
				} else {
					refused.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if bound := float64(r.Burst) + r.Rate.PerSec()*elapsed.Seconds(); float64(admitted.Load()) > bound {
		t.Fatalf("admitted %d in %v, above b + r*T = %.1f", admitted.Load(), elapsed, bound)
	}
	st := n.Stats().Rules["r"]
	t.Logf("%v: %d admitted, %d refused; the strategy saw %d checks; %d windows, %d refusals reported from them",
		elapsed.Round(time.Millisecond), admitted.Load(), refused.Load(), st.Requests, st.RefusalWindows, st.RefusedInWindows)
	if st.RefusalWindows == 0 || st.Requests >= refused.Load() {
		t.Fatalf("%d windows, %d checks to the strategy for %d refused: the refusals were not taken on the fast path", st.RefusalWindows, st.Requests, refused.Load())
	}

	var failure string
	err := n.Peek(context.Background(), func(now time.Duration, _ rule.Rule, _ strategy.Strategy) {
		rs := n.rules["r"]
		a := rs.fast.keys[key]
		if a == nil {
			failure = "no fast-path entry for the key"
			return
		}
		// A window the strategy ends refuses nothing more.
		a.dryUntil.Store(int64(now + time.Hour))
		if !rs.fast.refuse(a, 0, 1) {
			failure = "a window an hour ahead did not refuse"
			return
		}
		loopDriver{n}.RefusalEnded(rs.idx, key)
		if rs.fast.refuse(a, 0, 1) {
			failure = "refused after RefusalEnded"
			return
		}
		// The refusal counted above (and any the checks counted since the
		// last report) is reported by the next sweep.
		reported := rs.c.refusedFast.Load()
		n.fastSweep(now)
		if a.hasRefused() || rs.c.refusedFast.Load() <= reported {
			failure = "the sweep after the window did not report its refusal"
			return
		}
		// A window still open at the sweep is kept, with its count.
		a.dryUntil.Store(int64(now + time.Hour))
		rs.fast.refuse(a, 0, 1)
		n.fastSweep(now)
		if a.dryUntil.Load() == 0 || !a.hasRefused() {
			failure = "the sweep ended a window before its end"
			return
		}
		n.fastSweep(now + 2*time.Hour)
		if a.dryUntil.Load() != 0 || a.hasRefused() {
			failure = "the sweep after the window's end kept it"
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if failure != "" {
		t.Fatal(failure)
	}
}
