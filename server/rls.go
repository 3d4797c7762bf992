package server

import (
	"context"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
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
// shadow_mode check over its limit as allowed. Without a node it does
// nothing.
func (s *Server) RegisterRLS(g grpc.ServiceRegistrar, cfg *envoyrls.Config) {
	if s.node == nil {
		return
	}
	observe := func(rule string, r cluster.BatchResult, ok bool, waited time.Duration) {
		s.tbl.Load().byName[rule].m.count(r, ok, waited)
	}
	svc := envoyrls.New(cfg, s.node.Cluster(), observe)
	rlsv3.RegisterRateLimitServiceServer(g, &rls{s: s, svc: svc})
	s.AddHealthService(envoyrls.ServiceName)
}
