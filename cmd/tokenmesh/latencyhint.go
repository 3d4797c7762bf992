package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/prometheus/common/expfmt"

	"github.com/tokenmesh/tokenmesh/replay"
)

// metricsReader is what reportHints needs of a cluster
// (localcluster.Cluster).
type metricsReader interface {
	Metrics(ctx context.Context, i int) (string, error)
}

// reportHints prints, on w, the latency hint each node's strategies ended
// the replay with (tokenmesh_latency_hint_seconds from its /metrics) and,
// when the node measures it (node.latency_hint auto, e.g.
// TOKENMESH_LATENCY_HINT=auto in replay's environment), the largest
// per-peer one-way latency it measured (tokenmesh_peer_latency_seconds):
// what the simulator's --latency must say to describe the replay's
// timers. A fixed hint (the default 0s, or --wan-latency's) says so
// rather than print an unmeasured latency as 0.
func reportHints(ctx context.Context, w io.Writer, strategy string, c metricsReader, nodes int) {
	parts := make([]string, 0, nodes)
	for i := range nodes {
		mctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		text, err := c.Metrics(mctx, i)
		cancel()
		if err != nil {
			parts = append(parts, fmt.Sprintf("n%d unknown (%v)", i, err))
			continue
		}
		hint, ok := replay.SumCounter(text, "tokenmesh_latency_hint_seconds", nil)
		if !ok {
			parts = append(parts, fmt.Sprintf("n%d unknown (no tokenmesh_latency_hint_seconds)", i))
			continue
		}
		peer, measured := maxGauge(text, "tokenmesh_peer_latency_seconds")
		if !measured {
			parts = append(parts, fmt.Sprintf("n%d %v (fixed: peers' latency not measured)", i, secondsDur(hint)))
			continue
		}
		parts = append(parts, fmt.Sprintf("n%d %v (peers' p90 one-way up to %v)", i, secondsDur(hint), secondsDur(peer)))
	}
	fmt.Fprintf(w, "tokenmesh: %s: latency hint at the end: %s\n", strategy, strings.Join(parts, ", "))
}

// maxGauge is the largest value of the gauge family name in a Prometheus
// text exposition, and whether the family has a series (0, false if none).
func maxGauge(text, name string) (float64, bool) {
	var p expfmt.TextParser
	fams, _ := p.TextToMetricFamilies(strings.NewReader(text))
	var m float64
	series := fams[name].GetMetric()
	for _, x := range series {
		m = max(m, x.GetGauge().GetValue())
	}
	return m, len(series) > 0
}

// secondsDur is s seconds as a Duration, rounded to the microsecond.
func secondsDur(s float64) time.Duration {
	return time.Duration(s * float64(time.Second)).Round(time.Microsecond)
}
