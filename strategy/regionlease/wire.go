package regionlease

import (
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// Peer values are bounded (validate): a peer can neither make this node
// hold unbounded state nor move its buckets with values no honest peer
// sends.

// maxDemand bounds a reported demand (tokens per second).
const maxDemand = 1e12

func errorf(format string, a ...any) error {
	return fmt.Errorf("regionlease: "+format, a...)
}

func decodeMessage(from strategy.NodeID, payload []byte) (*peerv1.RegionLeaseMessage, error) {
	m := &peerv1.RegionLeaseMessage{}
	if err := proto.Unmarshal(payload, m); err != nil {
		return nil, errorf("message from %s does not decode: %v", from, err)
	}
	if m.Body == nil {
		return nil, errorf("message from %s has no body", from)
	}
	return m, nil
}

func checkKey(from strategy.NodeID, key string) error {
	if key == "" || len(key) > strategy.MaxKeyStateBytes {
		return errorf("message from %s: key of %d bytes (want 1..%d)", from, len(key), strategy.MaxKeyStateBytes)
	}
	return nil
}

// validate refuses, naming the field and its bounds: an empty or oversized
// key; a forward's tokens outside [1, burst], arrival outside [0, now +
// max_skew] or origin_request_id on a forward that is not a relay; an
// ask's tokens outside [1, burst], time outside [0, now + max_skew],
// demand above 1e12 tokens/s or more than 16 spent leases; a
// grant's tokens outside [0, burst], end beyond now + region_ttl +
// max_skew or dry hint beyond now + a day; a return's unused tokens or a
// used report's tokens outside [0, burst]; a verdict's dry hint beyond a
// day; a replica's fence (or its acknowledgement's) outside [0, now +
// region_ttl + 2*max(takeover - region_ttl, timeout) + max_skew].
func (l *RegionLease) validate(now time.Duration, from strategy.NodeID, m *peerv1.RegionLeaseMessage) error {
	ahead := int64(now + l.maxSkew)
	switch b := m.Body.(type) {
	case *peerv1.RegionLeaseMessage_Forward:
		return l.checkForward(from, b.Forward, ahead)
	case *peerv1.RegionLeaseMessage_Verdict:
		if b.Verdict.EmptyForUs > uint64(maxHint/time.Microsecond) {
			return errorf("verdict from %s: dry hint of %d µs beyond %v", from, b.Verdict.EmptyForUs, maxHint)
		}
	case *peerv1.RegionLeaseMessage_Ask:
		return l.checkAsk(from, b.Ask, ahead)
	case *peerv1.RegionLeaseMessage_Grant:
		return l.checkGrant(now, from, b.Grant)
	case *peerv1.RegionLeaseMessage_Return:
		return l.checkTokens("return", "unused tokens", from, b.Return.Key, b.Return.Unused)
	case *peerv1.RegionLeaseMessage_ReturnAck:
		return checkKey(from, b.ReturnAck.Key)
	case *peerv1.RegionLeaseMessage_Used:
		return l.checkTokens("used report", "tokens", from, b.Used.Key, b.Used.Used)
	case *peerv1.RegionLeaseMessage_Replica:
		return l.checkFence("replica", from, b.Replica.Key, b.Replica.FenceNs, now)
	case *peerv1.RegionLeaseMessage_ReplicaAck:
		return l.checkFence("replica acknowledgement", from, b.ReplicaAck.Key, b.ReplicaAck.FenceNs, now)
	}
	return nil
}

// checkFence: the key, and a fence in [0, now + region_ttl + 2*ahead +
// max_skew] (ahead = max(takeover - region_ttl, timeout): the farthest an
// honest owner ships).
func (l *RegionLease) checkFence(kind string, from strategy.NodeID, key string, fence int64, now time.Duration) error {
	if err := checkKey(from, key); err != nil {
		return err
	}
	if limit := now + l.rttl + 2*l.ahead + l.maxSkew; fence < 0 || fence > int64(limit) {
		return errorf("%s from %s: fence %v outside [0, now + region_ttl + 2*max(takeover - region_ttl, timeout) + max_skew = %v]", kind, from, time.Duration(fence), limit)
	}
	return nil
}

// checkForward: the key, tokens in [1, burst], arrival in [0, ahead]
// (now + max_skew, ns), origin_request_id only on a relay.
func (l *RegionLease) checkForward(from strategy.NodeID, f *peerv1.RegionLeaseForward, ahead int64) error {
	if err := checkKey(from, f.Key); err != nil {
		return err
	}
	if f.ExtraTokens < 0 || f.ExtraTokens >= l.sh.Burst {
		return errorf("forward from %s: %d tokens outside [1, burst %d]", from, f.ExtraTokens+1, l.sh.Burst)
	}
	if f.ArrivalNs < 0 || f.ArrivalNs > ahead {
		return errorf("forward from %s: arrival %v outside [0, now + max_skew %v]", from, time.Duration(f.ArrivalNs), time.Duration(ahead))
	}
	if f.OriginRequestId != 0 && !f.Relay {
		return errorf("forward from %s: origin_request_id %d on a forward that is not a relay", from, f.OriginRequestId)
	}
	return nil
}

// checkAsk: the key, tokens in [1, burst], time in [0, ahead], demand and
// spent leases bounded.
func (l *RegionLease) checkAsk(from strategy.NodeID, a *peerv1.RegionLeaseAsk, ahead int64) error {
	if err := checkKey(from, a.Key); err != nil {
		return err
	}
	switch {
	case a.Tokens < 1 || a.Tokens > l.sh.Burst:
		return errorf("ask from %s: %d tokens outside [1, burst %d]", from, a.Tokens, l.sh.Burst)
	case a.AskedAtNs < 0 || a.AskedAtNs > ahead:
		return errorf("ask from %s: time %v outside [0, now + max_skew %v]", from, time.Duration(a.AskedAtNs), time.Duration(ahead))
	case float64(a.DemandMtps) > maxDemand*1000:
		return errorf("ask from %s: demand %d mtps above %g tokens/s", from, a.DemandMtps, maxDemand)
	case len(a.Spent) > maxSpent:
		return errorf("ask from %s: %d spent leases (at most %d)", from, len(a.Spent), maxSpent)
	}
	return nil
}

// checkGrant: the key, tokens in [0, burst], end within region_ttl +
// max_skew of now (plus a dated push's time ahead, checkDated), dry hint
// within maxHint of now, and the same of the previous push it carries.
func (l *RegionLease) checkGrant(now time.Duration, from strategy.NodeID, g *peerv1.RegionLeaseGrant) error {
	if err := checkKey(from, g.Key); err != nil {
		return err
	}
	if g.Tokens < 0 || g.Tokens > l.sh.Burst {
		return errorf("grant from %s: %d tokens outside [0, burst %d]", from, g.Tokens, l.sh.Burst)
	}
	ahead, err := l.checkDated(now, from, "dated push", g.SentAtNs, g.UsableAtNs)
	if err != nil {
		return err
	}
	prevAhead, err := l.checkDated(now, from, "previous dated push", g.PrevSentAtNs, g.PrevUsableAtNs)
	if err != nil {
		return err
	}
	switch {
	case g.ExpiresNs < 0 || g.ExpiresNs > int64(now+l.rttl+l.maxSkew+ahead):
		return errorf("grant from %s: end %v outside [0, now + region_ttl + max_skew (+ a dated push's time ahead)]", from, time.Duration(g.ExpiresNs))
	case g.EmptyUntilNs < 0 || g.EmptyUntilNs > int64(now+maxHint):
		return errorf("grant from %s: dry hint %v outside [0, now + %v]", from, time.Duration(g.EmptyUntilNs), maxHint)
	case g.PrevTokens < 0 || g.PrevTokens > l.sh.Burst:
		return errorf("grant from %s: previous push of %d tokens outside [0, burst %d]", from, g.PrevTokens, l.sh.Burst)
	case g.PrevExpiresNs < 0 || g.PrevExpiresNs > int64(now+l.rttl+l.maxSkew+prevAhead):
		return errorf("grant from %s: previous push's end %v outside [0, now + region_ttl + max_skew]", from, time.Duration(g.PrevExpiresNs))
	}
	return nil
}

// checkDated bounds a dated push's times (dated.go; usableNs 0: not
// dated, nothing to check): sent (G's clock, ns) within [0, now +
// max_skew], usable within [sent, sent + min(2*latency_hint,
// region_ttl/4)], the most a global owner pushes ahead. It returns the
// push's time ahead (usable - sent), by which its end may lie beyond
// region_ttl from now. what names the push in the error ("dated push").
func (l *RegionLease) checkDated(now time.Duration, from strategy.NodeID, what string, sentNs, usableNs int64) (time.Duration, error) {
	if usableNs == 0 {
		return 0, nil
	}
	ahead := time.Duration(usableNs - sentNs)
	if sentNs < 0 || sentNs > int64(now+l.maxSkew) || ahead < 0 || ahead > l.rlead {
		return 0, errorf("grant from %s: %s sent at %v, usable at %v: want sent within [0, now + max_skew] and usable within [sent, sent + %v]",
			from, what, time.Duration(sentNs), time.Duration(usableNs), l.rlead)
	}
	return ahead, nil
}

// checkTokens: the key, and n tokens (what, e.g. "unused tokens") of a
// message (kind, e.g. "return") in [0, burst].
func (l *RegionLease) checkTokens(kind, what string, from strategy.NodeID, key string, n int64) error {
	if err := checkKey(from, key); err != nil {
		return err
	}
	if n < 0 || n > l.sh.Burst {
		return errorf("%s from %s: %d %s outside [0, burst %d]", kind, from, n, what, l.sh.Burst)
	}
	return nil
}

func (l *RegionLease) dispatch(now time.Duration, from strategy.NodeID, m *peerv1.RegionLeaseMessage, fx *strategy.Effects) error {
	switch b := m.Body.(type) {
	case *peerv1.RegionLeaseMessage_Forward:
		l.onForward(now, from, b.Forward, fx)
	case *peerv1.RegionLeaseMessage_Verdict:
		return l.onVerdict(now, from, b.Verdict, fx)
	case *peerv1.RegionLeaseMessage_Ask:
		l.onAsk(now, from, b.Ask, fx)
	case *peerv1.RegionLeaseMessage_Grant:
		if b.Grant.Pushed {
			l.onPush(now, from, b.Grant, fx)
			return nil
		}
		return l.onGrant(now, from, b.Grant, fx)
	case *peerv1.RegionLeaseMessage_Return:
		l.onReturn(now, from, b.Return, fx)
	case *peerv1.RegionLeaseMessage_ReturnAck:
		l.onReturnAck(from, b.ReturnAck)
	case *peerv1.RegionLeaseMessage_Used:
		l.onUsed(now, from, b.Used)
	case *peerv1.RegionLeaseMessage_Replica:
		l.onReplica(from, b.Replica, fx)
	case *peerv1.RegionLeaseMessage_ReplicaAck:
		l.onReplicaAck(from, b.ReplicaAck)
	}
	return nil
}
