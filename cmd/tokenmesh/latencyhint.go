package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"github.com/tokenmesh/tokenmesh/cluster"
	"github.com/tokenmesh/tokenmesh/config"
	"github.com/tokenmesh/tokenmesh/limiter"
	"github.com/tokenmesh/tokenmesh/replay"
)

// latencyHint sets lc's latency hint from node.latency_hint and returns the
// estimator (nil: none) whose tokenmesh_peer_latency_seconds serve exports.
// A fixed value (the default: 0s): that, nothing measured. auto on a
// networked node: the strategies start at 0 and gossip's probes measure
// the hint (at least cluster.DefaultHintFloor once a peer answered one;
// limiter.PeerConfig.Latency). auto without peers: 0.
func latencyHint(lc *limiter.Config, h config.LatencyHint, log *slog.Logger) *cluster.LatencyEstimator {
	switch {
	case !h.Auto:
		lc.LatencyHint = h.Value
		log.Info("latency hint fixed (node.latency_hint)", "hint", h.Value)
		return nil
	case lc.Peer == nil:
		lc.LatencyHint = 0
		return nil
	default:
		est := cluster.NewLatencyEstimator(cluster.DefaultHintFloor)
		lc.LatencyHint = 0
		lc.Peer.Latency = est
		log.Info("latency hint measured from gossip probes (node.latency_hint: auto)", "floor", cluster.DefaultHintFloor,
			"quantile", cluster.HintQuantile, "window", cluster.HintWindow, "factor", cluster.HintFactor)
		return est
	}
}

// registerHintMetrics exports tokenmesh_latency_hint_seconds (the hint the
// node's strategies have, cluster.Node.LatencyHint) and, with an
// estimator, tokenmesh_peer_latency_seconds.
func registerHintMetrics(reg prometheus.Registerer, node *cluster.Node, est *cluster.LatencyEstimator) {
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tokenmesh_latency_hint_seconds",
		Help: "The latency hint this node's strategies derive their timers from (owner's hold, ...), seconds: measured (node.latency_hint: auto) or fixed."},
		func() float64 { return node.LatencyHint().Seconds() }))
	if est != nil {
		reg.MustRegister(est)
	}
}

// metricsReader is what reportHints needs of a cluster
// (localcluster.Cluster).
type metricsReader interface {
	Metrics(ctx context.Context, i int) (string, error)
}

// reportHints prints, on w, the latency hint each node's strategies ended
// the replay with (tokenmesh_latency_hint_seconds from its /metrics; the
// nodes run with node.latency_hint auto) and the largest per-peer one-way
// latency it measured (tokenmesh_peer_latency_seconds): what the
// simulator's --latency must say to describe the replay's timers.
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
		peer := maxGauge(text, "tokenmesh_peer_latency_seconds")
		parts = append(parts, fmt.Sprintf("n%d %v (peers' p90 one-way up to %v)", i, secondsDur(hint), secondsDur(peer)))
	}
	fmt.Fprintf(w, "tokenmesh: %s: latency hint at the end: %s\n", strategy, strings.Join(parts, ", "))
}

// maxGauge is the largest value of the gauge family name in a Prometheus
// text exposition (0 if none).
func maxGauge(text, name string) float64 {
	var p expfmt.TextParser
	fams, _ := p.TextToMetricFamilies(strings.NewReader(text))
	var m float64
	for _, x := range fams[name].GetMetric() {
		m = max(m, x.GetGauge().GetValue())
	}
	return m
}

// secondsDur is s seconds as a Duration, rounded to the microsecond.
func secondsDur(s float64) time.Duration {
	return time.Duration(s * float64(time.Second)).Round(time.Microsecond)
}
