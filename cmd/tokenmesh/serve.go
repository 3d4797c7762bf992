package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/reflection"

	"github.com/tokenmesh/tokenmesh/cluster"
	"github.com/tokenmesh/tokenmesh/config"
	"github.com/tokenmesh/tokenmesh/envoyrls"
	"github.com/tokenmesh/tokenmesh/limiter"
	"github.com/tokenmesh/tokenmesh/server"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// clusterEpoch is the time base of every networked node (limiter.Config.Epoch):
// nodes in different processes must share one fixed wall-clock instant.
var clusterEpoch = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// shutdownTimeout bounds the wait for in-flight API requests at shutdown.
const shutdownTimeout = 5 * time.Second

// serveOptions are serve's flags.
type serveOptions struct {
	configPath     string
	addrFile       string    // --addr-file: the bound addresses as JSON, written once serving
	faultInjection bool      // --fault-injection (hidden): Faulty peer transport + /debug/faults
	discardBad     bool      // --discard-bad-state: a corrupt state file is moved aside instead of failing the start
	envoyConfig    string    // --envoy-config: a directory of envoyproxy/ratelimit YAML files (over node.envoy_config)
	watchConfig    bool      // --watch-config: reload the rules when the config file changes
	node           nodeFlags // --name, --api-addr, ..., --log-format, --log-level (serveopts.go)
	gcPercent      int       // --gc-percent: the garbage-collection target (servegc.go)
	cpuProfile     string    // --cpuprofile: write a CPU profile of the run (serveprof.go)
}

func newServeCmd() *cobra.Command {
	var opts serveOptions
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run a tokenmesh node and serve its gRPC and HTTP/JSON API",
		Long: `serve starts a tokenmesh node and serves its client API (tokenmesh.v1,
api/tokenmesh/v1/ratelimit.proto) over gRPC at node.grpc_addr and over
HTTP/JSON at node.api_addr:

  gRPC tokenmesh.v1.RateLimitService/Check, /ListRules; grpc.health.v1.Health
  POST /v1/check  {"checks":[{"rule":"api","key":"tenant-1","hits":1}]}
  GET  /v1/rules  the node's rules
  GET  /healthz   200 while the process serves
  GET  /readyz    200 while the node is started
  GET  /metrics   Prometheus metrics (docs/API.md lists them)
  ANY  /v1/limit/{rule}  HTTP mode: one token of the rule for the key its key
                  template takes from the request (rules[].key, default {key}:
                  ?key=); 200 "allowed" or 429 (403 with
                  node.http_refusal_status: 403, for nginx auth_request)
                  with Retry-After, and the RateLimit / RateLimit-Policy
                  headers (docs/API.md); a gateway's X-Request-Start
                  (nginx: "t=${msec}") is the check's edge time

With --envoy-config DIR (or node.envoy_config), serve reads envoyproxy/
ratelimit's YAML descriptor files in DIR (one domain per file), adds one
rule per descriptor limit (named rls.<domain>.<descriptor path>) and answers
Envoy's gRPC envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit on
the gRPC address (docs/ENVOY.md).

With --addr-file FILE, once every listener is bound and the node started,
serve writes the bound addresses to FILE (atomically: a temporary file
renamed) as JSON, for scripts and tests that use port 0:

  {"name":"n1","api":"127.0.0.1:8080","grpc":"127.0.0.1:8081",
   "peer":"127.0.0.1:7947","gossip":"127.0.0.1:7946"}

("peer" and "gossip" are empty without --config.)

With --config FILE, the node joins (or founds) a cluster: peers over gRPC at
node.peer_addr, membership by gossip at node.gossip_addr, joining node.join.
List the other nodes in node.join on every node: the first one up finds
nobody and founds the cluster (then keeps trying the join, so two nodes that
started apart merge), the others and any restarted node join it
(docs/OPERATIONS.md). Every node.reconnect_interval (5s) a node also retries
one member that failed, so the sides of a healed network partition merge.
Membership changes (member joined, failed, left; reconnected) are logged to
stderr.

Peer security: a node in a multi-node cluster (node.join set, or a
non-loopback node.gossip_addr) must authenticate its peers, with
node.secret_key (or secret_key_file; 16, 24 or 32 bytes, base64): gossip is
encrypted with it and every peer frame carries an HMAC-SHA256 under a key
derived from it, with replay protection; and/or with node.tls (peer mutual
TLS, the certificate naming the node; "tokenmesh certs" makes a CA and
node certificates). Without either, serve refuses to start unless
node.insecure: true, and then warns at every start: any process that
reaches the peer port could speak for any member. Refused peer frames are
counted in tokenmesh_peer_refused_frames_total{reason} (bad_mac, replay,
unknown_sender, bad_certificate, out_of_bounds) and logged at most once per
reason per 10 s (docs/OPERATIONS.md, "Peer security").

Resources: the HTTP API closes connections whose request headers take more
than 10 s, whose request takes more than 30 s, or whose answer takes more
than 30 s to write, and idle keep-alive connections after 2 min
(node.api_timeouts: read_header, read, write, idle).
node.memory_limit (e.g. 512MiB) sets the Go runtime's soft memory limit, as
GOMEMLIMIT does.

Without --config, a single node runs the built-in default configuration
(API on ` + config.DefaultAPIAddr + `, gRPC on ` + config.DefaultGRPCAddr + `, rule "default":
10/s, burst 20, strategy owner). With node.api_tls, both APIs use TLS.

With node.state_dir, the node keeps its token buckets (rules with strategy
owner, static, local or central) in a bbolt file there: a snapshot every
node.snapshot_interval (default 1s) and at shutdown, restored at start,
refilled for the time the node was down, so a restart does not grant every
key a fresh burst. A state file that does not load stops the start (it would
silently re-grant every limit); --discard-bad-state moves it aside and starts
with full buckets instead.

SIGINT or SIGTERM shuts down gracefully: the API stops taking requests and
finishes the ones in flight (5 s at most), the node hands its state to its
peers (gdrl: its capacity shares to its buddy; 2 s at most), then leaves the
gossip cluster, and writes its last snapshot to node.state_dir.

Reload: on SIGHUP, and when the --config file changes (--watch-config,
on by default: the file's directory is watched, so editors that rename a
new file over it and Kubernetes ConfigMap volumes work), serve reads the
file again and applies its rules without a restart: new rules start with
full buckets, removed rules are dropped, a rule whose rate, burst, strategy
or params changed starts afresh, and every unchanged rule keeps its state.
A file that does not load is refused as a whole: the error is logged and
the old rules keep answering. Node settings (addresses, name, join, keys,
TLS) and --envoy-config files are read at start only. Every node of a
cluster should get the same rules.

Logs: one log/slog logger on stdout, text (key=value) or JSON
(--log-format), from --log-level up: start, config loaded, members joining,
failing and leaving, refused peer frames, rule reloads, shutdown. In text
mode serve also prints a short human summary (addresses, rules) at start.

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
	cmd.Flags().BoolVar(&opts.watchConfig, "watch-config", true, "reload the rules when the --config file changes (they are also reloaded on SIGHUP)")
	cmd.Flags().StringVar(&opts.addrFile, "addr-file", "", "write the bound addresses as JSON {name, api, grpc, peer, gossip} to this file once serving")
	cmd.Flags().BoolVar(&opts.faultInjection, "fault-injection", false,
		"testing only: inject peer faults, set by POST /debug/faults on the HTTP API (needs --config)")
	cmd.Flags().StringVar(&opts.envoyConfig, "envoy-config", "",
		"directory of envoyproxy/ratelimit YAML files: serve Envoy's RLS v3 ShouldRateLimit on the gRPC address (over node.envoy_config)")
	cmd.Flags().BoolVar(&opts.discardBad, "discard-bad-state", false,
		"when the state file in node.state_dir does not load (corrupt), move it aside and start with full buckets instead of failing")
	addGCFlag(cmd, &opts.gcPercent)
	addCPUProfileFlag(cmd, &opts.cpuProfile)
	// Hidden: a test hook that lets anyone who reaches the API cut this
	// node's data plane; MarkHidden fails only for an unknown flag.
	_ = cmd.Flags().MarkHidden("fault-injection")
	return cmd
}

func runServe(ctx context.Context, cmd *cobra.Command, opts serveOptions) error {
	out := cmd.OutOrStdout()
	// SIGHUP reloads the rules (its default action would end the process).
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	// One log for the node: start and stop, config, state restores,
	// membership changes, refused peer frames (the transport and the
	// cluster log them), reloads, the warning below.
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
	gcPercent, err := applyGCPercent(cmd, opts.gcPercent)
	if err != nil {
		return err
	}
	bi := readBuildInfo()
	logger.Info("starting tokenmesh", "version", bi.Version, "revision", bi.Revision, "go", bi.GoVersion, "pid", os.Getpid(), "gc_percent", gcPercent)
	configPath := opts.resolvedConfigPath(cmd)
	if opts.faultInjection && configPath == "" {
		return errors.New("--fault-injection needs --config (a node with peers)")
	}
	var f *config.File
	if configPath == "" {
		f = config.Default()
		if err := f.Validate(); err != nil {
			return fmt.Errorf("default config: %w", err)
		}
	} else {
		if f, err = config.Load(configPath); err != nil {
			return err
		}
	}
	overrides, peerSet, err := opts.node.apply(cmd, f)
	if err != nil {
		return err
	}
	// networked: peers over gRPC and gossip membership (a config file, or
	// a peer setting given by flag or environment).
	networked := configPath != "" || peerSet
	if networked {
		if err := f.Node.CheckPeerSecurity(); err != nil {
			if configPath != "" {
				return fmt.Errorf("%s: %w", configPath, err)
			}
			return err
		}
	}
	source := configPath
	if source == "" {
		source = "built-in default"
	}
	logger.Info("config loaded", "config", source, "node", f.Node.Name, "rules", len(f.Rules), "overrides", overrides)
	if networked && f.Node.MultiNode() && len(f.Node.SecretKey) == 0 && f.Node.TLS == nil {
		logger.Warn("peer security is OFF (node.insecure: true): peer frames are neither authenticated nor encrypted; any process that reaches node.peer_addr can speak for any member. Set node.secret_key or node.tls",
			"node", f.Node.Name, "peer_addr", f.Node.PeerAddr)
	}
	if f.Node.MemoryLimit > 0 {
		debug.SetMemoryLimit(f.Node.MemoryLimit)
		logger.Info("memory limit set (node.memory_limit)", "bytes", f.Node.MemoryLimit)
		fmt.Fprintf(banner, "memory limit: %d bytes (node.memory_limit)\n", f.Node.MemoryLimit)
	}
	rules, err := f.ClusterRules()
	if err != nil {
		return fmt.Errorf("rules: %w", err)
	}
	envoyDir := f.Node.EnvoyConfig
	if opts.envoyConfig != "" {
		envoyDir = opts.envoyConfig
	}
	var envoyCfg *envoyrls.Config
	var envoyRules []cluster.Rule // the rules derived from envoyCfg (kept as they are by a reload)
	var lcEpoch time.Time         // the node's time base: clusterEpoch with peers or fixed_window rules
	if networked {
		lcEpoch = clusterEpoch
	}
	if envoyDir != "" {
		if envoyCfg, err = envoyrls.LoadDir(envoyDir); err != nil {
			return fmt.Errorf("envoy config: %w", err)
		}
		if envoyCfg.HasFixedWindow() {
			// fixed_window windows are Unix-aligned: the node needs a
			// wall-clock time base (a networked node has one already).
			lcEpoch = clusterEpoch
		}
		envoyRules = envoyCfg.Rules(lcEpoch)
		var dup string
		if rules, dup = appendEnvoyRules(rules, envoyRules); dup != "" {
			return fmt.Errorf("envoy config %s: rule %q is also a rule of the node config; rename that rule", envoyDir, dup)
		}
	}
	lc := limiter.Config{Name: f.Node.Name, ClusterRules: rules, StateDir: f.Node.StateDir,
		SnapshotInterval: f.Node.SnapshotInterval, DiscardBadState: opts.discardBad,
		Logger: logger}
	if networked {
		// Membership changes (joined, failed, left, reconnected) go to the
		// node's one log, for the operator.
		pc := &limiter.PeerConfig{ListenAddr: f.Node.PeerAddr, GossipAddr: f.Node.GossipAddr,
			Join: f.Node.Join, FoundIfAlone: true, SecretKey: f.Node.SecretKey,
			ReconnectInterval: f.Node.ReconnectInterval, ReconnectTimeout: f.Node.ReconnectTimeout, MembershipLog: logger}
		if f.Node.TLS != nil {
			if pc.TLS, err = peerTLS(f.Node.TLS); err != nil {
				return err
			}
		}
		lc.Peer = pc
	}
	lc.Epoch = lcEpoch
	hints := latencyHint(&lc, f.Node.LatencyHint, logger)
	var faulty *cluster.Faulty
	if opts.faultInjection {
		lc.Peer.WrapTransport = func(t cluster.Transport) cluster.Transport {
			faulty = cluster.NewFaulty(t, faultSeed(f.Node.Name))
			return faulty
		}
	}

	var apiTLS *tls.Config
	if f.Node.APITLS != nil {
		if apiTLS, err = serverTLS(f.Node.APITLS); err != nil {
			return err
		}
	}
	ln, err := net.Listen("tcp", f.Node.APIAddr)
	if err != nil {
		return fmt.Errorf("node.api_addr: %w", err)
	}
	gln, err := net.Listen("tcp", f.Node.GRPCAddr)
	if err != nil {
		_ = ln.Close()
		return fmt.Errorf("node.grpc_addr: %w", err)
	}
	startCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	node, err := limiter.Start(startCtx, lc)
	cancel()
	if err != nil {
		_ = ln.Close()
		_ = gln.Close()
		return fmt.Errorf("starting node %q: %w", f.Node.Name, err)
	}
	api := server.New(node, rules)
	registerHintMetrics(api.Registry(), node.Cluster(), hints)
	// Not ready until every strategy is (a gdrl joiner holds its default
	// share): a check decided before would be refused for lack of a share.
	ready := waitReady(ctx, node.Cluster(), api.SetReady)
	refusal := f.Node.HTTPRefusalStatus // node settings are read at start only
	buildAPI := func(f *config.File, rules []cluster.Rule) http.Handler {
		return withEdge(api.Handler(), api, f.Rules, rules, refusal, logger)
	}
	edge := &swapHandler{}
	edge.set(buildAPI(f, rules))
	var handler http.Handler = edge
	var rl *reloader
	if configPath != "" {
		rl = newReloader(configPath, f, envoyRules, node, api, edge, buildAPI, logger)
		if opts.watchConfig {
			if err := rl.watch(ctx); err != nil {
				logger.Warn("not watching the config file; SIGHUP still reloads it", "config", configPath, "error", err.Error())
			}
		}
	}
	if faulty != nil {
		handler = withFaults(handler, faulty)
	}
	at := f.Node.APITimeouts
	hs := server.NewHTTPServer(handler, server.Timeouts{ReadHeader: at.ReadHeader, Read: at.Read, Write: at.Write, Idle: at.Idle})
	var gopts []grpc.ServerOption
	scheme := "http"
	if apiTLS != nil {
		hs.TLSConfig = apiTLS
		ln = tls.NewListener(ln, apiTLS)
		gopts = append(gopts, grpc.Creds(credentials.NewTLS(apiTLS)))
		scheme = "https"
	}
	// A fixed pool of stream workers instead of a new goroutine (and a
	// new, growing stack) per call: about a fifth of the server's CPU per
	// unbatched check went to stack growth without it (server.StreamWorkers).
	gopts = append(gopts, server.GRPCServerOptions()...)
	gs := grpc.NewServer(gopts...)
	api.RegisterGRPC(gs)
	if envoyCfg != nil {
		api.RegisterRLS(gs, envoyCfg)
	}
	// gRPC server reflection (grpc.reflection.v1 and v1alpha): grpcurl
	// and similar tools list and call the services without the .proto
	// files; it lists gs's services when asked, whatever the order.
	reflection.Register(gs)
	if err := api.SetBuildInfo(bi.BuildInfo); err != nil {
		logger.Warn("build_info metric not registered", "error", err)
	}

	switch {
	case configPath == "" && !networked:
		fmt.Fprintln(banner, "tokenmesh serve: no --config; running the built-in default configuration (single node, no peers)")
	case configPath == "":
		fmt.Fprintln(banner, "tokenmesh serve: no --config; the built-in default configuration with the peer settings given")
	default:
		fmt.Fprintf(banner, "tokenmesh serve: config %s\n", configPath)
	}
	fmt.Fprintf(banner, "node %s: API %s://%s grpc %s\n", f.Node.Name, scheme, ln.Addr(), gln.Addr())
	if lc.Peer != nil {
		join := "founding a cluster"
		switch members := node.Members(); {
		case len(members) > 1:
			join = fmt.Sprintf("joined %s (members: %s)", strings.Join(f.Node.Join, ", "), strings.Join(members, ", "))
		case len(f.Node.Join) > 0:
			join = fmt.Sprintf("no member at %s answered: founding a cluster, retrying the join every %v",
				strings.Join(f.Node.Join, ", "), reconnectEvery(f.Node.ReconnectInterval))
		}
		fmt.Fprintf(banner, "peers: grpc %s, gossip %s, %s\n", node.PeerAddr(), node.GossipAddr(), join)
	}
	for _, r := range rules {
		fmt.Fprintf(banner, "rule %s: rate %s/s, burst %d, strategy %s\n", r.Name, plainNumber(r.Rate.PerSec()), r.Burst, r.Strategy)
		if logFormat == "json" {
			logger.Info("rule", "rule", r.Name, "rate_per_s", r.Rate.PerSec(), "burst", r.Burst, "strategy", r.Strategy)
		}
	}
	if envoyCfg != nil {
		logger.Info("envoy RLS loaded", "domains", len(envoyCfg.Domains), "limits", len(envoyCfg.Limits), "dir", envoyDir)
		fmt.Fprintf(banner, "envoy RLS: %d domains, %d limits from %s, on grpc %s\n", len(envoyCfg.Domains), len(envoyCfg.Limits), envoyDir, gln.Addr())
	}
	if ri := node.RestoreInfo(); ri.File != "" {
		fmt.Fprintf(banner, "state: %s, a snapshot every %v", ri.File, f.Node.SnapshotInterval)
		if ri.Found {
			fmt.Fprintf(banner, "; restored %v keys per rule, taken %v ago", ri.Keys, ri.Age.Round(time.Millisecond))
		} else {
			fmt.Fprint(banner, "; no snapshot there: full buckets")
		}
		fmt.Fprintln(banner)
	}

	errc := make(chan error, 3)
	if faulty != nil {
		logger.Warn("fault injection: on (POST /debug/faults); testing only")
	}
	// The addresses are written before the servers start: the listeners
	// are bound (connections wait in the backlog), and whoever reads the
	// file can rely on no request having been answered before it existed.
	if opts.addrFile != "" {
		a := boundAddrs{Name: f.Node.Name, API: ln.Addr().String(), GRPC: gln.Addr().String(),
			Peer: node.PeerAddr(), Gossip: node.GossipAddr()}
		if err := writeAddrFile(opts.addrFile, a); err != nil {
			errc <- fmt.Errorf("--addr-file: %w", err) // shuts down at once
		}
	}
	go func() {
		if err := hs.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("serving the HTTP API on %s: %w", ln.Addr(), err)
		}
	}()
	go func() {
		if err := gs.Serve(gln); err != nil {
			errc <- fmt.Errorf("serving the gRPC API on %s: %w", gln.Addr(), err)
		}
	}()
	logger.Info("serving", "node", f.Node.Name, "api", scheme+"://"+ln.Addr().String(), "grpc", gln.Addr().String(),
		"peer", node.PeerAddr(), "gossip", node.GossipAddr(), "members", len(node.Members()), "rules", len(rules))
	var serveErr error
wait:
	for {
		select {
		case <-ctx.Done():
			logger.Info("shutting down", "reason", "signal")
			break wait
		case serveErr = <-errc:
			logger.Error("shutting down", "reason", serveErr.Error())
			break wait
		case <-hup:
			if rl == nil {
				logger.Warn("SIGHUP: no config file (--config) to reload; nothing changed")
				continue
			}
			_ = rl.reload(ctx, "SIGHUP", false)
		}
	}
	ready.stop()
	api.SetReady(false)
	sctx, scancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer scancel()
	if err := hs.Shutdown(sctx); err != nil && serveErr == nil {
		serveErr = fmt.Errorf("API shutdown: %w", err)
	}
	stopped := make(chan struct{})
	go func() { gs.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-sctx.Done():
		gs.Stop()
	}
	if err := node.Close(); err != nil && serveErr == nil {
		serveErr = fmt.Errorf("closing node: %w", err)
	}
	if serveErr != nil {
		logger.Error("stopped", "error", serveErr.Error())
	} else {
		logger.Info("stopped")
	}
	return serveErr
}

// serverTLS builds the client APIs' TLS config from node.api_tls.
func serverTLS(t *config.APITLS) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("node.api_tls.cert_file/key_file: %w", err)
	}
	c := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}}
	if t.ClientCAFile != "" {
		pool, err := certPool("node.api_tls.client_ca_file", t.ClientCAFile)
		if err != nil {
			return nil, err
		}
		c.ClientCAs, c.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return c, nil
}

// certPool reads the PEM CA certificates at path; errors name the config
// field that gave the path.
func certPool(field, path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", field, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: %s holds no PEM certificate", field, path)
	}
	return pool, nil
}

// peerTLS builds the mutual-TLS config of the peer streams from node.tls.
func peerTLS(t *config.TLS) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("node.tls.cert_file/key_file: %w", err)
	}
	pool, err := certPool("node.tls.ca_file", t.CAFile)
	if err != nil {
		return nil, err
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, ClientCAs: pool,
		ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}, nil
}

// boundAddrs is the JSON that --addr-file writes.
type boundAddrs struct {
	Name   string `json:"name"`
	API    string `json:"api"`
	GRPC   string `json:"grpc"`
	Peer   string `json:"peer"`
	Gossip string `json:"gossip"`
}

// writeAddrFile writes a to path atomically: a temporary file in the same
// directory, renamed over path, so a reader never sees a partial file.
func writeAddrFile(path string, a boundAddrs) error {
	b, err := json.Marshal(a)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
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
	}
	return err
}

// faultSeed derives the Faulty transport's seed from the node's name, so
// each node draws its own (reproducible) losses.
func faultSeed(name string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(name))
	return h.Sum64()
}

// faultsRequest is the body of POST /debug/faults. Every field replaces
// the current value; an absent field is its zero value (no fault).
type faultsRequest struct {
	Blocked []string `json:"blocked"`  // node names whose frames this node drops
	Drop    float64  `json:"drop"`     // probability in [0, 1] that a frame is lost
	DelayMS int64    `json:"delay_ms"` // extra delay of every frame, ms, >= 0
}

// faultsResponse answers /debug/faults: the faults now in force and the
// counts of the Faulty transport.
type faultsResponse struct {
	Blocked []string           `json:"blocked"`
	Drop    float64            `json:"drop"`
	DelayMS int64              `json:"delay_ms"`
	Stats   cluster.FaultStats `json:"stats"`
}

// withFaults routes /debug/faults to the fault controls of f and every
// other request to next:
//
//	POST /debug/faults {"blocked":["n2"],"drop":0.1,"delay_ms":5}
//	     -> 200 and the faults in force (faultsResponse), or 400 naming the bad field
//	GET  /debug/faults -> 200 and the faults in force
//
// It cuts the data plane only (the peer frames of the rules' strategies):
// gossip still flows, so memberlist still sees a blocked peer alive and
// the strategies keep it as a member (a partition, not a crash).
func withFaults(next http.Handler, f *cluster.Faulty) http.Handler {
	var mu sync.Mutex
	cur := faultsRequest{Blocked: []string{}}
	answer := func(w http.ResponseWriter, status int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(v)
	}
	bad := func(w http.ResponseWriter, msg string) {
		answer(w, http.StatusBadRequest, map[string]string{"error": msg})
	}
	state := func() faultsResponse {
		return faultsResponse{Blocked: cur.Blocked, Drop: cur.Drop, DelayMS: cur.DelayMS, Stats: f.Stats()}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /debug/faults", func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		answer(w, http.StatusOK, state())
	})
	mux.HandleFunc("POST /debug/faults", func(w http.ResponseWriter, r *http.Request) {
		var req faultsRequest
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			var te *json.UnmarshalTypeError
			if errors.As(err, &te) && te.Field != "" {
				bad(w, fmt.Sprintf("%s: want %s, got JSON %s", te.Field, te.Type, te.Value))
				return
			}
			bad(w, fmt.Sprintf("body: %v (want {\"blocked\":[\"n2\"],\"drop\":0.0,\"delay_ms\":0})", err))
			return
		}
		if dec.More() {
			bad(w, "body: more than one JSON value")
			return
		}
		fl := cluster.Faults{Drop: req.Drop, Delay: time.Duration(req.DelayMS) * time.Millisecond}
		for i, b := range req.Blocked {
			if b == "" {
				bad(w, fmt.Sprintf("blocked[%d]: is empty; want a node name", i))
				return
			}
			fl.Blocked = append(fl.Blocked, strategy.NodeID(b))
		}
		switch {
		case !(req.Drop >= 0 && req.Drop <= 1):
			bad(w, fmt.Sprintf("drop: %v is not a probability in [0, 1]", req.Drop))
			return
		case req.DelayMS < 0 || req.DelayMS > int64(time.Hour/time.Millisecond):
			bad(w, fmt.Sprintf("delay_ms: %d is not between 0 and 3600000", req.DelayMS))
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if err := f.SetFaults(fl); err != nil {
			bad(w, err.Error())
			return
		}
		if req.Blocked == nil {
			req.Blocked = []string{}
		}
		cur = req
		answer(w, http.StatusOK, state())
	})
	mux.Handle("/", next)
	return mux
}

// reconnectEvery is node.reconnect_interval as the node uses it (zero in a
// config built in code: the default).
func reconnectEvery(d time.Duration) time.Duration {
	if d == 0 {
		return config.DefaultReconnectInterval
	}
	return d
}
