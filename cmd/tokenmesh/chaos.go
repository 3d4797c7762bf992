package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/chaos"
	"github.com/tokenmesh/tokenmesh/localcluster"
	"github.com/tokenmesh/tokenmesh/rule"
	"github.com/tokenmesh/tokenmesh/strategy/registry"
)

// chaosRule is the name of the one rule the chaos cluster serves.
const chaosRule = "chaos"

type chaosFlags struct {
	random     bool
	seed       uint64
	duration   time.Duration
	nodes      int
	strategies []string
	keys       int
	rate       float64
	burst      int64
	offered    float64
	params     []string
	settle     time.Duration
	maxFault   time.Duration
	slack      float64
	faults     []string
	netns      bool
	out        string
	binary     string
	idle       time.Duration
	checkFlat  bool
	timeout    time.Duration
	runBound   float64
}

func newChaosCmd() *cobra.Command { return newChaosCmdWith(&chaosFlags{}) }

// newChaosCmdWith is newChaosCmd parsing into f (tests run the plan).
func newChaosCmdWith(f *chaosFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "chaos --random --seed N --duration D",
		Short: "Run a randomized fault schedule (partitions, one-way cuts, flapping, kill -9, SIGSTOP) on a local cluster of real processes under load, and check every key's admissions",
		Long: `chaos --random starts, for each --strategy (in parallel, each on its own cluster),
--nodes real ` + "`tokenmesh serve`" + ` processes on this machine, serving one rule (--rate,
--burst, the strategy, its --param), and drives a bounded load: --keys keys, each
offered --offered times its rate, spread round-robin over the live nodes, at most
duration x rate x offered x keys checks, each waiting at most --timeout. Every check
is logged with the client time it was sent, its answer and its latency.

Meanwhile a nemesis applies faults to one node at a time, drawn from --seed (the
same seed, nodes, duration and fault options give the same schedule; it is
printed at the start and in the report):
  partition  the node is cut from all others, both ways, then healed
  oneway     the node's frames to the others are lost, or theirs to it (drawn)
  flap       2-5 short cuts of the node (0.3-1.5 s each, 0.3-1.5 s apart)
  kill       kill -9, restarted at the fault's end (same name and addresses)
  pause      SIGSTOP, SIGCONT at the fault's end (the load keeps sending to it:
             those checks time out or are answered at the SIGCONT)
Each fault lasts 2 s to --max-fault; after its repair the cluster gets --settle,
then 3-10 s of quiet before the next. Faults never overlap.

Cuts: without --netns the nodes run on 127.0.0.1 and a cut loses the strategies'
peer frames (fault injection, POST /debug/faults); gossip still flows, so the
members stay. With --netns (root and iproute2) every node has its own network
namespace and partition and flap cut gossip too (each side declares the other
failed, and merges after the heal); oneway still loses peer frames only.

Not drawn: wall-clock steps. A node reads the wall clock once, at start, and
runs on the monotonic clock afterwards (cluster.Config.Epoch), so stepping a
running node's wall clock changes nothing it decides, and there is no way on
this machine to step one process's wall clock for a restart (a time namespace
moves the monotonic clocks only).

The report (stdout; also report.md in --out):
  - per strategy: checks, tokens admitted, what one exact bucket per key would
    have admitted on the same sends (central), tokens lost (central minus
    admitted, per key, in the quiet windows), failed checks by error, latency
    p50 and p99 (each the worst quiet window's) and max (whole run), the largest excess
    of any key over b + r*T in any window during the whole run (information:
    during a fault a strategy admits what its split-brain and crash rules in
    docs/OPERATIONS.md allow, e.g. a cut node's side a whole envelope of its
    own under partition: available), and the largest excess in the quiet
    windows, with the keys over --slack;
  - the quiet windows: from each repair plus --settle to the next fault; in
    them every strategy must keep b + r*T exactly, --slack tokens being the
    client's clock slack (a check counts at its send time);
  - per node: RSS (process_resident_memory_bytes) and goroutines
    (go_goroutines) before the load, under it just before the first fault
    (warm: connections and keys in place) and --idle after it stopped (a
    restarted node's earlier samples are its first process's);
  - the worst keys, and the command that reproduces the run.

Exit status: 1 when a key went over b + r*T + --slack in a quiet window, a
fault could not be applied, (--max-excess-run) a key's excess during the
whole run went beyond the bound given, or (--check-flat) a node's goroutines or RSS grew
beyond the tolerance (after vs warm: goroutines +20, RSS 1.5x + 32 MiB); 2 for a bad command
line. Progress (each fault as applied) goes to stderr.`,
		Example: `  tokenmesh chaos --random --seed 1 --duration 2m
  tokenmesh chaos --random --seed 3 --duration 30m --strategy owner,lease,gdrl --check-flat --out chaos-out
  tokenmesh chaos --random --seed 1 --duration 2m --strategy owner --param owner.on_timeout=admit --faults partition --max-fault 30s`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runChaosCmd(ctx, f, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	fl := cmd.Flags()
	fl.BoolVar(&f.random, "random", false, "draw the fault schedule from --seed (required: the only mode; scripted scenarios are chaos.Run's, in the e2e tests)")
	fl.Uint64Var(&f.seed, "seed", 1, "seed of the fault schedule (which faults, which nodes, when, how long)")
	fl.DurationVar(&f.duration, "duration", 2*time.Minute, "length of the load; faults are drawn to settle before it ends")
	fl.IntVar(&f.nodes, "nodes", 3, "number of node processes per strategy (>= 2)")
	fl.StringSliceVar(&f.strategies, "strategy", []string{"owner"}, "strategies, comma-separated or repeated; each runs on its own cluster, all in parallel, under the same schedule")
	fl.IntVar(&f.keys, "keys", 100, "number of keys in the load")
	fl.Float64Var(&f.rate, "rate", 1, "the rule's rate r, tokens per second per key")
	fl.Int64Var(&f.burst, "burst", 5, "the rule's burst b, tokens per key")
	fl.Float64Var(&f.offered, "offered", 3, "checks offered per key, as a multiple of --rate")
	fl.StringArrayVar(&f.params, "param", nil, "strategy parameter as strategy.name=value, repeatable (e.g. owner.on_timeout=admit)")
	fl.DurationVar(&f.settle, "settle", 10*time.Second, "time after each repair before the envelope is checked again exactly")
	fl.DurationVar(&f.maxFault, "max-fault", 12*time.Second, "longest fault (at least 2s)")
	fl.Float64Var(&f.slack, "slack", 1, "tokens allowed over b + r*T in the quiet windows (the client clock's slack)")
	fl.StringSliceVar(&f.faults, "faults", nil, "fault kinds to draw from (default all): partition, oneway, flap, kill, pause")
	fl.BoolVar(&f.netns, "netns", false, "run each node in its own network namespace (root): cuts then stop gossip too")
	fl.StringVar(&f.out, "out", "", "write report.md, schedule.txt, history-<strategy>.csv (every check: sent_ms, key, node, allowed, latency_us, error) and the nodes' configs and logs (<strategy>/) into DIR")
	fl.StringVar(&f.binary, "binary", "", "tokenmesh binary the nodes run (default: this executable)")
	fl.DurationVar(&f.idle, "idle", 10*time.Second, "wait after the load stops before sampling RSS and goroutines")
	fl.BoolVar(&f.checkFlat, "check-flat", false, "also fail when a node's goroutines (+20) or RSS (1.5x + 32 MiB) --idle after the load exceed their level under the load before the first fault")
	fl.DurationVar(&f.timeout, "timeout", time.Second, "how long a check waits for its answer")
	fl.Float64Var(&f.runBound, "max-excess-run", 0, "also fail when a key's excess over b + r*T in any window of the whole run, faults included, exceeds TOKENS: the bound the strategy states for the faults drawn (e.g. b + r*(max-fault + 10 s of failure detection) for one node cut off under partition: available); 0: the whole run is reported, not checked")
	return cmd
}

// chaosPlan is the checked command line.
type chaosPlan struct {
	strategies []string
	params     map[string][]string // strategy -> name=value
	kinds      []chaos.FaultKind
	binary     string
	schedule   chaos.Schedule
	load       chaos.Load
	env        chaos.Envelope
	rate       bucket.Rate
}

// plan checks the command line and builds the run: the strategies and
// their parameters, the schedule drawn from --seed, the bounded load and
// the envelope. Every error is a usage error naming the first bad flag.
func (f *chaosFlags) plan() (*chaosPlan, error) {
	if err := f.checkLoad(); err != nil {
		return nil, err
	}
	if err := f.checkDurations(); err != nil {
		return nil, err
	}
	p := &chaosPlan{params: map[string][]string{}}
	infos, err := p.setStrategies(f.strategies)
	if err != nil {
		return nil, err
	}
	if err := p.setParams(f.params, infos); err != nil {
		return nil, err
	}
	for _, k := range f.faults {
		p.kinds = append(p.kinds, chaos.FaultKind(strings.TrimSpace(k)))
	}
	if p.binary, err = replayBinary(f.binary); err != nil {
		return nil, err
	}
	if p.rate, err = rule.ParseRate(fmt.Sprintf("%g/s", f.rate)); err != nil {
		return nil, usageErr("--rate: %v", err)
	}
	if p.schedule, err = f.drawSchedule(p.kinds); err != nil {
		return nil, err
	}
	p.env = chaos.Envelope{RatePerSec: f.rate, Burst: f.burst}
	if p.load, err = f.load(); err != nil {
		return nil, err
	}
	return p, nil
}

// checkLoad checks --random, --nodes and the load's flags (--keys,
// --rate in tokens per second, --burst in tokens, --offered as a multiple
// of --rate), in that order.
func (f *chaosFlags) checkLoad() error {
	switch {
	case !f.random:
		return usageErr("--random is required (the only mode: a schedule drawn from --seed)")
	case f.nodes < 2:
		return usageErr("--nodes %d: a random run needs at least 2", f.nodes)
	case f.keys < 1:
		return usageErr("--keys %d: want at least 1", f.keys)
	case !(f.rate > 0) || math.IsInf(f.rate, 0):
		return usageErr("--rate %v: want a positive number of tokens per second", f.rate)
	case f.burst < 1:
		return usageErr("--burst %d: want at least 1", f.burst)
	case !(f.offered > 0) || f.offered > 1000:
		return usageErr("--offered %v: want in (0, 1000]", f.offered)
	}
	return nil
}

// checkDurations checks --duration (at least 10 s), --max-fault (at least
// 2 s), and that --settle, --slack, --idle and --max-excess-run are not
// negative and --timeout is positive.
func (f *chaosFlags) checkDurations() error {
	switch {
	case f.duration < 10*time.Second:
		return usageErr("--duration %v: want at least 10s", f.duration)
	case f.maxFault < 2*time.Second:
		return usageErr("--max-fault %v: want at least 2s", f.maxFault)
	case f.settle < 0 || f.slack < 0 || f.idle < 0 || f.timeout <= 0 || f.runBound < 0:
		return usageErr("--settle, --slack, --idle, --timeout and --max-excess-run must not be negative (--timeout positive)")
	}
	return nil
}

// setStrategies sets p.strategies from --strategy (trimmed): coordination
// strategies, each once. It returns their registry entries, in order.
func (p *chaosPlan) setStrategies(names []string) ([]registry.Info, error) {
	var infos []registry.Info
	for _, s := range names {
		s = strings.TrimSpace(s)
		info, err := registry.Lookup(s)
		if err != nil || info.Centralized {
			return nil, usageErr("--strategy %q: want a coordination strategy (%s)", s, strings.Join(registry.Names()[1:], ", "))
		}
		if slices.Contains(p.strategies, s) {
			return nil, usageErr("--strategy: %q is listed twice", s)
		}
		p.strategies = append(p.strategies, s)
		infos = append(infos, info)
	}
	return infos, nil
}

// setParams parses the --param flags (strategy.name=value) for the
// strategies infos into p.params: per strategy, its name=value list.
func (p *chaosPlan) setParams(flags []string, infos []registry.Info) error {
	params, err := parseParamFlags(flags, infos)
	if err != nil {
		return err
	}
	for name, value := range params.Values() {
		s, pname, _ := strings.Cut(name, ".")
		p.params[s] = append(p.params[s], pname+"="+value)
	}
	return nil
}

// drawSchedule draws the fault schedule from --seed for --nodes and
// --duration, of the given kinds (nil: all), with --settle (0 stays 0)
// and --max-fault.
func (f *chaosFlags) drawSchedule(kinds []chaos.FaultKind) (chaos.Schedule, error) {
	settle := f.settle
	if settle == 0 {
		settle = time.Nanosecond // 0 is NewSchedule's default
	}
	s, err := chaos.NewSchedule(f.seed, f.nodes, f.duration, chaos.ScheduleOptions{Kinds: kinds, Settle: settle, MaxFault: f.maxFault})
	if err != nil {
		return s, usageErr("%v", err)
	}
	return s, nil
}

// load is the run's load: --keys keys, each offered --offered times
// --rate checks per second for --duration, each waiting at most
// --timeout, at most 512 in flight, bounded to duration x rate x offered
// x keys checks (plus one).
func (f *chaosFlags) load() (chaos.Load, error) {
	per := f.offered * f.rate
	l := chaos.Load{Keys: f.keys, PerKeyPerSec: per, Duration: f.duration, Timeout: f.timeout, MaxInFlight: 512,
		MaxChecks: int(math.Ceil(per*float64(f.keys)*f.duration.Seconds())) + 1}
	if err := l.Validate(); err != nil {
		return l, usageErr("%v", err)
	}
	return l, nil
}

// reproduce is the command line that repeats the run.
func (f *chaosFlags) reproduce() string {
	var b strings.Builder
	fmt.Fprintf(&b, "tokenmesh chaos --random --seed %d --duration %v --nodes %d --strategy %s --keys %d --rate %g --burst %d --offered %g --settle %v --max-fault %v --slack %g --timeout %v --idle %v",
		f.seed, f.duration, f.nodes, joinTrimmed(f.strategies), f.keys, f.rate, f.burst, f.offered, f.settle, f.maxFault, f.slack, f.timeout, f.idle)
	if len(f.faults) > 0 {
		fmt.Fprintf(&b, " --faults %s", joinTrimmed(f.faults))
	}
	for _, p := range f.params {
		fmt.Fprintf(&b, " --param %s", strings.TrimSpace(p))
	}
	if f.netns {
		b.WriteString(" --netns")
	}
	if f.checkFlat {
		b.WriteString(" --check-flat")
	}
	if f.runBound > 0 {
		fmt.Fprintf(&b, " --max-excess-run %g", f.runBound)
	}
	return b.String()
}

// joinTrimmed joins a list flag's values, each trimmed of spaces, with
// commas: `--strategy "owner, lease"` comes back as one argument.
func joinTrimmed(vs []string) string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = strings.TrimSpace(v)
	}
	return strings.Join(out, ",")
}

// errChaosFailed is returned when the checker found a key beyond its
// bound (or a fault was not applied, or a node grew with --check-flat).
var errChaosFailed = errors.New("chaos: check failed")

func runChaosCmd(ctx context.Context, f *chaosFlags, stdout, stderr io.Writer) error {
	_, _, err := runChaosRandom(ctx, f, stdout, stderr)
	return err
}

// runChaosRandom runs the command and returns its plan and results as
// well (for the tests): err wraps errChaosFailed when the checks failed.
func runChaosRandom(ctx context.Context, f *chaosFlags, stdout, stderr io.Writer) (*chaosPlan, []chaos.RandomResult, error) {
	p, err := f.plan()
	if err != nil {
		return nil, nil, err
	}
	var errMu sync.Mutex
	progress := &lockedWriter{w: stderr, mu: &errMu}
	fmt.Fprintf(progress, "chaos: %s", p.schedule)
	fmt.Fprintf(progress, "chaos: reproduce with: %s\n", f.reproduce())
	if err := writeChaosSchedule(f.out, p.schedule); err != nil {
		return p, nil, err
	}
	results, err := runChaosStrategies(ctx, f, p, progress)
	if err != nil {
		return p, results, err
	}
	report := chaosReport(f, p, results)
	fmt.Fprint(stdout, report)
	if err := writeChaosOut(f.out, p.strategies, report, results); err != nil {
		return p, results, err
	}
	if fails := chaosFailures(f, p.strategies, results); len(fails) > 0 {
		return p, results, fmt.Errorf("%w (seed %d):\n  %s", errChaosFailed, f.seed, strings.Join(fails, "\n  "))
	}
	return p, results, nil
}

// writeChaosSchedule writes the schedule s as schedule.txt into the
// directory out, made if need be (--out; "": nothing written).
func writeChaosSchedule(out string, s chaos.Schedule) error {
	if out == "" {
		return nil
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(out, "schedule.txt"), []byte(s.String()), 0o644)
}

// runChaosStrategies runs p's strategies in parallel, each on a cluster of
// its own (chaosOne), and returns their results in p.strategies' order;
// the error joins every strategy's, each prefixed by its name.
func runChaosStrategies(ctx context.Context, f *chaosFlags, p *chaosPlan, progress io.Writer) ([]chaos.RandomResult, error) {
	results := make([]chaos.RandomResult, len(p.strategies))
	errs := make([]error, len(p.strategies))
	var wg sync.WaitGroup
	for i, s := range p.strategies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = chaosOne(ctx, f, p, s, progress)
			if errs[i] != nil {
				errs[i] = fmt.Errorf("%s: %w", s, errs[i])
			}
		}()
	}
	wg.Wait()
	return results, errors.Join(errs...)
}

// writeChaosOut writes report as report.md and each strategy's history as
// history-<strategy>.csv (results in strategies' order) into the directory
// out (--out; "": nothing written).
func writeChaosOut(out string, strategies []string, report string, results []chaos.RandomResult) error {
	if out == "" {
		return nil
	}
	if err := os.WriteFile(filepath.Join(out, "report.md"), []byte(report), 0o644); err != nil {
		return err
	}
	for i, s := range strategies {
		if err := writeChaosHistory(filepath.Join(out, "history-"+s+".csv"), results[i].History); err != nil {
			return err
		}
	}
	return nil
}

// chaosFailures lists, one line each, what failed the run (results in
// strategies' order): keys beyond b + r*T + --slack in the quiet windows,
// faults not applied, with --max-excess-run a key's excess during the
// whole run beyond it, with --check-flat a node that grew after the load.
func chaosFailures(f *chaosFlags, strategies []string, results []chaos.RandomResult) []string {
	var fails []string
	for i, s := range strategies {
		r := results[i]
		if r.Quiet.Over > 0 {
			fails = append(fails, fmt.Sprintf("%s: %d keys beyond b + r*T + %g in the quiet windows (worst %s by %.2f tokens)", s, r.Quiet.Over, f.slack, r.Quiet.Keys[0].Key, r.Quiet.Keys[0].Violation))
		}
		for _, e := range r.StepErrors {
			fails = append(fails, fmt.Sprintf("%s: fault not applied: %v", s, e))
		}
		if f.runBound > 0 && r.Whole.MaxViolation > f.runBound {
			k := r.Whole.Keys[0]
			fails = append(fails, fmt.Sprintf("%s: key %s %.2f tokens over b + r*T during the run (checks sent in [%v, %v]), beyond --max-excess-run %g",
				s, k.Key, k.Violation, k.WorstFrom.Round(time.Millisecond), k.WorstTo.Round(time.Millisecond), f.runBound))
		}
		if f.checkFlat {
			for _, g := range r.Grown(chaos.DefaultFlat) {
				fails = append(fails, fmt.Sprintf("%s: grew after the load: %s", s, g))
			}
		}
	}
	return fails
}

// lockedWriter serializes writes of whole lines to w.
type lockedWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

// chaosOne runs strategy s on a cluster of its own.
func chaosOne(ctx context.Context, f *chaosFlags, p *chaosPlan, s string, progress io.Writer) (chaos.RandomResult, error) {
	dir := ""
	if f.out != "" {
		dir = filepath.Join(f.out, s)
	}
	sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	cl, err := localcluster.Start(sctx, localcluster.Config{
		Binary: p.binary, Nodes: f.nodes, Dir: dir, FaultInjection: true, Namespaces: f.netns,
		Rules: []rule.Rule{{Name: chaosRule, Rate: p.rate, Burst: f.burst, Strategy: s, Params: p.params[s]}},
	})
	cancel()
	if err != nil {
		return chaos.RandomResult{}, err
	}
	n := &lcNemesis{c: cl}
	defer func() {
		n.resumeAll()
		if err := cl.Stop(); err != nil {
			fmt.Fprintf(progress, "chaos: %s: stopping the cluster: %v\n", s, err)
		}
	}()
	// Progress for long runs: a line a minute.
	done := make(chan struct{})
	defer close(done)
	start := time.Now()
	go func() {
		t := time.NewTicker(time.Minute)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				fmt.Fprintf(progress, "chaos: %s: %v of %v\n", s, time.Since(start).Round(time.Second), f.duration)
			}
		}
	}()
	rctx, rcancel := context.WithTimeout(ctx, f.duration+f.idle+5*time.Minute)
	defer rcancel()
	return chaos.RunRandom(rctx, n, p.schedule, chaos.RandomOptions{Load: p.load, Env: p.env, Slack: f.slack, Idle: f.idle,
		Output: progress, Label: s + ": "})
}

// lcNemesis adapts a localcluster (fault injection on) to chaos.Nemesis.
type lcNemesis struct {
	c      *localcluster.Cluster
	mu     sync.Mutex
	paused map[int]int // node -> the PID stopped
}

func (n *lcNemesis) Nodes() int { return len(n.c.Nodes) }
func (n *lcNemesis) Checker(i int) (chaos.Checker, error) {
	return lcChaosChecker{n.c, i}, nil
}
func (n *lcNemesis) Kill(i int) error                         { return n.c.Kill(i) }
func (n *lcNemesis) Terminate(i int) error                    { return n.c.Terminate(i) }
func (n *lcNemesis) Restart(ctx context.Context, i int) error { return n.c.Restart(ctx, i) }
func (n *lcNemesis) Partition(groups ...[]int) error          { return n.c.Partition(groups...) }
func (n *lcNemesis) Metrics(ctx context.Context, i int) (string, error) {
	return n.c.Metrics(ctx, i)
}

// Heal removes the cuts; in namespace mode also the one-way frame losses
// (fault injection), which the routes' heal does not touch.
func (n *lcNemesis) Heal() error {
	err := n.c.Heal()
	if n.c.Namespaced() {
		err = errors.Join(err, n.setFaults(func(int) []string { return nil }))
	}
	return err
}

// OneWay makes every live node of from lose its peer frames to the nodes
// of to (localcluster.NodeFaults: the one place this command uses the type).
func (n *lcNemesis) OneWay(from, to []int) error {
	blocked := map[int][]string{}
	for _, i := range from {
		for _, j := range to {
			blocked[i] = append(blocked[i], n.c.Nodes[j].Name)
		}
	}
	return n.setFaults(func(i int) []string { return blocked[i] })
}

func (n *lcNemesis) setFaults(blocked func(i int) []string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var errs []error
	for i := range n.c.Nodes {
		if !n.c.Alive(i) {
			continue
		}
		b := blocked(i)
		if b == nil {
			b = []string{}
		}
		errs = append(errs, n.c.SetFaults(ctx, i, localcluster.NodeFaults{Blocked: b}))
	}
	return errors.Join(errs...)
}

// Pause sends SIGSTOP to node i's process (by its PID).
func (n *lcNemesis) Pause(i int) error {
	pid := n.c.PID(i)
	if pid <= 0 || !n.c.Alive(i) {
		return fmt.Errorf("node n%d is not running", i)
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return err
	}
	n.mu.Lock()
	if n.paused == nil {
		n.paused = map[int]int{}
	}
	n.paused[i] = pid
	n.mu.Unlock()
	return nil
}

// Resume sends SIGCONT to the process Pause stopped.
func (n *lcNemesis) Resume(i int) error {
	n.mu.Lock()
	pid, ok := n.paused[i]
	delete(n.paused, i)
	n.mu.Unlock()
	if !ok {
		return fmt.Errorf("node n%d is not paused", i)
	}
	return syscall.Kill(pid, syscall.SIGCONT)
}

// resumeAll continues every process still stopped (before Stop, on any
// exit path).
func (n *lcNemesis) resumeAll() {
	n.mu.Lock()
	var idx []int
	for i := range n.paused {
		idx = append(idx, i)
	}
	n.mu.Unlock()
	for _, i := range idx {
		_ = n.Resume(i)
	}
}

// lcChaosChecker is node i's client for the chaos rule, taken anew for
// every check (a restarted node is dialled again).
type lcChaosChecker struct {
	c *localcluster.Cluster
	i int
}

func (l lcChaosChecker) Check(ctx context.Context, key string, tokens int64) (bool, error) {
	cl, err := l.c.Client(l.i)
	if err != nil {
		return false, err
	}
	return chaos.GRPCChecker{Client: cl, Rule: chaosRule}.Check(ctx, key, tokens)
}

// chaosReport formats the results as Markdown.
func chaosReport(f *chaosFlags, p *chaosPlan, results []chaos.RandomResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "## tokenmesh chaos --random, seed %d\n\n", f.seed)
	fmt.Fprintf(&b, "rule %g/s burst %d, %d keys offered %gx, %d nodes, load %v; quiet windows checked against b + r*T + %g\n\n",
		f.rate, f.burst, f.keys, f.offered, f.nodes, f.duration, f.slack)
	fmt.Fprintf(&b, "```\n%s```\n\n", p.schedule)
	fmt.Fprintf(&b, "| strategy | checks | admitted | central | lost (quiet) | errors | p50 | p99 | max latency | max excess (run) | keys over (run) | max excess (quiet) | keys over (quiet) |\n")
	fmt.Fprintf(&b, "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for i, s := range p.strategies {
		r := results[i]
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %d | %v | %v | %v | %.2f | %d | %.2f | %d |\n", s, r.Whole.Checks, r.Whole.Admitted, r.Central, r.Lost,
			r.Whole.Errors, r.Quiet.P50.Round(100*time.Microsecond), r.Quiet.P99.Round(100*time.Microsecond), r.MaxLatency.Round(time.Millisecond),
			r.Whole.MaxViolation, r.Whole.Over, r.Quiet.MaxViolation, r.Quiet.Over)
	}
	fmt.Fprintf(&b, "\n| strategy | node | RSS before | RSS warm | RSS after | goroutines before | goroutines warm | goroutines after |\n|---|---|---|---|---|---|---|---|\n")
	mib := func(v float64) string {
		if math.IsNaN(v) {
			return "-"
		}
		return fmt.Sprintf("%.1f MiB", v/(1<<20))
	}
	num := func(v float64) string {
		if math.IsNaN(v) {
			return "-"
		}
		return fmt.Sprintf("%.0f", v)
	}
	for i, s := range p.strategies {
		r := results[i]
		for j := range min(len(r.Before), len(r.Warm), len(r.After)) {
			fmt.Fprintf(&b, "| %s | n%d | %s | %s | %s | %s | %s | %s |\n", s, j, mib(r.Before[j].RSS), mib(r.Warm[j].RSS), mib(r.After[j].RSS),
				num(r.Before[j].Goroutines), num(r.Warm[j].Goroutines), num(r.After[j].Goroutines))
		}
	}
	b.WriteString("\n")
	for i, s := range p.strategies {
		r := results[i]
		if len(r.Whole.ErrorKinds) > 0 {
			fmt.Fprintf(&b, "%s: failed checks by error: %v\n\n", s, r.Whole.ErrorKinds)
		}
		if g := r.Grown(chaos.DefaultFlat); len(g) > 0 {
			fmt.Fprintf(&b, "%s: grew after the load beyond goroutines +20, RSS 1.5x + 32 MiB: %s\n\n", s, strings.Join(g, "; "))
		}
		if r.Quiet.Over > 0 {
			fmt.Fprintf(&b, "%s: keys beyond b + r*T + %g in the quiet windows (worst first):\n\n", s, f.slack)
			for _, k := range r.Quiet.Keys[:min(5, len(r.Quiet.Keys))] {
				fmt.Fprintf(&b, "- %s: %.2f tokens over, checks sent in [%v, %v], answered by %v\n", k.Key, k.Violation,
					k.WorstFrom.Round(time.Millisecond), k.WorstTo.Round(time.Millisecond), k.WorstEnd.Round(time.Millisecond))
			}
			b.WriteString("\n")
		}
		for _, e := range r.StepErrors {
			fmt.Fprintf(&b, "%s: fault not applied: %v\n", s, e)
		}
	}
	fmt.Fprintf(&b, "reproduce: `%s`\n", f.reproduce())
	return b.String()
}

// writeChaosHistory writes every check of h as CSV.
func writeChaosHistory(path string, h *chaos.History) error {
	fh, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(fh)
	fmt.Fprintln(w, "sent_ms,key,node,tokens,allowed,latency_us,error")
	for _, d := range h.Decisions() {
		e := ""
		if d.Err != nil {
			e = strings.NewReplacer(",", ";", "\n", " ").Replace(d.Err.Error())
		}
		a := 0
		if d.Allowed {
			a = 1
		}
		fmt.Fprintf(w, "%.3f,%s,%d,%d,%d,%d,%s\n", float64(d.At)/float64(time.Millisecond), d.Key, d.Node, d.Tokens, a, d.Latency.Microseconds(), e)
	}
	if err := w.Flush(); err != nil {
		_ = fh.Close()
		return err
	}
	return fh.Close()
}
