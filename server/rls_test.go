package server

import (
	"context"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/tokenmesh/tokenmesh/envoyrls"
	"github.com/tokenmesh/tokenmesh/limiter"
)

// RegisterRLS serves Envoy's ShouldRateLimit over the node, reports it in
// the health service, counts its decisions in the metrics under the
// derived rule names, and refuses calls while not ready.
func TestRegisterRLS(t *testing.T) {
	cfg, err := envoyrls.Parse("edge.yaml", []byte("domain: edge\ndescriptors:\n  - key: ip\n    rate_limit: {unit: hour, requests_per_unit: 2}\n"))
	if err != nil {
		t.Fatal(err)
	}
	rules := append(testRules(), cfg.Rules(time.Time{})...)
	node := startTestNode(t, rules)
	s := New(node, rules)
	var svc *envoyrls.Service
	cc := grpcClient(t, s, func(g *grpc.Server) { svc = s.RegisterRLS(g, cfg) })
	cl := rlsv3.NewRateLimitServiceClient(cc)
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{
		{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "ip", Value: "1.2.3.4"}}}}}
	var got []rlsv3.RateLimitResponse_Code
	for range 3 {
		resp, err := cl.ShouldRateLimit(ctxT(t), req)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, resp.GetOverallCode())
	}
	if got[0] != rlsv3.RateLimitResponse_OK || got[1] != rlsv3.RateLimitResponse_OK || got[2] != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Errorf("codes %v, want OK OK OVER_LIMIT", got)
	}
	hr, err := healthpb.NewHealthClient(cc).Check(ctxT(t), &healthpb.HealthCheckRequest{Service: envoyrls.ServiceName})
	if err != nil || hr.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health: %v %v", hr, err)
	}
	// The global shadow mode: the drained key is answered OK, counted.
	svc.SetShadowMode(true)
	if resp, err := cl.ShouldRateLimit(ctxT(t), req); err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK ||
		resp.GetStatuses()[0].GetCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Errorf("global shadow mode: %v, %v; want overall OK, the status OVER_LIMIT", resp, err)
	}
	svc.SetShadowMode(false)
	if _, err := cl.ShouldRateLimit(ctxT(t), &rlsv3.RateLimitRequest{}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("empty request: %v", err)
	}
	w := httptest.NewRecorder()
	s.Handler().ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(w.Body)
	for _, want := range []string{
		`tokenmesh_decisions_total{result="refused",rule="rls.edge.ip",strategy="owner"} 1`,
		`tokenmesh_decisions_total{result="allowed",rule="rls.edge.ip",strategy="owner"} 3`,
		`tokenmesh_rls_global_shadow_mode_total 1`,
		`tokenmesh_invalid_requests_total 1`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	s.SetReady(false)
	if _, err := cl.ShouldRateLimit(ctxT(t), req); status.Code(err) != codes.Unavailable {
		t.Errorf("not ready: %v, want UNAVAILABLE", err)
	}
	hr, err = healthpb.NewHealthClient(cc).Check(ctxT(t), &healthpb.HealthCheckRequest{Service: envoyrls.ServiceName})
	if err != nil || hr.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("health after SetReady(false): %v %v", hr, err)
	}
}

// A limit override's checks count under its derived rule's name, the
// overrides the node's bound refuses and the override rules held have
// their metrics, and the derived rule's series go when the node drops the
// rule (a reload whose files no longer have the descriptor).
func TestRLSOverrideMetrics(t *testing.T) {
	cfg, err := envoyrls.Parse("edge.yaml", []byte("domain: edge\ndescriptors:\n  - key: ip\n    rate_limit: {unit: hour, requests_per_unit: 2}\n"))
	if err != nil {
		t.Fatal(err)
	}
	rules := append(testRules(), cfg.Rules(time.Time{})...)
	node, err := limiter.Start(context.Background(), limiter.Config{Name: "n1", Rules: rules,
		Derive: cfg.Deriver(time.Time{}), MaxDerivedPerBase: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = node.Close() })
	s := New(node, rules)
	cc := grpcClient(t, s, func(g *grpc.Server) { s.RegisterRLS(g, cfg) })
	cl := rlsv3.NewRateLimitServiceClient(cc)
	req := func(rpu uint32) *rlsv3.RateLimitRequest {
		return &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{
			{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "ip", Value: "1.2.3.4"}},
				Limit: &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: rpu, Unit: typev3.RateLimitUnit_HOUR}}}}
	}
	for range 2 {
		if _, err := cl.ShouldRateLimit(ctxT(t), req(1)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cl.ShouldRateLimit(ctxT(t), req(9)); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("a second override of one descriptor, bound 1: %v; want RESOURCE_EXHAUSTED", err)
	}
	scrape := func() string {
		w := httptest.NewRecorder()
		s.Handler().ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
		body, _ := io.ReadAll(w.Body)
		return string(body)
	}
	body := scrape()
	for _, want := range []string{
		`tokenmesh_decisions_total{result="allowed",rule="rls.edge.ip--1-per-hour",strategy="owner"} 1`,
		`tokenmesh_decisions_total{result="refused",rule="rls.edge.ip--1-per-hour",strategy="owner"} 1`,
		`tokenmesh_rls_overrides_refused_total 1`,
		`tokenmesh_rls_override_rules 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	// The node drops the derived rule (no Deriver any more): so do the metrics.
	node.Cluster().SetDeriver(nil)
	if _, err := node.SetRules(context.Background(), rules); err != nil {
		t.Fatal(err)
	}
	s.SetRules(rules)
	if body := scrape(); strings.Contains(body, "rls.edge.ip--1-per-hour") || !strings.Contains(body, "tokenmesh_rls_override_rules 0") {
		t.Errorf("after the node dropped the override rule, the metrics still have it:\n%s", body)
	}
}
