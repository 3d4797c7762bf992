package server

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/cluster"
)

// CheckItem and CheckBatch (the HTTP mode's path) decide as the node does
// and count in the same metrics as Check: decisions by result, decision
// time, edge lateness, and a rule not served as an invalid request.
func TestInProcessChecksCounted(t *testing.T) {
	s := newTestServer(t)
	ctx := context.Background()
	ago := time.Now().Add(-30 * time.Millisecond).UnixNano()
	for i, want := range []bool{true, true, true, false} { // api: burst 3
		d, err := s.CheckItem(ctx, cluster.BatchItem{Rule: "api", Key: "k", Tokens: 1, CreatedAtUnixNs: ago})
		if err != nil || d.Allowed != want {
			t.Fatalf("check %d: %+v, %v; want allowed %v", i, d, err, want)
		}
	}
	res, err := s.CheckBatch(ctx, []cluster.BatchItem{{Rule: "loc", Key: "k", Tokens: 1}, {Rule: "loc", Key: "k", Tokens: 5}})
	if err != nil || len(res) != 2 || !res[0].Allowed || res[1].Allowed {
		t.Fatalf("batch: %+v, %v; want allowed then refused", res, err)
	}
	if _, err := s.CheckItem(ctx, cluster.BatchItem{Rule: "nope", Key: "k", Tokens: 1}); err == nil {
		t.Error("a rule the server does not serve was decided")
	}
	if _, err := s.CheckBatch(ctx, []cluster.BatchItem{{Rule: "loc", Key: "k", Tokens: 1}, {Rule: "nope", Key: "k", Tokens: 1}}); err == nil {
		t.Error("a batch with a rule the server does not serve was decided")
	}
	fams := scrape(t, s)
	for _, tc := range []struct {
		rule, strat, result string
		want                float64
	}{{"api", "owner", "allowed", 3}, {"api", "owner", "refused", 1}, {"loc", "local", "allowed", 1}, {"loc", "local", "refused", 1}} {
		if got := value(t, fams, "tokenmesh_decisions_total", "rule="+tc.rule, "strategy="+tc.strat, "result="+tc.result); got != tc.want {
			t.Errorf("tokenmesh_decisions_total{rule=%s,result=%s} = %v, want %v", tc.rule, tc.result, got, tc.want)
		}
	}
	if got := value(t, fams, "tokenmesh_invalid_requests_total"); got != 2 {
		t.Errorf("tokenmesh_invalid_requests_total = %v, want 2", got)
	}
	m, ok := series(fams, "tokenmesh_edge_lateness_seconds", "rule=api")
	if !ok || m.GetHistogram().GetSampleCount() != 4 || m.GetHistogram().GetSampleSum() < 4*0.030 {
		t.Errorf("tokenmesh_edge_lateness_seconds{rule=api}: %v, want 4 checks of at least 30 ms", m)
	}
	if d, ok := series(fams, "tokenmesh_decision_seconds", "rule=loc"); !ok || d.GetHistogram().GetSampleCount() != 2 {
		t.Errorf("tokenmesh_decision_seconds{rule=loc}: %v, want 2 decisions", d)
	}
}

func TestInProcessNoNode(t *testing.T) {
	s := New(nil, nil)
	if _, err := s.CheckItem(context.Background(), cluster.BatchItem{Rule: "api", Key: "k", Tokens: 1}); !errors.Is(err, ErrNoNode) {
		t.Errorf("CheckItem without a node: %v, want ErrNoNode", err)
	}
	if _, err := s.CheckBatch(context.Background(), nil); !errors.Is(err, ErrNoNode) {
		t.Errorf("CheckBatch without a node: %v, want ErrNoNode", err)
	}
}
