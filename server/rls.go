package server

import (
	"context"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tokenmesh/tokenmesh/cluster"
	"github.com/tokenmesh/tokenmesh/envoyrls"
)

// rls serves envoy.service.ratelimit.v3.RateLimitService while the server
// is ready (UNAVAILABLE otherwise, like Check).
type rls struct {
	rlsv3.UnimplementedRateLimitServiceServer
	s   *Server
	svc *envoyrls.Service
}

func (r *rls) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	if !r.s.ready.Load() {
		return nil, status.Error(codes.Unavailable, "node is not ready")
	}
	resp, err := r.svc.ShouldRateLimit(ctx, req)
	if status.Code(err) == codes.InvalidArgument {
		r.s.metrics.invalid.Inc()
	}
	return resp, err
}

// RegisterRLS registers Envoy's rate limit service
// (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit, package
// envoyrls) on g, deciding cfg's limits through the node's cluster
// (cluster.Node.CheckBatch, as Check does), and reports it in the gRPC
// health service. cfg.Rules(epoch) must be among the rules given to New (the
// node's rules); their decisions count in tokenmesh_decisions_total and
// tokenmesh_decision_seconds under the derived rule names (rls.*), a
// shadow_mode check over its limit as allowed, and the responses the
// global shadow mode answered OK in tokenmesh_rls_global_shadow_mode_total.
// It returns the service, whose SetConfig swaps the limits on a reload
// (after SetRules gave the node's new rules here) and SetShadowMode sets
// the global shadow mode; without a node it does nothing and returns nil.
// Call it once per Server (the metric is registered once).
func (s *Server) RegisterRLS(g grpc.ServiceRegistrar, cfg *envoyrls.Config) *envoyrls.Service {
	if s.node == nil {
		return nil
	}
	observe := func(rule string, r cluster.BatchResult, ok bool, waited time.Duration) {
		s.tbl.Load().byName[rule].m.count(r, ok, waited)
	}
	svc := envoyrls.New(cfg, s.node.Cluster(), observe)
	// A second registration keeps the first counter (Register refuses it).
	_ = s.metrics.reg.Register(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "tokenmesh_rls_global_shadow_mode_total",
		Help: "Envoy RLS responses over a limit answered OK by the global shadow mode (node.envoy_shadow_mode).",
	}, func() float64 { return float64(svc.Shadowed()) }))
	rlsv3.RegisterRateLimitServiceServer(g, &rls{s: s, svc: svc})
	s.AddHealthService(envoyrls.ServiceName)
	return svc
}
