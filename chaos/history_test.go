package chaos

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// bruteForce is the largest excess of one key's admissions over every
// window [t_i, t_j] of decisions in [from, to], each window held to
// b + r*(E_j - t_i), E_j the latest answer among the admissions up to j.
func bruteForce(ds []Decision, key string, env Envelope, from, to time.Duration) float64 {
	var adm []Decision
	for _, d := range ds {
		if d.Key == key && d.Allowed && d.Err == nil && d.Tokens > 0 && d.At >= from && d.At <= to {
			adm = append(adm, d)
		}
	}
	worst := 0.0
	for i := range adm {
		var sum int64
		for j := i; j < len(adm); j++ {
			sum += adm[j].Tokens
			var end time.Duration
			for _, d := range adm[:j+1] {
				end = max(end, d.At+d.Latency)
			}
			v := float64(sum) - float64(env.Burst) - env.RatePerSec*(end-adm[i].At).Seconds()
			worst = math.Max(worst, v)
		}
	}
	if worst < 1e-6 {
		return 0
	}
	return worst
}

func TestCheckMatchesBruteForce(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		env := Envelope{RatePerSec: rapid.Float64Range(0, 5).Draw(t, "rate"), Burst: rapid.Int64Range(0, 6).Draw(t, "burst")}
		n := rapid.IntRange(0, 60).Draw(t, "n")
		var h History
		at := time.Duration(0)
		for i := range n {
			at += time.Duration(rapid.IntRange(0, 800).Draw(t, fmt.Sprint("gap", i))) * time.Millisecond
			d := Decision{At: at, Key: rapid.SampledFrom([]string{"a", "b", "c"}).Draw(t, fmt.Sprint("key", i)),
				Tokens: rapid.Int64Range(0, 3).Draw(t, fmt.Sprint("tokens", i)), Allowed: rapid.Bool().Draw(t, fmt.Sprint("ok", i)),
				Latency: time.Duration(rapid.IntRange(0, 1500).Draw(t, fmt.Sprint("latency", i))) * time.Millisecond}
			if rapid.IntRange(0, 9).Draw(t, fmt.Sprint("err", i)) == 0 {
				d.Err = errors.New("timeout")
			}
			h.Add(d)
		}
		from := time.Duration(rapid.IntRange(0, 20000).Draw(t, "from")) * time.Millisecond
		to := from + time.Duration(rapid.IntRange(0, 40000).Draw(t, "len"))*time.Millisecond
		rep, err := h.Check(env, from, to, 0.5)
		if err != nil {
			t.Fatal(err)
		}
		ds := h.Decisions()
		seen := map[string]bool{}
		over := 0
		for _, k := range rep.Keys {
			seen[k.Key] = true
			want := bruteForce(ds, k.Key, env, from, to)
			if math.Abs(k.Violation-want) > 1e-6 {
				t.Fatalf("key %s: Violation %v, brute force %v", k.Key, k.Violation, want)
			}
			if k.Violation > 0.5 {
				over++
			}
		}
		for _, k := range []string{"a", "b", "c"} {
			if !seen[k] && bruteForce(ds, k, env, from, to) != 0 {
				t.Fatalf("key %s missing from the report", k)
			}
		}
		if over != rep.Over {
			t.Fatalf("Over %d, want %d", rep.Over, over)
		}
	})
}

// A burst of b+2 sent at once, and one more a second later, is 2 tokens
// over; the burst alone is 2 tokens over less what the rate refilled while
// the last of them was answered (7 ms: 0.007 tokens); the run checked from
// after the burst is within the envelope. Latency percentiles are
// over the answered checks.
func TestCheckRange(t *testing.T) {
	var h History
	env := Envelope{RatePerSec: 1, Burst: 5}
	for i := range 7 {
		h.Add(Decision{At: time.Second, Key: "k", Tokens: 1, Allowed: true, Latency: time.Duration(i+1) * time.Millisecond})
	}
	for i := range 10 { // one per second afterwards: conforming
		h.Add(Decision{At: time.Duration(2+i) * time.Second, Key: "k", Tokens: 1, Allowed: true})
	}
	h.Add(Decision{At: 3 * time.Second, Key: "k", Tokens: 1, Err: errors.New("unreachable")})
	rep, err := h.Check(env, 0, time.Minute, 1)
	if err != nil {
		t.Fatal(err)
	}
	if rep.MaxViolation != 2 || rep.Over != 1 || rep.Admitted != 17 || rep.Errors != 1 || rep.Checks != 18 || rep.ErrorKinds["unreachable"] != 1 {
		t.Fatalf("whole run: %+v", rep)
	}
	// 17 answered checks: 10 at 0 latency, then 1..7 ms; nearest rank.
	if rep.P50 != 0 || rep.P99 != 7*time.Millisecond {
		t.Fatalf("latency p50 %v, p99 %v, want 0 and 7ms", rep.P50, rep.P99)
	}
	if k := rep.Keys[0]; k.WorstFrom != time.Second || k.WorstTo != 2*time.Second || k.WorstEnd != 2*time.Second {
		t.Fatalf("worst window sent in [%v, %v] answered by %v, want [1s, 2s] by 2s", k.WorstFrom, k.WorstTo, k.WorstEnd)
	}
	rep, err = h.Check(env, 0, 1500*time.Millisecond, 1)
	if err != nil {
		t.Fatal(err)
	}
	if k := rep.Keys[0]; math.Abs(k.Violation-1.993) > 1e-9 || k.WorstTo != time.Second || k.WorstEnd != time.Second+7*time.Millisecond {
		t.Fatalf("the burst alone: %+v, want 1.993 tokens over, answered by 1.007s", k)
	}
	rep, err = h.Check(env, 2*time.Second, time.Minute, 0)
	if err != nil {
		t.Fatal(err)
	}
	if rep.MaxViolation != 0 || rep.Over != 0 || rep.Admitted != 10 {
		t.Fatalf("after the burst: %+v", rep)
	}
	if _, err := h.Check(env, time.Minute, 0, 0); !errors.Is(err, ErrEmptyRange) {
		t.Fatalf("reversed range: %v", err)
	}
	if _, err := h.Check(Envelope{RatePerSec: math.NaN()}, 0, 1, 0); err == nil {
		t.Fatal("NaN rate accepted")
	}
}

// fakeChecker admits from one shared exact token bucket of rate 1/s burst
// 2, so Drive's history must check clean, and records the keys it saw.
type fakeChecker struct {
	mu   sync.Mutex
	seen map[string]int
	fail bool
}

func (f *fakeChecker) Check(ctx context.Context, key string, tokens int64) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail {
		return false, errors.New("down")
	}
	f.seen[key]++
	return f.seen[key] <= 2, nil
}

func TestDriveBounded(t *testing.T) {
	a, b := &fakeChecker{seen: map[string]int{}}, &fakeChecker{seen: map[string]int{}, fail: true}
	var h History
	l := Load{Keys: 4, PerKeyPerSec: 50, Duration: 2 * time.Second, MaxChecks: 40}
	start := time.Now()
	if err := Drive(context.Background(), l, start, func() ([]int, []Checker) { return []int{0, 1}, []Checker{a, b} }, &h); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el > time.Second {
		t.Fatalf("MaxChecks=40 at 200/s took %v", el)
	}
	ds := h.Decisions()
	if len(ds) != 40 {
		t.Fatalf("%d decisions, want 40 (MaxChecks)", len(ds))
	}
	nodes := map[int]int{}
	for _, d := range ds {
		nodes[d.Node]++
		if (d.Node == 1) != (d.Err != nil) {
			t.Fatalf("decision %+v: errors must come from node 1 only", d)
		}
	}
	if nodes[0] != 20 || nodes[1] != 20 {
		t.Fatalf("round robin: %v", nodes)
	}
	if len(a.seen) != 4 {
		t.Fatalf("node 0 saw keys %v, want all 4", a.seen)
	}
	if err := Drive(context.Background(), Load{Keys: 1, PerKeyPerSec: 1, Duration: time.Second}, start, nil, &h); err == nil {
		t.Fatal("a load without MaxChecks was accepted")
	}
}
