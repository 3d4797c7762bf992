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
// A limit override's checks count there under its derived rule's name
// (rls.<descriptor>--<limit>; series made at its first check, dropped by
// SetRules once the node lacks the rule), the overrides refused by the
// node's bound in tokenmesh_rls_overrides_refused_total, and the override
// rules the node holds in tokenmesh_rls_override_rules. It returns the
// service, whose SetConfig swaps the limits on a reload (after SetRules
// gave the node's new rules here), SetShadowMode sets the global shadow
// mode and SetEpoch the node's time base; without a node it does nothing
// and returns nil. Call it once per Server (the metrics are registered
// once).
func (s *Server) RegisterRLS(g grpc.ServiceRegistrar, cfg *envoyrls.Config) *envoyrls.Service {
	if s.node == nil {
		return nil
	}
	observe := func(rule string, r cluster.BatchResult, ok bool, waited time.Duration) {
		if ri, known := s.tbl.Load().byName[rule]; known {
			ri.m.count(r, ok, waited)
			return
		}
		s.derivedMetrics(rule).count(r, ok, waited) // a limit override's rule
	}
	svc := envoyrls.New(cfg, s.node.Cluster(), observe)
	// A second registration keeps the first counters (Register refuses them).
	_ = s.metrics.reg.Register(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "tokenmesh_rls_global_shadow_mode_total",
		Help: "Envoy RLS responses over a limit answered OK by the global shadow mode (node.envoy_shadow_mode).",
	}, func() float64 { return float64(svc.Shadowed()) }))
	_ = s.metrics.reg.Register(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "tokenmesh_rls_overrides_refused_total",
		Help: "Envoy RLS descriptors whose limit override was refused (RESOURCE_EXHAUSTED): the node holds node.envoy_max_overrides_per_descriptor overrides of the descriptor, or node.envoy_max_overrides in all.",
	}, func() float64 { return float64(svc.OverridesRefused()) }))
	_ = s.metrics.reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "tokenmesh_rls_override_rules",
		Help: "Rules this node holds for Envoy RLS limit overrides (one per descriptor and limit; its own and those its peers' forwarded checks named).",
	}, func() float64 { return float64(s.node.Cluster().DerivedRules()) }))
	rlsv3.RegisterRateLimitServiceServer(g, &rls{s: s, svc: svc})
	s.AddHealthService(envoyrls.ServiceName)
	return svc
}
