package main

import (
	"log/slog"

	"github.com/tokenmesh/tokenmesh/cluster"
	"github.com/tokenmesh/tokenmesh/config"
	"github.com/tokenmesh/tokenmesh/limiter"
)

// latencyHint sets lc's latency hint from node.latency_hint and returns the
// estimator whose metrics (tokenmesh_latency_hint_seconds,
// tokenmesh_peer_latency_seconds) serve exports. auto on a networked node:
// the strategies start at cluster.DefaultHintFloor and gossip's probes
// measure the rest (limiter.PeerConfig.Latency). auto on a single node: 0
// (no peer to wait for). A fixed value: that, nothing measured (the
// estimator only reports it).
func latencyHint(lc *limiter.Config, h config.LatencyHint, log *slog.Logger) *cluster.LatencyEstimator {
	switch {
	case h.Fixed:
		lc.LatencyHint = h.Value
		log.Info("latency hint fixed (node.latency_hint)", "hint", h.Value)
		return cluster.NewLatencyEstimator(h.Value)
	case lc.Peer == nil:
		lc.LatencyHint = 0
		return cluster.NewLatencyEstimator(0)
	default:
		est := cluster.NewLatencyEstimator(cluster.DefaultHintFloor)
		lc.LatencyHint = cluster.DefaultHintFloor
		lc.Peer.Latency = est
		log.Info("latency hint measured from gossip probes (node.latency_hint: auto)", "floor", cluster.DefaultHintFloor,
			"quantile", cluster.HintQuantile, "window", cluster.HintWindow, "factor", cluster.HintFactor)
		return est
	}
}
