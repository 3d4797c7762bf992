package membership

import (
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/tokenmesh/tokenmesh/strategy"
)

// pings is memberlist's PingDelegate: memberlist probes one member per
// probe interval with a direct UDP ping and, when the ack comes back in
// time, reports the round trip it measured itself (send to ack, on this
// node's clock: a peer cannot forge the value, only delay its ack; indirect
// and TCP fallback probes are not reported). Config.OnRTT receives them
// (cluster.LatencyEstimator.Observe). No payload rides on the acks.
type pings struct {
	on func(peer strategy.NodeID, rtt time.Duration, at time.Time)
}

func (p *pings) AckPayload() []byte { return nil }

func (p *pings) NotifyPingComplete(other *memberlist.Node, rtt time.Duration, _ []byte) {
	if other == nil || other.Name == "" {
		return
	}
	p.on(strategy.NodeID(other.Name), rtt, time.Now())
}
