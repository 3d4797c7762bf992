package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/tokenmesh/tokenmesh/config"
	"github.com/tokenmesh/tokenmesh/daemon"
	"github.com/tokenmesh/tokenmesh/rlqs"
)

// shutdownTimeout bounds the wait for in-flight API requests at shutdown
// (after node.drain_delay).
const shutdownTimeout = 5 * time.Second

// serveOptions are serve's flags.
type serveOptions struct {
	configPath     string
	addrFile       string    // --addr-file: the bound addresses as JSON, written once serving
	faultInjection bool      // --fault-injection (hidden): Faulty peer transport + /debug/faults
	discardBad     bool      // --discard-bad-state: a corrupt state file is moved aside instead of failing the start
	envoyConfig    string    // --envoy-config: a directory of envoyproxy/ratelimit YAML files (over node.envoy_config)
	watchConfig    bool      // --watch-config: reload the rules when the config file or an envoy config file changes
	node           nodeFlags // --name, --api-addr, ..., --log-format, --log-level (serveopts.go)
	gcPercent      int       // --gc-percent: the garbage-collection target (servegc.go)
	cpuProfile     string    // --cpuprofile: write a CPU profile of the run (serveprof.go)
}

func newServeCmd() *cobra.Command {
	var opts serveOptions
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run a tokenmesh node and serve its gRPC and HTTP/JSON API",
		Long: `serve runs a tokenmesh node and serves its client API over gRPC at
node.grpc_addr (tokenmesh.v1.RateLimitService, grpc.health.v1.Health, server
reflection) and over HTTP/JSON at node.api_addr (POST /v1/check, GET /v1/rules,
/healthz, /readyz, /metrics, and the HTTP mode ANY /v1/limit/{rule}: 200 or
429 per request, for nginx auth_request and the like). docs/API.md describes
the API. With --envoy-config DIR (or node.envoy_config) it also answers Envoy's
RLS v3 ShouldRateLimit on the gRPC address (docs/ENVOY.md) and its Rate Limit
Quota Service for the limits whose strategy is quota (docs/RLQS.md).

Without --config, a single node runs the built-in default configuration
(API on ` + config.DefaultAPIAddr + `, gRPC on ` + config.DefaultGRPCAddr + `, rule "default": 10/s, burst 20,
strategy owner). With --config FILE the node joins (or founds) a cluster:
peers at node.peer_addr, gossip at node.gossip_addr, joining node.join. A
multi-node cluster must authenticate its peers (node.secret_key or node.tls)
unless node.insecure: true.

With --addr-file FILE, once the node serves, serve writes the bound addresses
to FILE (atomically: a temporary file renamed) as JSON, for scripts and tests
that use port 0 ("peer" and "gossip" are empty for a node without peers):

  {"name":"n1","api":"127.0.0.1:8080","grpc":"127.0.0.1:8081",
   "peer":"127.0.0.1:7947","gossip":"127.0.0.1:7946"}

SIGINT or SIGTERM shuts down gracefully; SIGHUP, and a change of the --config
file or of an --envoy-config file (--watch-config), reloads the rules and the
Envoy limits; a file that does not load is refused, the old rules answering.

docs/OPERATIONS.md is the operator's guide: one config per node, flags and
environment variables, logs, reloading the rules, peer security, client API
limits (node.api_timeouts, node.memory_limit), stopping and restarting
(node.state_dir, --discard-bad-state), partitions, the latency hint. Programs
that embed a node use package daemon, which serve runs (go doc
github.com/tokenmesh/tokenmesh/daemon).

` + serveEnvHelp,
		Example: `  tokenmesh serve
  tokenmesh serve --config /etc/tokenmesh/tokenmesh.yaml
  tokenmesh serve --envoy-config /etc/ratelimit/config`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			stopProfile, err := startCPUProfile(opts.cpuProfile)
			if err != nil {
				return err
			}
			defer stopProfile()
			return runServe(ctx, cmd, opts)
		},
	}
	cmd.Flags().StringVar(&opts.configPath, "config", "", "node configuration (YAML; env "+envConfig+"); without it, a single node with the built-in defaults")
	opts.node.add(cmd)
	cmd.Flags().BoolVar(&opts.watchConfig, "watch-config", true, "reload the rules when the --config file or a file in the --envoy-config directory changes (also on SIGHUP)")
	cmd.Flags().StringVar(&opts.addrFile, "addr-file", "", "write the bound addresses as JSON {name, api, grpc, peer, gossip} to this file once serving")
	cmd.Flags().BoolVar(&opts.faultInjection, "fault-injection", false,
		"testing only: inject peer faults, set by POST /debug/faults on the HTTP API (needs --config)")
	cmd.Flags().StringVar(&opts.envoyConfig, "envoy-config", "",
		"directory of envoyproxy/ratelimit YAML files: serve Envoy's RLS v3 ShouldRateLimit and RLQS on the gRPC address (over node.envoy_config)")
	cmd.Flags().BoolVar(&opts.discardBad, "discard-bad-state", false,
		"when the state file in node.state_dir does not load (corrupt), move it aside and start with full buckets instead of failing")
	addGCFlag(cmd, &opts.gcPercent)
	addCPUProfileFlag(cmd, &opts.cpuProfile)
	// Hidden: a test hook that lets anyone who reaches the API cut this
	// node's data plane; MarkHidden fails only for an unknown flag.
	_ = cmd.Flags().MarkHidden("fault-injection")
	return cmd
}

// runServe runs a node (package daemon) until ctx ends (SIGINT, SIGTERM)
// or a server fails; SIGHUP reloads its rules.
func runServe(ctx context.Context, cmd *cobra.Command, opts serveOptions) error {
	out := cmd.OutOrStdout()
	// SIGHUP reloads the rules (its default action would end the process).
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	// One log for the node: start and stop, config, state restores,
	// membership changes, refused peer frames, reloads.
	logger, logFormat, err := opts.node.newLogger(cmd, out)
	if err != nil {
		return err
	}
	slog.SetDefault(logger)
	// banner is the human summary: text logs only (JSON logs stay one
	// object a line).
	banner := out
	if logFormat == "json" {
		banner = io.Discard
	}
	bi, err := logStart(cmd, opts.gcPercent, logger)
	if err != nil {
		return err
	}
	configPath := opts.resolvedConfigPath(cmd)
	f, networked, err := opts.loadConfig(cmd, configPath, logger)
	if err != nil {
		return err
	}
	setMemoryLimit(f.Node.MemoryLimit, logger, banner)
	d, err := daemon.Start(ctx, daemon.Config{File: f, ConfigPath: configPath, WatchConfig: opts.watchConfig,
		EnvoyDir: opts.envoyConfig, Networked: networked, Logger: logger, DiscardBadState: opts.discardBad,
		FaultInjection: opts.faultInjection, BuildInfo: bi.BuildInfo, Services: []daemon.Service{rlqs.Service()},
		Bound: func(a daemon.Addrs) error { return writeAddrFile(opts.addrFile, a) }})
	if err != nil {
		return err
	}
	printBanner(banner, d, configPath, networked)
	if logFormat == "json" {
		logRules(logger, d)
	}
	serveErr := waitServe(ctx, d, hup, logger)
	return shutdownServe(d, f.Node.DrainDelay, serveErr, logger)
}

// logStart applies the garbage-collection target (--gc-percent, GOGC)
// and logs the start: version, revision, Go version, PID and that target.
// It returns the build's information.
func logStart(cmd *cobra.Command, gcFlag int, logger *slog.Logger) (buildInfo, error) {
	gcPercent, err := applyGCPercent(cmd, gcFlag)
	if err != nil {
		return buildInfo{}, err
	}
	bi := readBuildInfo()
	logger.Info("starting tokenmesh", "version", bi.Version, "revision", bi.Revision, "go", bi.GoVersion, "pid", os.Getpid(), "gc_percent", gcPercent)
	return bi, nil
}

// loadConfig loads the node's config from configPath ("" : the built-in
// default), applies the node flags and environment variables over it and
// logs the outcome. networked is whether the node has peers over gRPC and
// gossip: a config file, or a peer setting given by flag or environment.
// Errors: --fault-injection without a config file, the config's, the
// flags'.
func (opts serveOptions) loadConfig(cmd *cobra.Command, configPath string, logger *slog.Logger) (f *config.File, networked bool, err error) {
	if opts.faultInjection && configPath == "" {
		return nil, false, errors.New("--fault-injection needs --config (a node with peers)")
	}
	f, source, err := loadServeConfig(configPath)
	if err != nil {
		return nil, false, err
	}
	overrides, peerSet, err := opts.node.apply(cmd, f)
	if err != nil {
		return nil, false, err
	}
	logger.Info("config loaded", "config", source, "node", f.Node.Name, "rules", len(f.Rules), "overrides", overrides)
	return f, configPath != "" || peerSet, nil
}

// setMemoryLimit sets the Go runtime's soft memory limit to limit bytes
// (node.memory_limit) and says so in the log and on banner; 0 or less
// leaves the runtime's default.
func setMemoryLimit(limit int64, logger *slog.Logger, banner io.Writer) {
	if limit <= 0 {
		return
	}
	debug.SetMemoryLimit(limit)
	logger.Info("memory limit set (node.memory_limit)", "bytes", limit)
	fmt.Fprintf(banner, "memory limit: %d bytes (node.memory_limit)\n", limit)
}

// logRules logs one record a rule of d: name, rate per second, burst,
// strategy (JSON logs' counterpart of the banner's rule lines).
func logRules(logger *slog.Logger, d *daemon.Daemon) {
	for _, r := range d.Rules().Rules {
		logger.Info("rule", "rule", r.Name, "rate_per_s", r.Rate.PerSec(), "burst", r.Burst, "strategy", r.Strategy)
	}
}

// waitServe serves until ctx ends (nil) or d fails (its error), reloading
// d's rules on each signal from hup.
func waitServe(ctx context.Context, d *daemon.Daemon, hup <-chan os.Signal, logger *slog.Logger) error {
	for {
		select {
		case <-ctx.Done():
			logger.Info("shutting down", "reason", "signal")
			return nil
		case <-d.Done():
			if err := d.Err(); err != nil {
				logger.Error("shutting down", "reason", err.Error())
				return err
			}
		case <-hup:
			if err := d.Reload(ctx, "SIGHUP"); errors.Is(err, daemon.ErrNoConfigFile) {
				logger.Warn("SIGHUP: no config file (--config) or envoy config (--envoy-config) to reload; nothing changed")
			}
		}
	}
}

// shutdownServe shuts d down, waiting at most drainDelay plus
// shutdownTimeout, and logs that it stopped. It returns serveErr, the
// reason serving ended, or else the shutdown's error.
func shutdownServe(d *daemon.Daemon, drainDelay time.Duration, serveErr error, logger *slog.Logger) error {
	sctx, cancel := context.WithTimeout(context.Background(), drainDelay+shutdownTimeout)
	defer cancel()
	if err := d.Shutdown(sctx); err != nil && serveErr == nil {
		serveErr = err
	}
	if serveErr != nil {
		logger.Error("stopped", "error", serveErr.Error())
	} else {
		logger.Info("stopped")
	}
	return serveErr
}

// loadServeConfig loads path, or the built-in default for "", and names
// the source for the log.
func loadServeConfig(path string) (f *config.File, source string, err error) {
	if path != "" {
		f, err = config.Load(path)
		return f, path, err
	}
	f = config.Default()
	if err := f.Validate(); err != nil {
		return nil, "", fmt.Errorf("default config: %w", err)
	}
	return f, "built-in default", nil
}

// printBanner prints serve's human summary of d on w: the config, the
// addresses, the join outcome, one line per rule, the Envoy config, the
// state file.
func printBanner(w io.Writer, d *daemon.Daemon, configPath string, networked bool) {
	rs, a, node := d.Rules(), d.Addrs(), d.Node()
	n := rs.File.Node
	switch {
	case configPath == "" && !networked:
		fmt.Fprintln(w, "tokenmesh serve: no --config; running the built-in default configuration (single node, no peers)")
	case configPath == "":
		fmt.Fprintln(w, "tokenmesh serve: no --config; the built-in default configuration with the peer settings given")
	default:
		fmt.Fprintf(w, "tokenmesh serve: config %s\n", configPath)
	}
	fmt.Fprintf(w, "node %s: API %s grpc %s\n", a.Name, d.APIURL(), a.GRPC)
	if networked {
		join := "founding a cluster"
		switch members := node.Members(); {
		case len(members) > 1:
			join = fmt.Sprintf("joined %s (members: %s)", strings.Join(n.Join, ", "), strings.Join(members, ", "))
		case len(n.Join) > 0:
			join = fmt.Sprintf("no member at %s answered: founding a cluster, retrying the join every %v",
				strings.Join(n.Join, ", "), reconnectEvery(n.ReconnectInterval))
		}
		fmt.Fprintf(w, "peers: grpc %s, gossip %s, %s\n", a.Peer, a.Gossip, join)
	}
	for _, r := range rs.Rules {
		fmt.Fprintf(w, "rule %s: rate %s/s, burst %d, strategy %s\n", r.Name, plainNumber(r.Rate.PerSec()), r.Burst, r.Strategy)
	}
	if e := rs.Envoy; e != nil {
		fmt.Fprintf(w, "envoy RLS: %d domains, %d limits from %s, on grpc %s%s\n", len(e.Domains), len(e.Limits), rs.EnvoyDir, a.GRPC, shadowNote(n))
	}
	if ri := node.RestoreInfo(); ri.File != "" {
		fmt.Fprintf(w, "state: %s, a snapshot every %v", ri.File, n.SnapshotInterval)
		if ri.Found {
			fmt.Fprintf(w, "; restored %v keys per rule, taken %v ago", ri.Keys, ri.Age.Round(time.Millisecond))
		} else {
			fmt.Fprint(w, "; no snapshot there: full buckets")
		}
		fmt.Fprintln(w)
	}
}

// writeAddrFile writes a as JSON to path ("": nothing) atomically: a temporary
// file in its directory renamed over it, so a reader never sees a partial one.
func writeAddrFile(path string, a daemon.Addrs) error {
	if path == "" {
		return nil
	}
	b, _ := json.Marshal(a) // plain strings: cannot fail
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("--addr-file: %w", err)
	}
	_, err = tmp.Write(append(b, '\n'))
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("--addr-file: %w", err)
	}
	return nil
}

// reconnectEvery is node.reconnect_interval as the node uses it (zero in a
// config built in code: the default).
func reconnectEvery(d time.Duration) time.Duration {
	if d == 0 {
		return config.DefaultReconnectInterval
	}
	return d
}
