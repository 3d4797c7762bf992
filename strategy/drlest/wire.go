package drlest

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"

	peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/internal/wire"
)

// maxDemandsPerReport bounds one report's keys (a node with more sends
// several reports).
const maxDemandsPerReport = 4096

// maxKeyBytes bounds a reported key's length.
const maxKeyBytes = 4096

// maxMilliPerSec bounds a reported estimate: 10^12 tokens per second (a
// node cannot have counted more).
const maxMilliPerSec = 1e15

// report sends this node's estimates of the keys with demand to every
// other live member, in reports of at most maxDemandsPerReport keys.
func (d *DRL) report(fx *strategy.Effects) {
	var demands []*peerv1.DrlEstDemand
	for _, name := range slices.Sorted(maps.Keys(d.keys)) {
		if k := d.keys[name]; k.demand > 0 {
			demands = append(demands, &peerv1.DrlEstDemand{Key: name, MilliTokensPerS: uint64(min(k.demand*1000, maxMilliPerSec))})
		}
	}
	for len(demands) > 0 {
		part := demands[:min(len(demands), maxDemandsPerReport)]
		demands = demands[len(part):]
		msg := wire.MustMarshal(&peerv1.DrlEstReport{Interval: d.seq, Demands: part})
		for _, m := range d.members {
			if m != d.self {
				fx.Send(m, msg)
			}
		}
	}
}

// Receive takes a peer's estimates (DrlEstReport). Errors: an undecodable
// payload, more than maxDemandsPerReport keys, an empty or too long key,
// keys not sorted or repeated, or an estimate above 10^12 tokens/s. Errors
// change no state. A report from a node that is not a live member is
// ignored.
func (d *DRL) Receive(now time.Duration, from strategy.NodeID, payload []byte, fx *strategy.Effects) error {
	var m peerv1.DrlEstReport
	if err := proto.Unmarshal(payload, &m); err != nil {
		return fmt.Errorf("%s: message from %s does not decode: %w", d.mode, from, err)
	}
	if err := validReport(&m); err != nil {
		return fmt.Errorf("%s: report from %s: %w", d.mode, from, err)
	}
	if from == d.self || !slices.Contains(d.members, from) {
		return nil
	}
	for _, e := range m.Demands {
		k := d.key(e.Key)
		if k.peers == nil {
			k.peers = map[strategy.NodeID]peerDemand{}
			d.mem.peerMaps++
		}
		k.peers[from] = peerDemand{perSec: float64(e.MilliTokensPerS) / 1000, at: now}
		d.mem.peerPeak = max(d.mem.peerPeak, len(k.peers))
	}
	return nil
}

// validReport checks a report's bounds and order.
func validReport(m *peerv1.DrlEstReport) error {
	if len(m.Demands) > maxDemandsPerReport {
		return fmt.Errorf("%d keys, above the %d a report holds", len(m.Demands), maxDemandsPerReport)
	}
	for i, e := range m.Demands {
		switch {
		case e.Key == "" || len(e.Key) > maxKeyBytes:
			return fmt.Errorf("key %d is empty or longer than %d bytes", i, maxKeyBytes)
		case i > 0 && e.Key <= m.Demands[i-1].Key:
			return fmt.Errorf("key %q is not after %q (keys sorted, no repeats)", e.Key, m.Demands[i-1].Key)
		case e.MilliTokensPerS > maxMilliPerSec:
			return fmt.Errorf("key %q: estimate %d milli-tokens/s above the bound %d", e.Key, e.MilliTokensPerS, uint64(maxMilliPerSec))
		}
	}
	return nil
}
