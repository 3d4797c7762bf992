package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/eval"
	"github.com/tokenmesh/tokenmesh/localcluster"
	"github.com/tokenmesh/tokenmesh/replay"
	"github.com/tokenmesh/tokenmesh/rule"
	"github.com/tokenmesh/tokenmesh/sim"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/registry"
	"github.com/tokenmesh/tokenmesh/workload"
)

// replayRule is the name of the one rule the replay cluster serves.
const replayRule = "replay"

type replayFlags struct {
	traceFlags
	reportFlags
	recommendFlags
	tableFlags
	regionFlags       replayRegionFlags
	nodes             int
	strategies        string
	rate              float64
	burst             int64
	assign            string
	seed              uint64
	params            []string
	speed             float64
	duration          time.Duration
	shortfallWindow   time.Duration
	kills, partitions []string
	heals, restarts   []string
	scenario          string
	binary            string
	keepLogs          string
	decisions         string
	netns             bool
	edgeTimes         bool
}

func newReplayCmd() *cobra.Command { return newReplayCmdWith(&replayFlags{}) }

// newReplayCmdWith is newReplayCmd parsing into f (tests read the plan).
func newReplayCmdWith(f *replayFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "replay",
		Short: "Replay a trace against a live local cluster of real processes and compare with a central limiter",
		Long: `replay starts a cluster of --nodes real ` + "`tokenmesh serve`" + ` processes on this machine
(loopback ports), sends every request of the trace to one of them over the gRPC
API at its time, and reports, like ` + "`tokenmesh sim`" + `, how the decisions differ from
one central token bucket on the same requests (computed from the trace) and what
they cost (peer messages and bytes, from the nodes' /metrics).

One strategy per run; with a comma list (--strategy owner,gdrl) each runs in
turn on a fresh cluster. Request i is sent at start + ts_i/--speed; the served
rule has rate --rate * --speed tokens per wall second and burst --burst, so the
decisions compare with central on the trace timeline at (--rate, --burst).
Requests go to the node --assign picks among the live nodes, as in sim.
Strategy timers and --param durations are wall time, not scaled by --speed.

The nodes stamp each request when they take it, so the path from this client to
the nodes (two requests of one key sent a fraction of a millisecond apart to
two nodes can arrive swapped) shows in the decisions of strategies that order
requests (owner). --edge-times sends each request's due time with it as the
time it reached the edge (created_at_unix_ns, as a gateway would): owner's
key owner then orders a key's requests as the trace does, as the simulator
does, provided its hold covers that path's jitter (--param owner.hold=5ms
here at --speed 10; docs/REPLAY.md has the numbers).

Requests are spread round-robin over the nodes (--assign), as a load
balancer spreads them; --assign hash is the thesis' injector, as in sim.

Decision latency is measured: the client's gRPC Check round trip (wall ms).
The report prints n/a for what a replay does not measure (local %: which
decisions a node took without a peer; msgs, bytes and B/req when the nodes'
/metrics could not be read), and ends, like sim's, with the verdict among
the strategies replayed (--recommend, --max-excess, ...) and how to serve
it. A fault (--kill, --restart, --partition, --heal, --scenario) after the
trace's last request never happens: stderr says so. A request sent
more than 50 ms after its due time is a late send: counted in the report (live
section of --json, and the setup line). Many late sends mean the machine could
not keep up: lower --speed.

Faults at trace times: --kill NODE@TIME (SIGKILL node NODE, 0-based),
--restart NODE@TIME (start a killed node again; it gets requests once it
serves and every node lists it), --partition "0,1|2@TIME" (cut the peer data
plane between groups; gossip still flows) and --heal TIME. Partitions start
the nodes with fault injection. --scenario FILE reads them from the YAML of
` + "`tokenmesh sim --scenario`" + ` (crash, crash_owner_of_hottest, restart, partition,
heal; not network; the detection settings are the simulator's model of what
the live nodes do, in trace time). After a run with faults, stderr says when
each fault was applied and how long each node took to log the membership
changes it calls for (wall seconds, and trace seconds at --speed): the
simulator describes a replay at speed S with those delays, and the strategy
timers, multiplied by S (docs/REPLAY.md).
With --regions (NAME:NODES,..., as sim's) node i is named <region>.n<i>, so
region-aware strategies (regionlease) run their tiers, and --wan-latency
delays every peer frame between regions in the nodes (fault injection; gossip
is not delayed): 30ms, or uniform:30ms-40ms, wall time; the nodes then get
its largest delay as their --latency-hint, as the simulator tells every
strategy the WAN's latency. The simulator of the same run takes
--wan-latency times --speed (docs/REPLAY.md).
With --netns (root and iproute2), every node runs in its own network namespace
and a partition cuts gossip and peer traffic together, as a real network
partition does: each side then declares the other failed, and after --heal the
membership's reconnects merge them (docs/OPERATIONS.md). Without root it falls
back to the data-plane cut with a warning.`,
		Example: `  tokenmesh replay --trace ../shared/data/traces/wrccdc-2018-dns.csv.gz --strategy owner --speed 10 --duration 120s
  tokenmesh replay --trace access.log --nodes 5 --rate 10 --burst 20 --strategy owner,gdrl --json
  tokenmesh replay --trace t.csv --strategy owner --kill 1@30s --partition "0|2@60s" --heal 90s --keep-logs logs/
  tokenmesh replay --trace t.csv --strategy owner --netns --scenario examples/scenarios/crash-restart-3nodes.yaml
  tokenmesh replay --trace t.csv --strategy regionlease,lease --regions eu:1,us:1,ap:1 --wan-latency 30ms --speed 10`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runReplay(ctx, cmd, f)
		},
	}
	fl := cmd.Flags()
	f.traceFlags.add(fl, "trace file (required): ts_ms,key CSV or Common/Combined Log Format access log, plain or gzip")
	fl.IntVar(&f.nodes, "nodes", 3, "number of node processes")
	f.regionFlags.add(fl)
	fl.StringVar(&f.strategies, "strategy", "owner", "strategy to run, or a comma-separated list run one after the other, each on a fresh cluster ("+strings.Join(registry.Names()[1:], ", ")+")")
	fl.Float64Var(&f.rate, "rate", 1, "token bucket rate r, in tokens per second of trace time, per key")
	fl.Int64Var(&f.burst, "burst", 10, "token bucket burst b, in tokens, per key")
	fl.StringVar(&f.assign, "assign", "roundrobin", assignHelp)
	fl.Uint64Var(&f.seed, "seed", 1, "random seed (random assignment)")
	fl.StringArrayVar(&f.params, "param", nil, "strategy parameter as strategy.name=value, repeatable (e.g. owner.hold=2ms); durations are wall time")
	f.reportFlags.add(fl)
	f.recommendFlags.add(fl)
	f.tableFlags.add(fl)
	fl.Float64Var(&f.speed, "speed", 1, "replay speed: 10 sends the trace 10 times faster (and scales the served rate by 10)")
	fl.DurationVar(&f.duration, "duration", 0, "replay only the first DURATION of trace time (0: all)")
	fl.DurationVar(&f.shortfallWindow, "shortfall-window", 0, shortfallWindowHelp)
	fl.StringArrayVar(&f.kills, "kill", nil, "NODE@TIME: SIGKILL node NODE (0-based) at trace time TIME, e.g. 1@30s; repeatable")
	fl.StringArrayVar(&f.restarts, "restart", nil, "NODE@TIME: start node NODE, killed before, again at trace time TIME, e.g. 1@2m; repeatable")
	fl.StringArrayVar(&f.partitions, "partition", nil, `GROUPS@TIME: from trace time TIME, cut the peer data plane between groups, e.g. "0,1|2@30s"; repeatable`)
	fl.StringArrayVar(&f.heals, "heal", nil, "TIME: heal the partition at trace time TIME; repeatable")
	fl.StringVar(&f.scenario, "scenario", "", "YAML scenario of tokenmesh sim (examples/scenarios): its crashes, partitions and heals, added to the flags' faults")
	fl.StringVar(&f.binary, "binary", "", "the tokenmesh binary the nodes run (default: this executable)")
	fl.BoolVar(&f.edgeTimes, "edge-times", false, "send each request's due time as the time it reached the edge (created_at_unix_ns), for owner's ordering buffer (with --param owner.hold covering the client-to-node jitter)")
	fl.BoolVar(&f.netns, "netns", false, "run each node in its own network namespace (root): --partition then cuts gossip too")
	fl.StringVar(&f.decisions, "decisions", "", "also write every request's live decision to DIR/<strategy>.csv (index, arrival_ms, key, node, allowed, central, lateness_ms, error, latency_ms), e.g. to compare with the simulator's over time")
	fl.StringVar(&f.keepLogs, "keep-logs", "", "keep the nodes' configs and logs in DIR/<strategy> (default: a temporary directory, removed)")
	return cmd
}

// replayPlan is the checked command line.
type replayPlan struct {
	trace      *workload.Trace
	strategies []string
	params     map[string]map[string]string // strategy -> name -> value
	paramList  strategy.Params              // the same, as parsed
	rate       bucket.Rate
	events     []replay.Event
	faults     bool // partitions or a WAN delay: start with fault injection
	binary     string
	regions    replayRegions
}

// plan checks the flags (every error names its flag) and reads the trace.
func (f *replayFlags) plan() (*replayPlan, error) {
	p := &replayPlan{params: map[string]map[string]string{}}
	if err := f.checkNumbers(); err != nil {
		return nil, err
	}
	var err error
	if p.rate, err = f.checkRate(); err != nil {
		return nil, err
	}
	if p.strategies, err = parseReplayStrategies(f.strategies); err != nil {
		return nil, err
	}
	if _, err := workload.NewAssigner(f.assign, f.seed); err != nil {
		return nil, usageErr("--assign: %v", err)
	}
	if err := p.setParams(f.params); err != nil {
		return nil, err
	}
	if p.regions, err = f.regionFlags.plan(&f.nodes); err != nil {
		return nil, err
	}
	p.faults = p.regions.wanDelay > 0 || p.regions.wanJitter > 0
	if err := f.flagEvents(p); err != nil {
		return nil, err
	}
	if p.binary, err = replayBinary(f.binary); err != nil {
		return nil, err
	}
	tr, err := f.traceFlags.read()
	if err != nil {
		return nil, fmt.Errorf("--trace: %w", err)
	}
	if err := f.scenarioEvents(p, tr); err != nil {
		return nil, err
	}
	if err := f.cutDuration(tr); err != nil {
		return nil, err
	}
	p.trace = tr
	return p, nil
}

// checkNumbers checks the report flags, that a trace is given and the
// numeric flags' ranges.
func (f *replayFlags) checkNumbers() error {
	if err := f.reportFlags.check(); err != nil {
		return err
	}
	switch {
	case f.trace == "":
		return usageErr("--trace: a trace file is required")
	case f.nodes < 1:
		return usageErr("--nodes %d: need at least 1 node", f.nodes)
	case math.IsNaN(f.rate) || f.rate <= 0:
		return usageErr("--rate %v: the rate must be a positive number of tokens per second", f.rate)
	case f.burst < 1:
		return usageErr("--burst %d: the burst must be at least 1 token", f.burst)
	case math.IsNaN(f.speed) || math.IsInf(f.speed, 0) || f.speed <= 0:
		return usageErr("--speed %v: want a positive number (1 = real time)", f.speed)
	case f.duration < 0:
		return usageErr("--duration %v: want a positive duration, or 0 for the whole trace", f.duration)
	}
	return checkShortfallWindow(f.shortfallWindow)
}

// checkRate returns --rate as a bucket.Rate, checked with --burst and, as
// the served rate, with --speed.
func (f *replayFlags) checkRate() (bucket.Rate, error) {
	rate, err := bucket.PerSecond(f.rate)
	if err != nil {
		return rate, usageErr("--rate: %v", err)
	}
	if _, err := bucket.New(rate, f.burst, 0); err != nil {
		return rate, usageErr("--burst: %v", err)
	}
	if _, err := bucket.PerSecond(replay.ScaledRate(rate, f.speed)); err != nil {
		return rate, usageErr("--speed %v: the served rate --rate * --speed: %v", f.speed, err)
	}
	return rate, nil
}

// parseReplayStrategies parses --strategy: registered strategies other
// than central, each once.
func parseReplayStrategies(list string) ([]string, error) {
	var names []string
	seen := map[string]bool{}
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		if name == "central" {
			return nil, usageErr("--strategy central: central is the reference, computed from the trace; name a coordination strategy (%s)", strings.Join(registry.Names()[1:], ", "))
		}
		if _, err := registry.Lookup(name); err != nil {
			return nil, usageErr("--strategy: %v", err)
		}
		if seen[name] {
			return nil, usageErr("--strategy: %q is listed twice", name)
		}
		seen[name] = true
		names = append(names, name)
	}
	return names, nil
}

// setParams parses the --param flags for p's strategies into p.paramList
// and p.params.
func (p *replayPlan) setParams(flags []string) error {
	infos := make([]registry.Info, 0, len(p.strategies))
	for _, name := range p.strategies {
		info, _ := registry.Lookup(name) // checked by parseReplayStrategies
		infos = append(infos, info)
	}
	params, err := parseParamFlags(flags, infos)
	if err != nil {
		return err
	}
	p.paramList = params
	for name, value := range params.Values() {
		s, pname, _ := strings.Cut(name, ".")
		if p.params[s] == nil {
			p.params[s] = map[string]string{}
		}
		p.params[s][pname] = value
	}
	return nil
}

// flagEvents parses the fault flags (--kill, --restart, --partition,
// --heal, in that order) into p.events.
func (f *replayFlags) flagEvents(p *replayPlan) error {
	for _, spec := range f.kills {
		if err := f.killEvent(p, spec); err != nil {
			return err
		}
	}
	for _, spec := range f.restarts {
		if err := f.restartEvent(p, spec); err != nil {
			return err
		}
	}
	for _, spec := range f.partitions {
		if err := f.partitionEvent(p, spec); err != nil {
			return err
		}
	}
	for _, spec := range f.heals {
		e, err := replay.ParseHeal(spec)
		if err != nil {
			return usageErr("--heal %v", err)
		}
		p.events = append(p.events, e)
		p.faults = true
	}
	return nil
}

// killEvent adds the event of one --kill: a node of the cluster not
// killed by another --kill.
func (f *replayFlags) killEvent(p *replayPlan, spec string) error {
	e, err := replay.ParseKill(spec)
	if err != nil {
		return usageErr("--kill %v", err)
	}
	if e.Node >= f.nodes {
		return usageErr("--kill %q: no node %d (--nodes %d: 0..%d)", spec, e.Node, f.nodes, f.nodes-1)
	}
	for _, o := range p.events {
		if o.Node == e.Node {
			return usageErr("--kill %q: node %d is killed twice", spec, e.Node)
		}
	}
	p.events = append(p.events, e)
	return nil
}

// restartEvent adds the event of one --restart: a node of the cluster
// killed by a --kill before it.
func (f *replayFlags) restartEvent(p *replayPlan, spec string) error {
	e, err := replay.ParseRestart(spec)
	if err != nil {
		return usageErr("--restart %v", err)
	}
	if e.Node >= f.nodes {
		return usageErr("--restart %q: no node %d (--nodes %d: 0..%d)", spec, e.Node, f.nodes, f.nodes-1)
	}
	killedBefore := false
	for _, o := range p.events {
		killedBefore = killedBefore || (o.Kind == replay.Kill && o.Node == e.Node && o.At < e.At)
	}
	if !killedBefore {
		return usageErr("--restart %q: node %d is not killed (--kill) before %v", spec, e.Node, e.At)
	}
	p.events = append(p.events, e)
	return nil
}

// partitionEvent adds the event of one --partition: groups of nodes of
// the cluster.
func (f *replayFlags) partitionEvent(p *replayPlan, spec string) error {
	e, err := replay.ParsePartition(spec)
	if err != nil {
		return usageErr("--partition %v", err)
	}
	for _, g := range e.Groups {
		for _, n := range g {
			if n >= f.nodes {
				return usageErr("--partition %q: no node %d (--nodes %d: 0..%d)", spec, n, f.nodes, f.nodes-1)
			}
		}
	}
	p.events = append(p.events, e)
	p.faults = true
	return nil
}

// replayBinary is --binary, by default this executable, checked to be a
// file.
func replayBinary(flag string) (string, error) {
	binary := flag
	if binary == "" {
		var err error
		if binary, err = os.Executable(); err != nil {
			return "", usageErr("--binary: cannot find this executable (%v); give the tokenmesh binary", err)
		}
	}
	if st, err := os.Stat(binary); err != nil || st.IsDir() {
		return "", usageErr("--binary %s: not an executable file", binary)
	}
	return binary, nil
}

// scenarioEvents adds the events of --scenario, if given, on trace tr to
// p.events: none may kill or restart a node the flags kill or restart.
func (f *replayFlags) scenarioEvents(p *replayPlan, tr *workload.Trace) error {
	if f.scenario == "" {
		return nil
	}
	sc, err := sim.LoadScenario(f.scenario)
	if err != nil {
		return usageErr("--scenario: %v", err)
	}
	evs, err := replay.FromScenario(sc, tr, f.nodes, p.regions.regions)
	if err != nil {
		return usageErr("--scenario %s: %v", f.scenario, err)
	}
	flagEvents := p.events
	for _, e := range evs {
		switch e.Kind {
		case replay.Kill, replay.Restart:
			if killsOrRestarts(flagEvents, e.Node) {
				return usageErr("--scenario %s: node %d is killed or restarted by --kill or --restart too", f.scenario, e.Node)
			}
		case replay.Partition, replay.Heal:
			p.faults = true
		}
		p.events = append(p.events, e)
	}
	return nil
}

// killsOrRestarts says whether one of events kills or restarts node.
func killsOrRestarts(events []replay.Event, node int) bool {
	for _, o := range events {
		if (o.Kind == replay.Kill || o.Kind == replay.Restart) && o.Node == node {
			return true
		}
	}
	return false
}

// cutDuration keeps the requests of tr that arrive before --duration, if
// given (at least one).
func (f *replayFlags) cutDuration(tr *workload.Trace) error {
	if f.duration <= 0 {
		return nil
	}
	n := 0
	for n < len(tr.Requests) && tr.Requests[n].Arrival < f.duration {
		n++
	}
	if n == 0 {
		return usageErr("--duration %v: no request of %s arrives that early", f.duration, tr.Name)
	}
	tr.Requests = tr.Requests[:n:n]
	return nil
}

func runReplay(ctx context.Context, cmd *cobra.Command, f *replayFlags) error {
	f.regionFlags.nodesSet = cmd.Flags().Changed("nodes")
	p, err := f.plan()
	if err != nil {
		return err
	}
	stderr := cmd.ErrOrStderr()
	if p.trace.Skipped > 0 {
		fmt.Fprintf(stderr, "skipped %d malformed lines, e.g. %s\n", p.trace.Skipped, strings.Join(p.trace.SkippedExamples, "; "))
	}
	var events []timedEvent
	for _, e := range p.events {
		events = append(events, timedEvent{e.At, e.String()})
	}
	warnLateEvents(stderr, "fault", events, p.trace)
	bounds, err := f.bounds(f.shortfallWindow > 0)
	if err != nil {
		return err
	}
	central, err := eval.Central(p.trace, p.rate, f.burst)
	if err != nil {
		return err
	}
	progress, bar := f.replayProgress(p, stderr)
	if bar != nil {
		defer bar.Finish()
	}
	runs, err := f.replayAll(ctx, p, central, progress, stderr)
	if err != nil {
		return err
	}
	live := replay.Live{Cluster: "processes", Nodes: f.nodes, Speed: f.speed, DurationSec: f.duration.Seconds(),
		RuleRatePS: replay.ScaledRate(p.rate, f.speed), LateAfterMs: float64(replay.DefaultLateAfter) / float64(time.Millisecond),
		EdgeTimes: f.edgeTimes, Regions: f.regionFlags.regions, WANLatency: f.regionFlags.wanLatency}
	setup := eval.Setup{Nodes: f.nodes, RatePerSec: p.rate.PerSec(), Burst: f.burst, Assign: f.assign, Seed: f.seed,
		ShortfallWindowS: f.shortfallWindow.Seconds()}
	rep := replay.NewReport(p.trace, setup, live, central, runs)
	if f.recommend {
		rep.Recommendation = f.replayRecommendation(rep, bounds, p)
	}
	return f.writeReplayReport(cmd, rep)
}

// replayProgress returns what tells the progress of each run (nil: none):
// a bar on a terminal (returned too, to be finished), a plain line every
// few seconds for --progress auto on another stderr.
func (f *replayFlags) replayProgress(p *replayPlan, stderr io.Writer) (func(run int) func(done, total int), *progressbar.ProgressBar) {
	reqs := len(p.trace.Requests)
	if bar := newProgress(f.progress, stderr, len(p.strategies)*reqs); bar != nil {
		return func(run int) func(done, total int) {
			bar.Describe(p.strategies[run])
			return func(done, total int) { _ = bar.Set(run*total + done) }
		}, bar
	}
	if f.progress == "auto" && len(p.strategies)*reqs > 0 {
		// stderr is no terminal (a log, CI): a plain line every few
		// seconds instead of a bar, so a long replay is not silent.
		return func(run int) func(done, total int) {
			return lineProgress(stderr, p.strategies[run], replayProgressEvery, time.Now)
		}, nil
	}
	return nil, nil
}

// replayAll replays each strategy of p in turn, each on a fresh cluster,
// writing its decisions under --decisions if given.
func (f *replayFlags) replayAll(ctx context.Context, p *replayPlan, central []bool, progress func(run int) func(done, total int), stderr io.Writer) ([]*replay.Result, error) {
	var runs []*replay.Result
	for i, s := range p.strategies {
		opts := replay.Options{Trace: p.trace, Strategy: s, Rate: p.rate, Burst: f.burst, Speed: f.speed,
			AssignPolicy: f.assign, Seed: f.seed, Events: p.events, Central: central, EdgeTimes: f.edgeTimes}
		if progress != nil {
			opts.Progress = progress(i)
		}
		res, err := replayOne(ctx, f, p, s, opts, stderr)
		if err != nil {
			return nil, fmt.Errorf("replay of %s: %w", s, err)
		}
		if res.BytesError != "" {
			fmt.Fprintf(stderr, "tokenmesh: %s: peer traffic not measured (n/a in the report): %s\n", s, res.BytesError)
		}
		if f.decisions != "" {
			if err := writeDecisions(filepath.Join(f.decisions, s+".csv"), p.trace, central, res); err != nil {
				return nil, fmt.Errorf("--decisions: %w", err)
			}
		}
		runs = append(runs, res)
	}
	return runs, nil
}

// replayRecommendation is the verdict among the strategies replayed, with
// how to serve it.
func (f *replayFlags) replayRecommendation(rep *replay.Report, bounds eval.Bounds, p *replayPlan) *eval.Recommendation {
	rec := eval.Recommend(&rep.Report, bounds, p.paramList)
	switch {
	case rec.Strategy != "":
		rec.Next = []eval.Step{serveStep(rec.Strategy, p.paramList, p.rate, f.burst)}
	case rec.Closest != "":
		rec.Next = []eval.Step{eval.NoneMeetsStep(rec.Closest, rec.Bounds)}
	}
	return rec
}

// writeReplayReport writes rep on stdout (JSON or a table) and, with
// --out, its files there (report.json with the live section).
func (f *replayFlags) writeReplayReport(cmd *cobra.Command, rep *replay.Report) error {
	out := cmd.OutOrStdout()
	var err error
	if f.json {
		err = writeReplayJSON(out, rep)
	} else {
		err = f.tableFlags.writeTable(out, &rep.Report)
	}
	if err != nil {
		return err
	}
	if f.out == "" {
		return nil
	}
	rep.Report.Reproduce = reproduceSteps(cmd)
	if err := eval.WriteAll(f.out, &rep.Report); err != nil {
		return err
	}
	// report.json with the live section too.
	jf, err := os.Create(filepath.Join(f.out, "report.json"))
	if err != nil {
		return err
	}
	if err := writeReplayJSON(jf, rep); err != nil {
		jf.Close()
		return err
	}
	if err := jf.Close(); err != nil {
		return err
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "wrote %s and %s\n", filepath.Join(f.out, "report.md"), filepath.Join(f.out, "report.html"))
	return nil
}

func writeReplayJSON(w io.Writer, rep *replay.Report) error {
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// replayOne runs one strategy on a fresh cluster.
func replayOne(ctx context.Context, f *replayFlags, p *replayPlan, s string, opts replay.Options, stderr io.Writer) (*replay.Result, error) {
	dir := ""
	if f.keepLogs != "" {
		dir = filepath.Join(f.keepLogs, s)
	}
	rate, err := rule.ParseRate(replay.RuleRate(p.rate, f.speed))
	if err != nil {
		return nil, fmt.Errorf("replay: the rule's rate at --speed %v: %w", f.speed, err)
	}
	var serveArgs []string
	if hint := p.regions.wanDelay + p.regions.wanJitter; hint > 0 {
		// As the simulator tells every strategy the largest link latency
		// (the WAN's): the nodes' default hint is 0 s, and the WAN delay
		// added in their fault injection is not seen by gossip probes.
		serveArgs = []string{"--latency-hint", hint.String()}
	}
	cl, err := localcluster.Start(ctx, localcluster.Config{
		Binary: p.binary, Nodes: f.nodes, Dir: dir, FaultInjection: p.faults, Namespaces: f.netns, Regions: p.regions.names,
		Rules:     []rule.Rule{{Name: replayRule, Rate: rate, Burst: f.burst, Strategy: s, Params: rule.Pairs(p.params[s])}},
		ServeArgs: serveArgs,
	})
	if err != nil {
		return nil, err
	}
	defer func() {
		if err := cl.Stop(); err != nil {
			fmt.Fprintf(stderr, "tokenmesh: stopping the %s cluster: %v\n", s, err)
		}
	}()
	if p.regions.wanDelay > 0 || p.regions.wanJitter > 0 { // (fault injection is on then: plan)
		if err := cl.SetWANDelay(ctx, p.regions.wanDelay, p.regions.wanJitter); err != nil {
			return nil, fmt.Errorf("replay: --wan-latency: %w", err)
		}
	}
	addrs := make([]string, len(cl.Nodes))
	for i, n := range cl.Nodes {
		addrs[i] = n.GRPC
	}
	target, err := replay.NewLiveTarget(cl, addrs, replayRule, cl.DialOptions()...)
	if err != nil {
		return nil, err
	}
	defer target.Close()
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err = target.Warm(wctx)
	cancel()
	if err != nil {
		return nil, err
	}
	res, err := replay.Run(ctx, opts, target)
	if err != nil {
		return nil, err
	}
	reportHints(ctx, stderr, s, cl, f.nodes)
	names := make([]string, len(cl.Nodes))
	for i, n := range cl.Nodes {
		names[i] = n.Name
	}
	reportDetection(stderr, s, f.speed, cl.Dir(), names, res)
	return res, nil
}

// reportDetection prints, on stderr, the wall time each fault was applied
// and how long each live node took to log the membership changes it calls
// for (replay.MeasureDetection on the nodes' logs in dir, names[i] node
// i's name: n<i>, or with regions <region>.n<i>), in wall seconds
// and in trace seconds (times speed): what the simulator's scenario model
// (detection, detection_jitter, reconnect_interval, join_delay) must say
// to describe this replay.
func reportDetection(w io.Writer, strategy string, speed float64, dir string, names []string, res *replay.Result) {
	if len(res.Applied) == 0 {
		return
	}
	for i, e := range res.Applied {
		fmt.Fprintf(w, "tokenmesh: %s: %s applied at %s\n", strategy, e, res.EventTimes[i].UTC().Format("15:04:05.000"))
	}
	logs := make([]string, len(names))
	for i := range logs {
		b, err := os.ReadFile(filepath.Join(dir, names[i]+".log"))
		if err == nil {
			logs[i] = string(b)
		}
	}
	ds, err := replay.MeasureDetection(len(names), res.Applied, res.EventTimes, logs)
	if err != nil {
		fmt.Fprintf(w, "tokenmesh: %s: detection not measured: %v\n", strategy, err)
		return
	}
	for _, d := range ds {
		fmt.Fprintf(w, "tokenmesh: %s: detection: %s saw %d of %d membership changes of %s, first after %.2fs, last after %.2fs wall (%.1fs, %.1fs of trace at speed %g)\n",
			strategy, names[d.Observer], d.Seen, d.Expected, d.Event, d.First.Seconds(), d.Last.Seconds(), d.First.Seconds()*speed, d.Last.Seconds()*speed, speed)
	}
}

// writeDecisions writes one CSV line per request of trace: its index,
// arrival (trace ms), key, the node it was sent to (-1: none), the live
// decision (1 admitted, 0 rejected or undecided), central's, the send's
// lateness (wall ms), its error, if any, and the Check call's round trip
// as the client measured it (wall ms; the last column, so that readers of
// the earlier columns are unchanged).
func writeDecisions(path string, trace *workload.Trace, central []bool, res *replay.Result) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	fmt.Fprintln(w, "index,arrival_ms,key,node,allowed,central,lateness_ms,error,latency_ms")
	b := func(v bool) int {
		if v {
			return 1
		}
		return 0
	}
	for i, r := range trace.Requests {
		o := res.Outcomes[i]
		errText := ""
		if o.Err != nil {
			errText = strconv.Quote(o.Err.Error())
		}
		fmt.Fprintf(w, "%d,%d,%s,%d,%d,%d,%.3f,%s,%.3f\n", i, r.Arrival.Milliseconds(), strconv.Quote(r.Key), o.Node,
			b(res.Allowed(i)), b(central[i]), float64(o.Lateness)/float64(time.Millisecond), errText,
			float64(o.Latency)/float64(time.Millisecond))
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// replayProgressEvery is the wall time between two progress lines of a
// replay whose stderr is no terminal.
const replayProgressEvery = 5 * time.Second

// lineProgress returns a replay.Options.Progress that writes to w, at most
// once per every of wall time (now), a line
//
//	replay owner: 1200/5000 requests sent (24%), 15s wall time
//
// and a last one when the run's requests are all sent.
func lineProgress(w io.Writer, strategy string, every time.Duration, now func() time.Time) func(done, total int) {
	start := now()
	last := start
	return func(done, total int) {
		t := now()
		if done < total && t.Sub(last) < every {
			return
		}
		last = t
		pct := 100
		if total > 0 {
			pct = done * 100 / total
		}
		fmt.Fprintf(w, "replay %s: %d/%d requests sent (%d%%), %v wall time\n", strategy, done, total, pct, t.Sub(start).Round(time.Second))
	}
}
