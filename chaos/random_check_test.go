package chaos

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// check on a history built by hand (r = 1/s, b = 1; one fault [4 s, 5 s),
// settle 1 s: quiet windows [0, 4 s] and [6 s, 10 s]): key a sends every
// 2 s and is always denied (one exact bucket admits each: 4 tokens lost in
// the quiet windows), b's one check fails (the central bucket admits it:
// one more lost), c is admitted 3 times in 0.2 s in the first window and
// 4 times in 0.3 s in the second (the worst window is the second's, c is
// over the slack; it lost nothing: it got more than the central bucket).
// a's denied check during the fault counts in Central and MaxLatency
// only, not in Lost; the second window's p99 (40 ms) is the worst.
func TestRandomResultCheck(t *testing.T) {
	ms := time.Millisecond
	h := &History{}
	for _, at := range []time.Duration{0, 2 * time.Second, 6 * time.Second, 8 * time.Second} {
		h.Add(Decision{At: at, Key: "a", Tokens: 1, Allowed: false, Latency: 10 * ms})
	}
	h.Add(Decision{At: 4500 * ms, Key: "a", Tokens: 1, Allowed: false, Latency: 50 * ms})
	h.Add(Decision{At: 7 * time.Second, Key: "b", Tokens: 1, Latency: time.Second, Err: errors.New("boom")})
	for _, at := range []time.Duration{1000 * ms, 1100 * ms, 1200 * ms} {
		h.Add(Decision{At: at, Key: "c", Tokens: 1, Allowed: true, Latency: 10 * ms})
	}
	h.Add(Decision{At: 6000 * ms, Key: "c", Tokens: 1, Allowed: true, Latency: 40 * ms})
	for _, at := range []time.Duration{6100 * ms, 6200 * ms, 6300 * ms} {
		h.Add(Decision{At: at, Key: "c", Tokens: 1, Allowed: true, Latency: 10 * ms})
	}
	env := Envelope{RatePerSec: 1, Burst: 1}
	res := RandomResult{History: h, Schedule: Schedule{Nodes: 3, Duration: 10 * time.Second, Settle: time.Second,
		Faults: []Fault{{Kind: FaultPartition, Start: 4 * time.Second, End: 5 * time.Second}}}}
	if err := res.check(env, 0.5, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	w1, err := h.Check(env, 0, 4*time.Second, 0.5)
	if err != nil {
		t.Fatal(err)
	}
	w2, err := h.Check(env, 6*time.Second, 10*time.Second, 0.5)
	if err != nil {
		t.Fatal(err)
	}
	q := res.Quiet
	if q.Checks != 12 || q.Admitted != 7 || q.Errors != 1 || q.ErrorKinds["boom"] != 1 || q.Over != 1 {
		t.Fatalf("quiet totals: %+v", q)
	}
	if q.From != 0 || q.To != 10*time.Second || q.P50 != max(w1.P50, w2.P50) || q.P99 != max(w1.P99, w2.P99) || q.P99 != 40*ms || q.P50 != 10*ms {
		t.Fatalf("quiet range and latencies: %+v (windows %v %v, %v %v)", q, w1.P50, w1.P99, w2.P50, w2.P99)
	}
	if len(q.Keys) != 3 || q.Keys[0].Key != "c" || q.Keys[1].Key != "a" || q.Keys[2].Key != "b" {
		t.Fatalf("quiet keys: %+v", q.Keys)
	}
	c := q.Keys[0]
	if c.Checks != 7 || c.Admitted != 7 || c.Violation != w2.Keys[0].Violation || c.WorstFrom != 6*time.Second || q.MaxViolation != c.Violation {
		t.Fatalf("key c: %+v (second window %+v)", c, w2.Keys[0])
	}
	if a := q.Keys[1]; a.Checks != 4 || a.Admitted != 0 || a.Violation != 0 {
		t.Fatalf("key a: %+v", a)
	}
	if b := q.Keys[2]; b.Checks != 1 || b.Errors != 1 {
		t.Fatalf("key b: %+v", b)
	}
	if res.Central != 8 || res.Lost != 5 || res.MaxLatency != 50*ms {
		t.Fatalf("central %d (want 8), lost %d (want 5), max latency %v (want 50ms)", res.Central, res.Lost, res.MaxLatency)
	}
	if res.Whole.Checks != 13 {
		t.Fatalf("whole: %+v", res.Whole)
	}
}

// RunRandom refuses, before any load, a schedule for another number of
// nodes, a bad envelope and a bad load (the load's Duration is the
// schedule's), and its result keeps the schedule and the Idle default.
func TestRunRandomRejects(t *testing.T) {
	env := Envelope{RatePerSec: 5, Burst: 5}
	s := Schedule{Seed: 1, Nodes: 3, Duration: time.Second}
	l := Load{Keys: 2, PerKeyPerSec: 20, MaxChecks: 100}
	for _, tc := range []struct {
		name  string
		nodes int
		o     RandomOptions
		want  string
	}{
		{"nodes", 2, RandomOptions{Load: l, Env: env}, "the schedule is for 3 nodes, the cluster has 2"},
		{"envelope", 3, RandomOptions{Load: l, Env: Envelope{RatePerSec: -1, Burst: 5}}, "envelope rate -1"},
		{"load", 3, RandomOptions{Load: Load{Keys: 0, PerKeyPerSec: 20, MaxChecks: 100}, Env: env}, "keys 0"},
	} {
		res, err := RunRandom(context.Background(), newFake(tc.nodes, env), s, tc.o)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want %q", tc.name, err, tc.want)
		}
		if res.Schedule.Seed != 1 || res.Idle != 10*time.Second || res.History == nil || res.Before != nil {
			t.Errorf("%s: result %+v", tc.name, res)
		}
	}
	// A run of no faults samples before, warm (half the load) and after.
	res, err := RunRandom(context.Background(), newFake(3, env), s, RandomOptions{Load: l, Env: env, Idle: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Before) != 3 || len(res.Warm) != 3 || len(res.After) != 3 || res.Idle != time.Millisecond || res.Whole.Checks == 0 {
		t.Fatalf("result %+v", res)
	}
}

// The quiet windows' sum keeps at most maxErrorKinds error kinds, the rest
// under "other", as one window's report does, and every error counted.
func TestAddWindowCapsErrorKinds(t *testing.T) {
	agg := Report{ErrorKinds: map[string]int{}}
	byKey := map[string]*KeyReport{}
	for w := range 2 {
		rep := Report{Errors: 6, ErrorKinds: map[string]int{}}
		for i := range 6 {
			rep.ErrorKinds[fmt.Sprintf("w%d-kind%d", w, i)] = 1
		}
		agg.addWindow(rep, byKey)
	}
	total := 0
	for _, n := range agg.ErrorKinds {
		total += n
	}
	if len(agg.ErrorKinds) != maxErrorKinds+1 || agg.ErrorKinds["other"] != 12-maxErrorKinds || total != 12 || agg.Errors != 12 {
		t.Fatalf("sum of two windows of 6 kinds each: %d kinds %v (errors %d), want %d kinds and %d under other",
			len(agg.ErrorKinds), agg.ErrorKinds, agg.Errors, maxErrorKinds, 12-maxErrorKinds)
	}
}
