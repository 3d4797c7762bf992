package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/common/expfmt"
)

// Cluster is what a scenario does to a running cluster of real processes
// (localcluster.Cluster in the end-to-end tests). Node indices are
// 0..Nodes()-1.
type Cluster interface {
	Nodes() int
	// Checker is node i's client API for the scenario's rule.
	Checker(i int) (Checker, error)
	// Kill sends SIGKILL (a crash); Terminate sends SIGTERM and waits (a
	// graceful leave); Restart starts a stopped node again with its
	// configuration and waits until it serves.
	Kill(i int) error
	Terminate(i int) error
	Restart(ctx context.Context, i int) error
	// Partition cuts gossip and peer traffic between the groups (nodes
	// not listed form a group of their own); Heal removes every cut.
	Partition(groups ...[]int) error
	Heal() error
	// Metrics is node i's Prometheus text.
	Metrics(ctx context.Context, i int) (string, error)
}

// Step is one fault at At (since the scenario's start). Exactly one of its
// actions is set.
type Step struct {
	At        time.Duration
	Partition [][]int
	Heal      bool
	Kill      []int
	Terminate []int
	Restart   []int
}

func (s Step) String() string {
	switch {
	case len(s.Partition) > 0:
		return fmt.Sprintf("%v partition %v", s.At, s.Partition)
	case s.Heal:
		return fmt.Sprintf("%v heal", s.At)
	case len(s.Kill) > 0:
		return fmt.Sprintf("%v kill -9 %v", s.At, s.Kill)
	case len(s.Terminate) > 0:
		return fmt.Sprintf("%v SIGTERM %v", s.At, s.Terminate)
	case len(s.Restart) > 0:
		return fmt.Sprintf("%v restart %v", s.At, s.Restart)
	}
	return fmt.Sprintf("%v nothing", s.At)
}

// Scenario is a fault schedule over a run of Duration. Settle is how long
// after the last fault is repaired (heal or restart) the cluster is given
// before the envelope must hold again exactly (Result.After).
type Scenario struct {
	Name     string
	Nodes    int
	Steps    []Step
	Duration time.Duration
	Settle   time.Duration
}

// Validate checks the schedule against the cluster size.
func (sc Scenario) Validate() error {
	if sc.Nodes < 1 || sc.Duration <= 0 || sc.Settle < 0 {
		return fmt.Errorf("chaos: scenario %q: nodes %d, duration %v, settle %v", sc.Name, sc.Nodes, sc.Duration, sc.Settle)
	}
	last := time.Duration(-1)
	for _, s := range sc.Steps {
		n := 0
		for _, set := range []bool{len(s.Partition) > 0, s.Heal, len(s.Kill) > 0, len(s.Terminate) > 0, len(s.Restart) > 0} {
			if set {
				n++
			}
		}
		if n != 1 {
			return fmt.Errorf("chaos: scenario %q: step at %v has %d actions, want 1", sc.Name, s.At, n)
		}
		if s.At < last || s.At >= sc.Duration {
			return fmt.Errorf("chaos: scenario %q: step at %v out of order or after the end %v", sc.Name, s.At, sc.Duration)
		}
		last = s.At
		idx := slices.Concat(s.Kill, s.Terminate, s.Restart, slices.Concat(s.Partition...))
		for _, i := range idx {
			if i < 0 || i >= sc.Nodes {
				return fmt.Errorf("chaos: scenario %q: step at %v names node %d of %d", sc.Name, s.At, i, sc.Nodes)
			}
		}
	}
	return nil
}

// RepairedAt is when the last fault was repaired: the last heal or
// restart (0 when the scenario has none).
func (sc Scenario) RepairedAt() time.Duration {
	var t time.Duration
	for _, s := range sc.Steps {
		if s.Heal || len(s.Restart) > 0 {
			t = s.At
		}
	}
	return t
}

// Sample is one metrics scrape of every live node.
type Sample struct {
	At time.Duration
	// Members is each node's tokenmesh_members (-1: not scraped).
	Members []int
	// ShareSum is the sum over nodes of tokenmesh_capacity_share_ratio
	// (strategies that split the rate; NaN when no node reports one): a
	// conserving cluster whose nodes hold shares of the same keys sums
	// to 1.
	ShareSum float64
}

// Result is a scenario run.
type Result struct {
	Scenario string
	// Whole is the run checked over its whole length; After from
	// RepairedAt + Settle to the end.
	Whole, After Report
	Samples      []Sample
	// MergedAfter is the time from RepairedAt until the first scrape where
	// every live node saw every node as a member (-1: never).
	MergedAfter time.Duration
	// MaxShareSumAfter is the largest ShareSum from RepairedAt + Settle
	// on (NaN: none reported).
	MaxShareSumAfter float64
	// StepErrors are faults that could not be applied.
	StepErrors []error
}

// Run drives load against c while applying sc's steps at their times,
// scraping every live node's metrics every scrapeEvery (0: 1 s), and
// checks the history against env with slack tokens allowed (see Check).
// progress, when set, gets one line per step.
func Run(ctx context.Context, c Cluster, sc Scenario, l Load, env Envelope, slack float64, scrapeEvery time.Duration, progress io.Writer) (Result, error) {
	if err := sc.Validate(); err != nil {
		return Result{}, err
	}
	if c.Nodes() != sc.Nodes {
		return Result{}, fmt.Errorf("chaos: scenario %q wants %d nodes, the cluster has %d", sc.Name, sc.Nodes, c.Nodes())
	}
	if scrapeEvery <= 0 {
		scrapeEvery = time.Second
	}
	l.Duration = sc.Duration
	res := Result{Scenario: sc.Name, MergedAfter: -1, MaxShareSumAfter: math.NaN()}
	r, err := newChaosRun(c, sc)
	if err != nil {
		return res, err
	}
	r.res = res
	r.start = time.Now()
	var h History
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	loadErr := make(chan error, 1)
	go func() { loadErr <- Drive(runCtx, l, r.start, r.targets, &h) }()
	scrapeDone := make(chan struct{})
	go r.scrapeLoop(runCtx, scrapeEvery, scrapeDone)
	if err := r.steps(ctx, progress); err != nil {
		return r.res, err
	}
	if err := <-loadErr; err != nil && !errors.Is(err, context.Canceled) {
		return r.res, err
	}
	cancel()
	<-scrapeDone
	return r.check(&h, env, slack)
}

// chaosRun is the state of one Run.
type chaosRun struct {
	c        Cluster
	sc       Scenario
	start    time.Time
	checkers []Checker
	mu       sync.Mutex // guards down and res.Samples
	down     []bool
	res      Result
}

// newChaosRun is the state of a run of sc on c, every node up and its
// checker taken. Errors: c's Checker's.
func newChaosRun(c Cluster, sc Scenario) (*chaosRun, error) {
	r := &chaosRun{c: c, sc: sc, down: make([]bool, sc.Nodes), checkers: make([]Checker, sc.Nodes)}
	for i := range r.checkers {
		ch, err := c.Checker(i)
		if err != nil {
			return nil, err
		}
		r.checkers[i] = ch
	}
	return r, nil
}

// targets are the live nodes' indices and checkers.
func (r *chaosRun) targets() ([]int, []Checker) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var idx []int
	var cs []Checker
	for i, d := range r.down {
		if !d {
			idx, cs = append(idx, i), append(cs, r.checkers[i])
		}
	}
	return idx, cs
}

// isDown says whether node i is down.
func (r *chaosRun) isDown(i int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.down[i]
}

// setDown marks node i down or up.
func (r *chaosRun) setDown(i int, d bool) {
	r.mu.Lock()
	r.down[i] = d
	r.mu.Unlock()
}

// scrapeLoop scrapes the live nodes' metrics every scrapeEvery until ctx
// ends, then closes done.
func (r *chaosRun) scrapeLoop(ctx context.Context, scrapeEvery time.Duration, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(scrapeEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s := scrape(ctx, r.c, r.sc.Nodes, time.Since(r.start), r.isDown)
		r.mu.Lock()
		r.res.Samples = append(r.res.Samples, s)
		r.mu.Unlock()
	}
}

// steps applies the scenario's steps at their times, telling progress
// (if set); a step that fails is noted in res.StepErrors.
func (r *chaosRun) steps(ctx context.Context, progress io.Writer) error {
	for _, s := range r.sc.Steps {
		if err := sleep(ctx, time.Until(r.start.Add(s.At))); err != nil {
			return err
		}
		if progress != nil {
			fmt.Fprintf(progress, "chaos: %s: %s\n", r.sc.Name, s)
		}
		if err := apply(ctx, r.c, s, r.setDown); err != nil {
			r.res.StepErrors = append(r.res.StepErrors, fmt.Errorf("%s: %w", s, err))
		}
	}
	return nil
}

// check measures the history h against env, over the whole run and after
// the repair and settling, and reads from the samples when the membership
// merged and the largest share sum after.
func (r *chaosRun) check(h *History, env Envelope, slack float64) (Result, error) {
	sc, res := r.sc, &r.res
	end := time.Since(r.start)
	var err error
	if res.Whole, err = h.Check(env, 0, end, slack); err != nil {
		return *res, err
	}
	after := min(sc.RepairedAt()+sc.Settle, end)
	if res.After, err = h.Check(env, after, end, slack); err != nil {
		return *res, err
	}
	repaired := sc.RepairedAt()
	for _, s := range res.Samples {
		if res.MergedAfter < 0 && s.At >= repaired && allSeeAll(s.Members) {
			res.MergedAfter = s.At - repaired
		}
		if s.At >= after && !math.IsNaN(s.ShareSum) && (math.IsNaN(res.MaxShareSumAfter) || s.ShareSum > res.MaxShareSumAfter) {
			res.MaxShareSumAfter = s.ShareSum
		}
	}
	return *res, nil
}

// apply carries out one step; setDown tells the load driver which nodes
// a load balancer would no longer send to.
func apply(ctx context.Context, c Cluster, s Step, setDown func(int, bool)) error {
	var errs []error
	switch {
	case len(s.Partition) > 0:
		errs = append(errs, c.Partition(s.Partition...))
	case s.Heal:
		errs = append(errs, c.Heal())
	case len(s.Kill) > 0:
		for _, i := range s.Kill {
			setDown(i, true)
			errs = append(errs, c.Kill(i))
		}
	case len(s.Terminate) > 0:
		for _, i := range s.Terminate {
			setDown(i, true)
			errs = append(errs, c.Terminate(i))
		}
	case len(s.Restart) > 0:
		for _, i := range s.Restart {
			err := c.Restart(ctx, i)
			errs = append(errs, err)
			if err == nil {
				setDown(i, false)
			}
		}
	}
	return errors.Join(errs...)
}

// allSeeAll: every scraped node reports all nodes as members, and every
// node was scraped.
func allSeeAll(members []int) bool {
	for _, m := range members {
		if m != len(members) {
			return false
		}
	}
	return len(members) > 0
}

// scrape reads tokenmesh_members and tokenmesh_capacity_share_ratio from
// every node not down.
func scrape(ctx context.Context, c Cluster, n int, at time.Duration, isDown func(int) bool) Sample {
	s := Sample{At: at, Members: make([]int, n), ShareSum: math.NaN()}
	for i := range n {
		s.Members[i] = -1
		if isDown(i) {
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		text, err := c.Metrics(sctx, i)
		cancel()
		if err != nil {
			continue
		}
		members, share, err := ParseMetrics(text)
		if err != nil {
			continue
		}
		s.Members[i] = members
		if !math.IsNaN(share) {
			if math.IsNaN(s.ShareSum) {
				s.ShareSum = 0
			}
			s.ShareSum += share
		}
	}
	return s
}

// ParseMetrics reads a node's member count (tokenmesh_members) and the sum
// over its rules of tokenmesh_capacity_share_ratio (NaN when absent) from
// Prometheus text. Errors: unparsable text, no tokenmesh_members.
func ParseMetrics(text string) (members int, share float64, err error) {
	var p expfmt.TextParser
	fams, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		return 0, 0, fmt.Errorf("chaos: metrics: %w", err)
	}
	m, ok := fams["tokenmesh_members"]
	if !ok || len(m.GetMetric()) == 0 {
		return 0, 0, errors.New("chaos: metrics: no tokenmesh_members")
	}
	members = int(m.GetMetric()[0].GetGauge().GetValue())
	share = math.NaN()
	if f, ok := fams["tokenmesh_capacity_share_ratio"]; ok {
		for _, mm := range f.GetMetric() {
			if math.IsNaN(share) {
				share = 0
			}
			share += mm.GetGauge().GetValue()
		}
	}
	return members, share, nil
}

// Row is one line of Table: a strategy's result in one scenario.
type Row struct {
	Strategy string
	Result   Result
}

// Table formats rows as one Markdown table: per strategy and scenario,
// checks, admitted tokens, the largest excess over b + r*T in the whole
// run and after the settle with the keys over the slack, errors, decision
// latency, the time to re-merge after the last repair and the largest
// capacity share sum after the settle.
func Table(rows []Row) string {
	var b strings.Builder
	fmt.Fprintf(&b, "| strategy | scenario | checks | admitted | max excess (run) | keys over | max excess (after settle) | keys over | errors | p50 | p99 | merged after | share sum after |\n")
	fmt.Fprintf(&b, "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, row := range rows {
		r := row.Result
		merged := "never"
		if r.MergedAfter >= 0 {
			merged = r.MergedAfter.Round(100 * time.Millisecond).String()
		}
		share := "-"
		if !math.IsNaN(r.MaxShareSumAfter) {
			share = fmt.Sprintf("%.3f", r.MaxShareSumAfter)
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %d | %.2f | %d | %.2f | %d | %d | %v | %v | %s | %s |\n", row.Strategy, r.Scenario,
			r.Whole.Checks, r.Whole.Admitted, r.Whole.MaxViolation, r.Whole.Over, r.After.MaxViolation, r.After.Over,
			r.Whole.Errors, r.Whole.P50.Round(100*time.Microsecond), r.Whole.P99.Round(100*time.Microsecond), merged, share)
	}
	return b.String()
}
