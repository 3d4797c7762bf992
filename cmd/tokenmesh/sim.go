package main

import (
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/term"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/eval"
	"github.com/tokenmesh/tokenmesh/rule"
	"github.com/tokenmesh/tokenmesh/sim"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/registry"
	"github.com/tokenmesh/tokenmesh/workload"
)

type simFlags struct {
	traceFlags
	reportFlags
	workload                 string
	nodes                    int
	strategies               string
	rate                     float64
	burst                    int64
	assign                   string
	latency                  string
	clientLatency            string
	edgeTimes                bool
	loss, duplicate, reorder float64
	scenario                 string
	seed                     uint64
	params                   []string
	parallel                 int
	cpuprofile               string
	maxWait                  time.Duration
	hold                     string
	waitNotes                []string // strategies "all" brought in that have no waiting mode (checkWaiting)
	shortfallWindow          time.Duration
	recommendFlags
	tableFlags
	proxyFlags
	regionFlags
}

// tableFlags is --wide, sim's and replay's.
type tableFlags struct{ wide bool }

// add defines --wide on fl.
func (f *tableFlags) add(fl *pflag.FlagSet) {
	fl.BoolVar(&f.wide, "wide", false, "print the table whole, one line per strategy, however wide (default: fit 120 columns, the table cut between its accuracy and cost columns)")
}

// writeTable writes rep as the terminal table: fitted in
// eval.DefaultWidth columns, or whole with --wide.
func (f *tableFlags) writeTable(w io.Writer, rep *eval.Report) error {
	if f.wide {
		return eval.WriteTableWidth(w, rep, 0)
	}
	return eval.WriteTable(w, rep)
}

// recommendFlags are the recommendation flags sim and replay share.
type recommendFlags struct {
	recommend                            bool
	maxExcess, maxFalseRej, maxShortfall string
	maxEnvelope                          float64
}

// add defines --recommend, --max-excess, --max-false-rejections,
// --max-shortfall and --max-envelope on fl.
func (f *recommendFlags) add(fl *pflag.FlagSet) {
	fl.BoolVar(&f.recommend, "recommend", true, "end the report with the verdict: the strategy (and parameters) that meets --max-excess, --max-false-rejections (--max-shortfall with --shortfall-window) and --max-envelope at the lowest cost (bytes per request, within 5% counting as equal, then p99 latency), or the closest when none does, and the commands to run next (--recommend=false: leave it out)")
	fl.StringVar(&f.maxExcess, "max-excess", "0.5%", "the recommendation's bound on the excess admitted, in % of central's admitted tokens")
	fl.StringVar(&f.maxFalseRej, "max-false-rejections", "0.5%", "the recommendation's bound on false rejections, in % of the requests central admitted (without --shortfall-window)")
	fl.StringVar(&f.maxShortfall, "max-shortfall", "0.5%", "with --shortfall-window, the recommendation's bound on the shortfall, in % of central's admitted tokens, in place of --max-false-rejections (on an overloaded key false rejections count which requests lost a race for the tokens, the shortfall how many tokens were refused)")
	fl.Float64Var(&f.maxEnvelope, "max-envelope", 1, "the recommendation's bound on the envelope violation, in tokens")
}

func newSimCmd() *cobra.Command {
	f := &simFlags{}
	cmd := &cobra.Command{
		Use:   "sim",
		Short: "Replay a trace through a simulated cluster and compare strategies with a central limiter",
		Long: `sim replays requests through a simulated cluster once per strategy and reports,
for each, how its decisions differ from one central token bucket on the same
input (same requests, same timestamps, same order), and at what cost.

Input: --trace FILE (a ts_ms,key CSV, or a Common/Combined Log Format access
log; plain or gzip), or --workload SPEC for a generated workload. With neither,
a built-in mixed workload runs (Poisson, periodic, batch and heavy-hitter users).

Strategies (` + strings.Join(registry.Names(), ", ") + `):
` + strategyHelp() + `
Metrics: precision = rejections / central's rejections (thesis 002 §5.1.1);
excess % = tokens admitted beyond central, per key, as % of central's admitted;
false rej. = requests rejected that central admitted; envelope = the largest
excess of one key's admitted tokens over b + r*T in any interval; msgs/bytes =
peer messages and their protobuf payload bytes; state = peak bytes of a node's
state; p50/p99 = decision latency; local % = requests decided without
waiting for a peer (JSON local_decision_pct); B/req = peer payload bytes per
request (JSON bytes_per_request). --shortfall-window D adds shortfall % =
per key and per window of D, central's admitted tokens beyond the
strategy's, summed, as % of central's admitted (JSON shortfall_tokens,
shortfall_pct): over-rejection counted in tokens, not in which requests;
and after birth % = the same with each key's first window left out
(JSON shortfall_after_birth_pct): the steady part, without the tokens a
strategy holds away from its requests when a new key's burst runs out.

--regions eu:10,us:10,ap:10 spreads the cluster over regions (the
sum is the cluster's size, so --nodes may be left out): nodes are named
<region>.n<i> (eu.n0 .. eu.n9, us.n10 .., where a strategy can read a
peer's region from its name), --latency and --loss are the links within a
region, --wan-latency and --wan-loss those between regions (a scenario's
network may set wan_latency, wan_loss and pairs: {eu/ap: exp:120ms}), a
scenario may cut whole regions (cut: [ap], healed by heal: true) or name
regions in partition groups, and the report adds, per strategy, region %
and WAN % (decisions that waited for peers of the region only, or for a
message that crossed between regions; local % are those taken on the node),
p999 ms, WAN B/req and region short % (per key and region, over the run,
the tokens central admitted to a region's requests beyond the strategy's:
one region refused in another's stead). The tenants workload follows the
sun with follow=D
(e.g. tenants:users=20,rate=2000,duration=60s,follow=20s): tenant k (from
0) is offered in region (k + floor(t/D)) mod R, its requests spread over
that region's live nodes by --assign, and moves to the next region every D.

--max-wait D runs every request in waiting mode (000 §5.2): central, local,
static, owner, gdrl, adaptive and lease reserve tokens in arrival order and
admit with a delay up to D (lease and adaptive up to their max_wait, which
--max-wait sets when not given); the report adds each strategy's waiting
time distribution and, for static, SRTM's M/D/1 prediction of its mean wait
(Prop. 1, eq. (1)). gcounter, tbqueue and regionlease have no waiting mode:
naming one in --strategies with --max-wait is refused, saying why; under
all they decide plain checks and stderr says so.

--hold DIST (100ms, or uniform:50ms-200ms) runs the trace as requests that
hold what they are granted for a service time drawn from DIST: under the
concurrency strategy (at most --param concurrency.limit=N in flight per key)
each admitted request's permit is released after its hold; the report adds
each strategy's permits: the most in flight for one key at once (N bounds
it), the mean in flight per key and the mean hold. A rate limit grants no
permit and is unaffected.

Requests are spread round-robin over the nodes (--assign), as a load
balancer spreads them; --assign hash is the thesis' injector (002 §4.3.1),
which flatters the strategies that decide from a node's own view. Every
report notes what its --assign policy flatters and what precision != 1
means, and ends with the verdict (--recommend, on by default): the cheapest
strategy within --max-excess, --max-false-rejections (--max-shortfall with
--shortfall-window) and --max-envelope, or the closest, and the commands to
run next (tokenmesh replay on real processes, then tokenmesh serve). A
scenario event after the trace's last request never happens: stderr says so. The terminal table fits 120 columns
(cut between the accuracy and the cost columns); --wide prints one line per
strategy.

The same flags and seed give byte-identical --json output. Strategies are
simulated in parallel, up to --parallel at once; the output does not depend
on it.

` + sourcesNote,
		Example: `  tokenmesh sim
  tokenmesh sim --trace access.log --nodes 5 --rate 10 --burst 20 --strategies static,owner
  tokenmesh sim --trace ../shared/data/traces/zanbil-2019-http.csv.gz --nodes 10 --rate 1 --burst 10 --json
  tokenmesh sim --workload poisson:users=100,rate=2,duration=60s --loss 0.05 --out report/
  tokenmesh sim --scenario examples/scenarios/crash-hot-owner.yaml --strategies owner --param owner.on_timeout=reject
  tokenmesh sim --trace ../shared/data/traces/zanbil-2019-http.csv.gz --nodes 30 --strategies central,owner,lease --max-wait 1s
  tokenmesh sim --trace ../shared/data/traces/wrccdc-2018-dns.csv.gz --nodes 30 --max-excess 1% --max-false-rejections 0.1%
  tokenmesh sim --trace ../shared/data/traces/zanbil-2019-http.csv.gz --assign hash --wide    # the thesis' injector, full-width table
  tokenmesh sim --trace ../shared/data/traces/zanbil-2019-http.csv.gz --nodes 30 --proxies 20 --strategies central,quota,owner,lease,proxystatic
  tokenmesh sim --regions eu:10,us:10,ap:10 --latency 1ms --wan-latency exp:60ms+20ms --loss 0.01 --workload tenants:users=20,rate=2000,duration=20s,follow=5s --rate 1000 --burst 1000 --strategies central,owner,lease`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runSim(cmd, f) },
	}
	fl := cmd.Flags()
	f.traceFlags.add(fl, "trace file: ts_ms,key CSV or Common/Combined Log Format access log, plain or gzip")
	fl.StringVar(&f.workload, "workload", "", "generated workload instead of a trace, e.g. poisson:users=100,rate=2,duration=60s (kinds: poisson, periodic, batch, heavy, mix, tenants; tenants:...,follow=20s follows the sun over --regions)")
	fl.IntVar(&f.nodes, "nodes", 10, "number of nodes in the simulated cluster")
	fl.StringVar(&f.strategies, "strategies", "all", "comma-separated strategies to compare, or all (central is always run: it is the reference)")
	fl.Float64Var(&f.rate, "rate", 1, "token bucket rate r, in tokens per second, per key")
	fl.Int64Var(&f.burst, "burst", 10, "token bucket burst b, in tokens, per key")
	fl.StringVar(&f.assign, "assign", "roundrobin", assignHelp)
	fl.StringVar(&f.latency, "latency", "1ms", "one-way peer latency: 2ms (fixed), uniform:1ms-5ms, exp:2ms (exponential mean), exp:1ms+2ms, samples:FILE (measured values, one duration per line)")
	fl.StringVar(&f.clientLatency, "client-latency", "", "delay of every request on its way from the client to its node (the node stamps it on receipt; central, the reference, keeps the trace's times), in --latency's forms, e.g. exp:2ms to describe a replay's gRPC calls at --speed 10 (docs/REPLAY.md); empty: none")
	fl.BoolVar(&f.edgeTimes, "edge-times", false, "with --client-latency: each request carries its trace time as the time it reached the edge (created_at_unix_ns), which owner orders a key's requests by (as `tokenmesh replay --edge-times`)")
	fl.Float64Var(&f.loss, "loss", 0, "probability that a peer message is lost")
	fl.Float64Var(&f.duplicate, "duplicate", 0, "probability that a peer message is delivered twice")
	fl.Float64Var(&f.reorder, "reorder", 0, "probability that a peer message gets an extra delay that reorders it")
	fl.StringVar(&f.scenario, "scenario", "", "YAML file of crashes, restarts and partitions at given times (see examples/scenarios)")
	fl.Uint64Var(&f.seed, "seed", 1, "random seed (network, random assignment, strategies)")
	fl.StringArrayVar(&f.params, "param", nil, "strategy parameter as strategy.name=value, repeatable (e.g. owner.hold=2ms; tokenmesh strategies lists them)")
	fl.IntVar(&f.parallel, "parallel", 0, "strategies simulated at once (0: GOMAXPROCS); the output is the same for any value")
	fl.StringVar(&f.cpuprofile, "cpuprofile", "", "write a CPU profile of the run to this file (go tool pprof)")
	fl.DurationVar(&f.shortfallWindow, "shortfall-window", 0, shortfallWindowHelp)
	fl.StringVar(&f.hold, "hold", "", "service time of every admitted request, fixed (100ms) or uniform:50ms-200ms: a concurrency limit's permits are held that long, and the report adds the permits in flight per key (empty: none)")
	fl.DurationVar(&f.maxWait, "max-wait", 0, "waiting mode (000 §5.2): every request accepts a wait up to this long; central, local, static, owner, gdrl, adaptive and lease reserve tokens in arrival order and admit with a delay, and the report adds the waiting time distribution; gcounter, tbqueue and regionlease have none (0: off)")
	f.recommendFlags.add(fl)
	f.tableFlags.add(fl)
	f.proxyFlags.add(fl)
	f.regionFlags.add(fl)
	f.reportFlags.add(fl)
	return cmd
}

// assignHelp is --assign's help, sim's and replay's.
var assignHelp = "how requests are spread over the nodes: roundrobin (what a load balancer does, whatever the key), random, hash (the thesis' injector: a hash of the key and the arrival ms, so a key's requests of one ms reach one node together; it flatters the strategies that decide from a node's own view) or key (sticky: every request of a key to one node)"

func strategyHelp() string {
	var b strings.Builder
	for _, s := range registry.List() {
		fmt.Fprintf(&b, "  %-8s %s (%s)\n", s.Name, s.Summary, s.Source)
	}
	return b.String()
}

// parseParamFlags parses --param values (strategy.name=value), each
// addressed to a known strategy and checked against its declared
// parameters (registry.Info.Params: name and type); errors name the flag. A
// value may contain a comma unless NAME= follows it (strategy.ParseParams). The generic
// partition=available|conserve (strategy.PartitionParam) may be given
// without a strategy: it then applies to every strategy of strategies.
func parseParamFlags(flags []string, strategies []registry.Info) (strategy.Params, error) {
	params, err := strategy.ParseParams(flags)
	if err != nil {
		return params, usageErr("--param: %v", err)
	}
	if v, ok := params.Values()[strategy.PartitionParam]; ok {
		if _, err := strategy.ParsePartitionMode(v); err != nil {
			return params, usageErr("--param %s=%s: %v", strategy.PartitionParam, v, err)
		}
		expanded := slices.Clone(flags)
		for _, s := range strategies {
			if _, set := params.Values()[s.Name+"."+strategy.PartitionParam]; !set && !s.Centralized {
				expanded = append(expanded, s.Name+"."+strategy.PartitionParam+"="+v)
			}
		}
		withAll, err := strategy.ParseParams(expanded)
		if err != nil {
			return params, usageErr("--param: %v", err)
		}
		params, _, _ = strategy.TakePartition(withAll)
	}
	if un := params.Unprefixed(); len(un) > 0 {
		return params, usageErr("--param %s: name the strategy, as strategy.%s=value", un[0], un[0])
	}
	values := params.Values()
	for _, name := range params.Names() {
		s, pname, _ := strings.Cut(name, ".")
		info, err := registry.Lookup(s)
		if err != nil {
			return params, usageErr("--param %s: %v", name, err)
		}
		// Names and types from the strategy's declarations (tokenmesh
		// strategies lists them); bounds are checked by its constructor.
		if err := strategy.CheckParam(s, info.Params, pname, values[name]); err != nil {
			return params, usageErr("--param %s: %v", name, err)
		}
	}
	return params, nil
}

func usageErr(format string, a ...any) error {
	return fmt.Errorf("%w: %s", errUsage, fmt.Sprintf(format, a...))
}

// options checks the flags and builds the evaluation; every error names the flag.
func (f *simFlags) options() (eval.Options, error) {
	var o eval.Options
	if err := f.checkNumbers(); err != nil {
		return o, err
	}
	rate, err := bucket.PerSecond(f.rate)
	if err != nil {
		return o, usageErr("--rate: %v", err)
	}
	if _, err := bucket.New(rate, f.burst, 0); err != nil {
		return o, usageErr("--burst: %v", err)
	}
	strategies, err := eval.ParseStrategies(f.strategies)
	if err != nil {
		return o, usageErr("--strategies: %v", err)
	}
	if _, err := workload.NewAssigner(f.assign, f.seed); err != nil {
		return o, usageErr("--assign: %v", err)
	}
	net, err := f.network()
	if err != nil {
		return o, err
	}
	params, err := parseParamFlags(withMaxWaitParams(f.params, f.maxWait), strategies)
	if err != nil {
		return o, err
	}
	if f.waitNotes, err = checkWaiting(f.strategies, strategies, f.maxWait); err != nil {
		return o, err
	}
	hold, err := parseHold(f.hold)
	if err != nil {
		return o, err
	}
	o = eval.Options{Strategies: strategies, Nodes: f.nodes, Rate: rate, Burst: f.burst, Params: params,
		Network: net, AssignPolicy: f.assign, Seed: f.seed, MaxWait: f.maxWait,
		ShortfallWindow: f.shortfallWindow, Hold: hold}
	if err := f.setClientLatency(&o); err != nil {
		return o, err
	}
	if err := f.proxyFlags.apply(&o); err != nil {
		return o, err
	}
	if f.scenario != "" {
		if o.Scenario, err = sim.LoadScenario(f.scenario); err != nil {
			return o, err
		}
		o.ScenarioName = filepath.Base(f.scenario)
	}
	if o.Trace, err = f.input(); err != nil {
		return o, err
	}
	return o, f.regionFlags.apply(&o, &f.nodes)
}

// checkNumbers checks the report flags, the numeric flags' ranges and
// that at most one input is given.
func (f *simFlags) checkNumbers() error {
	if err := f.reportFlags.check(); err != nil {
		return err
	}
	if err := checkShortfallWindow(f.shortfallWindow); err != nil {
		return err
	}
	switch {
	case f.nodes < 1:
		return usageErr("--nodes %d: need at least 1 node", f.nodes)
	case math.IsNaN(f.rate) || f.rate <= 0:
		return usageErr("--rate %v: the rate must be a positive number of tokens per second", f.rate)
	case f.burst < 1:
		return usageErr("--burst %d: the burst must be at least 1 token", f.burst)
	case f.maxWait < 0:
		return usageErr("--max-wait %v: the wait must not be negative", f.maxWait)
	case f.maxWait > time.Hour:
		return usageErr("--max-wait %v: at most 1h", f.maxWait)
	case f.trace != "" && f.workload != "":
		return usageErr("--trace and --workload: give one input, not both")
	case f.parallel < 0:
		return usageErr("--parallel %d: want 0 (GOMAXPROCS) or a positive number of strategies at once", f.parallel)
	}
	return nil
}

// network is the simulated network of --latency, --loss, --duplicate and
// --reorder.
func (f *simFlags) network() (sim.Network, error) {
	lat, err := sim.ParseLatency(f.latency)
	if err != nil {
		return sim.Network{}, usageErr("--latency: %v", err)
	}
	net := sim.Network{Latency: lat, Loss: f.loss, Duplicate: f.duplicate, Reorder: f.reorder}
	if err := net.Validate(); err != nil {
		return sim.Network{}, usageErr("%v", err)
	}
	return net, nil
}

// setClientLatency sets o's client latency (--client-latency) and edge
// times (--edge-times, which needs it).
func (f *simFlags) setClientLatency(o *eval.Options) error {
	if f.clientLatency != "" {
		cl, err := sim.ParseLatency(f.clientLatency)
		if err != nil {
			return usageErr("--client-latency: %v", err)
		}
		o.ClientLatency = &cl
	}
	if f.edgeTimes && f.clientLatency == "" {
		return usageErr("--edge-times needs --client-latency: without it every request reaches its node at its trace time already")
	}
	o.EdgeTimes = f.edgeTimes
	return nil
}

// input is the trace simulated: --trace, --workload or the default
// workload.
func (f *simFlags) input() (*workload.Trace, error) {
	switch {
	case f.trace != "":
		return f.traceFlags.read()
	case f.workload != "":
		g, err := workload.ParseGenerator(f.workload)
		if err != nil {
			return nil, usageErr("--workload: %v", err)
		}
		return g.Generate(f.seed), nil
	default:
		return workload.Default().Generate(f.seed), nil
	}
}

func runSim(cmd *cobra.Command, f *simFlags) error {
	f.nodesSet = cmd.Flags().Changed("nodes")
	opts, err := f.options()
	if err != nil {
		return err
	}
	stderr := cmd.ErrOrStderr()
	f.warnInput(stderr, opts)
	warnWaiting(stderr, f.waitNotes)
	if f.cpuprofile != "" {
		stop, err := startSimProfile(f.cpuprofile)
		if err != nil {
			return err
		}
		defer stop()
	}
	if os.Getenv("GOGC") == "" {
		// The simulator allocates fast (messages encoded and decoded)
		// over a small live heap: a garbage collection every 100% of heap
		// growth took a fifth of gcounter's time at 30 nodes. A target of
		// 400% (the heap grows to five times the live heap) costs some
		// memory (about 230 MB for gcounter on zanbil at 30 nodes) and
		// changes no output.
		debug.SetGCPercent(400)
	}
	workers := f.parallel
	if workers == 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	if bar := newProgress(f.progress, stderr, len(opts.Strategies)*len(opts.Trace.Requests)); bar != nil {
		opts.Progress = progressOf(bar, opts.Strategies)
		defer bar.Finish()
	}
	bounds, err := f.bounds(f.shortfallWindow > 0)
	if err != nil {
		return err
	}
	rep, err := eval.RunParallel(opts, workers)
	if err != nil {
		return err
	}
	if f.recommend {
		rep.Recommendation = eval.Recommend(rep, bounds, opts.Params)
		rep.Recommendation.Next = f.next(rep.Recommendation, opts)
	}
	return f.writeReport(cmd, rep)
}

// warnInput says on stderr how many malformed lines the trace skipped and
// which scenario events come after its last request.
func (f *simFlags) warnInput(stderr io.Writer, opts eval.Options) {
	if opts.Trace.Skipped > 0 {
		fmt.Fprintf(stderr, "skipped %d malformed lines, e.g. %s\n", opts.Trace.Skipped, strings.Join(opts.Trace.SkippedExamples, "; "))
	}
	if opts.Scenario != nil {
		var events []timedEvent
		for _, e := range opts.Scenario.Events {
			events = append(events, timedEvent{e.At, e.Action()})
		}
		warnLateEvents(stderr, "scenario "+f.scenario, events, opts.Trace)
	}
}

// startSimProfile starts a CPU profile written to path (--cpuprofile) and
// returns what stops it and closes the file.
func startSimProfile(path string) (stop func(), err error) {
	pf, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(pf); err != nil {
		pf.Close()
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		pf.Close()
	}, nil
}

// writeReport writes rep on stdout (JSON or a table) and, with --out, its
// files there.
func (f *simFlags) writeReport(cmd *cobra.Command, rep *eval.Report) error {
	out := cmd.OutOrStdout()
	var err error
	if f.json {
		err = eval.WriteJSON(out, rep)
	} else {
		err = f.tableFlags.writeTable(out, rep)
	}
	if err != nil {
		return err
	}
	if f.out != "" {
		rep.Reproduce = reproduceSteps(cmd)
		if err := eval.WriteAll(f.out, rep); err != nil {
			return err
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "wrote %s and %s\n", filepath.Join(f.out, "report.md"), filepath.Join(f.out, "report.html"))
	}
	return nil
}

// bounds parses the --recommend bounds, --max-shortfall's only with a
// shortfall window (shortfall); errors name the flag.
func (f *recommendFlags) bounds(shortfall bool) (eval.Bounds, error) {
	var b eval.Bounds
	var err error
	if b.MaxExcessPct, err = parsePercent(f.maxExcess); err != nil {
		return b, usageErr("--max-excess %q: %v", f.maxExcess, err)
	}
	if b.MaxFalseRejectionsPct, err = parsePercent(f.maxFalseRej); err != nil {
		return b, usageErr("--max-false-rejections %q: %v", f.maxFalseRej, err)
	}
	short, err := parsePercent(f.maxShortfall)
	if err != nil {
		return b, usageErr("--max-shortfall %q: %v", f.maxShortfall, err)
	}
	if shortfall {
		b.MaxShortfallPct = &short
	}
	if math.IsNaN(f.maxEnvelope) || f.maxEnvelope < 0 {
		return b, usageErr("--max-envelope %v: want a number of tokens >= 0", f.maxEnvelope)
	}
	b.MaxEnvelopeTokens = f.maxEnvelope
	return b, nil
}

// parsePercent reads "0.5%" or "0.5" as 0.5 (percent), in [0, 100].
func parsePercent(s string) (float64, error) {
	v, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(s), "%"), 64)
	if err != nil || math.IsNaN(v) || v < 0 || v > 100 {
		return 0, fmt.Errorf("want a percentage in [0, 100], e.g. 0.5%%")
	}
	return v, nil
}

// newProgress returns a bar over total steps, or nil when none is wanted.
func newProgress(mode string, w io.Writer, total int) *progressbar.ProgressBar {
	show := false
	switch mode {
	case "always":
		show = true
	case "auto":
		if file, ok := w.(*os.File); ok {
			show = term.IsTerminal(int(file.Fd()))
		}
	}
	if !show || total == 0 {
		return nil
	}
	return progressbar.NewOptions(total, progressbar.OptionSetWriter(w), progressbar.OptionClearOnFinish(),
		progressbar.OptionShowCount(), progressbar.OptionThrottle(100_000_000), progressbar.OptionSetWidth(30))
}

// progressOf reports the runs of strategies on bar: the bar counts the
// requests injected so far over all runs (each run counts from 0 to the
// trace's length), and its description names the strategies still running.
// Safe for concurrent use by the parallel runs.
func progressOf(bar *progressbar.ProgressBar, strategies []registry.Info) func(name string, done, total int) {
	var mu sync.Mutex
	done := map[string]int{}
	return func(name string, n, total int) {
		mu.Lock()
		defer mu.Unlock()
		done[name] = n
		sum := 0
		var running []string
		for _, s := range strategies {
			sum += done[s.Name]
			if d, ok := done[s.Name]; ok && d < total {
				running = append(running, s.Name)
			}
		}
		bar.Describe(strings.Join(running, ","))
		_ = bar.Set(sum)
	}
}

// timedEvent is a fault at a trace time, for warnLateEvents.
type timedEvent struct {
	at   time.Duration
	what string
}

// warnLateEvents writes to w one line per event of source (a scenario
// file, or replay's fault flags) that falls after the last request of
// trace: it never happens, and a reader of the report would otherwise
// think it did.
func warnLateEvents(w io.Writer, source string, events []timedEvent, trace *workload.Trace) {
	if len(trace.Requests) == 0 {
		return
	}
	end := trace.Requests[len(trace.Requests)-1].Arrival
	for _, e := range events {
		if e.at > end {
			fmt.Fprintf(w, "tokenmesh: warning: %s: %q at %v falls after the trace's end (its last request arrives at %v): it never happens\n",
				source, e.what, e.at, end)
		}
	}
}

// next returns the commands that follow sim's recommendation rec: with a
// trace, replay it on real processes with the strategy rec picks (the
// setup's nodes, rate, burst and that strategy's --param values); without
// one, evaluate one's own traffic; then serve the strategy. When no
// strategy meets the bounds: the closest one's parameters to try.
func (f *simFlags) next(rec *eval.Recommendation, opts eval.Options) []eval.Step {
	if f.proxies > 0 {
		return f.proxyFlags.next(rec, opts, f.burst)
	}
	pick := rec.Strategy
	if pick == "" {
		if rec.Closest == "" {
			return nil
		}
		return []eval.Step{eval.NoneMeetsStep(rec.Closest, rec.Bounds)}
	}
	setup := fmt.Sprintf(" --nodes %d --rate %s --burst %d", f.nodes, num(f.rate), f.burst)
	if f.assign != "roundrobin" {
		setup += " --assign " + f.assign
	}
	var first eval.Step
	if f.trace == "" {
		simSetup := setup
		if f.regions != "" {
			// The same regions and links (replay has no regions: it keeps --nodes).
			simSetup = strings.Replace(setup, fmt.Sprintf(" --nodes %d", f.nodes), " --regions "+f.regions+" --latency "+f.latency, 1)
			if f.wanLatency != "" {
				simSetup += " --wan-latency " + f.wanLatency
			}
		}
		first = eval.Step{Why: "evaluate your own traffic (an access log, or a ts_ms,key CSV; examples/access.log is a sample)",
			Command: "tokenmesh sim --trace examples/access.log" + simSetup}
	} else {
		var flags []string
		if f.format != "auto" {
			flags = append(flags, "--format "+f.format)
		}
		if f.key != "" {
			flags = append(flags, "--key "+f.key)
		}
		if f.skipBad {
			flags = append(flags, "--skip-bad")
		}
		for _, p := range paramFlags(pick, opts.Params) {
			flags = append(flags, "--param "+p)
		}
		if opts.Trace.Span() >= time.Minute {
			flags = append(flags, "--speed 10")
		}
		first = eval.Step{Why: "check " + pick + " on real processes: the same trace sent to a local cluster of `tokenmesh serve` processes, scored against central the same way (docs/REPLAY.md)",
			Command: strings.TrimSpace("tokenmesh replay --trace " + shellQuote(f.trace) + setup + " --strategy " + pick + " " + strings.Join(flags, " "))}
	}
	return []eval.Step{first, serveStep(pick, opts.Params, opts.Rate, f.burst)}
}

// serveStep is the step that serves strategy (with its params) for a
// rule of rate and burst.
func serveStep(strategy string, params strategy.Params, rate bucket.Rate, burst int64) eval.Step {
	ruleYAML := fmt.Sprintf("{name: api, rate: %s, burst: %d, strategy: %s", rule.FormatRate(rate), burst, strategy)
	if vals := params.For(strategy).Values(); len(vals) > 0 {
		var kv []string
		for _, k := range slices.Sorted(maps.Keys(vals)) {
			kv = append(kv, k+": "+vals[k])
		}
		ruleYAML += ", params: {" + strings.Join(kv, ", ") + "}"
	}
	ruleYAML += "}"
	return eval.Step{Why: "serve it: put the rule " + ruleYAML + " in each node's config; examples/cluster/ is a three-node cluster on this machine to start from (README, \"A local cluster in one command\")",
		Command: "tokenmesh serve --config examples/cluster/n1.yaml"}
}

// paramFlags are strategy's values of params as --param flag values
// (strategy.name=value), sorted by name.
func paramFlags(strategy string, params strategy.Params) []string {
	vals := params.For(strategy).Values()
	var out []string
	for _, k := range slices.Sorted(maps.Keys(vals)) {
		out = append(out, strategy+"."+k+"="+vals[k])
	}
	return out
}

// num formats v with as few digits as needed ("1", "0.5").
func num(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, needsQuote) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// needsQuote says whether r is special to a POSIX shell: all but
// letters, digits and /.-_+:,=.
func needsQuote(r rune) bool {
	return !(strings.ContainsRune("/.-_+:,=", r) ||
		('0' <= r && r <= '9') || ('a' <= r && r <= 'z') || ('A' <= r && r <= 'Z'))
}
