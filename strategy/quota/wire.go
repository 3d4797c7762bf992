package quota

import (
	"fmt"
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
		Elapsed: time.Duration(m.ElapsedNs)}
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
	case m.MaxTokens < 0 || m.MaxTokens > q.sh.burst:
		return a, fmt.Errorf("quota: assignment of %q: max_tokens %d outside [0, %d]", m.Key, m.MaxTokens, q.sh.burst)
	case m.TokensPerFill < 0 || m.TokensPerFill > q.sh.units:
		return a, fmt.Errorf("quota: assignment of %q: tokens_per_fill %d outside [0, %d]", m.Key, m.TokensPerFill, q.sh.units)
	case a.FillInterval != q.sh.fill || m.FillIntervalS > maxFillSeconds:
		return a, fmt.Errorf("quota: assignment of %q: fill interval %d s, this rule's is %v", m.Key, m.FillIntervalS, q.sh.fill)
	case m.TtlS < 0 || m.TtlS > maxTTLSeconds:
		return a, fmt.Errorf("quota: assignment of %q: ttl %d s outside [0, %d]", m.Key, m.TtlS, maxTTLSeconds)
	}
	return a, nil
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
	default:
		panic(fmt.Sprintf("quota: no frame for %T", body))
	}
	return wire.MustMarshal(m)
}
