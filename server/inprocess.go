package server

import (
	"context"
	"errors"
	"fmt"

	"github.com/tokenmesh/tokenmesh/cluster"
)

// ErrNoNode is returned by CheckItem and CheckBatch of a Server built
// without a node.
var ErrNoNode = errors.New("server: no node")

// CheckItem decides one check for a caller in this process (serve's HTTP
// mode, through httplimit.Local over the Server) through the node's
// cluster.Node.CheckItem, counted in the metrics Check keeps:
// tokenmesh_decisions_total, tokenmesh_decision_seconds and, for an item
// with an edge time (it.CreatedAtUnixNs), tokenmesh_edge_lateness_seconds.
// A rule the server does not serve is an error counted in
// tokenmesh_invalid_requests_total, as Check counts a call it refuses.
// Unlike Check it does not wait for readiness (the HTTP mode's contract).
// Errors: that, ErrNoNode, and the node's (ctx ended, the rule removed:
// counted as not decided; input the node refuses, the node closed).
func (s *Server) CheckItem(ctx context.Context, it cluster.BatchItem) (cluster.CheckResult, error) {
	if s.node == nil {
		return cluster.CheckResult{}, ErrNoNode
	}
	t := s.tbl.Load()
	if _, ok := t.byName[it.Rule]; !ok {
		s.metrics.invalid.Inc()
		return cluster.CheckResult{}, fmt.Errorf("rule %q: not a rule of this node", it.Rule)
	}
	r, err := s.decideItem(ctx, t, it)
	if err != nil {
		return cluster.CheckResult{}, err
	}
	return r.CheckResult, r.Err
}

// CheckBatch is CheckItem for a batch (cluster.Node.CheckBatch), each
// item counted as Check counts it. Errors: an item of a rule the server
// does not serve (naming it; nothing decided), ErrNoNode, the node's.
func (s *Server) CheckBatch(ctx context.Context, items []cluster.BatchItem) ([]cluster.BatchResult, error) {
	if s.node == nil {
		return nil, ErrNoNode
	}
	t := s.tbl.Load()
	for i, it := range items {
		if _, ok := t.byName[it.Rule]; !ok {
			s.metrics.invalid.Inc()
			return nil, fmt.Errorf("item %d: rule %q: not a rule of this node", i, it.Rule)
		}
	}
	return s.decideBatch(ctx, t, items)
}
