package quota

import (
	"fmt"
	"math"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"

	peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/internal/wire"
)

// maxFillSeconds and maxTTLSeconds bound the fill interval and TTL of an
// assignment from a peer.
const (
	maxFillSeconds = 3600
	maxTTLSeconds  = 3600
)

// decode parses a peer frame. Errors: a frame that is not a QuotaMessage,
// or one with no body.
func decode(payload []byte) (*peerv1.QuotaMessage, error) {
	var m peerv1.QuotaMessage
	if err := proto.Unmarshal(payload, &m); err != nil {
		return nil, fmt.Errorf("quota: bad frame: %w", err)
	}
	if m.Body == nil {
		return nil, fmt.Errorf("quota: frame with no message")
	}
	return &m, nil
}

// checkKey refuses an empty, over-long or non-UTF-8 key from a peer.
func checkKey(what, key string) error {
	switch {
	case key == "":
		return fmt.Errorf("quota: %s with an empty key", what)
	case len(key) > strategy.MaxKeyStateBytes:
		return fmt.Errorf("quota: %s key of %d bytes is above the limit of %d", what, len(key), strategy.MaxKeyStateBytes)
	case !utf8.ValidString(key):
		return fmt.Errorf("quota: %s key %q is not valid UTF-8", what, key)
	}
	return nil
}

// usageOf converts a peer's usage report, checking it as a driver's
// (strategy.QuotaUsage.Validate) and its resync part against the rule:
// held tokens within the key's units and burst, an expiry no later than
// now + ttl + max_skew.
func (q *Quota) usageOf(now time.Duration, m *peerv1.QuotaUsage) (strategy.QuotaUsage, *held, error) {
	u := strategy.QuotaUsage{Client: strategy.QuotaClient(m.Client), Key: m.Key, Allowed: m.Allowed, Denied: m.Denied,
		Elapsed: time.Duration(m.ElapsedNs), ID: m.ClientId}
	if err := u.Validate(); err != nil {
		return u, nil, fmt.Errorf("quota: %w", err)
	}
	if !m.Resync {
		return u, nil, nil
	}
	h := &held{units: m.HeldTokensPerFill, burst: m.HeldMaxTokens, expires: time.Duration(m.HeldExpiresNs)}
	switch {
	case h.units < 0 || h.units > q.sh.units:
		return u, nil, fmt.Errorf("quota: resync of %q: tokens_per_fill %d outside [0, %d]", m.Key, h.units, q.sh.units)
	case h.burst < 0 || h.burst > q.sh.burst:
		return u, nil, fmt.Errorf("quota: resync of %q: max_tokens %d outside [0, %d]", m.Key, h.burst, q.sh.burst)
	case h.expires > now+q.ttl+q.maxSkew:
		return u, nil, fmt.Errorf("quota: resync of %q: expiry %v after now + ttl + max_skew (%v)", m.Key, h.expires, now+q.ttl+q.maxSkew)
	}
	return u, h, nil
}

// assignmentOf converts an owner's assignment, refusing values no owner of
// this rule sends: tokens beyond the key's units or burst, a fill interval
// other than the rule's, a TTL outside [0, 3600] s.
func (q *Quota) assignmentOf(m *peerv1.QuotaAssign) (strategy.QuotaAssignment, error) {
	if err := checkKey("assignment", m.Key); err != nil {
		return strategy.QuotaAssignment{}, err
	}
	a := strategy.QuotaAssignment{Client: strategy.QuotaClient(m.Client), Key: m.Key, MaxTokens: m.MaxTokens,
		TokensPerFill: m.TokensPerFill, FillInterval: time.Duration(m.FillIntervalS) * time.Second, TTL: time.Duration(m.TtlS) * time.Second, Seq: m.Seq,
		Abandon: m.Abandon}
	switch {
	case m.Client == 0:
		return a, fmt.Errorf("quota: assignment of %q to client 0", m.Key)
	case m.Abandon && (m.MaxTokens != 0 || m.TokensPerFill != 0 || m.FillIntervalS != 0 || m.TtlS != 0):
		return a, fmt.Errorf("quota: abandon of %q with a token bucket (max_tokens %d, tokens_per_fill %d, fill %d s, ttl %d s)", m.Key, m.MaxTokens, m.TokensPerFill, m.FillIntervalS, m.TtlS)
	case m.Abandon:
		return a, nil
	}
	return a, q.checkBucket(m)
}

// checkBucket refuses an assignment's token bucket beyond the key's burst
// or units, of another fill interval, or with a TTL outside [0, 3600] s
// (assignmentOf).
func (q *Quota) checkBucket(m *peerv1.QuotaAssign) error {
	switch {
	case m.MaxTokens < 0 || m.MaxTokens > q.sh.burst:
		return fmt.Errorf("quota: assignment of %q: max_tokens %d outside [0, %d]", m.Key, m.MaxTokens, q.sh.burst)
	case m.TokensPerFill < 0 || m.TokensPerFill > q.sh.units:
		return fmt.Errorf("quota: assignment of %q: tokens_per_fill %d outside [0, %d]", m.Key, m.TokensPerFill, q.sh.units)
	case time.Duration(m.FillIntervalS)*time.Second != q.sh.fill || m.FillIntervalS > maxFillSeconds:
		return fmt.Errorf("quota: assignment of %q: fill interval %d s, this rule's is %v", m.Key, m.FillIntervalS, q.sh.fill)
	case m.TtlS < 0 || m.TtlS > maxTTLSeconds:
		return fmt.Errorf("quota: assignment of %q: ttl %d s outside [0, %d]", m.Key, m.TtlS, maxTTLSeconds)
	}
	return nil
}

func frame(body any) []byte {
	m := &peerv1.QuotaMessage{}
	switch b := body.(type) {
	case *peerv1.QuotaUsage:
		m.Body = &peerv1.QuotaMessage_Usage{Usage: b}
	case *peerv1.QuotaDetach:
		m.Body = &peerv1.QuotaMessage_Detach{Detach: b}
	case *peerv1.QuotaAssign:
		m.Body = &peerv1.QuotaMessage_Assign{Assign: b}
	case *peerv1.QuotaForward:
		m.Body = &peerv1.QuotaMessage_Forward{Forward: b}
	case *peerv1.QuotaVerdict:
		m.Body = &peerv1.QuotaMessage_Verdict{Verdict: b}
	case *peerv1.QuotaAck:
		m.Body = &peerv1.QuotaMessage_Ack{Ack: b}
	case *peerv1.QuotaReplica:
		m.Body = &peerv1.QuotaMessage_Replica{Replica: b}
	case *peerv1.QuotaStateQuery:
		m.Body = &peerv1.QuotaMessage_StateQuery{StateQuery: b}
	case *peerv1.QuotaState:
		m.Body = &peerv1.QuotaMessage_State{State: b}
	default:
		panic(fmt.Sprintf("quota: no frame for %T", body))
	}
	return wire.MustMarshal(m)
}

// recordOf converts an owner's replica (QuotaReplica), refusing values no
// owner of this rule sends: another geometry (fill interval, units, burst),
// a time after now + max_skew, a reserve outside [0, burst], more than
// maxReplicaEntries shares and releases, a share or release with an empty
// or over-long node, client 0, tokens outside the key's units or burst, or
// a time after the replica's + ttl + apply_lag + max_skew, a client id
// over strategy.MaxQuotaClientIDBytes or not UTF-8, an acknowledged send
// after the share's last send (or without a client id or token bucket), a
// share twice,
// or shares and releases that together hold more than the key's units or
// burst.
func (q *Quota) recordOf(now time.Duration, from strategy.NodeID, m *peerv1.QuotaReplica) (*record, error) {
	if err := q.checkReplica(now, m); err != nil {
		return nil, err
	}
	at := time.Duration(m.AtNs)
	horizon := at + q.ttl + q.applyLag + q.maxSkew
	r := &record{from: from, at: at, handover: m.Handover, reserve: m.ReserveTokens, frozenUntil: time.Duration(m.FrozenUntilNs)}
	var units, burst int64
	for _, x := range m.Shares {
		s, err := q.shareOf(m.Key, at, horizon, x)
		if err != nil {
			return nil, err
		}
		if len(r.shares) > 0 && r.shares[len(r.shares)-1].id.compare(s.id) >= 0 {
			return nil, fmt.Errorf("quota: replica of %q: shares not in (node, client) order or twice (client %d at %s)", m.Key, x.Client, x.Node)
		}
		r.shares = append(r.shares, s)
		units += s.units
		burst += s.burst
	}
	for _, x := range m.Pending {
		rel, err := q.releaseOf(m.Key, horizon, x)
		if err != nil {
			return nil, err
		}
		r.pending = append(r.pending, rel)
		units += rel.units
		burst += rel.burst
	}
	if units > q.sh.units || burst > q.sh.burst {
		return nil, fmt.Errorf("quota: replica of %q: shares and releases hold %d units and %d burst, above the key's %d and %d", m.Key, units, burst, q.sh.units, q.sh.burst)
	}
	return r, nil
}

// checkReplica checks a replica's key, geometry, time, reserve, takeover
// and size (recordOf).
func (q *Quota) checkReplica(now time.Duration, m *peerv1.QuotaReplica) error {
	if err := checkKey("replica", m.Key); err != nil {
		return err
	}
	at := time.Duration(m.AtNs)
	switch {
	case time.Duration(m.FillIntervalS)*time.Second != q.sh.fill || m.Units != q.sh.units || m.Burst != q.sh.burst:
		return fmt.Errorf("quota: replica of %q: fill interval %d s, %d units, burst %d; this rule's are %v, %d, %d", m.Key, m.FillIntervalS, m.Units, m.Burst, q.sh.fill, q.sh.units, q.sh.burst)
	case at < 0 || at > now+q.maxSkew:
		return fmt.Errorf("quota: replica of %q: time %v outside [0, now + max_skew = %v]", m.Key, at, now+q.maxSkew)
	case m.ReserveTokens < 0 || m.ReserveTokens > q.sh.burst:
		return fmt.Errorf("quota: replica of %q: reserve of %d tokens outside [0, %d]", m.Key, m.ReserveTokens, q.sh.burst)
	case m.FrozenUntilNs < 0 || time.Duration(m.FrozenUntilNs) > at+q.takeover+q.maxSkew:
		return fmt.Errorf("quota: replica of %q: frozen until %v, after its time + takeover (%v)", m.Key, time.Duration(m.FrozenUntilNs), at+q.takeover)
	case len(m.Shares)+len(m.Pending) > maxReplicaEntries:
		return fmt.Errorf("quota: replica of %q: %d shares and releases, above the limit of %d", m.Key, len(m.Shares)+len(m.Pending), maxReplicaEntries)
	}
	return nil
}

// shareOf converts and checks one share of a replica taken at at (recordOf).
func (q *Quota) shareOf(key string, at, horizon time.Duration, x *peerv1.QuotaReplicaShare) (*share, error) {
	id, err := q.holderOf(key, x.Node, x.Client, x.TokensPerFill, x.MaxTokens)
	if err != nil {
		return nil, err
	}
	s := &share{id: id, demand: x.Demand, units: x.TokensPerFill, burst: x.MaxTokens, sent: x.Sent, seq: x.Seq,
		sentAt: time.Duration(x.SentAtNs), expires: time.Duration(x.ExpiresNs), idleSince: time.Duration(x.IdleSinceNs), live: x.Live,
		cid: x.ClientId, ackedAt: time.Duration(x.AckedSentAtNs)}
	if err := checkClientID(key, x, s); err != nil {
		return nil, err
	}
	switch {
	case math.IsNaN(s.demand) || math.IsInf(s.demand, 0) || s.demand > float64(maxEnvoyTokens)*3600:
		return nil, fmt.Errorf("quota: replica of %q: client %d at %s: demand %g", key, x.Client, x.Node, s.demand)
	case s.sentAt < 0 || s.sentAt > at+q.maxSkew || s.idleSince < 0 || s.idleSince > at+q.maxSkew:
		return nil, fmt.Errorf("quota: replica of %q: client %d at %s: sent at %v, idle since %v, after the replica's time %v", key, x.Client, x.Node, s.sentAt, s.idleSince, at)
	case s.expires < 0 || s.expires > horizon:
		return nil, fmt.Errorf("quota: replica of %q: client %d at %s: expiry %v after the replica's time + ttl + apply_lag (%v)", key, x.Client, x.Node, s.expires, horizon-q.maxSkew)
	}
	s.demand = max(s.demand, -1)
	return s, nil
}

// checkClientID checks a replica share's client id and acknowledged send
// (shareOf): an id of at most strategy.MaxQuotaClientIDBytes of UTF-8, an
// acknowledged send no later than the last send, and only for a share
// with an id and a token bucket sent.
func checkClientID(key string, x *peerv1.QuotaReplicaShare, s *share) error {
	switch {
	case len(s.cid) > strategy.MaxQuotaClientIDBytes || !utf8.ValidString(s.cid):
		return fmt.Errorf("quota: replica of %q: client %d at %s: client id of %d bytes above %d or not UTF-8", key, x.Client, x.Node, len(s.cid), strategy.MaxQuotaClientIDBytes)
	case s.ackedAt < 0 || s.ackedAt > s.sentAt || (s.ackedAt > 0 && (s.cid == "" || !s.sent)):
		return fmt.Errorf("quota: replica of %q: client %d at %s: acknowledged send at %v, after its last send %v or without a client id or token bucket", key, x.Client, x.Node, s.ackedAt, s.sentAt)
	}
	return nil
}

// releaseOf converts and checks one pending release of a replica
// (recordOf).
func (q *Quota) releaseOf(key string, horizon time.Duration, x *peerv1.QuotaReplicaRelease) (release, error) {
	id, err := q.holderOf(key, x.Node, x.Client, x.TokensPerFill, x.MaxTokens)
	if err != nil {
		return release{}, err
	}
	if a := time.Duration(x.AtNs); a < 0 || a > horizon {
		return release{}, fmt.Errorf("quota: replica of %q: release of client %d at %s at %v, after the replica's time + ttl + apply_lag (%v)", key, x.Client, x.Node, a, horizon-q.maxSkew)
	}
	return release{at: time.Duration(x.AtNs), units: x.TokensPerFill, burst: x.MaxTokens, id: id, seq: x.Seq}, nil
}

// holderOf checks one share's or release's client and tokens in a replica.
func (q *Quota) holderOf(key, node string, client uint64, units, burst int64) (holderID, error) {
	switch {
	case node == "" || len(node) > maxNodeIDBytes || !utf8.ValidString(node):
		return holderID{}, fmt.Errorf("quota: replica of %q: node %q empty, over %d bytes or not UTF-8", key, node, maxNodeIDBytes)
	case client == 0:
		return holderID{}, fmt.Errorf("quota: replica of %q: client 0 at %s", key, node)
	case units < 0 || units > q.sh.units || burst < 0 || burst > q.sh.burst:
		return holderID{}, fmt.Errorf("quota: replica of %q: client %d at %s holds %d units and %d burst, outside [0, %d] and [0, %d]", key, client, node, units, burst, q.sh.units, q.sh.burst)
	}
	return holderID{node: strategy.NodeID(node), client: strategy.QuotaClient(client)}, nil
}
