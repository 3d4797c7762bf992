package daemon

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/reflection"

	"github.com/tokenmesh/tokenmesh/cluster"
	"github.com/tokenmesh/tokenmesh/config"
	"github.com/tokenmesh/tokenmesh/envoyrls"
	"github.com/tokenmesh/tokenmesh/limiter"
	"github.com/tokenmesh/tokenmesh/rule"
	"github.com/tokenmesh/tokenmesh/server"
)

// ClusterEpoch is the time base (limiter.Config.Epoch) of every networked
// node, and of a node with Envoy fixed_window limits (their windows are
// Unix-aligned): nodes in different processes must share one fixed
// wall-clock instant. A single node without those starts its own.
var ClusterEpoch = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// DefaultStartTimeout bounds the node's start (joining gossip) when
// Config.StartTimeout is zero.
const DefaultStartTimeout = 30 * time.Second

// ErrNoConfigFile is returned by Reload when the daemon has nothing to
// read again: no config file (Config.ConfigPath) and no Envoy config
// directory.
var ErrNoConfigFile = errors.New("daemon: no config file and no Envoy config to reload (Config.ConfigPath and the Envoy directory are empty)")

// Config is one daemon.
type Config struct {
	// File is the node's configuration, validated (config.Load,
	// config.Default), with any overrides applied (serve's flags and
	// environment). Required; Start does not change it.
	File *config.File
	// ConfigPath is the file File was read from: Reload and WatchConfig
	// read it again. "": none.
	ConfigPath string
	// WatchConfig reloads the rules when ConfigPath or a file in the Envoy
	// config directory changes (ConfigPath's directory and the Envoy
	// directory are watched, so an editor's rename over a file and a
	// Kubernetes ConfigMap volume work). A watch that cannot be set up is
	// logged; Reload still works.
	WatchConfig bool
	// EnvoyDir is a directory of envoyproxy/ratelimit YAML files, over
	// File.Node.EnvoyConfig: one rule per descriptor limit (named
	// rls.<domain>.<path>) and Envoy's ShouldRateLimit on the gRPC server.
	// Both empty: none. Reload (and WatchConfig) read its files again;
	// the directory itself is Start's.
	EnvoyDir string
	// Networked makes the node a cluster member: peers over gRPC at
	// File.Node.PeerAddr, gossip at GossipAddr, joining Join (serve: a
	// config file was given, or a peer setting by flag or environment).
	// False: a single node; File's peer settings are not used.
	Networked bool
	// Logger is the node's log: start, membership changes, refused peer
	// frames, snapshots, reloads. Nil: none.
	Logger *slog.Logger
	// DiscardBadState moves a state file that does not load aside instead
	// of failing Start (limiter.Config.DiscardBadState).
	DiscardBadState bool
	// FaultInjection (testing only) sends peer frames through a
	// cluster.Faulty transport, set by POST /debug/faults on the HTTP API
	// (anyone who reaches the API can cut the node's data plane). Needs
	// Networked.
	FaultInjection bool
	// BuildInfo, when its Version is set, is exported as
	// tokenmesh_build_info (server.Server.SetBuildInfo).
	BuildInfo server.BuildInfo
	// StartTimeout bounds the node's start (default DefaultStartTimeout).
	StartTimeout time.Duration
	// Services are served on the daemon's gRPC server, registered in this
	// order (see Service).
	Services []Service
	// Bound, when set, is called with the bound addresses once the node
	// runs and the servers are built, before they serve (serve's
	// --addr-file: whoever reads the file can rely on no request having
	// been answered before it existed). An error stops Start.
	Bound func(Addrs) error
}

// Addrs are a daemon's addresses as bound (port 0 resolved), "host:port";
// the JSON is what `tokenmesh serve --addr-file` writes.
type Addrs struct {
	Name   string `json:"name"`   // the node's name
	API    string `json:"api"`    // HTTP/JSON API
	GRPC   string `json:"grpc"`   // gRPC API
	Peer   string `json:"peer"`   // peer frames; "" unless Networked
	Gossip string `json:"gossip"` // gossip membership; "" unless Networked
}

// Daemon is a running node and its servers. Its methods are safe for
// concurrent use.
type Daemon struct {
	cfg    Config
	log    *slog.Logger
	node   *limiter.Node
	api    *server.Server
	hs     *http.Server
	gs     *grpc.Server
	ln     net.Listener // the HTTP API's (TLS-wrapped with node.api_tls)
	gln    net.Listener
	scheme string // of the HTTP API: http or https
	addrs  Addrs
	http   *httpMode

	rulesMu  sync.RWMutex
	rules    RuleSet
	envoyDir string            // the Envoy config directory ("" none), Start's
	envoyStr string            // node.envoy_strategy at Start (the default strategy of its files)
	epoch    time.Time         // the node's time base (limiter.Config.Epoch)
	rls      *envoyrls.Service // Envoy's RLS; nil without an Envoy config

	reloadMu sync.Mutex  // one reload at a time
	sum      [32]byte    // sha256 of the config file as last loaded (or refused)
	envoySum [32]byte    // envoyrls.Digest of the Envoy directory, likewise
	nodeConf config.Node // the node section as last seen, for the warning

	stopBg  context.CancelFunc // ends the readiness wait and the watcher
	bg      sync.WaitGroup
	closing atomic.Bool // Shutdown began: servers' Serve errors are expected
	done    chan struct{}
	errOnce sync.Once
	err     error // the serving failure that closed done
	shut    sync.Once
	shutErr error
}

// Start starts the node of cfg.File and serves its APIs (see the package
// documentation); ctx bounds the start only (the node's join; with
// cfg.StartTimeout). When it returns, every listener is bound and the
// servers serve. Errors name what failed: File's Validate and peer
// security errors (prefixed with ConfigPath when set), "node.api_addr:
// ...", "envoy config: ...", "starting node \"n1\": ...", "service rlqs:
// ..."; on error everything started is stopped again.
func Start(ctx context.Context, cfg Config) (*Daemon, error) {
	d, err := newDaemon(cfg)
	if err != nil {
		return nil, err
	}
	f := cfg.File
	d.envoyDir = cmp.Or(cfg.EnvoyDir, f.Node.EnvoyConfig)
	if d.envoyDir != "" {
		// Before the files are read: a change meanwhile is reloaded.
		d.envoySum = envoyrls.Digest(d.envoyDir)
	}
	d.envoyStr = f.Node.EnvoyStrategy
	rs, epoch, err := startRules(f, d.envoyDir, cfg.Networked)
	if err != nil {
		return nil, err
	}
	d.rules, d.epoch = rs, epoch
	if cfg.ConfigPath != "" {
		d.sum = fileSum(cfg.ConfigPath)
		// The node section as the file has it (File's may carry the
		// caller's overrides): what a reload compares the file with.
		if base, err := config.Load(cfg.ConfigPath); err == nil {
			d.nodeConf = base.Node
		}
	}
	lc, faulty, err := d.nodeConfig(rs.Rules, epoch)
	if err != nil {
		return nil, err
	}
	var apiTLS *tls.Config
	if f.Node.APITLS != nil {
		if apiTLS, err = f.Node.APITLS.Config(); err != nil {
			return nil, err
		}
	}
	if err := d.listen(apiTLS); err != nil {
		return nil, err
	}
	if err := d.startNode(ctx, lc); err != nil {
		d.closeListeners()
		return nil, err
	}
	if err := d.build(apiTLS, faulty); err != nil {
		d.closeListeners()
		_ = d.node.Close()
		return nil, err
	}
	if cfg.Bound != nil {
		if err := cfg.Bound(d.addrs); err != nil {
			d.closeListeners()
			_ = d.node.Close()
			return nil, err
		}
	}
	d.serve()
	return d, nil
}

// newDaemon checks cfg and its file (errors name the file; a networked
// node's peer security is checked, and its absence on a multi-node
// cluster logged) and returns the daemon to start.
func newDaemon(cfg Config) (*Daemon, error) {
	f := cfg.File
	switch {
	case f == nil:
		return nil, errors.New("daemon: Config.File is nil")
	case cfg.FaultInjection && !cfg.Networked:
		return nil, errors.New("daemon: FaultInjection needs a networked node (Config.Networked)")
	}
	d := &Daemon{cfg: cfg, log: cfg.Logger, done: make(chan struct{}), nodeConf: f.Node, scheme: "http"}
	if d.log == nil {
		d.log = slog.New(slog.DiscardHandler)
	}
	// Errors in the config name the file (the field is in err).
	inFile := func(err error) error {
		if cfg.ConfigPath != "" {
			return fmt.Errorf("%s: %w", cfg.ConfigPath, err)
		}
		return err
	}
	if err := f.Validate(); err != nil {
		return nil, inFile(err)
	}
	if cfg.Networked {
		if err := f.Node.CheckPeerSecurity(); err != nil {
			return nil, inFile(err)
		}
		if f.Node.MultiNode() && len(f.Node.SecretKey) == 0 && f.Node.TLS == nil {
			d.log.Warn("peer security is OFF (node.insecure: true): peer frames are neither authenticated nor encrypted; any process that reaches node.peer_addr can speak for any member. Set node.secret_key or node.tls",
				"node", f.Node.Name, "peer_addr", f.Node.PeerAddr)
		}
	}
	return d, nil
}

// startNode starts the node of lc within the config's start timeout and
// records the addresses it bound.
func (d *Daemon) startNode(ctx context.Context, lc limiter.Config) error {
	startTimeout := d.cfg.StartTimeout
	if startTimeout <= 0 {
		startTimeout = DefaultStartTimeout
	}
	sctx, cancel := context.WithTimeout(ctx, startTimeout)
	node, err := limiter.Start(sctx, lc)
	cancel()
	if err != nil {
		return fmt.Errorf("starting node %q: %w", d.cfg.File.Node.Name, err)
	}
	d.node = node
	d.addrs = Addrs{Name: d.cfg.File.Node.Name, API: d.ln.Addr().String(), GRPC: d.gln.Addr().String(),
		Peer: d.node.PeerAddr(), Gossip: d.node.GossipAddr()}
	return nil
}

// startRules are the rules of f and of the Envoy config in envoyDir (""
// none), and the node's time base: ClusterEpoch when networked or for
// Envoy fixed_window limits, else zero (the node's start).
func startRules(f *config.File, envoyDir string, networked bool) (RuleSet, time.Time, error) {
	envoy, err := loadEnvoy(envoyDir, f.Node.EnvoyStrategy)
	if err != nil {
		return RuleSet{}, time.Time{}, err
	}
	var epoch time.Time
	if networked || envoy != nil && envoy.HasFixedWindow() {
		// fixed_window windows are Unix-aligned: the node needs a
		// wall-clock time base (a networked node has one already).
		epoch = ClusterEpoch
	}
	rs, err := ruleSet(f, envoy, envoyDir, epoch)
	return rs, epoch, err
}

// loadEnvoy reads the Envoy config in dir (nil for ""), its limits
// without a strategy of their own under defaultStrategy (node.envoy_strategy;
// "": owner); errors are "envoy config: FILE:LINE: FIELD: ...".
func loadEnvoy(dir, defaultStrategy string) (*envoyrls.Config, error) {
	if dir == "" {
		return nil, nil
	}
	envoy, err := envoyrls.LoadDirWith(dir, envoyrls.LoadOptions{DefaultStrategy: defaultStrategy})
	if err != nil {
		return nil, fmt.Errorf("envoy config: %w", err)
	}
	return envoy, nil
}

// ruleSet is what a node of time base epoch runs for the config f and the
// Envoy config envoy (read from dir; nil: none): f's rules, then envoy's.
// Errors: f's rules ("rules: ..."), a rule name both have, a fixed_window
// limit on a node without a wall-clock time base (epoch zero: possible
// on a reload only, Start picks the epoch for it).
func ruleSet(f *config.File, envoy *envoyrls.Config, dir string, epoch time.Time) (RuleSet, error) {
	rules, err := f.CheckRules()
	if err != nil {
		return RuleSet{}, fmt.Errorf("rules: %w", err)
	}
	rs := RuleSet{File: f, Rules: rules, Envoy: envoy, EnvoyDir: dir}
	if envoy == nil {
		return rs, nil
	}
	if epoch.IsZero() {
		for _, l := range envoy.Limits {
			if l.Algorithm == envoyrls.AlgorithmFixedWindow && l.Rule != "" {
				return RuleSet{}, fmt.Errorf("envoy config: %s: limit %s: algorithm fixed_window needs a wall-clock time base, which this node did not start with (it had no peers and no fixed_window limit); restart the node to add one",
					envoy.Domains[l.Domain].File, l.Path)
			}
		}
	}
	var dup string
	if rs.Rules, dup = appendEnvoyRules(rules, envoy.Rules(epoch)); dup != "" {
		return RuleSet{}, fmt.Errorf("envoy config %s: rule %q is also a rule of the node config; rename that rule", dir, dup)
	}
	return rs, nil
}

// appendEnvoyRules appends the rules derived from the envoy config to the
// config file's rules; dup is the first name both have ("" when none:
// only then is all of envoy appended).
func appendEnvoyRules(rules, envoy []rule.Rule) (all []rule.Rule, dup string) {
	have := make(map[string]bool, len(rules))
	for _, x := range rules {
		have[x.Name] = true
	}
	for _, x := range envoy {
		if have[x.Name] {
			return rules, x.Name
		}
		rules = append(rules, x)
	}
	return rules, ""
}

// nodeConfig is the limiter.Config of d's node for rules; faulty is the
// fault-injection transport once the node has started (Config.FaultInjection).
func (d *Daemon) nodeConfig(rules []rule.Rule, epoch time.Time) (limiter.Config, *faultHook, error) {
	n := d.cfg.File.Node
	lc := limiter.Config{Name: n.Name, Rules: rules, StateDir: n.StateDir, SnapshotInterval: n.SnapshotInterval,
		DiscardBadState: d.cfg.DiscardBadState, Logger: d.cfg.Logger, Epoch: epoch,
		MaxDerived: n.EnvoyMaxOverrides, MaxDerivedPerBase: n.EnvoyMaxOverridesPerDescriptor}
	if env := d.rules.Envoy; env != nil {
		// Envoy's limit overrides: rules every node derives from their
		// names (a forwarded check names one its owner may lack).
		lc.Derive = env.Deriver(epoch)
	}
	var faulty *faultHook
	if d.cfg.Networked {
		// Membership changes (joined, failed, left, reconnected) go to the
		// node's one log, for the operator.
		lc.Peer = &limiter.PeerConfig{ListenAddr: n.PeerAddr, GossipAddr: n.GossipAddr, Join: n.Join, FoundIfAlone: true,
			SecretKey: n.SecretKey, ReconnectInterval: n.ReconnectInterval, ReconnectTimeout: n.ReconnectTimeout, ProbeInterval: n.ProbeInterval,
			MembershipLog: d.cfg.Logger}
		if n.TLS != nil {
			var err error
			if lc.Peer.TLS, err = n.TLS.Config(); err != nil {
				return lc, nil, err
			}
		}
		if d.cfg.FaultInjection {
			faulty = &faultHook{name: n.Name, seed: faultSeed(n.Name)}
			lc.Peer.WrapTransport = faulty.wrap
		}
	}
	h := n.LatencyHint
	est := lc.SetLatencyHint(h)
	switch {
	case !h.Auto:
		d.log.Info("latency hint fixed (node.latency_hint)", "hint", h.Value)
	case est != nil:
		d.log.Info("latency hint measured from gossip probes (node.latency_hint: auto)", "floor", cluster.DefaultHintFloor,
			"quantile", cluster.HintQuantile, "window", cluster.HintWindow, "factor", cluster.HintFactor)
	}
	return lc, faulty, nil
}

// listen binds the API listeners (apiTLS, when set, wraps the HTTP one).
func (d *Daemon) listen(apiTLS *tls.Config) error {
	n := d.cfg.File.Node
	ln, err := net.Listen("tcp", n.APIAddr)
	if err != nil {
		return fmt.Errorf("node.api_addr: %w", err)
	}
	gln, err := net.Listen("tcp", n.GRPCAddr)
	if err != nil {
		_ = ln.Close()
		return fmt.Errorf("node.grpc_addr: %w", err)
	}
	if apiTLS != nil {
		ln = tls.NewListener(ln, apiTLS)
		d.scheme = "https"
	}
	d.ln, d.gln = ln, gln
	return nil
}

func (d *Daemon) closeListeners() {
	_ = d.ln.Close()
	_ = d.gln.Close()
}

// build makes the API and its servers over the started node, starts the
// readiness wait, registers the services and starts the config watcher.
// On error, the services registered are shut down and the readiness wait
// ended.
// startBackground starts the daemon's background work, until bg ends:
// readiness (not ready until every strategy is: a gdrl joiner holds its
// default share, and a check decided before would be refused for lack of
// a share) and returning the memory of expired keys to the OS within
// MemoryReturnInterval of their expiry (memreturn.go).
func (d *Daemon) startBackground(bg context.Context) {
	if ok, err := d.node.Ready(bg); err == nil && !ok {
		d.api.SetReady(false)
		d.bg.Add(1)
		go func() {
			defer d.bg.Done()
			if d.node.WaitReady(bg) == nil {
				d.api.SetReady(true)
			}
		}()
	}
	d.bg.Add(1)
	go func() {
		defer d.bg.Done()
		d.returnMemory(bg)
	}()
}

// registerRLS registers Envoy's RLS on the gRPC server when the daemon
// has Envoy limits (shadow mode and the epoch set, logged), and warns of
// a shadow mode set without them.
func (d *Daemon) registerRLS() {
	f, rs := d.cfg.File, d.rules
	switch {
	case rs.Envoy != nil:
		d.rls = d.api.RegisterRLS(d.gs, rs.Envoy)
		d.rls.SetShadowMode(f.Node.EnvoyShadowMode) // node settings are read at start only
		d.rls.SetEpoch(d.epoch)                     // limit overrides of fixed_window limits align as Rules
		d.log.Info("envoy RLS loaded", "domains", len(rs.Envoy.Domains), "limits", len(rs.Envoy.Limits), "dir", rs.EnvoyDir,
			"default_strategy", cmp.Or(d.envoyStr, config.DefaultStrategy))
		if f.Node.EnvoyShadowMode {
			d.log.Warn("envoy RLS: global shadow mode on (node.envoy_shadow_mode): every check is decided and counted, none is refused",
				"dir", rs.EnvoyDir)
		}
	case f.Node.EnvoyShadowMode:
		d.log.Warn("node.envoy_shadow_mode is set but there is no Envoy config (node.envoy_config, --envoy-config): it does nothing")
	}
}

func (d *Daemon) build(apiTLS *tls.Config, faulty *faultHook) (err error) {
	f, rs := d.cfg.File, d.rules
	d.api = server.New(d.node, rs.Rules)
	bg, cancel := context.WithCancel(context.Background())
	d.stopBg = cancel
	defer func() {
		if err != nil {
			cancel()
			d.bg.Wait()
		}
	}()
	d.startBackground(bg)
	if err := d.node.RegisterHintMetrics(d.api.Registry()); err != nil {
		return fmt.Errorf("latency hint metrics: %w", err)
	}
	if d.cfg.BuildInfo.Version != "" {
		if err := d.api.SetBuildInfo(d.cfg.BuildInfo); err != nil {
			d.log.Warn("build_info metric not registered", "error", err)
		}
	}
	d.http = newHTTPMode(d.api, f.Node.HTTPRefusalStatus, d.log) // node settings are read at start only
	d.http.set(f, rs.Rules)
	var handler http.Handler = d.http
	if faulty != nil {
		handler = withFaults(handler, faulty.faulty)
		d.log.Warn("fault injection: on (POST /debug/faults); testing only")
	}
	at := f.Node.APITimeouts
	d.hs = server.NewHTTPServer(handler, server.Timeouts{ReadHeader: at.ReadHeader, Read: at.Read, Write: at.Write, Idle: at.Idle})
	// A fixed pool of stream workers instead of a new goroutine (and a
	// new, growing stack) per call (server.StreamWorkers).
	gopts := server.GRPCServerOptions()
	if apiTLS != nil {
		d.hs.TLSConfig = apiTLS
		gopts = append(gopts, grpc.Creds(credentials.NewTLS(apiTLS)))
	}
	d.gs = grpc.NewServer(gopts...)
	d.api.RegisterGRPC(d.gs)
	d.registerRLS()
	for i, s := range d.cfg.Services {
		if err := s.Register(d.gs, d); err != nil {
			d.shutdownServices(context.Background(), d.cfg.Services[:i])
			return fmt.Errorf("service %s: %w", s.Name(), err)
		}
	}
	// gRPC server reflection (grpc.reflection.v1 and v1alpha): grpcurl
	// and similar tools list and call the services without the .proto
	// files.
	reflection.Register(d.gs)

	if d.cfg.WatchConfig && (d.cfg.ConfigPath != "" || d.envoyDir != "") {
		if err := d.watch(bg); err != nil {
			d.log.Warn("not watching the config files; SIGHUP still reloads them", append(d.sources(), "error", err.Error())...)
		}
	}
	return nil
}

// serve starts the servers on the bound listeners.
func (d *Daemon) serve() {
	go func() {
		if err := d.hs.Serve(d.ln); !errors.Is(err, http.ErrServerClosed) {
			d.fail(fmt.Errorf("serving the HTTP API on %s: %w", d.ln.Addr(), err))
		}
	}()
	go func() {
		if err := d.gs.Serve(d.gln); err != nil {
			d.fail(fmt.Errorf("serving the gRPC API on %s: %w", d.gln.Addr(), err))
		}
	}()
	a := d.addrs
	d.log.Info("serving", "node", a.Name, "api", d.APIURL(), "grpc", a.GRPC, "peer", a.Peer, "gossip", a.Gossip,
		"members", len(d.node.Members()), "rules", len(d.rules.Rules))
}

// fail records a server's failure and closes Done (unless Shutdown began:
// then the servers' errors are those of stopping).
func (d *Daemon) fail(err error) {
	if d.closing.Load() {
		return
	}
	d.errOnce.Do(func() {
		d.err = err
		close(d.done)
	})
}

// Addrs are the addresses as bound.
func (d *Daemon) Addrs() Addrs { return d.addrs }

// APIURL is the HTTP API's base URL: "http://127.0.0.1:8080", https with
// node.api_tls.
func (d *Daemon) APIURL() string { return d.scheme + "://" + d.addrs.API }

// Node is the running node (limiter.Node; Node().Cluster() decides checks).
func (d *Daemon) Node() *limiter.Node { return d.node }

// API is the client API server (package server) both servers serve.
func (d *Daemon) API() *server.Server { return d.api }

// Registry is the Prometheus registry served at GET /metrics; register a
// service's collectors on it.
func (d *Daemon) Registry() *prometheus.Registry { return d.api.Registry() }

// Logger is the daemon's log (Config.Logger; a discarding one when nil).
func (d *Daemon) Logger() *slog.Logger { return d.log }

// Rules is the configuration in force (Start's, or the last Reload's that
// applied).
func (d *Daemon) Rules() RuleSet {
	d.rulesMu.RLock()
	defer d.rulesMu.RUnlock()
	return d.rules
}

// Ready reports what /readyz and the gRPC health service report: false
// until every strategy is ready (limiter.Node.Ready), and from the start
// of Shutdown.
func (d *Daemon) Ready() bool { return d.api.Ready() }

// Done is closed when a server stopped serving on its own (Err says why;
// the caller should then call Shutdown) and when Shutdown returns.
func (d *Daemon) Done() <-chan struct{} { return d.done }

// Err is the failure that closed Done; nil while serving and after a
// Shutdown with no server failure before it.
func (d *Daemon) Err() error {
	select {
	case <-d.done:
	default:
		return nil
	}
	return d.err
}

// Shutdown stops the daemon gracefully (the package documentation has the
// order): readiness off, the services' Shutdown, the HTTP API's shutdown,
// gRPC GracefulStop (Stop once ctx ends), the node's Close. In-flight
// requests may take until ctx ends. It carries on past errors and returns
// the first ("service rlqs: ...", "API shutdown: ...", "closing node:
// ..."); later calls return the same.
func (d *Daemon) Shutdown(ctx context.Context) error {
	d.shut.Do(func() {
		d.closing.Store(true)
		if delay := d.cfg.File.Node.DrainDelay; delay > 0 {
			// Readiness off first, still serving, so that load balancers
			// stop sending requests before the listeners close.
			d.api.SetDraining(true)
			d.log.Info("draining: /readyz answers 503 and health NOT_SERVING; the listeners close after node.drain_delay", "drain_delay", delay)
			select {
			case <-time.After(delay):
			case <-ctx.Done():
			}
		}
		d.stopBg()
		d.bg.Wait()
		d.api.SetReady(false)
		err := d.shutdownServices(ctx, d.cfg.Services)
		if herr := d.hs.Shutdown(ctx); herr != nil && err == nil {
			err = fmt.Errorf("API shutdown: %w", herr)
		}
		stopped := make(chan struct{})
		go func() { d.gs.GracefulStop(); close(stopped) }()
		select {
		case <-stopped:
		case <-ctx.Done():
			d.gs.Stop()
		}
		if cerr := d.node.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("closing node: %w", cerr)
		}
		d.shutErr = err
		d.errOnce.Do(func() { close(d.done) })
	})
	return d.shutErr
}

// shutdownServices calls Shutdown on services in reverse order, logging
// errors; it returns the first.
func (d *Daemon) shutdownServices(ctx context.Context, services []Service) error {
	var first error
	for _, s := range slices.Backward(services) {
		if err := s.Shutdown(ctx); err != nil {
			d.log.Error("service shutdown failed", "service", s.Name(), "error", err.Error())
			if first == nil {
				first = fmt.Errorf("service %s: %w", s.Name(), err)
			}
		}
	}
	return first
}
