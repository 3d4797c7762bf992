package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/cluster"
	"github.com/tokenmesh/tokenmesh/localcluster"
	"github.com/tokenmesh/tokenmesh/rule"
)

// Real serve processes with node.latency_hint auto (the environment
// variable; the default is 0s) expose the
// one-way latency each measured to its peer from gossip's probes (probes
// every second: a sample within a few seconds) and, once it did, the hint
// their strategies have: non-zero, at least the floor.
func TestClusterE2ELatencyHintMeasured(t *testing.T) {
	rules := []rule.Rule{{Name: "api", Rate: rule.MustRate("10/s"), Burst: 10, Strategy: "owner"}}
	t.Setenv(envLatency, "auto") // the spawned serve processes inherit it
	c := startCluster(t, localcluster.Config{Nodes: 2, Rules: rules})
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	for i := range 2 {
		other := []string{"n1", "n0"}[i]
		peerSeries := `tokenmesh_peer_latency_seconds{peer="` + other + `"}`
		for {
			m, err := c.Metrics(ctx, i)
			if err != nil {
				t.Fatal(err)
			}
			hint, ok := metricValue(m, "tokenmesh_latency_hint_seconds")
			if !ok || hint < 0 || hint > cluster.MaxLatencyHint.Seconds() {
				t.Fatalf("n%d: tokenmesh_latency_hint_seconds %v (present %v), want in [0, %v]", i, hint, ok, cluster.MaxLatencyHint)
			}
			if peer, ok := metricValue(m, peerSeries); ok && hint >= cluster.DefaultHintFloor.Seconds() {
				if peer <= 0 || peer > cluster.MaxLatencyHint.Seconds() {
					t.Fatalf("n%d: %s = %v, want a positive latency below %v", i, peerSeries, peer, cluster.MaxLatencyHint)
				}
				t.Logf("n%d: hint %.3f ms, peer %s one way %.3f ms", i, hint*1e3, other, peer*1e3)
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("n%d: no %s, or a hint below %v, after 45s; /metrics has:\n%s", i, peerSeries, cluster.DefaultHintFloor, grepLines(m, "latency"))
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
}

func grepLines(text, sub string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
