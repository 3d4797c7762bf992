package rlqs

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/tokenmesh/tokenmesh/config"
	"github.com/tokenmesh/tokenmesh/daemon"
)

// Service on a daemon: RLQS is reported in the gRPC health service
// (SERVING while the daemon is ready), and a reload of the Envoy files
// reaches it (a domain added by the reload is served, NotFound before).
func TestServiceOnDaemon(t *testing.T) {
	if ServiceName != rlqsv3.RateLimitQuotaService_ServiceDesc.ServiceName {
		t.Fatalf("ServiceName %q, the service's %q", ServiceName, rlqsv3.RateLimitQuotaService_ServiceDesc.ServiceName)
	}
	dir := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("edge.yaml", limitsYAML)
	f := config.Default()
	f.Node.APIAddr, f.Node.GRPCAddr = "127.0.0.1:0", "127.0.0.1:0"
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	d, err := daemon.Start(ctx, daemon.Config{File: f, EnvoyDir: dir, Services: []daemon.Service{Service()}})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Shutdown(ctx)
	conn, err := grpc.NewClient(d.Addrs().GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hr, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: ServiceName}, grpc.WaitForReady(true))
	if err != nil || hr.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health of %s: %v, %v; want SERVING", ServiceName, hr, err)
	}

	// first is the answer to one report of bucket {k: v} in domain.
	first := func(domain string) (*rlqsv3.RateLimitQuotaResponse, error) {
		sctx, scancel := context.WithTimeout(ctx, 5*time.Second)
		defer scancel()
		st, err := rlqsv3.NewRateLimitQuotaServiceClient(conn).StreamRateLimitQuotas(sctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Send(usage(domain, map[string]string{"k": "v"}, 0, 0, 0)); err != nil {
			t.Fatal(err)
		}
		return st.Recv()
	}
	if _, err := first("other"); status.Code(err) != codes.NotFound {
		t.Fatalf("a report for a domain no file has: %v; want NotFound", err)
	}
	write("other.yaml", "domain: other\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true}\n")
	if err := d.Reload(ctx, "test"); err != nil {
		t.Fatalf("Reload: %v", err)
	}
	r, err := first("other")
	if err != nil || r.GetBucketAction()[0].GetQuotaAssignmentAction().GetRateLimitStrategy().GetBlanketRule().String() != "ALLOW_ALL" {
		t.Fatalf("the domain added by the reload: %v, %v; want its unlimited bucket's ALLOW_ALL", r, err)
	}
}

// A file as envoyproxy/ratelimit has it (no tokenmesh extension) serves
// RLQS when the node's node.envoy_strategy is quota: the first report of a
// bucket gets a token bucket (or the blanket rule that precedes a paid
// first assignment); with the default (owner) the same report is answered
// nothing (the stream's Recv times out).
func TestFileAsItIsServesRLQSWithNodeStrategy(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "edge.yaml"), []byte("domain: edge\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 100}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		strategy string
		answered bool
	}{{"quota", true}, {"", false}} {
		f := config.Default()
		f.Node.APIAddr, f.Node.GRPCAddr = "127.0.0.1:0", "127.0.0.1:0"
		f.Node.EnvoyStrategy = tc.strategy
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		d, err := daemon.Start(ctx, daemon.Config{File: f, EnvoyDir: dir, Services: []daemon.Service{Service()}})
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		conn, err := grpc.NewClient(d.Addrs().GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		sctx, scancel := context.WithTimeout(ctx, 3*time.Second)
		st, err := rlqsv3.NewRateLimitQuotaServiceClient(conn).StreamRateLimitQuotas(sctx, grpc.WaitForReady(true))
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Send(usage("edge", map[string]string{"k": "v"}, 0, 0, 0)); err != nil {
			t.Fatal(err)
		}
		r, err := st.Recv()
		got := err == nil && len(r.GetBucketAction()) > 0 && r.GetBucketAction()[0].GetQuotaAssignmentAction() != nil
		if got != tc.answered {
			t.Errorf("node.envoy_strategy %q: answer %v, %v; want answered %v", tc.strategy, r, err, tc.answered)
		}
		scancel()
		conn.Close()
		d.Shutdown(ctx)
		cancel()
	}
}
