package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/config"
	"github.com/tokenmesh/tokenmesh/envoyrls"
	"github.com/tokenmesh/tokenmesh/loadgen"
	"github.com/tokenmesh/tokenmesh/localcluster"
	"github.com/tokenmesh/tokenmesh/rule"
	"github.com/tokenmesh/tokenmesh/strategy/registry"
)

type benchFlags struct {
	target      string
	rule        string
	concurrency int
	conns       int
	batch       int
	keys        int
	keysDist    string
	accuracy    bool
	hotKey      bool
	hits        int64
	duration    time.Duration
	warmup      time.Duration
	rate        float64
	seed        uint64
	json        bool
	progress    string
	spawn       int
	limitRate   string
	limitBurst  int64
	strategy    string
	settle      time.Duration
	burstTest   bool
	burstWindow time.Duration
	tls         bool
	tlsCA       string
	tlsCert     string
	tlsKey      string
	tlsName     string
	tlsInsecure bool
	api         string
	domain      string
	descKey     string
	envoyConfig string
	profileDir  string // --spawn-cpuprofile: the directory of the spawned nodes' CPU profiles
	params      []string
	rlqs        rlqsFlags
}

func newBenchCmd() *cobra.Command {
	f := &benchFlags{}
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Load a running node or cluster with Check calls and measure throughput and latency",
		Long: `bench sends rate limit checks to tokenmesh nodes over gRPC
(tokenmesh.v1.RateLimitService/Check) and reports checks/s, calls/s, the
share of checks allowed, and call latency (p50/p90/p99/p99.9/max, from an
HDR histogram), measured over --duration after an unrecorded --warmup.

--concurrency workers each keep one call of --batch checks in flight,
spread round-robin over the --target nodes. Keys are drawn uniformly from
--keys distinct keys (k0, k1, ...), or every check uses one key with
--hot-key. With --rate, calls are sent open loop at that many calls/s in
all, and latency counts from each call's scheduled time; without it the
workers go as fast as the nodes answer (closed loop).

The targets must be running ` + "`tokenmesh serve`" + ` (the default, ` + config.DefaultGRPCAddr + `, is
where a node without --config serves gRPC) and have the --rule. With
--spawn N, bench instead starts N local ` + "`tokenmesh serve`" + ` processes as one
cluster with one rule (--rule, --limit-rate, --limit-burst, --strategy),
runs against all of them and stops them.

--burst-test checks the envelope instead: it sends burst x nodes checks of
one fresh key, spread over the nodes and over --burst-window, and compares
the admitted checks with what one token bucket allows in that time
(burst + rate x elapsed): OK, or EXCEEDS when the cluster admitted more
(as strategies do whose nodes each keep their own full bucket).

--api rls drives Envoy's rate limit service instead
(envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit), as tokenmesh
serves it with --envoy-config and envoyproxy/ratelimit does: each call is
one request of --domain with --batch descriptors, each a single entry
(--descriptor-key, key); OK counts as allowed, OVER_LIMIT as refused. With
--spawn, the nodes get --envoy-config DIR, or without it a generated file:
domain --domain, descriptor --descriptor-key, --limit-burst requests per
second.

--api rlqs drives Envoy's rate limit quota service
(envoy.service.rate_limit_quota.v3.RateLimitQuotaService) with --proxies
emulated Envoys: each holds one stream (proxy i to target i mod the
targets, failing over to the next), decides every request itself from its
assignment as Envoy's rate_limit_quota filter does (before one, by
--no-assignment-behavior; after one expired, by
--expired-assignment-behavior), and reports usage every --report-interval
(today's Envoy: 5s). Requests arrive Poisson at --proxy-rates (one rate
per proxy) or --rate (in all, split evenly; default 100/s each) for
--duration, each in the bucket {--descriptor-key: key} of --domain, keys
drawn as above (--keys defaults to 1). With --spawn the nodes serve a
generated config: that descriptor, --limit-rate with --limit-burst (the
burst must be the rate over a second, minute, hour or day: an envoy
ratelimit limit's burst is its requests_per_unit), strategy quota, and the
fleet starts once quota's takeover after the joins is over and the bucket
is full again. The report: offered, admitted and denied requests,
assignments and reports per proxy and in all; when the limit is known
(spawned, or --envoy-config) the admitted requests as a share of
min(offered, r x T + b) per key and the worst window's excess over
b + r x T; stream messages and bytes per request; the proxies' decision
latency (local) and, for --rls-hop after the run, the ShouldRateLimit
round trip a proxy would wait for on every request with RLS.

The client shares the machine with local servers: the report includes the
CPU the bench process used (client_cpu_cores).`,
		Example: `  tokenmesh serve &   # then:
  tokenmesh bench --duration 5s
  tokenmesh bench --target 10.0.0.1:8081,10.0.0.2:8081 --rule api --batch 100 --json
  tokenmesh bench --spawn 3 --limit-rate 1000000000/s --limit-burst 1000000000 --hot-key
  tokenmesh bench --spawn 3 --burst-test --limit-rate 100/s --limit-burst 100 --strategy local
  tokenmesh bench --api rls --target 127.0.0.1:8081 --domain edge --descriptor-key remote_address
  tokenmesh bench --api rls --spawn 3 --limit-burst 1000000
  tokenmesh bench --api rlqs --spawn 3 --proxy-rates 150,150,10,10,10,10 --limit-rate 100/s --limit-burst 100 --duration 60s
  tokenmesh bench --api rlqs --target 10.0.0.1:8081,10.0.0.2:8081 --domain edge --descriptor-key tenant --envoy-config ratelimit/ --rate 1000`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runBench(ctx, cmd, f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.target, "target", config.DefaultGRPCAddr, "gRPC API addresses (host:port) of the nodes, comma-separated")
	fl.StringVar(&f.rule, "rule", "default", "the rule every check names (a node without --config has one rule, default)")
	fl.IntVar(&f.concurrency, "concurrency", 32, "workers, each with one call in flight")
	fl.IntVar(&f.conns, "conns", 1, "gRPC connections per target, shared by the workers")
	fl.IntVar(&f.batch, "batch", 1, fmt.Sprintf("checks per call, 1 to %d", loadgen.MaxBatch))
	fl.IntVar(&f.keys, "keys", 10000, "distinct keys, drawn uniformly (with --api rlqs the default is 1)")
	fl.BoolVar(&f.hotKey, "hot-key", false, "every check uses one key (ignores --keys)")
	fl.StringVar(&f.keysDist, "keys-dist", loadgen.DistUniform, "key distribution: uniform (--keys keys), zipf[:s=1.1,n=100000] (key i drawn with probability proportional to (i+1)^-s), tenants[:20] (N tenant keys drawn uniformly)")
	fl.BoolVar(&f.accuracy, "accuracy", false, "record every answer and report, per key, the excess over b + r x T (1 s windows and any interval) and the tokens one exact token bucket per key would have admitted that the targets refused (missed) or refused that they admitted (extra); needs the rule's limit from the first target")
	fl.Int64Var(&f.hits, "hits", 1, "tokens each check asks for")
	fl.DurationVar(&f.duration, "duration", 10*time.Second, "measured time")
	fl.DurationVar(&f.warmup, "warmup", time.Second, "unrecorded time before the measurement")
	fl.Float64Var(&f.rate, "rate", 0, "open loop: calls per second in all; 0: closed loop, as fast as the nodes answer (with --api rlqs: requests per second in all, split evenly over --proxies)")
	fl.Uint64Var(&f.seed, "seed", 1, "seed of the key choice")
	fl.BoolVar(&f.json, "json", false, "print the result as JSON instead of a table")
	fl.StringVar(&f.progress, "progress", "auto", "progress bar on stderr: auto (when stderr is a terminal), always or never")
	fl.IntVar(&f.spawn, "spawn", 0, "start this many local \"tokenmesh serve\" processes as one cluster, bench them, and stop them (instead of --target)")
	fl.StringVar(&f.limitRate, "limit-rate", "1000/s", "with --spawn: the rule's rate, as in the config (1000/s, 6000/min)")
	fl.Int64Var(&f.limitBurst, "limit-burst", 1000, "with --spawn: the rule's burst, tokens")
	fl.StringVar(&f.strategy, "strategy", "owner", "with --spawn: the rule's coordination strategy")
	fl.DurationVar(&f.settle, "settle", localcluster.DefaultSettle, "with --spawn: wait this long after every node sees every member and reports ready, before the load; 0: none")
	fl.BoolVar(&f.burstTest, "burst-test", false, "check the envelope: burst x nodes checks of one key over --burst-window, admitted vs burst + rate x elapsed")
	fl.DurationVar(&f.burstWindow, "burst-window", time.Second, "with --burst-test: the time the checks are spread over")
	fl.BoolVar(&f.tls, "tls", false, "connect with TLS (node.api_tls), verifying the nodes with the system's roots unless --tls-ca")
	fl.StringVar(&f.tlsCA, "tls-ca", "", "PEM file of the CA certificate(s) that signed the nodes' certificates (implies --tls)")
	fl.StringVar(&f.tlsCert, "tls-cert", "", "PEM client certificate, for nodes with node.api_tls.client_ca_file (with --tls-key; implies --tls)")
	fl.StringVar(&f.tlsKey, "tls-key", "", "PEM key of --tls-cert")
	fl.StringVar(&f.tlsName, "tls-server-name", "", "name the nodes' certificates must hold (default: the target's host)")
	fl.StringVar(&f.api, "api", loadgen.APITokenmesh, "the API to drive: tokenmesh (tokenmesh.v1 Check), rls (Envoy's ShouldRateLimit) or rlqs (Envoy's rate limit quota service, from emulated Envoys)")
	fl.StringVar(&f.domain, "domain", "bench", "with --api rls or rlqs: the domain of every request (RLQS: of every stream)")
	fl.StringVar(&f.descKey, "descriptor-key", "key", "with --api rls: the entry key of every descriptor; with --api rlqs: of every bucket_id (its value is the drawn key)")
	fl.StringVar(&f.envoyConfig, "envoy-config", "", "with --api rls or rlqs --spawn: the nodes' envoy ratelimit config directory (default: a generated one); with --api rlqs --target: the targets' config, read for each key's limit")
	fl.StringVar(&f.profileDir, "spawn-cpuprofile", "", "with --spawn: directory (created if missing) where every spawned node writes a CPU profile of its run (serve-PID.pprof; serve --cpuprofile)")
	fl.BoolVar(&f.tlsInsecure, "tls-insecure", false, "do not verify the nodes' certificates (implies --tls; benchmarks only)")
	fl.StringArrayVar(&f.params, "param", nil, "with --spawn: a parameter of the spawned rule's strategy, as strategy.name=value, repeatable (e.g. quota.ttl=3s; tokenmesh strategies lists them)")
	f.rlqs.add(fl)
	return cmd
}

// tlsConfig builds the client TLS config from the --tls flags; nil for plaintext.
func (f *benchFlags) tlsConfig() (*tls.Config, error) {
	if !f.tls && f.tlsCA == "" && f.tlsCert == "" && f.tlsKey == "" && !f.tlsInsecure && f.tlsName == "" {
		return nil, nil
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: f.tlsName, InsecureSkipVerify: f.tlsInsecure}
	if f.tlsCA != "" {
		pool, err := config.CertPool("--tls-ca", f.tlsCA)
		if err != nil {
			return nil, usageErr("%v", err)
		}
		c.RootCAs = pool
	}
	if (f.tlsCert == "") != (f.tlsKey == "") {
		return nil, usageErr("--tls-cert and --tls-key: give both or neither")
	}
	if f.tlsCert != "" {
		cert, err := tls.LoadX509KeyPair(f.tlsCert, f.tlsKey)
		if err != nil {
			return nil, usageErr("--tls-cert/--tls-key: %v", err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}

// options checks the flags; every error names the flag.
func (f *benchFlags) options(cmd *cobra.Command) (loadgen.Options, error) {
	var o loadgen.Options
	if f.api == loadgen.APIRLQS && !cmd.Flags().Changed("keys") {
		f.keys = 1
	}
	if err := f.checkAPIs(cmd.Flags()); err != nil {
		return o, err
	}
	var targets []string
	for _, t := range strings.Split(f.target, ",") {
		if t = strings.TrimSpace(t); t != "" {
			targets = append(targets, t)
		}
	}
	for _, check := range []func() error{
		func() error { return f.checkTargetFlags(cmd, targets) },
		f.checkLoadFlags,
		f.checkPacingFlags,
		f.checkAPIFlag,
		f.checkSpawnOnlyFlags,
	} {
		if err := check(); err != nil {
			return o, err
		}
	}
	tlsConf, err := f.tlsConfig()
	if err != nil {
		return o, err
	}
	if err := f.checkSpawnFlags(tlsConf); err != nil {
		return o, err
	}
	dist, err := f.keysDistribution(cmd)
	if err != nil {
		return o, err
	}
	o = loadgen.Options{Targets: targets, Rule: f.rule, Concurrency: f.concurrency, ConnsPerTarget: f.conns,
		Batch: f.batch, HotKey: f.hotKey, Hits: f.hits, Duration: f.duration, Warmup: f.warmup,
		Rate: f.rate, Seed: f.seed, TLS: tlsConf, API: f.api, Domain: f.domain, DescriptorKey: f.descKey,
		RecordAdmissions: f.accuracy}
	dist.Apply(&o, f.keys)
	if err := f.checkTargetAddrs(o); err != nil {
		return o, err
	}
	return o, nil
}

// keysDistribution parses --keys-dist, which --keys (uniform keys only),
// --hot-key and --api rlqs leave no room for, and --accuracy (not with
// --api rlqs or --burst-test, which report their own account).
func (f *benchFlags) keysDistribution(cmd *cobra.Command) (loadgen.KeysDist, error) {
	d, err := loadgen.ParseKeysDist(f.keysDist)
	switch {
	case err != nil:
		return d, usageErr("%v", err)
	case f.accuracy && (f.api == loadgen.APIRLQS || f.burstTest):
		return d, usageErr("--accuracy: not with --api rlqs or --burst-test (they report the limit's account themselves)")
	case d.Kind == loadgen.DistUniform:
		return d, nil
	case cmd.Flags().Changed("keys"):
		return d, usageErr("--keys is for --keys-dist uniform; %s sets its own keys", d)
	case f.hotKey:
		return d, usageErr("--hot-key and --keys-dist %s: choose one", d)
	case f.api == loadgen.APIRLQS:
		return d, usageErr("--keys-dist %s: only uniform keys with --api rlqs", d)
	}
	return d, nil
}

// checkTargetFlags checks --settle, --spawn against --target (targets,
// its addresses) and --rule.
func (f *benchFlags) checkTargetFlags(cmd *cobra.Command, targets []string) error {
	switch {
	case f.settle < 0:
		return usageErr("--settle %v: want a duration >= 0 (0: none)", f.settle)
	case f.spawn < 0:
		return usageErr("--spawn %d: want a number of nodes >= 1 (or 0: use --target)", f.spawn)
	case f.spawn > 0 && cmd.Flags().Changed("target"):
		return usageErr("--spawn and --target: give one, not both")
	case f.spawn == 0 && len(targets) == 0:
		return usageErr("--target %q: give at least one host:port", f.target)
	case f.rule == "":
		return usageErr("--rule: is required")
	}
	return nil
}

// checkLoadFlags checks the load's shape: workers, connections, batch,
// keys, hits and durations.
func (f *benchFlags) checkLoadFlags() error {
	switch {
	case f.concurrency < 1:
		return usageErr("--concurrency %d: need at least 1 worker", f.concurrency)
	case f.conns < 1:
		return usageErr("--conns %d: need at least 1 connection per target", f.conns)
	case f.batch < 1 || f.batch > loadgen.MaxBatch:
		return usageErr("--batch %d: must be between 1 and %d checks per call", f.batch, loadgen.MaxBatch)
	case !f.hotKey && f.keys < 1:
		return usageErr("--keys %d: need at least 1 key (or --hot-key)", f.keys)
	case f.hits < 1 || f.hits > loadgen.MaxHits:
		return usageErr("--hits %d: must be between 1 and %d", f.hits, loadgen.MaxHits)
	case f.duration <= 0:
		return usageErr("--duration %v: must be positive", f.duration)
	case f.warmup < 0:
		return usageErr("--warmup %v: must not be negative", f.warmup)
	}
	return nil
}

// checkPacingFlags checks --rate, --progress and --burst-window.
func (f *benchFlags) checkPacingFlags() error {
	switch {
	case math.IsNaN(f.rate) || math.IsInf(f.rate, 0) || f.rate < 0:
		return usageErr("--rate %v: want calls per second >= 0 (0: closed loop)", f.rate)
	case f.progress != "auto" && f.progress != "always" && f.progress != "never":
		return usageErr("--progress %q: want auto, always or never", f.progress)
	case f.burstWindow <= 0:
		return usageErr("--burst-window %v: must be positive", f.burstWindow)
	}
	return nil
}

// checkAPIFlag checks --api and what it needs (--domain) or excludes
// (--burst-test).
func (f *benchFlags) checkAPIFlag() error {
	switch {
	case f.api != loadgen.APITokenmesh && f.api != loadgen.APIRLS && f.api != loadgen.APIRLQS:
		return usageErr("--api %q: want tokenmesh, rls or rlqs", f.api)
	case (f.api == loadgen.APIRLS || f.api == loadgen.APIRLQS) && f.domain == "":
		return usageErr("--domain: is required with --api %s", f.api)
	case f.api == loadgen.APIRLS && f.burstTest:
		return usageErr("--burst-test and --api rls: the burst test drives the tokenmesh API only")
	}
	return nil
}

// checkSpawnOnlyFlags checks the flags that need --spawn or exclude each
// other, and --hits against RLS's bound.
func (f *benchFlags) checkSpawnOnlyFlags() error {
	switch {
	case f.profileDir != "" && f.spawn == 0:
		return usageErr("--spawn-cpuprofile: only with --spawn N")
	case f.envoyConfig != "" && f.api != loadgen.APIRLQS && (f.api != loadgen.APIRLS || f.spawn == 0):
		return usageErr("--envoy-config: only with --api rls --spawn N, or --api rlqs")
	case len(f.params) > 0 && f.spawn == 0:
		return usageErr("--param: only with --spawn N (a parameter of the spawned nodes' rule)")
	case len(f.params) > 0 && f.envoyConfig != "":
		return usageErr("--param and --envoy-config: the strategy's parameters are the config's (tokenmesh: {params: ...})")
	case f.hits > math.MaxUint32 && f.api == loadgen.APIRLS:
		return usageErr("--hits %d: RLS hits_addend is at most %d", f.hits, uint32(math.MaxUint32))
	}
	return nil
}

// checkSpawnFlags checks, with --spawn, that there is no TLS (tlsConf)
// and the spawned rule's --limit-rate, --limit-burst, --strategy and
// --param.
func (f *benchFlags) checkSpawnFlags(tlsConf *tls.Config) error {
	if f.spawn <= 0 {
		return nil
	}
	if tlsConf != nil {
		return usageErr("--spawn and --tls: the spawned nodes serve plaintext")
	}
	if _, err := config.ParseRate(f.limitRate); err != nil {
		return usageErr("--limit-rate %q: %v", f.limitRate, err)
	}
	if f.limitBurst < 1 {
		return usageErr("--limit-burst %d: the burst must be at least 1 token", f.limitBurst)
	}
	if f.strategy == "" {
		return usageErr("--strategy: is required")
	}
	if _, err := f.spawnParams(); err != nil {
		return err
	}
	return nil
}

// checkTargetAddrs checks, without --spawn, that each of o's targets is a
// host:port.
func (f *benchFlags) checkTargetAddrs(o loadgen.Options) error {
	for _, t := range o.Targets {
		sub := o
		sub.Targets = []string{t}
		if sub.API == loadgen.APIRLQS {
			sub.API = loadgen.APITokenmesh // for the address's check only
		}
		if err := sub.Validate(); err != nil && f.spawn == 0 {
			return usageErr("--target %q: want host:port", t)
		}
	}
	return nil
}

func runBench(ctx context.Context, cmd *cobra.Command, f *benchFlags) error {
	o, err := f.options(cmd)
	if err != nil {
		return err
	}
	stderr, out := cmd.ErrOrStderr(), cmd.OutOrStdout()
	rlqsMode := f.api == loadgen.APIRLQS
	envoyDir := f.envoyConfig // the nodes' envoy config (rls, rlqs), or the rlqs targets'
	var lc localcluster.Config
	if f.spawn > 0 {
		var written string
		if lc, envoyDir, written, err = f.spawnConfig(envoyDir); err != nil {
			return err
		}
		if written != "" {
			defer os.RemoveAll(written)
		}
	}
	lim := benchLimit{settle: f.settle,
		why: "bench did not spawn the targets: --envoy-config DIR, the targets' config, tells it the limits"}
	if rlqsMode && envoyDir != "" {
		if err := f.readRLQSLimit(cmd, envoyDir, &lim, stderr); err != nil {
			return err
		}
	}
	if f.spawn > 0 {
		c, err := f.startSpawned(ctx, lc, lim, stderr)
		if err != nil {
			return err
		}
		defer func() {
			if err := c.Stop(); err != nil {
				fmt.Fprintf(stderr, "stopping the spawned nodes: %v\n", err)
			}
		}()
		o.Targets = nil
		for _, n := range c.Nodes {
			o.Targets = append(o.Targets, n.GRPC)
		}
	}
	if rlqsMode {
		return runBenchRLQS(ctx, f, out, stderr, o, lim.limit, lim.why)
	}
	if f.burstTest {
		return f.runBurstTest(ctx, o, out)
	}
	return f.runLoad(ctx, o, out, stderr)
}

// benchLimit is what bench knows of the RLQS targets' limit.
type benchLimit struct {
	limit       *loadgen.RLQSLimit // nil: unknown
	why         string             // why limit is nil
	settle      time.Duration      // the spawned cluster's settle time
	startsAfter string             // for the spawn line: why it settles that long
}

// spawnConfig is the config of the --spawn cluster, with the envoy config
// directory its nodes serve (envoyDir, or one written for --api rls and
// rlqs: written, to be removed after the run).
func (f *benchFlags) spawnConfig(envoyDir string) (lc localcluster.Config, dir, written string, err error) {
	bin, err := os.Executable()
	if err != nil {
		return lc, envoyDir, "", fmt.Errorf("--spawn: finding the tokenmesh binary: %w", err)
	}
	rate, err := config.ParseRate(f.limitRate)
	if err != nil {
		return lc, envoyDir, "", usageErr("--limit-rate %q: %v", f.limitRate, err)
	}
	params, err := f.spawnParams()
	if err != nil {
		return lc, envoyDir, "", err
	}
	if f.profileDir != "" {
		// Created here: a missing directory otherwise failed every node
		// at its start, reported as "exited before it was serving".
		if err := os.MkdirAll(f.profileDir, 0o755); err != nil {
			return lc, envoyDir, "", fmt.Errorf("--spawn-cpuprofile: %w", err)
		}
	}
	strat := f.spawnStrategy()
	lc = localcluster.Config{Binary: bin, Nodes: f.spawn,
		Rules: []rule.Rule{{Name: f.rule, Rate: rate, Burst: f.limitBurst, Strategy: strat, Params: rule.Pairs(params)}}}
	if (f.api == loadgen.APIRLS || f.api == loadgen.APIRLQS) && envoyDir == "" {
		if envoyDir, err = f.writeSpawnEnvoyConfig(strat, rate, params); err != nil {
			return lc, "", "", err
		}
		written = envoyDir
	}
	if envoyDir != "" {
		lc.ServeArgs = []string{"--envoy-config", envoyDir}
	}
	if f.profileDir != "" {
		lc.ServeArgs = append(lc.ServeArgs, "--"+cpuProfileFlag, filepath.Join(f.profileDir, "serve-"+pidPlaceholder+".pprof"))
	}
	return lc, envoyDir, written, nil
}

// writeSpawnEnvoyConfig writes the envoy config of the spawned nodes to a
// new directory. RLS: one descriptor of --limit-burst per second, the
// file's strategy --strategy; RLQS: --limit-rate and --limit-burst,
// strategy quota on the descriptor.
func (f *benchFlags) writeSpawnEnvoyConfig(strat string, rate bucket.Rate, params map[string]string) (string, error) {
	file := benchEnvoyFile{Domain: f.domain, Tokenmesh: &benchEnvoyExt{Strategy: strat, Params: params},
		Descriptors: []benchDescriptor{{Key: f.descKey, RateLimit: benchRateLimit{Unit: "second", RequestsPerUnit: f.limitBurst}}}}
	if f.api == loadgen.APIRLQS {
		var err error
		if file, err = f.rlqsConfigFile(rate, params); err != nil {
			return "", err
		}
	}
	return writeBenchEnvoyConfig(file)
}

// readRLQSLimit reads the RLQS limit of the config in envoyDir into lim
// and, for a spawned quota cluster without --settle, how long it settles.
func (f *benchFlags) readRLQSLimit(cmd *cobra.Command, envoyDir string, lim *benchLimit, stderr io.Writer) error {
	cfg, err := envoyrls.LoadDir(envoyDir)
	if err != nil {
		return usageErr("--envoy-config %s: %v", envoyDir, err)
	}
	l, whyNot, warn := rlqsLimit(cfg, f.domain, f.descKey, f.rlqsKeys())
	if warn != "" {
		fmt.Fprintf(stderr, "warning: %s\n", warn)
	}
	lim.why = whyNot
	if l == nil {
		return nil
	}
	lim.limit = limitOf(l)
	if f.spawn > 0 && !cmd.Flags().Changed("settle") && l.Strategy == quotaStrategy {
		var takeover, fill time.Duration
		if lim.settle, takeover, fill, err = rlqsSettle(l); err != nil {
			return fmt.Errorf("--envoy-config %s: limit %s: %w", envoyDir, l.Path, err)
		}
		lim.startsAfter = fmt.Sprintf("; the fleet starts %v after they formed: quota's takeover after the joins (%v) and the bucket's fill (%v); --settle to change", lim.settle, takeover, fill)
	}
	return nil
}

// startSpawned says what it starts and starts the --spawn cluster lc.
func (f *benchFlags) startSpawned(ctx context.Context, lc localcluster.Config, lim benchLimit, stderr io.Writer) (*localcluster.Cluster, error) {
	rlqsMode := f.api == loadgen.APIRLQS
	switch {
	case rlqsMode && lim.limit != nil:
		fmt.Fprintf(stderr, "starting %d tokenmesh serve processes (Envoy RLQS, domain %s: %s/s, burst %d per key)%s...\n",
			f.spawn, f.domain, plainNumber(lim.limit.RatePerS), lim.limit.Burst, lim.startsAfter)
	case rlqsMode:
		fmt.Fprintf(stderr, "starting %d tokenmesh serve processes (Envoy RLQS, domain %s)...\n", f.spawn, f.domain)
	case f.api == loadgen.APIRLS:
		fmt.Fprintf(stderr, "starting %d tokenmesh serve processes (Envoy RLS, domain %s)...\n", f.spawn, f.domain)
	default:
		fmt.Fprintf(stderr, "starting %d tokenmesh serve processes (rule %s: %s, burst %d, strategy %s)...\n",
			f.spawn, f.rule, f.limitRate, f.limitBurst, f.strategy)
	}
	lc.Settle = lim.settle
	if lc.Settle <= 0 {
		lc.Settle = -1 // localcluster: none
	}
	c, err := localcluster.Start(ctx, lc)
	if err != nil {
		return nil, fmt.Errorf("--spawn %d: %w", f.spawn, err)
	}
	return c, nil
}

// runBurstTest runs --burst-test against o's targets and writes its result.
func (f *benchFlags) runBurstTest(ctx context.Context, o loadgen.Options, out io.Writer) error {
	br, err := loadgen.Burst(ctx, loadgen.BurstOptions{Targets: o.Targets, Rule: o.Rule, Window: f.burstWindow, TLS: o.TLS})
	if err != nil {
		return targetErr(err)
	}
	if f.json {
		return writeJSON(out, br)
	}
	writeBurst(out, br)
	return nil
}

// runLoad runs the load o and writes its result (what was measured so far
// if interrupted).
func (f *benchFlags) runLoad(ctx context.Context, o loadgen.Options, out, stderr io.Writer) error {
	if bar := newProgress(f.progress, stderr, int((o.Warmup + o.Duration).Milliseconds())); bar != nil {
		o.Progress = func(done time.Duration) { _ = bar.Set(int(done.Milliseconds())) }
		defer bar.Finish()
	}
	res, err := loadgen.Run(ctx, o)
	if res == nil {
		return targetErr(err)
	}
	if err != nil {
		fmt.Fprintf(stderr, "interrupted (%v): results so far\n", err)
	}
	var acc *benchAccuracy
	if f.accuracy {
		if acc, err = accuracyOf(res); err != nil {
			return err
		}
	}
	if f.json {
		return writeJSON(out, benchOutput{Result: res, Accuracy: acc})
	}
	writeBenchTable(out, res)
	if acc != nil {
		writeAccuracy(out, res, acc)
	}
	return nil
}

// benchOutput is bench's JSON: the load generator's result, and with
// --accuracy the limit's account.
type benchOutput struct {
	*loadgen.Result
	Accuracy *benchAccuracy `json:"accuracy,omitempty"`
}

// benchAccuracy is --accuracy's account of the run's admissions against
// the rule's limit (r, b) per key.
type benchAccuracy struct {
	// Excess over b + r*T in 1 s windows and over any interval
	// (loadgen.WindowExcess).
	Excess loadgen.Excess `json:"excess"`
	// Shortfall against one exact bucket per key over the same checks
	// (loadgen.Shortfall).
	Shortfall loadgen.ShortfallResult `json:"shortfall"`
	MissedPct float64                 `json:"missed_pct"`
	ExtraPct  float64                 `json:"extra_pct"`
}

// accuracyOf is res's benchAccuracy; an error when the first target did
// not report the rule's limit.
func accuracyOf(res *loadgen.Result) (*benchAccuracy, error) {
	if res.RuleRate <= 0 || res.RuleBurst < 1 {
		return nil, fmt.Errorf("--accuracy: the first target reported no limit for rule %q (rate %v/s, burst %d): nothing to measure against", res.Rule, res.RuleRate, res.RuleBurst)
	}
	s, err := loadgen.Shortfall(res.Answered, res.RuleRate, res.RuleBurst)
	if err != nil {
		return nil, fmt.Errorf("--accuracy: %w", err)
	}
	return &benchAccuracy{Excess: loadgen.WindowExcess(res.Admissions, res.RuleRate, res.RuleBurst, time.Second),
		Shortfall: s, MissedPct: s.MissedPct(), ExtraPct: s.ExtraPct()}, nil
}

// writeAccuracy prints acc under the table.
func writeAccuracy(w io.Writer, res *loadgen.Result, acc *benchAccuracy) {
	e, s := acc.Excess, acc.Shortfall
	fmt.Fprintf(w, "accuracy against one exact token bucket per key (%s/s, burst %d), on this client's clock:\n", plainNumber(res.RuleRate), res.RuleBurst)
	fmt.Fprintf(w, "  excess over b + r x T: worst 1 s window %.1f tokens (%d keys over, %.0f in all), any interval %.1f\n", e.Worst, e.Keys, e.Sum, e.Sliding)
	fmt.Fprintf(w, "  exact bucket admits %d tokens: missed %d (%.2f%%, %d keys), extra %d (%.2f%%)\n", s.Exact, s.Missed, acc.MissedPct, s.KeysMissed, s.Extra, acc.ExtraPct)
}

// spawnStrategy is the spawned rule's strategy: quota with --api rlqs
// (the one that serves RLQS), else --strategy.
func (f *benchFlags) spawnStrategy() string {
	if f.api == loadgen.APIRLQS {
		return quotaStrategy
	}
	return f.strategy
}

// spawnParams are the --param values for the spawned rule's strategy, by
// name without the strategy's prefix; nil without --param. Errors: a bad
// --param, or one of another strategy.
func (f *benchFlags) spawnParams() (map[string]string, error) {
	if len(f.params) == 0 {
		return nil, nil
	}
	strat := f.spawnStrategy()
	info, err := registry.Lookup(strat)
	if err != nil {
		return nil, usageErr("--strategy: %v", err)
	}
	params, err := parseParamFlags(f.params, []registry.Info{info})
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for name, v := range params.Values() {
		s, p, _ := strings.Cut(name, ".")
		if s != strat {
			return nil, usageErr("--param %s: the spawned rule's strategy is %s", name, strat)
		}
		out[p] = v
	}
	return out, nil
}

// targetErr names the --target flag in an error about a target.
func targetErr(err error) error {
	var te *loadgen.TargetError
	if errors.As(err, &te) {
		return fmt.Errorf("--target %s: %w", te.Target, te.Err)
	}
	return err
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func writeBenchTable(w io.Writer, r *loadgen.Result) {
	keys := fmt.Sprint(r.Keys)
	if r.HotKey {
		keys = "1 (hot)"
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "targets\tconcurrency\tbatch\tkeys\tchecks/s\tRPC/s\tallowed %\tp50 ms\tp99 ms\tp999 ms\t")
	fmt.Fprintf(tw, "%d\t%d\t%d\t%s\t%.0f\t%.0f\t%.1f\t%.3f\t%.3f\t%.3f\t\n", len(r.Targets), r.Concurrency, r.Batch, keys,
		r.ChecksPerS, r.RPCsPerS, r.AllowedPct, r.LatencyMS.P50, r.LatencyMS.P99, r.LatencyMS.P999)
	_ = tw.Flush()
	mode := "closed loop"
	if r.Rate > 0 {
		mode = fmt.Sprintf("open loop at %s calls/s", plainNumber(r.Rate))
	}
	what := fmt.Sprintf("rule %s (%s/s, burst %d)", r.Rule, plainNumber(r.RuleRate), r.RuleBurst)
	if domain, ok := strings.CutPrefix(r.Rule, "rls:"); ok {
		what = "Envoy RLS, domain " + domain
	}
	fmt.Fprintf(w, "\ntargets %s, %s, %s, %.1fs measured\n", strings.Join(r.Targets, ","), what, mode, r.ElapsedSec)
	fmt.Fprintf(w, "checks %d: allowed %d, refused %d, errors %d; calls %d, failed %d; p90 %.3f ms, max %.3f ms\n",
		r.Checks, r.Allowed, r.Refused, r.Errors, r.RPCs, r.FailedRPCs, r.LatencyMS.P90, r.LatencyMS.Max)
	fmt.Fprintf(w, "client CPU: %.2f cores\n", r.CPUCores)
	if r.Rate > 0 && r.RPCsPerS < 0.95*r.Rate {
		fmt.Fprintf(w, "note: %.0f calls/s is below --rate %s: the workers could not keep up; raise --concurrency\n", r.RPCsPerS, plainNumber(r.Rate))
	}
	for _, e := range r.ErrorSample {
		fmt.Fprintf(w, "error: %s\n", e)
	}
}

func writeBurst(w io.Writer, r *loadgen.BurstResult) {
	verdict := "OK"
	if !r.OK {
		verdict = "EXCEEDS"
	}
	fmt.Fprintf(w, "burst test: %d checks of key %q (rule %s: %s/s, burst %d) over %d nodes in %.3fs\n",
		r.Sent, r.Key, r.Rule, plainNumber(r.RuleRate), r.RuleBurst, len(r.Targets), r.ElapsedSec)
	fmt.Fprintf(w, "envelope (burst + rate x elapsed): %.1f\n", r.Envelope)
	fmt.Fprintf(w, "admitted: %d (refused %d, errors %d, failed calls %d)\n", r.Admitted, r.Refused, r.Errors, r.FailedRPCs)
	for _, e := range r.ErrorSample {
		fmt.Fprintf(w, "error: %s\n", e)
	}
	fmt.Fprintln(w, verdict)
}

// plainNumber formats v without an exponent and with no more digits than
// it needs: 1000000000, 0.5, 16.666667 (at most 6 decimals), as rates are
// written in configs ("1000000000/s", not "1e+09/s").
func plainNumber(v float64) string {
	return strconv.FormatFloat(math.Round(v*1e6)/1e6, 'f', -1, 64)
}
