// Command peers is `make bench-peers` : tokenmesh and the
// rate limiters a user would pick instead, on one harness. Every server
// runs on 127.0.0.1 as a process of its own, started here and stopped here
// by PID (SIGTERM, then SIGKILL after 5 s; on Linux the kernel kills them
// if this process dies first); every load run is bounded in time.
//
// Systems, each by default with a rule of 10^9 tokens/s and a burst of
// 10^9 (every check is admitted; --limit and --burst below):
//
//	1 node:  tokenmesh (owner); Gubernator v2 (1 node); envoyproxy/ratelimit
//	         on redis-server; redisrate (go-redis/redis_rate, GCRA) on
//	         redis-server.
//	3 nodes: tokenmesh owner; tokenmesh gdrl; Gubernator v2 (3 nodes,
//	         member-list, BATCHING: the exact mode, the owner decides;
//	         --gubernator exact,global adds GLOBAL, where every node
//	         decides and the owner syncs, at 1 and 3 nodes);
//	         three redisrate front-ends on one redis-server; three
//	         envoyproxy/ratelimit front-ends on one redis-server.
//	both:    the floor (bench/peers/floor): tokenmesh.v1 answered by
//	         grpc-go with every check admitted and no limiter at all, with
//	         tokenmesh's gRPC server options; its checks/s over a system's
//	         ("floor / this") is the most any limiter answering through
//	         grpc-go could show against that system on this load
//	         generator and machine.
//
// --strategies-1 and --strategies-3 choose tokenmesh's rows (default owner;
// owner,gdrl); the first is the reference of the "tokenmesh / this" column.
//
// All are driven by tokenmesh's loadgen (one driver per API: tokenmesh.v1
// Check, Gubernator GetRateLimits, Envoy RLS ShouldRateLimit) with the
// same options (--workers closed-loop workers, --batch checks per call,
// --keys uniform keys, workers spread round-robin over the nodes), in
// A-B-A-B order: --rounds rounds, each running every system of a group
// once, after a --warmup run of its own; a system runs only for its own
// run (started before it, stopped after it), so the others' background
// work does not share the machine with it. It prints one markdown table with
// the median over rounds of checks/s, p50, p99 and CPU per check (the
// servers' processes, redis-server included, from /proc/<pid>/stat, over
// the measured run; and the load generator's own), with tokenmesh's
// checks/s over each system's.
//
// Realistic keys and limits : --keys-dist picks the keys (uniform
// over --keys, the default; zipf:s=S,n=N; tenants:N, N hot keys carrying
// all the load, as the simulator's tenants workload), and --limit R/s
// --burst B gives every system a per-key token bucket in its own terms
// (tokenmesh: the rule; Gubernator: limit R per 1s and burst B in every
// request, its TOKEN_BUCKET a fixed window of R per second that reads no
// burst; envoy ratelimit: requests_per_unit R, unit second, a fixed
// window; redis_rate: rate R per 1s, burst B). With --limit the load is an
// open loop at --overload (2) times the limit on the hottest key, so there
// are refusals, and the load generator records every admission (key, time
// of the answer on its own clock): the table adds the excess over b + r*T
// per key in fixed windows of --window (T) and over any interval
// (loadgen.WindowExcess), and says which system kept the limit. Without
// --limit the harness is what it was (closed loop, 10^9/s, the same
// table).
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tokenmesh/tokenmesh/rule"

	"github.com/tokenmesh/tokenmesh/loadgen"
	"github.com/tokenmesh/tokenmesh/localcluster"
)

const (
	ruleName = "bench"
	domain   = "bench"
	descKey  = "key"
)

type flags struct {
	tokenmesh, binDir           string
	duration, warmup            time.Duration
	rounds, workers, keys       int
	batch                       int
	groups                      string
	only                        string
	strategies1, strategiesN    []string
	versionsOut                 string
	clkTck                      float64
	gubernatorBin, ratelimitBin string
	redisBin, redisrateBin      string
	floorBin                    string
	dist                        loadgen.KeysDist
	limit                       limitSpec
	window                      time.Duration
	overload                    float64
	offeredPerS                 float64 // checks/s of the open loop (limit set)
	gubernatorModes             []string
}

func main() {
	f := parseFlags()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	dir, err := os.MkdirTemp("", "bench-peers")
	if err != nil {
		fatalf("%v", err)
	}
	defer os.RemoveAll(dir)
	h := &harness{f: f, dir: dir}
	defer h.stopAll()
	var rows []row
	for _, g := range strings.Split(f.groups, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(g))
		if err != nil || (n != 1 && n != 3) {
			fatalf("--nodes %q: want 1, 3 or 1,3", f.groups)
		}
		r, err := h.group(ctx, n)
		rows = append(rows, r...)
		if err != nil {
			h.stopAll()
			printTable(os.Stdout, &f, rows)
			fatalf("%d node(s): %v", n, err)
		}
	}
	printTable(os.Stdout, &f, rows)
}

// rawFlags are the flags parsed into f only after flag.Parse.
type rawFlags struct {
	distSpec, limit, gubernator, strategies1, strategiesN *string
	burst                                                 *int64
}

// parseFlags parses and checks the command line; a bad one is fatal.
func parseFlags() flags {
	var f flags
	raw := defineFlags(&f)
	flag.Parse()
	f.parseRaw(raw)
	f.clkTck = 100 // USER_HZ on Linux
	f.gubernatorBin = filepath.Join(f.binDir, "gubernator")
	f.ratelimitBin = filepath.Join(f.binDir, "service_cmd")
	f.redisrateBin = filepath.Join(f.binDir, "redisrate")
	f.floorBin = filepath.Join(f.binDir, "floor")
	f.check()
	return f
}

// defineFlags defines the command's flags, into f or the raw ones it
// returns.
func defineFlags(f *flags) rawFlags {
	var raw rawFlags
	flag.StringVar(&f.tokenmesh, "tokenmesh", "bin/tokenmesh", "the tokenmesh binary")
	flag.StringVar(&f.binDir, "bin", "bench/peers/bin", "directory of gubernator, service_cmd (envoyproxy/ratelimit) and redisrate")
	flag.StringVar(&f.redisBin, "redis-server", "redis-server", "the redis-server binary")
	flag.DurationVar(&f.duration, "duration", 8*time.Second, "measured time of one run")
	flag.DurationVar(&f.warmup, "warmup", time.Second, "unmeasured run before each measured one")
	flag.IntVar(&f.rounds, "rounds", 2, "rounds (A-B-A-B: each round runs every system once)")
	flag.IntVar(&f.workers, "workers", 32, "workers, one call in flight each (a closed loop; with --limit they send on the open loop's schedule, and a system slower than workers/latency falls behind it)")
	flag.IntVar(&f.keys, "keys", 10000, "distinct keys, drawn uniformly (--keys-dist uniform only)")
	raw.distSpec = flag.String("keys-dist", "uniform", "key distribution: uniform (--keys keys), zipf[:s=1.1,n=100000] (key i drawn with probability proportional to (i+1)^-s), tenants[:20] (N hot tenant keys carrying all the load)")
	raw.limit = flag.String("limit", "", "per-key limit every system enforces, a whole number per second (e.g. 100/s); empty: 10^9/s, every check admitted, closed loop. "+
		"Set, the load is an open loop offering the hottest key --overload times the limit, and every admission is counted per key and --window")
	raw.burst = flag.Int64("burst", 0, "per-key burst with --limit (0: one second's tokens); Gubernator's token bucket and envoy ratelimit have no burst of their own: a fixed window of the limit")
	flag.DurationVar(&f.window, "window", time.Second, "with --limit: the windows the admissions are counted in, T of b + r*T; "+
		"make it several times b/r: at --overload 2 with b = r*1s, a 1s window's bound is the hottest key's whole offered load and no limiter at all shows an excess")
	flag.Float64Var(&f.overload, "overload", 2, "with --limit: offered load on the hottest key over its limit")
	raw.gubernator = flag.String("gubernator", "exact", "Gubernator rows, comma-separated: exact (BATCHING: the owner decides), global (GLOBAL: every node decides, the owner syncs)")
	flag.IntVar(&f.batch, "batch", 1, "checks per call")
	flag.StringVar(&f.groups, "nodes", "1,3", "node counts to run (1, 3 or both)")
	flag.StringVar(&f.only, "only", "", "comma-separated system names to run (default all), e.g. tokenmesh,gubernator")
	raw.strategies1 = flag.String("strategies-1", "owner", "tokenmesh strategies run on 1 node, comma-separated; the first is the reference of the ratio column")
	raw.strategiesN = flag.String("strategies-3", "owner,gdrl", "tokenmesh strategies run on 3 nodes, comma-separated; the first is the reference of the ratio column "+
		"(add lease for the exact, mostly local strategy, local for the harness's ceiling: no coordination at all)")
	return raw
}

// parseRaw parses the raw flags into f; a bad one is fatal.
func (f *flags) parseRaw(raw rawFlags) {
	var err error
	if f.strategies1, err = strategyList("--strategies-1", *raw.strategies1); err != nil {
		fatalf("%v", err)
	}
	if f.strategiesN, err = strategyList("--strategies-3", *raw.strategiesN); err != nil {
		fatalf("%v", err)
	}
	if f.dist, err = loadgen.ParseKeysDist(*raw.distSpec); err != nil {
		fatalf("%v", err)
	}
	flag.Visit(func(fl *flag.Flag) {
		if fl.Name == "keys" && f.dist.Kind != loadgen.DistUniform {
			fatalf("--keys is for --keys-dist uniform; %s sets its own keys", f.dist)
		}
	})
	if f.limit, err = parseLimit(*raw.limit, *raw.burst); err != nil {
		fatalf("%v", err)
	}
	if f.gubernatorModes, err = gubernatorModes(*raw.gubernator); err != nil {
		fatalf("%v", err)
	}
	if f.limit.set {
		if f.window <= 0 {
			fatalf("--window %v: must be positive", f.window)
		}
		if f.offeredPerS, err = offered(f.limit, f.dist, f.keys, f.overload); err != nil {
			fatalf("%v", err)
		}
	}
}

// check checks the bounds of f and that the binaries it runs exist; a bad
// one is fatal.
func (f *flags) check() {
	if f.rounds < 1 || f.workers < 1 || f.keys < 1 || f.batch < 1 || f.duration <= 0 || f.warmup < 0 {
		fatalf("--rounds, --workers, --keys and --batch must be >= 1, --duration > 0, --warmup >= 0")
	}
	if f.duration > 2*time.Minute || f.rounds > 10 {
		fatalf("--duration at most 2m and --rounds at most 10: this harness is bounded")
	}
	for _, b := range []string{f.tokenmesh, f.gubernatorBin, f.ratelimitBin, f.redisrateBin, f.floorBin} {
		if _, err := os.Stat(b); err != nil {
			fatalf("%v (run `make bench-peers`, which installs and builds them)", err)
		}
	}
	if _, err := exec.LookPath(f.redisBin); err != nil {
		fatalf("--redis-server: %v (apt-get install -y redis-server)", err)
	}
}

// strategyList parses a comma-separated list of tokenmesh strategies: at
// least one, no empty or repeated name (the nodes validate the names
// themselves when they load the rule).
func strategyList(flagName, v string) ([]string, error) {
	var out []string
	for _, s := range strings.Split(v, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			return nil, fmt.Errorf("%s %q: empty strategy name", flagName, v)
		}
		if slices.Contains(out, s) {
			return nil, fmt.Errorf("%s %q: %s named twice", flagName, v, s)
		}
		out = append(out, s)
	}
	return out, nil
}

// gubernatorModes parses --gubernator: exact, global or both.
func gubernatorModes(v string) ([]string, error) {
	ms, err := strategyList("--gubernator", v)
	if err != nil {
		return nil, err
	}
	for _, m := range ms {
		if m != "exact" && m != "global" {
			return nil, fmt.Errorf("--gubernator %q: %s is not exact or global", v, m)
		}
	}
	return ms, nil
}

func fatalf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "bench-peers: "+format+"\n", a...)
	os.Exit(1)
}

// system is one limiter under test.
type system struct {
	name    string
	nodes   int
	targets []string
	pids    []int // the server processes (redis-server included)
	opts    func(o *loadgen.Options)
}

// run is one measured run of a system.
type run struct {
	checksPerS, p50ms, p99ms float64
	serverCPUus, clientCPUus float64 // per check
	allowedPct               float64
	failed                   int64
	excess                   loadgen.Excess          // with --limit
	shortfall                loadgen.ShortfallResult // with --limit
}

// shortfall is what res's system admitted against one exact bucket per
// key (loadgen.Shortfall) over the warmup run's checks and res's, the
// warmup's placed before res's on one time line (the buckets drain in the
// warmup as the system's do).
func shortfall(warm, res *loadgen.Result, l limitSpec) (loadgen.ShortfallResult, error) {
	ans := res.Answered
	if len(warm.Answered) > 0 {
		shift := warm.MeasureStart.Sub(res.MeasureStart)
		ans = make([]loadgen.Answered, 0, len(warm.Answered)+len(res.Answered))
		for _, a := range warm.Answered {
			if a.At >= 0 { // the warmup run's own warmup (none) stays out
				a.At += shift
				ans = append(ans, a)
			}
		}
		ans = append(ans, res.Answered...)
	}
	s, err := loadgen.Shortfall(ans, float64(l.perS), l.burst)
	if err != nil {
		return s, fmt.Errorf("shortfall against the exact bucket: %w", err)
	}
	return s, nil
}

type row struct {
	sys  string
	ref  bool // the group's reference (tokenmesh)
	n    int
	runs []run
}

type harness struct {
	f        flags
	dir      string
	procs    []*exec.Cmd
	clusters []*localcluster.Cluster // tokenmesh's, stopped by localcluster (by PID)
	seq      int
}

// start starts a server process with its output to a log file.
func (h *harness) start(name, bin string, args, env []string) (*exec.Cmd, error) {
	h.seq++
	logf, err := os.Create(filepath.Join(h.dir, fmt.Sprintf("%02d-%s.log", h.seq, name)))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = procAttr()
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	go func() { _ = cmd.Wait(); logf.Close() }()
	h.procs = append(h.procs, cmd)
	return cmd, nil
}

// stopAll stops every tokenmesh cluster and every process started, by PID:
// SIGTERM, SIGKILL after 5 s.
func (h *harness) stopAll() { h.stopSince(0, 0) }

// stopSince stops the processes started after the first procs and the
// tokenmesh clusters after the first clusters (one system's, started last),
// and forgets them, so that their PIDs are never signalled again.
func (h *harness) stopSince(procs, clusters int) {
	for _, c := range h.clusters[clusters:] {
		if err := c.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stopping tokenmesh: %v\n", err)
		}
	}
	h.clusters = h.clusters[:clusters]
	stop := h.procs[procs:]
	for _, c := range stop {
		_ = c.Process.Signal(syscall.SIGTERM)
	}
	deadline := time.Now().Add(5 * time.Second)
	for _, c := range stop {
		for alive(c.Process.Pid) && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if alive(c.Process.Pid) {
			_ = c.Process.Kill()
		}
	}
	h.procs = h.procs[:procs]
}

// alive: the process exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && b[i+2] != 'Z'
}

// freePorts returns n distinct free loopback ports: all listeners are held
// open until all are drawn, so they differ.
func freePorts(n int) ([]int, error) {
	var lns []net.Listener
	defer func() {
		for _, l := range lns {
			l.Close()
		}
	}()
	var ps []int
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns = append(lns, ln)
		ps = append(ps, ln.Addr().(*net.TCPAddr).Port)
	}
	return ps, nil
}

func addr(p int) string { return "127.0.0.1:" + strconv.Itoa(p) }

// waitTCP waits until addr accepts connections.
func waitTCP(ctx context.Context, a string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		c, err := net.DialTimeout("tcp", a, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s did not accept connections within %v: %v", a, timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// cpuTicks is the user+system CPU of pids so far, in clock ticks.
func cpuTicks(pids []int) (float64, error) {
	var sum float64
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return 0, fmt.Errorf("CPU of process %d: %w", pid, err)
		}
		i := bytes.LastIndexByte(b, ')')
		fs := strings.Fields(string(b[i+1:]))
		// fields after the command: state(3) ... utime(14) stime(15)
		if len(fs) < 13 {
			return 0, fmt.Errorf("/proc/%d/stat: too few fields", pid)
		}
		u, err1 := strconv.ParseFloat(fs[11], 64)
		s, err2 := strconv.ParseFloat(fs[12], 64)
		if err := errors.Join(err1, err2); err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		sum += u + s
	}
	return sum, nil
}

// redis starts a redis-server on loopback (no persistence).
func (h *harness) redis(ctx context.Context) (string, int, error) {
	ps, err := freePorts(1)
	if err != nil {
		return "", 0, err
	}
	p := ps[0]
	c, err := h.start("redis", h.f.redisBin, []string{"--bind", "127.0.0.1", "--port", strconv.Itoa(p),
		"--save", "", "--appendonly", "no", "--protected-mode", "yes", "--daemonize", "no"}, nil)
	if err != nil {
		return "", 0, err
	}
	a := addr(p)
	return a, c.Process.Pid, waitTCP(ctx, a, 10*time.Second)
}

func (h *harness) tokenmesh(ctx context.Context, nodes int, strategy string) (*system, error) {
	h.seq++ // a directory of its own per start
	lc, err := localcluster.Start(ctx, localcluster.Config{Binary: h.f.tokenmesh, Nodes: nodes,
		Dir:   filepath.Join(h.dir, fmt.Sprintf("tokenmesh-%s-%d-%d", strategy, nodes, h.seq)),
		Rules: []rule.Rule{{Name: ruleName, Rate: rule.MustRate(h.f.limit.rate()), Burst: h.f.limit.burst, Strategy: strategy}}})
	if err != nil {
		return nil, err
	}
	s := &system{name: "tokenmesh " + strategy, nodes: nodes}
	for i, n := range lc.Nodes {
		s.targets = append(s.targets, n.GRPC)
		s.pids = append(s.pids, lc.PID(i))
	}
	h.clusters = append(h.clusters, lc)
	s.opts = func(o *loadgen.Options) { o.Rule = ruleName }
	return s, nil
}

// gubernatorName is the row of a Gubernator mode (exact: the harness's
// "gubernator" before the modes were named).
func gubernatorName(mode string) string {
	if mode == "global" {
		return "gubernator global"
	}
	return "gubernator"
}

func (h *harness) gubernator(ctx context.Context, nodes int, mode string) (*system, error) {
	if nodes > 1 && os.Geteuid() != 0 {
		return nil, errors.New("gubernator with more than 1 node needs root (a UTS namespace per node: memberlist names nodes by host name)")
	}
	ps, err := freePorts(3 * nodes)
	if err != nil {
		return nil, err
	}
	s := &system{name: gubernatorName(mode), nodes: nodes}
	// Gubernator's member-list pool keys its peers by IP address
	// (memberlist.go, memberListEventHandler.peers), so nodes on one
	// address collapse into one peer: node i listens on 127.0.0.<i+1>,
	// all loopback.
	at := func(i, p int) string { return fmt.Sprintf("127.0.0.%d:%d", i+1, p) }
	known := at(0, ps[2])
	var https []string
	for i := range nodes {
		g, ht, ml := at(i, ps[3*i]), at(i, ps[3*i+1]), at(i, ps[3*i+2])
		// memberlist names a node by its host name (Gubernator sets no
		// other), so with nodes > 1 each runs in a UTS namespace of its
		// own with host name gubernator-<i> (root and unshare(1) needed;
		// the network is the host's loopback all the same).
		bin, args := h.f.gubernatorBin, []string(nil)
		if nodes > 1 {
			bin, args = "unshare", []string{"--uts", "--", "sh", "-c", `hostname "$1" && exec "$2"`, "sh",
				fmt.Sprintf("gubernator-%d", i), h.f.gubernatorBin}
		}
		c, err := h.start(fmt.Sprintf("gubernator-%d-%d", nodes, i), bin, args, []string{
			"GUBER_GRPC_ADDRESS=" + g, "GUBER_HTTP_ADDRESS=" + ht, "GUBER_ADVERTISE_ADDRESS=" + g,
			"GUBER_PEER_DISCOVERY_TYPE=member-list", "GUBER_MEMBERLIST_ADDRESS=" + ml,
			"GUBER_MEMBERLIST_BIND_ADDRESS=" + ml, "GUBER_MEMBERLIST_KNOWN_NODES=" + known,
			"GUBER_INSTANCE_ID=bench-" + strconv.Itoa(i), "GUBER_LOG_LEVEL=warn", "OTEL_TRACES_EXPORTER=none",
			"OTEL_SDK_DISABLED=true"})
		if err != nil {
			return nil, err
		}
		s.targets = append(s.targets, g)
		s.pids = append(s.pids, c.Process.Pid)
		https = append(https, ht)
	}
	// ready: every node's health check reports all the peers
	deadline := time.Now().Add(30 * time.Second)
	for _, ht := range https {
		for {
			n, err := gubernatorPeers(ht)
			if err == nil && n == nodes {
				break
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				return nil, fmt.Errorf("gubernator at %s: not %d peers within 30s (peers %d, %v); logs in %s", ht, nodes, n, err, h.dir)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	s.opts = func(o *loadgen.Options) {
		o.API, o.Rule = loadgen.APIGubernator, ruleName
		behavior := loadgen.GubernatorBatching
		if mode == "global" {
			behavior = loadgen.GubernatorGlobal
		}
		// Gubernator's TOKEN_BUCKET (the default algorithm) admits Limit per
		// Duration, from the key's first hit (a fixed window; burst is read
		// by its LEAKY_BUCKET only): sent all the same, as a user would.
		var burst int64
		if h.f.limit.set {
			burst = h.f.limit.burst
		}
		o.Gubernator = &loadgen.GubernatorRule{Limit: h.f.limit.perS, Duration: time.Second, Burst: burst, Behavior: behavior}
	}
	return s, nil
}

func gubernatorPeers(httpAddr string) (int, error) {
	cl := http.Client{Timeout: 2 * time.Second}
	resp, err := cl.Get("http://" + httpAddr + "/v1/HealthCheck")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var hc struct {
		Status    string `json:"status"`
		PeerCount int    `json:"peer_count"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&hc); err != nil {
		return 0, err
	}
	return hc.PeerCount, nil
}

func (h *harness) envoyRatelimit(ctx context.Context, nodes int, redisAddr string, redisPID int) (*system, error) {
	root := filepath.Join(h.dir, fmt.Sprintf("ratelimit-%d", nodes))
	if err := os.MkdirAll(filepath.Join(root, "ratelimit", "config"), 0o755); err != nil {
		return nil, err
	}
	conf := fmt.Sprintf("domain: %s\ndescriptors:\n  - key: %s\n    rate_limit:\n      unit: second\n      requests_per_unit: %d\n", domain, descKey, h.f.limit.perS)
	if err := os.WriteFile(filepath.Join(root, "ratelimit", "config", "bench.yaml"), []byte(conf), 0o644); err != nil {
		return nil, err
	}
	s := &system{name: "envoy ratelimit + redis", nodes: nodes, pids: []int{redisPID}}
	ps, err := freePorts(3 * nodes)
	if err != nil {
		return nil, err
	}
	for i := range nodes {
		c, err := h.start(fmt.Sprintf("ratelimit-%d-%d", nodes, i), h.f.ratelimitBin, nil, []string{
			"HOST=127.0.0.1", "PORT=" + strconv.Itoa(ps[3*i]), "GRPC_HOST=127.0.0.1", "GRPC_PORT=" + strconv.Itoa(ps[3*i+1]),
			"DEBUG_HOST=127.0.0.1", "DEBUG_PORT=" + strconv.Itoa(ps[3*i+2]), "USE_STATSD=false", "LOG_LEVEL=warn",
			"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + redisAddr, "RUNTIME_ROOT=" + root, "RUNTIME_SUBDIRECTORY=ratelimit",
			"RUNTIME_WATCH_ROOT=false"})
		if err != nil {
			return nil, err
		}
		s.targets = append(s.targets, addr(ps[3*i+1]))
		s.pids = append(s.pids, c.Process.Pid)
	}
	for _, t := range s.targets {
		if err := waitTCP(ctx, t, 20*time.Second); err != nil {
			return nil, fmt.Errorf("envoy ratelimit: %v; logs in %s", err, h.dir)
		}
	}
	s.opts = func(o *loadgen.Options) { o.API, o.Domain, o.DescriptorKey = loadgen.APIRLS, domain, descKey }
	return s, nil
}

// floorName is the floor's row (bench/peers/floor).
const floorName = "floor (grpc-go, no limiter)"

// floor starts nodes floor servers (bench/peers/floor): tokenmesh.v1
// answered with every check admitted and no limiter, no peers, no store.
func (h *harness) floor(ctx context.Context, nodes int) (*system, error) {
	s := &system{name: floorName, nodes: nodes}
	return s, h.frontEnds(ctx, s, "floor", h.f.floorBin, []string{"--rule", ruleName})
}

func (h *harness) redisrate(ctx context.Context, nodes int, redisAddr string, redisPID int) (*system, error) {
	s := &system{name: "redis_rate + redis", nodes: nodes, pids: []int{redisPID}}
	return s, h.frontEnds(ctx, s, "redisrate", h.f.redisrateBin, []string{"--redis", redisAddr, "--rule", ruleName,
		"--rate", strconv.FormatInt(h.f.limit.perS, 10), "--burst", strconv.FormatInt(h.f.limit.burst, 10)})
}

// frontEnds starts s.nodes processes of bin (ours, serving tokenmesh.v1 on
// --grpc-addr, with args), adds them to s and waits for their ports.
func (h *harness) frontEnds(ctx context.Context, s *system, label, bin string, args []string) error {
	ps, err := freePorts(s.nodes)
	if err != nil {
		return err
	}
	for i := range s.nodes {
		c, err := h.start(fmt.Sprintf("%s-%d-%d", label, s.nodes, i), bin, append([]string{"--grpc-addr", addr(ps[i])}, args...), nil)
		if err != nil {
			return err
		}
		s.targets = append(s.targets, addr(ps[i]))
		s.pids = append(s.pids, c.Process.Pid)
	}
	for _, t := range s.targets {
		if err := waitTCP(ctx, t, 20*time.Second); err != nil {
			return fmt.Errorf("%s: %v; logs in %s", label, err, h.dir)
		}
	}
	s.opts = func(o *loadgen.Options) { o.Rule = ruleName }
	return nil
}

func (h *harness) want(name string) bool {
	if h.f.only == "" {
		return true
	}
	for _, w := range strings.Split(h.f.only, ",") {
		if w = strings.TrimSpace(w); w != "" && strings.HasPrefix(name, w) {
			return true
		}
	}
	return false
}

// starter starts one system; the harness stops it after its run.
type starter struct {
	name  string
	start func() (*system, error)
}

// group runs the rounds of a node count: in each, every system in turn is
// started, warmed up, measured and stopped, so that no other system's
// background work (gossip, share exchanges, replication, timers) runs
// beside the one measured; before 2026-11-29 every system of a group ran
// for the whole group, and the idle ones took about half the machine at 3
// nodes (docs/PERFORMANCE.md, "The floor"). The redis-server that envoy
// ratelimit and redis_rate share runs for the whole group (idle, it costs
// nothing), its CPU counted in their runs.
func (h *harness) group(ctx context.Context, n int) ([]row, error) {
	defer h.stopAll()
	starters, err := h.starters(ctx, n)
	if err != nil {
		return nil, err
	}
	rows := make([]row, len(starters))
	for i, st := range starters {
		rows[i] = row{sys: st.name, n: n, ref: i == 0 && strings.HasPrefix(st.name, "tokenmesh")}
	}
	for r := range h.f.rounds {
		for i, st := range starters {
			res, err := h.runOnce(ctx, st, n, r, i)
			if err != nil {
				return rows, err
			}
			rows[i].runs = append(rows[i].runs, res)
		}
	}
	return rows, nil
}

// starters are the systems of a group of n nodes that --only wants, in
// the order they run; the envoy and redis_rate rows share a redis-server
// started here.
func (h *harness) starters(ctx context.Context, n int) ([]starter, error) {
	var starters []starter
	if h.want("tokenmesh") {
		strategies := h.f.strategies1
		if n > 1 {
			strategies = h.f.strategiesN
		}
		for _, st := range strategies {
			starters = append(starters, starter{"tokenmesh " + st, func() (*system, error) { return h.tokenmesh(ctx, n, st) }})
		}
	}
	if h.want("floor") {
		starters = append(starters, starter{floorName, func() (*system, error) { return h.floor(ctx, n) }})
	}
	for _, m := range h.f.gubernatorModes {
		if name := gubernatorName(m); h.want(name) {
			starters = append(starters, starter{name, func() (*system, error) { return h.gubernator(ctx, n, m) }})
		}
	}
	if h.want("envoy") || h.want("redis") {
		ra, rpid, err := h.redis(ctx)
		if err != nil {
			return nil, err
		}
		if h.want("envoy") {
			starters = append(starters, starter{"envoy ratelimit + redis", func() (*system, error) { return h.envoyRatelimit(ctx, n, ra, rpid) }})
		}
		if h.want("redis") {
			starters = append(starters, starter{"redis_rate + redis", func() (*system, error) { return h.redisrate(ctx, n, ra, rpid) }})
		}
	}
	return starters, nil
}

// runOnce starts system st (the i-th of a group of n nodes), measures it
// in round r and stops it, saying so on stderr.
func (h *harness) runOnce(ctx context.Context, st starter, n, r, i int) (run, error) {
	fmt.Fprintf(os.Stderr, "round %d/%d: %s, %d node(s)... ", r+1, h.f.rounds, st.name, n)
	procs, clusters := len(h.procs), len(h.clusters)
	s, err := st.start()
	var res run
	if err == nil {
		res, err = h.measure(ctx, s, uint64(r*100+i))
	}
	h.stopSince(procs, clusters)
	if err != nil {
		fmt.Fprintln(os.Stderr)
		return res, fmt.Errorf("%s: %w", st.name, err)
	}
	fmt.Fprintf(os.Stderr, "%.0f checks/s, p99 %.2f ms, server %.1f us/check", res.checksPerS, res.p99ms, res.serverCPUus)
	if h.f.limit.set {
		fmt.Fprintf(os.Stderr, ", admitted %.2f%%, excess worst %.1f sum %.0f sliding %.1f, missed %.2f%% of the exact bucket's", res.allowedPct,
			res.excess.Worst, res.excess.Sum, res.excess.Sliding, res.shortfall.MissedPct())
	}
	fmt.Fprintln(os.Stderr)
	return res, nil
}

func (h *harness) measure(ctx context.Context, s *system, seed uint64) (run, error) {
	o := loadgen.Options{Targets: s.targets, Concurrency: h.f.workers, Batch: h.f.batch,
		Seed: seed, DialTimeout: 5 * time.Second}
	h.f.dist.Apply(&o, h.f.keys)
	if h.f.limit.set {
		o.Rate = h.f.offeredPerS / float64(h.f.batch) // calls/s
		o.RecordAdmissions = true
	}
	s.opts(&o)
	warm := &loadgen.Result{}
	if h.f.warmup > 0 {
		w := o
		w.Duration = h.f.warmup
		var err error
		if warm, err = loadgen.Run(ctx, w); err != nil {
			return run{}, fmt.Errorf("warmup: %w", err)
		}
	}
	o.Duration = h.f.duration
	t0, err := cpuTicks(s.pids)
	if err != nil {
		return run{}, err
	}
	res, err := loadgen.Run(ctx, o)
	if err != nil {
		return run{}, err
	}
	t1, err := cpuTicks(s.pids)
	if err != nil {
		return run{}, err
	}
	if res.Checks == 0 {
		return run{}, fmt.Errorf("no check answered (%d failed calls: %v)", res.FailedRPCs, res.ErrorSample)
	}
	out := run{checksPerS: res.ChecksPerS, p50ms: res.LatencyMS.P50, p99ms: res.LatencyMS.P99,
		allowedPct: res.AllowedPct, failed: res.FailedRPCs,
		serverCPUus: (t1 - t0) / h.f.clkTck * 1e6 / float64(res.Checks),
		clientCPUus: res.ProcessCPU.Seconds() * 1e6 / float64(res.Checks)}
	if h.f.limit.set {
		out.excess = loadgen.WindowExcess(res.Admissions, float64(h.f.limit.perS), h.f.limit.burst, h.f.window)
		if out.shortfall, err = shortfall(warm, res, h.f.limit); err != nil {
			return run{}, err
		}
	}
	if res.FailedRPCs > 0 || res.Errors > 0 || (res.Refused > 0 && !h.f.limit.set) {
		fmt.Fprintf(os.Stderr, "(%d failed calls, %d of %d checks refused, %d check errors: %v) ", res.FailedRPCs,
			res.Refused, res.Checks, res.Errors, res.ErrorSample)
	}
	return out, nil
}
