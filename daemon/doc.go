// Package daemon runs a tokenmesh node with its servers, as `tokenmesh
// serve` does, inside any Go program: Start builds the node (limiter) from
// a config file (config.File), binds its listeners and serves its APIs;
// Reload applies the file's rules again; Shutdown stops it gracefully.
// `tokenmesh serve` is flags, environment, logging, a banner and signals
// around this package.
//
//	f, err := config.Load("tokenmesh.yaml")
//	...
//	d, err := daemon.Start(ctx, daemon.Config{File: f, ConfigPath: "tokenmesh.yaml",
//	        Networked: true, Logger: slog.Default()})
//	...
//	fmt.Println(d.Addrs())            // the bound addresses (port 0 resolved)
//	_ = d.Reload(ctx, "SIGHUP")       // a bad file is refused, the old rules stay
//	_ = d.Shutdown(shutdownCtx)       // what SIGTERM does
//
// What Start serves, from File.Node:
//
//	node.grpc_addr  gRPC: tokenmesh.v1.RateLimitService, grpc.health.v1.Health,
//	                server reflection; with an Envoy config, Envoy's
//	                envoy.service.ratelimit.v3.RateLimitService (in the global
//	                shadow mode with node.envoy_shadow_mode); and Config.Services
//	node.api_addr   HTTP/JSON: the tokenmesh.v1 API (package server), /healthz,
//	                /readyz, /metrics, and the HTTP mode ANY /v1/limit/{rule}
//	                (httplimit.Endpoints, the key templates of the config's rules)
//	node.peer_addr, node.gossip_addr  (Networked only) peer frames over gRPC,
//	                gossip membership, joining node.join
//
// with node.api_tls on both APIs, node.tls between peers, node.state_dir
// snapshots, node.latency_hint (auto: measured, exported as
// tokenmesh_latency_hint_seconds and tokenmesh_peer_latency_seconds), and
// readiness: /readyz and the gRPC health service report not ready until
// every rule's strategy is (limiter.Node.WaitReady: a gdrl node that
// joined holds its default share), and from the start of Shutdown on.
// node.memory_limit is the process's business (runtime/debug.SetMemoryLimit):
// the daemon does not set it; neither does it set slog's default logger.
// It does return the memory of expired keys to the OS: every
// MemoryReturnInterval it reads the rules' heap estimates
// (strategy.MemoryReporter) and calls debug.FreeOSMemory once after they
// fell by MemoryReturnMin and to half of their peak (an idle Go process
// otherwise keeps the pages for minutes).
//
// # Reloads
//
// Reload reads Config.ConfigPath and the Envoy config directory again
// and applies their rules together to the running node: new rules start
// with full buckets, removed rules are dropped, changed ones start
// afresh, unchanged ones keep their state (limiter.Node.SetRules); then
// Envoy's RLS answers with the new limits (envoyrls.Service.SetConfig). A
// file that does not load (a config file or any Envoy file: the error
// names the file, line and field), rules the node refuses, or a rule name
// both have, are refused as a whole: the error is logged and returned,
// and the old rules and limits keep answering. An Envoy file may add or
// remove domains and change a limit's strategy (its rule changes); a
// fixed_window limit added on a node that started without a wall-clock
// time base is refused (restart it). Node settings (addresses, keys, TLS,
// node.envoy_config, node.envoy_shadow_mode, ...) are read at Start only;
// a reload that sees the node section changed logs a warning. With
// Config.WatchConfig the config file's directory and the Envoy directory
// are watched and a change is reloaded 300 ms after the last write (only
// when the bytes of the file or of the Envoy files changed).
//
// # Services
//
// Config.Services serves further gRPC services on the daemon's gRPC server
// (node.grpc_addr, with its TLS and options) without changing this
// package. A Service is told three things:
//
//	Register(g, d)     once, in Start: the node has started, the API exists,
//	                   nothing is served yet. Register the handlers on g and
//	                   take what the service needs from d: Node() (the
//	                   limiter.Node; Node().Cluster() decides checks), Rules()
//	                   (the rules and the Envoy config in force), Logger(),
//	                   Registry() (the Prometheus registry served at /metrics),
//	                   API().AddHealthService (report it in grpc.health.v1),
//	                   Ready(). An error stops Start.
//	Reloaded(ctx, rs)  after each Reload that applied: rs is what is now in
//	                   force. Serialized with other reloads.
//	Shutdown(ctx)      first thing in Daemon.Shutdown after readiness went
//	                   off, before the servers stop and the node drains.
//
// The next service to plug in this way is Envoy's Rate Limit Quota
// Service (RLQS, envoy.service.rate_limit_quota.v3): its Register keeps
// d.Node() to decide quota assignments, d.Rules() for its buckets
// (rs.Envoy, rs.Rules), d.Logger() and d.Registry() for its metrics;
// Reloaded swaps its bucket settings for the new rules and the Envoy
// config read again (RuleSet.Envoy);
// Shutdown tells every open stream to fall back (its no-assignment
// behaviour) and ends the streams while the node still answers. A service
// with long-lived streams must end them in Shutdown: gRPC's GracefulStop
// waits for open streams until Shutdown's ctx ends, and then every
// connection is cut. ServiceFuncs makes a Service of functions.
//
// # Shutdown
//
// Shutdown, in order: readiness off (health NOT_SERVING, /readyz 503,
// Check UNAVAILABLE), the services' Shutdown (in reverse order), the HTTP
// API's graceful shutdown (in-flight requests finish), gRPC GracefulStop
// (Stop when ctx ends first), then the node's Close (limiter.Node.Close:
// its state handed to its peers, 2 s at most; gossip left; the last
// snapshot). Done is closed when it returns, or before, when a server
// stopped serving on its own (Err says why; call Shutdown then).
//
// Dependencies point one way: daemon imports limiter, server, httplimit,
// envoyrls, config and cluster; none of them imports daemon.
package daemon
