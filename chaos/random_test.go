package chaos

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"
)

// The fake's one-way cut and pause: a one-way cut is a partition of the
// node (the fake has no directions), a pause a kill that a resume undoes.
func (f *fakeCluster) OneWay(from, to []int) error {
	if len(from) == 1 {
		return f.Partition(from)
	}
	return f.Partition(to)
}
func (f *fakeCluster) Pause(i int) error  { return f.Kill(i) }
func (f *fakeCluster) Resume(i int) error { return f.Restart(context.Background(), i) }

// The same seed gives the same schedule, another seed another; faults
// never overlap, each is followed by the settle, and the quiet windows
// lie between them.
func TestNewScheduleReproducible(t *testing.T) {
	a, err := NewSchedule(7, 3, 2*time.Minute, ScheduleOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := NewSchedule(7, 3, 2*time.Minute, ScheduleOptions{})
	c, _ := NewSchedule(8, 3, 2*time.Minute, ScheduleOptions{})
	if a.String() != b.String() {
		t.Fatalf("seed 7 twice:\n%s\n%s", a, b)
	}
	if a.String() == c.String() {
		t.Fatalf("seeds 7 and 8 drew the same schedule:\n%s", a)
	}
	if len(a.Faults) < 3 {
		t.Fatalf("only %d faults in 2 minutes:\n%s", len(a.Faults), a)
	}
	for i, f := range a.Faults {
		if f.End <= f.Start || f.Node < 0 || f.Node >= 3 {
			t.Fatalf("fault %d: %v", i, f)
		}
		if i > 0 && f.Start < a.Faults[i-1].End+a.Settle {
			t.Fatalf("fault %d starts before the previous one settled:\n%s", i, a)
		}
	}
	if last := a.Faults[len(a.Faults)-1]; last.End+a.Settle > a.Duration {
		t.Fatalf("the last fault does not settle before the end:\n%s", a)
	}
	for _, w := range a.Quiet() {
		for _, f := range a.Faults {
			if w[0] < f.End+a.Settle && w[1] > f.Start {
				t.Fatalf("quiet window %v overlaps fault %v or its settle", w, f)
			}
		}
	}
	kinds := map[FaultKind]bool{}
	for seed := range uint64(20) {
		s, _ := NewSchedule(seed, 3, 2*time.Minute, ScheduleOptions{})
		for _, f := range s.Faults {
			kinds[f.Kind] = true
		}
	}
	if len(kinds) != len(FaultKinds) {
		t.Fatalf("20 seeds drew only %v", kinds)
	}
	if _, err := NewSchedule(1, 1, time.Minute, ScheduleOptions{}); err == nil {
		t.Fatal("1 node accepted")
	}
	if _, err := NewSchedule(1, 3, time.Minute, ScheduleOptions{Kinds: []FaultKind{"clock"}}); err == nil {
		t.Fatal("an unknown kind accepted")
	}
}

// On the fake (each side of a cut keeps its own exact buckets: a cut node
// admits a whole extra envelope), the whole run shows the split's excess
// while the quiet windows hold, and a deliberately broken fake (every
// node its own bucket, always) is caught in the quiet windows too.
func TestRunRandomFake(t *testing.T) {
	env := Envelope{RatePerSec: 5, Burst: 5}
	s := Schedule{Seed: 1, Nodes: 3, Duration: 4 * time.Second, Settle: 500 * time.Millisecond,
		Faults: []Fault{{Kind: FaultPartition, Node: 0, Start: 500 * time.Millisecond, End: 1500 * time.Millisecond},
			{Kind: FaultPause, Node: 1, Start: 2500 * time.Millisecond, End: 3 * time.Second}}}
	var log strings.Builder
	o := RandomOptions{Load: Load{Keys: 4, PerKeyPerSec: 30, MaxChecks: 2000}, Env: env, Slack: 0.5, Idle: 10 * time.Millisecond, Output: &log}
	res, err := RunRandom(context.Background(), newFake(3, env), s, o)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"cut n0", "heal n0", "stop n1", "cont n1"} {
		if !strings.Contains(log.String(), want) {
			t.Fatalf("progress lacks %q:\n%s", want, log.String())
		}
	}
	if res.Whole.MaxViolation < 2 {
		t.Fatalf("the split's extra envelope went unnoticed: %+v", res.Whole)
	}
	if res.Quiet.Over != 0 || res.Quiet.Checks == 0 {
		t.Fatalf("quiet windows: %+v", res.Quiet)
	}
	if res.Central == 0 || res.MaxLatency <= 0 {
		t.Fatalf("central %d, max latency %v", res.Central, res.MaxLatency)
	}
	// Broken: cut n0 for good (never healed) from the first instant.
	f := newFake(3, env)
	_ = f.Partition([]int{0})
	s2 := Schedule{Seed: 2, Nodes: 3, Duration: 2 * time.Second, Settle: 100 * time.Millisecond}
	res, err = RunRandom(context.Background(), f, s2, RandomOptions{Load: o.Load, Env: env, Slack: 0.5, Idle: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if res.Quiet.Over == 0 {
		t.Fatalf("two buckets per key in the quiet windows went unnoticed: %+v", res.Quiet)
	}
}

func TestGrownAndProcMetrics(t *testing.T) {
	s := ParseProcMetrics("# TYPE go_goroutines gauge\ngo_goroutines 42\n# TYPE process_resident_memory_bytes gauge\nprocess_resident_memory_bytes 1.048576e+07\n")
	if s.Goroutines != 42 || s.RSS != 10<<20 {
		t.Fatalf("%+v", s)
	}
	res := RandomResult{Warm: []ProcSample{{RSS: 10 << 20, Goroutines: 40}, {RSS: 10 << 20, Goroutines: 40}},
		After: []ProcSample{{RSS: 20 << 20, Goroutines: 55}, {RSS: 60 << 20, Goroutines: 80}}}
	g := res.Grown(DefaultFlat)
	if len(g) != 2 || !strings.HasPrefix(g[0], "n1: goroutines") || !strings.HasPrefix(g[1], "n1: RSS") {
		t.Fatalf("grown: %q", g)
	}
}

// recChk records which keys reached it.
type recChk struct {
	mu   *sync.Mutex
	seen map[string]map[int]bool
	i    int
}

func (r recChk) Check(_ context.Context, key string, _ int64) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen[key] == nil {
		r.seen[key] = map[int]bool{}
	}
	r.seen[key][r.i] = true
	return true, nil
}

// Every key reaches every target, whatever the number of keys (20 keys on
// 3 nodes once kept each key on one node).
func TestDriveSpreadsEveryKey(t *testing.T) {
	for _, keys := range []int{1, 2, 3, 20, 100} {
		mu := &sync.Mutex{}
		seen := map[string]map[int]bool{}
		cs := []Checker{recChk{mu, seen, 0}, recChk{mu, seen, 1}, recChk{mu, seen, 2}}
		var h History
		l := Load{Keys: keys, PerKeyPerSec: 2000 / float64(keys), Duration: time.Second, MaxChecks: 12 * keys}
		if err := Drive(context.Background(), l, time.Now(), func() ([]int, []Checker) { return []int{0, 1, 2}, cs }, &h); err != nil {
			t.Fatal(err)
		}
		for k, nodes := range seen {
			if len(nodes) != 3 {
				t.Errorf("%d keys: key %s reached nodes %v only", keys, k, nodes)
			}
		}
	}
}

// A run ended early (its context) returns with the load stopped and the
// paused node continued.
func TestRunRandomCancelResumes(t *testing.T) {
	env := Envelope{RatePerSec: 5, Burst: 5}
	f := newFake(3, env)
	s := Schedule{Seed: 1, Nodes: 3, Duration: 20 * time.Second, Settle: time.Second,
		Faults: []Fault{{Kind: FaultPause, Node: 1, Start: 200 * time.Millisecond, End: 15 * time.Second}}}
	ctx, cancel := context.WithTimeout(context.Background(), 600*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := RunRandom(ctx, f, s, RandomOptions{Load: Load{Keys: 2, PerKeyPerSec: 20, MaxChecks: 1000}, Env: env})
	if err == nil || time.Since(start) > 5*time.Second {
		t.Fatalf("err %v after %v, want the context's error at once", err, time.Since(start))
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.dead[1] {
		t.Fatal("node 1 still paused after the run returned")
	}
}
