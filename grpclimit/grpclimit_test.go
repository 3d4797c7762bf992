package grpclimit

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/tokenmesh/tokenmesh/httplimit"
	"github.com/tokenmesh/tokenmesh/limiter"
	"github.com/tokenmesh/tokenmesh/rule"
)

func startNode(t *testing.T) *limiter.Node {
	t.Helper()
	n, err := limiter.Start(context.Background(), limiter.Config{Name: "n1", Rules: []rule.Rule{
		{Name: "rate", Rate: rule.MustRate("1/m"), Burst: 2, Strategy: "local"},
		{Name: "conc", Rate: rule.MustRate("1/s"), Burst: 1, Strategy: "concurrency", Params: []string{"limit=1", "permit_ttl=50ms"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close() })
	return n
}

// TestUnaryRateOverGRPC: a real gRPC server (the health service) behind
// a rate rule of burst 2 keyed by the x-tenant metadata: two calls of a
// tenant pass, the third is RESOURCE_EXHAUSTED with retry-after and
// ratelimit-policy headers, another tenant passes, a call without the
// metadata is INVALID_ARGUMENT naming it.
func TestUnaryRateOverGRPC(t *testing.T) {
	lim, err := New(Options{Rule: "rate", Key: "{header:x-tenant}", Checker: httplimit.LocalNode(startNode(t))})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(lim.Unary()), grpc.ChainStreamInterceptor(lim.Stream()))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	c := healthpb.NewHealthClient(cc)
	call := func(tenant string) (metadata.MD, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if tenant != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, "x-tenant", tenant)
		}
		var hdr metadata.MD
		_, err := c.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&hdr))
		return hdr, err
	}
	for i := range 2 {
		if _, err := call("a"); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	hdr, err := call("a")
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), `key "a"`) {
		t.Fatalf("third call: %v, want RESOURCE_EXHAUSTED naming the key", err)
	}
	if len(hdr.Get("retry-after")) != 1 || !strings.Contains(strings.Join(hdr.Get("ratelimit-policy"), ""), `"rate";q=2`) {
		t.Fatalf("refusal headers %v, want retry-after and ratelimit-policy q=2", hdr)
	}
	if _, err := call("b"); err != nil {
		t.Fatalf("another tenant: %v", err)
	}
	if _, err := call(""); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "X-Tenant is missing") {
		t.Fatalf("no tenant: %v, want INVALID_ARGUMENT naming the header", err)
	}
}

// TestUnaryConcurrencyReleasesWhenHandlerReturns: limit 1: a call held in
// its handler makes a second call of its key RESOURCE_EXHAUSTED; once the
// handler returned, a call passes again.
func TestUnaryConcurrencyReleasesWhenHandlerReturns(t *testing.T) {
	n := startNode(t)
	time.Sleep(110 * time.Millisecond) // no permit within permit_ttl + join_wait of the start
	lim, err := New(Options{Rule: "conc", Key: "{header:x-tenant}", Checker: httplimit.LocalNode(n), Concurrency: true})
	if err != nil {
		t.Fatal(err)
	}
	in := metadata.NewIncomingContext(context.Background(), metadata.Pairs("x-tenant", "a"))
	info := &grpc.UnaryServerInfo{FullMethod: "/svc.S/M"}
	hold, entered := make(chan struct{}), make(chan struct{})
	done := make(chan error)
	go func() {
		_, err := lim.Unary()(in, nil, info, func(context.Context, any) (any, error) { close(entered); <-hold; return nil, nil })
		done <- err
	}()
	<-entered
	ok := func(context.Context, any) (any, error) { return "ok", nil }
	if _, err := lim.Unary()(in, nil, info, ok); status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "concurrency limit") {
		t.Fatalf("second call in flight: %v, want RESOURCE_EXHAUSTED", err)
	}
	close(hold)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Second)
	for {
		_, err := lim.Unary()(in, nil, info, ok)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the permit was never released: %v", err)
		}
		time.Sleep(2 * time.Millisecond)
	}
	if _, err := New(Options{Rule: "conc", Checker: httplimit.CheckerFunc(func(context.Context, string, string, int64) (httplimit.Result, error) {
		return httplimit.Result{}, nil
	}), Concurrency: true}); err == nil || !strings.Contains(err.Error(), "Options.Concurrency") {
		t.Fatalf("Concurrency with a Checker that cannot acquire: %v", err)
	}
}
