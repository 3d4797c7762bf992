package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/tokenmesh/tokenmesh/config"
	"github.com/tokenmesh/tokenmesh/limiter"
	"github.com/tokenmesh/tokenmesh/server"
)

// clusterEpoch is the time base of every networked node (limiter.Config.Epoch):
// nodes in different processes must share one fixed wall-clock instant.
var clusterEpoch = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// shutdownTimeout bounds the wait for in-flight API requests at shutdown.
const shutdownTimeout = 5 * time.Second

func newServeCmd() *cobra.Command {
	var configPath string
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

With --config FILE, the node joins (or founds) a cluster: peers over gRPC at
node.peer_addr, membership by gossip at node.gossip_addr, joining node.join.
Without it, a single node runs the built-in default configuration (API on
` + config.DefaultAPIAddr + `, gRPC on ` + config.DefaultGRPCAddr + `, rule "default": 10/s,
burst 20, strategy owner). With node.api_tls, both APIs use TLS.

SIGINT or SIGTERM shuts down gracefully: the API stops taking requests and
finishes the ones in flight, then the node leaves the gossip cluster.`,
		Example: `  tokenmesh serve
  tokenmesh serve --config /etc/tokenmesh/tokenmesh.yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runServe(ctx, cmd, configPath)
		},
	}
	cmd.Flags().StringVar(&configPath, "config", "", "node configuration (YAML); without it, a single node with the built-in defaults")
	return cmd
}

func runServe(ctx context.Context, cmd *cobra.Command, configPath string) error {
	out := cmd.OutOrStdout()
	var f *config.File
	if configPath == "" {
		f = config.Default()
		if err := f.Validate(); err != nil {
			return fmt.Errorf("default config: %w", err)
		}
	} else {
		var err error
		if f, err = config.Load(configPath); err != nil {
			return err
		}
	}
	rules, err := f.ClusterRules()
	if err != nil {
		return fmt.Errorf("rules: %w", err)
	}
	lc := limiter.Config{Name: f.Node.Name, ClusterRules: rules}
	if configPath != "" {
		pc := &limiter.PeerConfig{ListenAddr: f.Node.PeerAddr, GossipAddr: f.Node.GossipAddr,
			Join: f.Node.Join, SecretKey: f.Node.SecretKey}
		if f.Node.TLS != nil {
			if pc.TLS, err = peerTLS(f.Node.TLS); err != nil {
				return err
			}
		}
		lc.Peer, lc.Epoch, lc.Join = pc, clusterEpoch, len(f.Node.Join) > 0
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
	hs := &http.Server{Handler: api.Handler(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	var gopts []grpc.ServerOption
	scheme := "http"
	if apiTLS != nil {
		hs.TLSConfig = apiTLS
		ln = tls.NewListener(ln, apiTLS)
		gopts = append(gopts, grpc.Creds(credentials.NewTLS(apiTLS)))
		scheme = "https"
	}
	gs := grpc.NewServer(gopts...)
	api.RegisterGRPC(gs)

	if configPath == "" {
		fmt.Fprintln(out, "tokenmesh serve: no --config; running the built-in default configuration (single node, no peers)")
	} else {
		fmt.Fprintf(out, "tokenmesh serve: config %s\n", configPath)
	}
	fmt.Fprintf(out, "node %s: API %s://%s grpc %s\n", f.Node.Name, scheme, ln.Addr(), gln.Addr())
	if lc.Peer != nil {
		join := "founding a cluster"
		if len(f.Node.Join) > 0 {
			join = "joining " + strings.Join(f.Node.Join, ", ")
		}
		fmt.Fprintf(out, "peers: grpc %s, gossip %s, %s\n", node.PeerAddr(), node.GossipAddr(), join)
	}
	for _, r := range rules {
		fmt.Fprintf(out, "rule %s: rate %g/s, burst %d, strategy %s\n", r.Name, r.Rate.PerSec(), r.Burst, r.Strategy)
	}

	errc := make(chan error, 2)
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
	var serveErr error
	select {
	case <-ctx.Done():
		fmt.Fprintln(out, "shutting down")
	case serveErr = <-errc:
	}
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
		pem, err := os.ReadFile(t.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("node.api_tls.client_ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("node.api_tls.client_ca_file: %s holds no PEM certificate", t.ClientCAFile)
		}
		c.ClientCAs, c.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return c, nil
}

// peerTLS builds the mutual-TLS config of the peer streams from node.tls.
func peerTLS(t *config.TLS) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("node.tls.cert_file/key_file: %w", err)
	}
	pem, err := os.ReadFile(t.CAFile)
	if err != nil {
		return nil, fmt.Errorf("node.tls.ca_file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("node.tls.ca_file: %s holds no PEM certificate", t.CAFile)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, ClientCAs: pool,
		ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}, nil
}
