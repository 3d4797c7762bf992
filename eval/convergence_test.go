package eval

import (
	"math"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/tokenmesh/tokenmesh/sim"
	"github.com/tokenmesh/tokenmesh/workload"
)

// steady is a trace of one key, "a", with one request every 100 ms (10 a
// bin) for span, central admitting every one.
func steady(span time.Duration) (reqs []workload.Request, central []bool) {
	for at := time.Duration(0); at < span; at += 100 * time.Millisecond {
		reqs = append(reqs, workload.Request{Arrival: at, Key: "a", Tokens: 1})
		central = append(central, true)
	}
	return reqs, central
}

// A strategy that refuses everything in [30 s, 50 s) of a 120 s trace and
// agrees with central elsewhere: the 10 s windows starting at 21..49 s
// overlap the outage, and from 50 s on the cluster has converged (windows
// 50..59 are within). From any event in (-9 s, 50 s] the first window out
// of tolerance within the 30 s horizon is 21 s (or the event's own), so
// the cluster converges at 50 s; from 50 s on at once. With a 20 s
// horizon, an event at 0 s sees no window out of tolerance before 20 s,
// and the cluster had converged at once (windows 0..9 are within).
func TestConvergenceTimeKnown(t *testing.T) {
	reqs, central := steady(120 * time.Second)
	allowed := make([]bool, len(reqs))
	for i, r := range reqs {
		allowed[i] = r.Arrival < 30*time.Second || r.Arrival >= 50*time.Second
	}
	spec := DefaultConvergence
	events := []time.Duration{0, 11 * time.Second, 12 * time.Second, 30 * time.Second, 35500 * time.Millisecond, 50 * time.Second, 100 * time.Second}
	want := []time.Duration{50 * time.Second, 39 * time.Second, 38 * time.Second, 20 * time.Second, 14500 * time.Millisecond, 0, 0}
	got := ConvergenceTimes(reqs, allowed, central, events, spec)
	for i := range events {
		if got[i] != want[i] {
			t.Errorf("event at %v: convergence time %v, want %v", events[i], got[i], want[i])
		}
	}
	short := spec
	short.Horizon = 20 * time.Second
	if got := ConvergenceTimes(reqs, allowed, central, []time.Duration{0, 2 * time.Second}, short); got[0] != 0 || got[1] != 48*time.Second {
		t.Errorf("horizon 20 s: got %v, want [0s 48s]", got)
	}
	// central against itself: 0 after every event, up to the rounding to
	// the next bin (35.5 s -> 36 s).
	for i, d := range ConvergenceTimes(reqs, central, central, events, spec) {
		if want := (events[i] + time.Second - 1).Truncate(time.Second) - events[i]; d != want {
			t.Errorf("central against itself, event at %v: %v, want %v", events[i], d, want)
		}
	}
}

// Never: the strategy refuses everything from 60 s on; and the tolerance
// is 1% of central's tokens in the window: 1 refusal in 100 (10 s of 10 a
// second) is within, 2 are not.
func TestConvergenceNeverAndTolerance(t *testing.T) {
	reqs, central := steady(120 * time.Second)
	allowed := make([]bool, len(reqs))
	for i, r := range reqs {
		allowed[i] = r.Arrival < 60*time.Second
	}
	// The windows out of tolerance start at 51 s: beyond 10 s's 30 s
	// horizon, within 25 s's.
	got := ConvergenceTimes(reqs, allowed, central, []time.Duration{10 * time.Second, 25 * time.Second, 60 * time.Second}, DefaultConvergence)
	if got[0] != 0 || got[1] != Never || got[2] != Never {
		t.Fatalf("got %v, want [0 Never Never]", got)
	}
	for _, c := range []struct {
		every int // one refusal every this many requests
		want  time.Duration
	}{{100, 0}, {50, Never}} {
		for i := range allowed {
			allowed[i] = i%c.every != c.every-1
		}
		if got := ConvergenceTimes(reqs, allowed, central, []time.Duration{0}, DefaultConvergence); got[0] != c.want {
			t.Errorf("one refusal in %d: %v, want %v", c.every, got[0], c.want)
		}
	}
}

// Errors of opposite sign on two keys do not cancel: over-admitting b while
// under-admitting a by as much is not within.
func TestConvergenceKeysDoNotCancel(t *testing.T) {
	var reqs []workload.Request
	var allowed, central []bool
	for at := time.Duration(0); at < 60*time.Second; at += 100 * time.Millisecond {
		reqs = append(reqs, workload.Request{Arrival: at, Key: "a", Tokens: 1}, workload.Request{Arrival: at, Key: "b", Tokens: 1})
		central = append(central, true, false)
		refuse := at < 30*time.Second && at%time.Second == 0 // a refused, b admitted, once a second
		allowed = append(allowed, !refuse, refuse)
	}
	got := ConvergenceTimes(reqs, allowed, central, []time.Duration{0}, DefaultConvergence)
	if got[0] != 30*time.Second {
		t.Fatalf("got %v, want 30s (the errors on a and b cancel in the total, not per key)", got[0])
	}
}

// The sliding computation equals the definition evaluated window by
// window, on random traces and decisions.
func TestConvergenceMatchesBruteForce(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		spec := ConvergenceSpec{Bin: time.Second, Window: time.Duration(rapid.IntRange(1, 4).Draw(t, "window_s")) * time.Second,
			Hold: time.Duration(rapid.IntRange(1, 4).Draw(t, "hold_s")) * time.Second, Tolerance: 0.1,
			Horizon: time.Duration(rapid.IntRange(0, 5).Draw(t, "horizon_s")) * time.Second}
		n := rapid.IntRange(1, 80).Draw(t, "n")
		reqs := make([]workload.Request, n)
		allowed, central := make([]bool, n), make([]bool, n)
		at := time.Duration(rapid.IntRange(0, 3000).Draw(t, "origin_ms")) * time.Millisecond
		for i := range reqs {
			at += time.Duration(rapid.IntRange(0, 700).Draw(t, "dt_ms")) * time.Millisecond
			reqs[i] = workload.Request{Arrival: at, Key: rapid.SampledFrom([]string{"a", "b", "c"}).Draw(t, "key"), Tokens: int64(rapid.IntRange(1, 3).Draw(t, "tokens"))}
			central[i] = rapid.Float64Range(0, 1).Draw(t, "c") < 0.7
			allowed[i] = central[i]
			if rapid.Float64Range(0, 1).Draw(t, "flip") < 0.15 {
				allowed[i] = !allowed[i]
			}
		}
		events := []time.Duration{reqs[0].Arrival - time.Second, reqs[n/2].Arrival + 300*time.Millisecond, reqs[n-1].Arrival}
		got := ConvergenceTimes(reqs, allowed, central, events, spec)
		origin := reqs[0].Arrival
		last := int(reqs[n-1].Arrival-origin) / int(time.Second)
		wb, hb := int(spec.Window/time.Second), int(spec.Hold/time.Second)
		within := func(j int) bool { // window [j, j+wb) in bins, whole
			if j+wb-1 > last {
				return false
			}
			diff := map[string]int64{}
			var cen int64
			for i, r := range reqs {
				b := int((r.Arrival - origin) / time.Second)
				if b < j || b >= j+wb {
					continue
				}
				if central[i] {
					cen += r.Tokens
					diff[r.Key] -= r.Tokens
				}
				if allowed[i] {
					diff[r.Key] += r.Tokens
				}
			}
			var dev int64
			for _, d := range diff {
				dev += abs64(d)
			}
			return cen > 0 && float64(dev) <= spec.Tolerance*float64(cen)
		}
		for k, e := range events {
			j := 0
			if e > origin {
				j = int(math.Ceil(float64(e-origin) / float64(time.Second)))
			}
			hz := int(spec.Horizon / time.Second)
			for b := j; b < j+hz && b+wb-1 <= last; b++ {
				if !within(b) {
					j = b // the first window out of tolerance within the horizon
					break
				}
			}
			want := Never
			for ; j <= last; j++ {
				ok := true
				for h := 0; h < hb && ok; h++ {
					ok = within(j + h)
				}
				if ok {
					want = origin + time.Duration(j)*time.Second - e
					break
				}
			}
			if got[k] != want {
				t.Fatalf("event %d at %v: got %v, want %v", k, e, got[k], want)
			}
		}
	})
}

// Demand changes: a key going from 1 to 3 requests a second (30 tokens
// more in 10 s, above rate x 10 s = 10) at 30 s, and back at 60 s; another
// key doubling by less than the floor (1 -> 2 in a window) changes nothing.
func TestDemandChanges(t *testing.T) {
	var reqs []workload.Request
	for at := time.Duration(0); at < 90*time.Second; at += 100 * time.Millisecond {
		if at%time.Second == 0 || (at >= 30*time.Second && at < 60*time.Second && at%(time.Second/3) < 100*time.Millisecond) {
			reqs = append(reqs, workload.Request{Arrival: at, Key: "a", Tokens: 1})
		}
		if at == 5*time.Second || at == 15*time.Second || at == 16*time.Second {
			reqs = append(reqs, workload.Request{Arrival: at, Key: "b", Tokens: 1})
		}
	}
	got := DemandChanges(reqs, 1, DefaultConvergence)
	want := []time.Duration{30 * time.Second, 60 * time.Second}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("demand changes %v, want %v", got, want)
	}
	// A key that stops (20 tokens in a window, then none) is a change too.
	var stop []workload.Request
	for at := time.Duration(0); at < 40*time.Second; at += 500 * time.Millisecond {
		k := "a"
		if at >= 20*time.Second {
			k = "c" // a stops at 20 s, c starts: both change in window 2
		}
		stop = append(stop, workload.Request{Arrival: at, Key: k, Tokens: 1})
	}
	if got := DemandChanges(stop, 1, DefaultConvergence); len(got) != 1 || got[0] != 20*time.Second {
		t.Fatalf("stop: %v, want [20s]", got)
	}
}

// Events too close to the end to measure are left out and counted.
func TestConvergenceEventsLate(t *testing.T) {
	reqs, _ := steady(60 * time.Second) // bins 0..59; the last 10 s windows start at 50
	sc := &sim.Scenario{Events: []sim.ScenarioEvent{{At: 10 * time.Second}, {At: 41 * time.Second}, {At: 42 * time.Second}}}
	faults, demand, late := ConvergenceEvents(reqs, sc, 1, DefaultConvergence)
	// From 41 s: windows 41..50 all whole; from 42 s the tenth would start at 51.
	if len(faults) != 2 || faults[1] != 41*time.Second || len(demand) != 0 || late != 1 {
		t.Fatalf("faults %v demand %v late %d, want [10s 41s] [] 1", faults, demand, late)
	}
}

// The distribution counts never as longest: with 2 of 4 events never, the
// median (nearest rank 2 of 4) is the longer of the two converged times,
// and p90 and max are never.
func TestConvergenceDist(t *testing.T) {
	d := convergenceDist([]time.Duration{Never, 3 * time.Second, Never, 1 * time.Second})
	if d.Events != 4 || d.Never != 2 || d.MedianS == nil || *d.MedianS != 3 || d.P90S != nil || d.MaxS != nil {
		t.Fatalf("got %+v", d)
	}
	d = convergenceDist([]time.Duration{2 * time.Second, 0, 5 * time.Second})
	if d.Never != 0 || *d.MedianS != 2 || *d.P90S != 5 || *d.MaxS != 5 {
		t.Fatalf("got %+v", d)
	}
	if d := convergenceDist(nil); d.Events != 0 || d.MedianS != nil {
		t.Fatalf("no events: %+v", d)
	}
}
