package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	tokenmeshv1 "github.com/tokenmesh/tokenmesh/api/tokenmesh/v1"
	"github.com/tokenmesh/tokenmesh/cluster"
)

// Acquire implements tokenmesh.v1.RateLimitService/Acquire (see
// ratelimit.proto): a permit of key under a rule of strategy
// concurrency, through the node's cluster.Node.Acquire. Errors:
// INVALID_ARGUMENT naming the field (an empty or unknown rule, an empty or
// over-long key, weight outside 0..MaxHits, 0 meaning 1; max_wait_ms
// outside 0..3,600,000; a rule whose
// strategy hands out no permits), UNAVAILABLE while the node is not ready
// or when it closed, the ctx's code when the call's ctx ended.
func (s *Server) Acquire(ctx context.Context, req *tokenmeshv1.AcquireRequest) (*tokenmeshv1.AcquireResponse, error) {
	if !s.ready.Load() {
		return nil, status.Error(codes.Unavailable, "node is not ready")
	}
	weight := req.GetWeight()
	if weight == 0 {
		weight = 1
	}
	if err := s.validatePermitCall(req.GetRule(), req.GetKey()); err != nil {
		return nil, err
	}
	if weight < 1 || weight > MaxHits {
		s.metrics.invalid.Inc()
		return nil, status.Errorf(codes.InvalidArgument, "weight: %d must be between 1 and %d (0 for 1)", req.GetWeight(), MaxHits)
	}
	if w := req.GetMaxWaitMs(); w < 0 || w > cluster.MaxWait.Milliseconds() {
		s.metrics.invalid.Inc()
		return nil, status.Errorf(codes.InvalidArgument, "max_wait_ms: %d must be between 0 and %d", w, cluster.MaxWait.Milliseconds())
	}
	r, err := s.node.Cluster().AcquireWait(ctx, req.GetRule(), req.GetKey(), weight, time.Duration(req.GetMaxWaitMs())*time.Millisecond)
	if err != nil {
		return nil, permitError(ctx, err, s)
	}
	out := &tokenmeshv1.AcquireResponse{Granted: r.Granted, Limit: r.Limit, Remaining: r.Remaining}
	if r.Granted {
		out.Permit, out.ExpiresUnixMs = r.Permit.ID, r.Permit.Expires.UnixMilli()
	}
	return out, nil
}

// Release implements tokenmesh.v1.RateLimitService/Release: the node's
// cluster.Node.Release. Errors: Acquire's, and INVALID_ARGUMENT for
// permit 0.
func (s *Server) Release(ctx context.Context, req *tokenmeshv1.ReleaseRequest) (*tokenmeshv1.ReleaseResponse, error) {
	if !s.ready.Load() {
		return nil, status.Error(codes.Unavailable, "node is not ready")
	}
	if err := s.validatePermitCall(req.GetRule(), req.GetKey()); err != nil {
		return nil, err
	}
	if req.GetPermit() == 0 {
		s.metrics.invalid.Inc()
		return nil, status.Error(codes.InvalidArgument, "permit: is required (the id Acquire returned; never 0)")
	}
	if err := s.node.Cluster().Release(ctx, req.GetRule(), req.GetKey(), req.GetPermit()); err != nil {
		return nil, permitError(ctx, err, s)
	}
	return &tokenmeshv1.ReleaseResponse{}, nil
}

// validatePermitCall checks an Acquire's or Release's rule and key:
// INVALID_ARGUMENT naming the field, counted as an invalid request.
func (s *Server) validatePermitCall(rule, key string) error {
	_, known := s.tbl.Load().byName[rule]
	var msg string
	switch {
	case rule == "":
		msg = "rule: is required"
	case !known:
		msg = fmt.Sprintf("rule: %q is not a rule of this node (ListRules, GET /v1/rules lists them)", rule)
	case key == "":
		msg = "key: is required"
	case len(key) > cluster.MaxKeyBytes:
		msg = fmt.Sprintf("key: %d bytes; at most %d", len(key), cluster.MaxKeyBytes)
	default:
		return nil
	}
	s.metrics.invalid.Inc()
	return status.Error(codes.InvalidArgument, msg)
}

// permitError maps the node's error on an Acquire or Release to a status.
func permitError(ctx context.Context, err error, s *Server) error {
	switch {
	case errors.Is(err, cluster.ErrNoPermits):
		s.metrics.invalid.Inc()
		return status.Errorf(codes.InvalidArgument, "rule: %v", err)
	case ctx.Err() != nil:
		return status.FromContextError(ctx.Err()).Err()
	}
	return status.Errorf(codes.Unavailable, "node: %v", err)
}
