package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
)

// fakeCluster is an in-process stand-in for real processes: each side of
// a partition keeps its own exact token buckets ("available": both sides
// admit the whole limit), and a heal keeps, per key, the more-consumed
// side's bucket. It lets the runner and the checker be tested together
// in a second, without processes.
type fakeCluster struct {
	mu      sync.Mutex
	start   time.Time
	env     Envelope
	group   []int                             // node -> side
	buckets map[int]map[string]*bucket.Bucket // side -> key -> bucket
	dead    []bool
	lastAt  []time.Duration // node -> when it last answered a check
}

func newFake(n int, env Envelope) *fakeCluster {
	return &fakeCluster{start: time.Now(), env: env, group: make([]int, n), dead: make([]bool, n), lastAt: make([]time.Duration, n),
		buckets: map[int]map[string]*bucket.Bucket{0: {}}}
}

func (f *fakeCluster) now() time.Duration { return time.Since(f.start) }
func (f *fakeCluster) Nodes() int         { return len(f.group) }

type fakeChk struct {
	f *fakeCluster
	i int
}

func (c fakeChk) Check(ctx context.Context, key string, tokens int64) (bool, error) {
	f := c.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.dead[c.i] {
		return false, errors.New("connection refused")
	}
	f.lastAt[c.i] = f.now()
	side := f.buckets[f.group[c.i]]
	b, ok := side[key]
	if !ok {
		rate, _ := bucket.PerSecond(f.env.RatePerSec)
		nb := bucket.MustNew(rate, f.env.Burst, f.now())
		b = &nb
		side[key] = b
	}
	return b.AllowN(f.now(), tokens), nil
}

func (f *fakeCluster) Checker(i int) (Checker, error) { return fakeChk{f, i}, nil }
func (f *fakeCluster) Kill(i int) error               { f.mu.Lock(); f.dead[i] = true; f.mu.Unlock(); return nil }
func (f *fakeCluster) Terminate(i int) error          { return f.Kill(i) }
func (f *fakeCluster) Restart(_ context.Context, i int) error {
	f.mu.Lock()
	f.dead[i] = false
	f.mu.Unlock()
	return nil
}

func (f *fakeCluster) Partition(groups ...[]int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	old := f.buckets[0]
	f.buckets = map[int]map[string]*bucket.Bucket{}
	for g := range len(groups) + 1 {
		side := map[string]*bucket.Bucket{}
		for k, b := range old {
			c := *b
			side[k] = &c
		}
		f.buckets[g] = side
	}
	for i := range f.group {
		f.group[i] = len(groups)
	}
	for g, idx := range groups {
		for _, i := range idx {
			f.group[i] = g
		}
	}
	return nil
}

func (f *fakeCluster) Heal() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	merged := map[string]*bucket.Bucket{}
	for _, side := range f.buckets {
		for k, b := range side {
			if m, ok := merged[k]; !ok || b.Tokens(f.now()) < m.Tokens(f.now()) {
				merged[k] = b
			}
		}
	}
	f.buckets = map[int]map[string]*bucket.Bucket{0: merged}
	for i := range f.group {
		f.group[i] = 0
	}
	return nil
}

func (f *fakeCluster) Metrics(_ context.Context, i int) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for j, g := range f.group {
		if g == f.group[i] && !f.dead[j] {
			n++
		}
	}
	return fmt.Sprintf("# TYPE tokenmesh_members gauge\ntokenmesh_members %d\n# TYPE tokenmesh_capacity_share_ratio gauge\ntokenmesh_capacity_share_ratio{rule=\"r\"} %g\n", n, 1/float64(len(f.group))), nil
}

// A partition under "available" admits up to a whole extra envelope on
// the minority side; after the heal and the settle the checker finds no
// key over, and the scrapes see the re-merge.
func TestRunPartitionHeal(t *testing.T) {
	env := Envelope{RatePerSec: 5, Burst: 5}
	f := newFake(3, env)
	sc := Scenario{Name: "1|2", Nodes: 3, Duration: 3 * time.Second, Settle: 500 * time.Millisecond,
		Steps: []Step{{At: 500 * time.Millisecond, Partition: [][]int{{0}, {1, 2}}}, {At: 1500 * time.Millisecond, Heal: true}}}
	l := Load{Keys: 4, PerKeyPerSec: 30, MaxChecks: 1000}
	var log strings.Builder
	res, err := Run(context.Background(), f, sc, l, env, 0.5, 200*time.Millisecond, &log)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(log.String(), "partition [[0] [1 2]]") || !strings.Contains(log.String(), "heal") {
		t.Fatalf("progress: %q", log.String())
	}
	if res.Whole.MaxViolation < 2 || res.Whole.Over == 0 {
		t.Fatalf("two sides each with the whole limit went unnoticed: %+v", res.Whole)
	}
	if res.After.MaxViolation > 0.5 || res.After.Over != 0 {
		t.Fatalf("after the heal and settle: %+v", res.After)
	}
	if res.MergedAfter < 0 || res.MergedAfter > time.Second {
		t.Fatalf("merged after %v", res.MergedAfter)
	}
	if math.Abs(res.MaxShareSumAfter-1) > 1e-9 {
		t.Fatalf("share sum after %v, want 1", res.MaxShareSumAfter)
	}
	if tab := Table([]Row{{"fake", res}}); !strings.Contains(tab, "| fake | 1|2 |") {
		t.Fatalf("table:\n%s", tab)
	}
}

// Checks to a killed node are not sent (the load balancer skips it); a
// restarted node is used again.
func TestRunKillRestart(t *testing.T) {
	env := Envelope{RatePerSec: 100, Burst: 100}
	f := newFake(2, env)
	sc := Scenario{Name: "kill", Nodes: 2, Duration: 1500 * time.Millisecond,
		Steps: []Step{{At: 300 * time.Millisecond, Kill: []int{1}}, {At: 900 * time.Millisecond, Restart: []int{1}}}}
	res, err := Run(context.Background(), f, sc, Load{Keys: 2, PerKeyPerSec: 40, MaxChecks: 500}, env, 0, 0, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if res.Whole.Errors != 0 {
		t.Fatalf("%d checks went to the dead node", res.Whole.Errors)
	}
	if res.Whole.Checks < 100 {
		t.Fatalf("only %d checks", res.Whole.Checks)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.lastAt[1] < 900*time.Millisecond {
		t.Fatalf("node 1 last answered a check at %v, before its restart at 900ms: not used again", f.lastAt[1])
	}
}

func TestScenarioValidate(t *testing.T) {
	for _, sc := range []Scenario{
		{Name: "no nodes", Duration: time.Second},
		{Name: "two actions", Nodes: 2, Duration: time.Second, Steps: []Step{{Heal: true, Kill: []int{0}}}},
		{Name: "bad node", Nodes: 2, Duration: time.Second, Steps: []Step{{Kill: []int{2}}}},
		{Name: "order", Nodes: 2, Duration: time.Second, Steps: []Step{{At: 2, Heal: true}, {At: 1, Heal: true}}},
		{Name: "late", Nodes: 2, Duration: time.Second, Steps: []Step{{At: time.Second, Heal: true}}},
	} {
		if err := sc.Validate(); err == nil {
			t.Errorf("%s: accepted", sc.Name)
		}
	}
	if _, _, err := ParseMetrics("garbage{"); err == nil {
		t.Error("bad metrics text accepted")
	}
	if _, _, err := ParseMetrics("# TYPE x gauge\nx 1\n"); err == nil {
		t.Error("metrics without tokenmesh_members accepted")
	}
}
