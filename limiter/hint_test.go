package limiter

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tokenmesh/tokenmesh/config"
	"github.com/tokenmesh/tokenmesh/rule"
)

// SetLatencyHint: fixed values are kept, auto measures only with peers.
func TestSetLatencyHint(t *testing.T) {
	c := Config{LatencyHint: time.Second}
	if est := c.SetLatencyHint(config.LatencyHint{Value: 2 * time.Millisecond}); est != nil || c.LatencyHint != 2*time.Millisecond {
		t.Errorf("fixed 2ms: hint %v, estimator %v; want 2ms, nil", c.LatencyHint, est)
	}
	if est := c.SetLatencyHint(config.LatencyHint{Auto: true}); est != nil || c.LatencyHint != 0 {
		t.Errorf("auto without peers: hint %v, estimator %v; want 0, nil", c.LatencyHint, est)
	}
	c.Peer = &PeerConfig{}
	if est := c.SetLatencyHint(config.LatencyHint{Auto: true}); est == nil || c.Peer.Latency != est || c.LatencyHint != 0 {
		t.Errorf("auto with peers: hint %v, estimator %v (peer's %v); want 0 and the peer's estimator", c.LatencyHint, est, c.Peer.Latency)
	}
}

// RegisterHintMetrics exports the node's hint; Ready is true on a node
// whose strategies need no share.
func TestRegisterHintMetricsAndReady(t *testing.T) {
	n, err := Start(context.Background(), Config{Name: "solo", Rules: []rule.Rule{{Name: "api", Rate: perSec(1), Burst: 1}},
		LatencyHint: 3 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	reg := prometheus.NewRegistry()
	if err := n.RegisterHintMetrics(reg); err != nil {
		t.Fatal(err)
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(fams) != 1 || fams[0].GetName() != "tokenmesh_latency_hint_seconds" || fams[0].GetMetric()[0].GetGauge().GetValue() != 0.003 {
		t.Errorf("gathered %v; want tokenmesh_latency_hint_seconds 0.003 alone (a fixed hint: no estimator)", fams)
	}
	if err := n.RegisterHintMetrics(reg); err == nil {
		t.Error("a second RegisterHintMetrics on one registry: no error")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if ok, err := n.Ready(ctx); !ok || err != nil {
		t.Errorf("Ready = %v, %v; want true", ok, err)
	}
	if err := n.WaitReady(ctx); err != nil {
		t.Errorf("WaitReady = %v", err)
	}
}
