package livetest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/chaos"
	"github.com/tokenmesh/tokenmesh/localcluster"
	"github.com/tokenmesh/tokenmesh/rule"
)

// The chaos suite : real `serve` processes, each in its
// own network namespace, under a bounded load (keys offered 3x their rate,
// spread round-robin over the live nodes), while a scenario partitions,
// heals, kills and restarts them. Every decision is recorded and checked
// per key against b + r*T (package chaos).
//
// What is asserted in `make test` (owner, gdrl, static, gcounter on the
// 3-node partition; owner on kill -9 + restart and on a rolling restart):
//   - from chaosSettle after the last repair on, no key's admissions exceed
//     b + r*T + 1 token in any window, a window of checks running from the
//     first one's send to the last answer (chaos.History.Check: the
//     client's scheduling slack is allowed for; the token is the suite's
//     allowance for a repair, as before);
//   - after a heal, every node sees every member again within 15 s;
//   - gdrl: the sum of the nodes' capacity shares stays within one
//     percent of C after the settle.
// What each strategy admitted beyond the envelope during the faults is
// printed as a table (-v), and written to $TOKENMESH_CHAOS_OUT when set.
// TOKENMESH_CHAOS=full adds the 5-node 2|3 partition and runs every
// scenario for every cluster strategy but local (which admits up to N
// times the limit by design).

const (
	chaosRate  = 1 // tokens/s per key
	chaosBurst = 5 // tokens
	// chaosSettle is the "from 10 s after the heal on".
	chaosSettle = 10 * time.Second
)

// lcChaos adapts a localcluster to chaos.Cluster.
type lcChaos struct {
	c    *localcluster.Cluster
	rule string
}

type lcChecker struct {
	c    *localcluster.Cluster
	i    int
	rule string
}

// Check takes node i's client anew for every check: after a restart the
// cluster dials the node again.
func (l lcChecker) Check(ctx context.Context, key string, tokens int64) (bool, error) {
	cl, err := l.c.Client(l.i)
	if err != nil {
		return false, err
	}
	return chaos.GRPCChecker{Client: cl, Rule: l.rule}.Check(ctx, key, tokens)
}

func (a lcChaos) Nodes() int                                         { return len(a.c.Nodes) }
func (a lcChaos) Checker(i int) (chaos.Checker, error)               { return lcChecker{a.c, i, a.rule}, nil }
func (a lcChaos) Kill(i int) error                                   { return a.c.Kill(i) }
func (a lcChaos) Terminate(i int) error                              { return a.c.Terminate(i) }
func (a lcChaos) Partition(groups ...[]int) error                    { return a.c.Partition(groups...) }
func (a lcChaos) Heal() error                                        { return a.c.Heal() }
func (a lcChaos) Metrics(ctx context.Context, i int) (string, error) { return a.c.Metrics(ctx, i) }

func (a lcChaos) Restart(ctx context.Context, i int) error {
	r, ok := any(a.c).(interface {
		Restart(context.Context, int) error
	})
	if !ok {
		return errors.New("localcluster has no Restart")
	}
	return r.Restart(ctx, i)
}

type chaosCase struct {
	sc         chaos.Scenario
	strategies []string
	full       bool // only with TOKENMESH_CHAOS=full
}

func chaosCases() []chaosCase {
	const p = 15 * time.Second // longer than failure detection (~8 s at 3 nodes)
	return []chaosCase{
		{sc: chaos.Scenario{Name: "partition 1|2, heal", Nodes: 3, Duration: 3*time.Second + p + chaosSettle + 8*time.Second, Settle: chaosSettle,
			Steps: []chaos.Step{{At: 3 * time.Second, Partition: [][]int{{0}, {1, 2}}}, {At: 3*time.Second + p, Heal: true}}},
			strategies: []string{"owner", "gdrl", "static", "gcounter"}},
		{sc: chaos.Scenario{Name: "kill -9 n1, restart 10 s later", Nodes: 3, Duration: 28 * time.Second, Settle: chaosSettle,
			Steps: []chaos.Step{{At: 3 * time.Second, Kill: []int{1}}, {At: 13 * time.Second, Restart: []int{1}}}},
			strategies: []string{"owner"}},
		{sc: chaos.Scenario{Name: "rolling restart (SIGTERM)", Nodes: 3, Duration: 30 * time.Second, Settle: chaosSettle,
			Steps: []chaos.Step{
				{At: 3 * time.Second, Terminate: []int{0}}, {At: 5 * time.Second, Restart: []int{0}},
				{At: 9 * time.Second, Terminate: []int{1}}, {At: 11 * time.Second, Restart: []int{1}},
				{At: 15 * time.Second, Terminate: []int{2}}, {At: 17 * time.Second, Restart: []int{2}}}},
			strategies: []string{"owner"}},
		{sc: chaos.Scenario{Name: "partition 2|3, heal", Nodes: 5, Duration: 3*time.Second + 25*time.Second + chaosSettle + 8*time.Second, Settle: chaosSettle,
			Steps: []chaos.Step{{At: 3 * time.Second, Partition: [][]int{{0, 1}, {2, 3, 4}}}, {At: 28 * time.Second, Heal: true}}},
			full: true},
	}
}

// TestChaosE2E runs each scenario and strategy as a parallel subtest (as
// many at once as -parallel, GOMAXPROCS by default: 2 here): each has its
// own namespaces (netns labs do not see each other) and a light load (300
// checks/s), and the suite's time in make test halves (220 s one after
// the other).
func TestChaosE2E(t *testing.T) {
	requireNetns(t)
	full := os.Getenv("TOKENMESH_CHAOS") == "full"
	env := chaos.Envelope{RatePerSec: chaosRate, Burst: chaosBurst}
	var (
		mu   sync.Mutex
		rows []chaos.Row
	)
	t.Cleanup(func() { // after every parallel subtest
		table := chaos.Table(rows)
		t.Logf("chaos suite, rule %d/s burst %d, 100 keys offered 3x:\n%s", chaosRate, chaosBurst, table)
		if out := os.Getenv("TOKENMESH_CHAOS_OUT"); out != "" {
			if err := os.WriteFile(out, []byte(table), 0o644); err != nil {
				t.Error(err)
			}
		}
	})
	for _, cc := range chaosCases() {
		if cc.full && !full {
			continue
		}
		strategies := cc.strategies
		if full || strategies == nil {
			// local admits up to N times the limit by design (every node
			// enforces the whole bucket alone): no envelope to check.
			strategies = slices.DeleteFunc(slices.Clone(clusterStrategies), func(s string) bool { return s == "local" })
		}
		for _, strategy := range strategies {
			t.Run(cc.sc.Name+"/"+strategy, func(t *testing.T) {
				t.Parallel()
				res := runChaos(t, cc.sc, strategy, env)
				mu.Lock()
				rows = append(rows, chaos.Row{Strategy: strategy, Result: res})
				mu.Unlock()
				checkChaos(t, cc.sc, strategy, res)
			})
		}
	}
}

func runChaos(t *testing.T, sc chaos.Scenario, strategy string, env chaos.Envelope) chaos.Result {
	t.Helper()
	c := startCluster(t, localcluster.Config{Nodes: sc.Nodes, Namespaces: true,
		Rules: []rule.Rule{{Name: "api", Rate: rule.MustRate(fmt.Sprintf("%d/s", chaosRate)), Burst: chaosBurst, Strategy: strategy}}})
	if !c.Namespaced() {
		t.Fatal("Namespaces requested and available, but the nodes run on 127.0.0.1")
	}
	// 100 keys offered 3x their rate; at most 3 checks per key-second in
	// all, so the count bound is the time bound's.
	l := chaos.Load{Keys: 100, PerKeyPerSec: 3 * chaosRate, MaxChecks: int(3 * chaosRate * 100 * sc.Duration.Seconds()), Timeout: 2 * time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), sc.Duration+time.Minute)
	defer cancel()
	var progress strings.Builder
	res, err := chaos.Run(ctx, lcChaos{c, "api"}, sc, l, env, 1, 500*time.Millisecond, &progress)
	t.Log(strings.TrimSpace(progress.String()))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range res.StepErrors {
		t.Errorf("step: %v", e)
	}
	return res
}

func checkChaos(t *testing.T, sc chaos.Scenario, strategy string, res chaos.Result) {
	t.Helper()
	t.Logf("whole run: %d checks, %d admitted, max excess %.2f tokens (%d keys over +1), errors %d, p50 %v p99 %v",
		res.Whole.Checks, res.Whole.Admitted, res.Whole.MaxViolation, res.Whole.Over, res.Whole.Errors, res.Whole.P50, res.Whole.P99)
	if len(res.Whole.ErrorKinds) > 0 {
		t.Logf("failed checks by error: %v", res.Whole.ErrorKinds)
	}
	if res.After.Over > 0 {
		k := res.After.Keys[0]
		t.Errorf("from %v on (%v after the last repair), %d keys exceeded b + r*T + 1; worst %s by %.2f tokens for the checks sent in [%v, %v] and answered by %v (T runs to the last answer: the client's slack is allowed for)",
			res.After.From.Round(time.Millisecond), sc.Settle, res.After.Over, k.Key, k.Violation, k.WorstFrom.Round(time.Millisecond), k.WorstTo.Round(time.Millisecond), k.WorstEnd.Round(time.Millisecond))
	}
	if res.After.Checks == 0 {
		t.Error("no checks after the settle: the load did not reach the end of the scenario")
	}
	healed := false
	for _, s := range sc.Steps {
		healed = healed || s.Heal
	}
	if healed && (res.MergedAfter < 0 || res.MergedAfter > healDeadline) {
		t.Errorf("after the heal, every node saw every member after %v (want within %v)", res.MergedAfter, healDeadline)
	}
	if strategy == "gdrl" && !math.IsNaN(res.MaxShareSumAfter) && res.MaxShareSumAfter > 1.01 {
		t.Errorf("gdrl: capacity shares summed to %.3f of C after the settle", res.MaxShareSumAfter)
	}
}
