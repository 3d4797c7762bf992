package limiter

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tokenmesh/tokenmesh/cluster"
	"github.com/tokenmesh/tokenmesh/config"
)

// SetLatencyHint sets c.LatencyHint (and, when measured, c.Peer.Latency)
// from h, a config's node.latency_hint, and returns the estimator it set
// (nil: nothing measured). Set c.Peer first:
//
//   - a fixed hint (h.Auto false; the default is 0s): c.LatencyHint is
//     h.Value, nothing is measured;
//   - auto with c.Peer set: the strategies start at 0 and a new
//     cluster.LatencyEstimator (floor cluster.DefaultHintFloor) measures
//     the hint from gossip's probes (PeerConfig.Latency);
//   - auto without peers: 0 (no peer to measure).
func (c *Config) SetLatencyHint(h config.LatencyHint) *cluster.LatencyEstimator {
	c.LatencyHint = 0
	switch {
	case !h.Auto:
		c.LatencyHint = h.Value
		return nil
	case c.Peer == nil:
		return nil
	default:
		est := cluster.NewLatencyEstimator(cluster.DefaultHintFloor)
		c.Peer.Latency = est
		return est
	}
}

// RegisterHintMetrics registers on reg the gauge
//
//	tokenmesh_latency_hint_seconds        the hint the node's strategies have (cluster.Node.LatencyHint), seconds
//
// and, when the hint is measured (PeerConfig.Latency), the estimator's
// tokenmesh_peer_latency_seconds{peer} (cluster.LatencyEstimator). Errors:
// reg's (a collector already registered; nothing is then left half
// registered).
func (n *Node) RegisterHintMetrics(reg prometheus.Registerer) error {
	node := n.node
	g := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tokenmesh_latency_hint_seconds",
		Help: "The latency hint this node's strategies derive their timers from (owner's hold, ...), seconds: measured (node.latency_hint: auto) or fixed."},
		func() float64 { return node.LatencyHint().Seconds() })
	if err := reg.Register(g); err != nil {
		return err
	}
	if n.latency != nil {
		if err := reg.Register(n.latency); err != nil {
			reg.Unregister(g)
			return err
		}
	}
	return nil
}
