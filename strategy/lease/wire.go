package lease

import (
	"fmt"
	"math"
	"time"

	"google.golang.org/protobuf/proto"

	peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/internal/forwarding"
)

// Decoding and validation of the peer messages (api/peer/v1/lease.proto):
// Receive decodes a payload (decodeMessage) and checks it (validate)
// before any handler may change state; every error names the sender, the
// message kind, the field and its value. What can only be checked against
// this node's state (a verdict or a grant from a node that was not asked, a
// warm-up answer to a query that went elsewhere) is checked by the
// message's handler, still before it changes anything.

// maxKeyBytes bounds keys from peers; maxSpent the spent leases one ask
// reports.
const (
	maxKeyBytes = 4096
	maxSpent    = 16
)

// decodeMessage decodes a peer's payload. Error: a payload that does not
// decode.
func decodeMessage(from strategy.NodeID, payload []byte) (*peerv1.LeaseMessage, error) {
	var m peerv1.LeaseMessage
	if err := proto.Unmarshal(payload, &m); err != nil {
		return nil, fmt.Errorf("lease: message from %s does not decode: %w", from, err)
	}
	return &m, nil
}

// validate checks a decoded message at now, before it may change any
// state: a body of a known kind, and every bound of that kind's check
// (checkForward, checkAsk, checkReturn, checkReplicas, checkAnswer,
// checkRefund, checkGrant; a state query's key). A verdict is checked
// against the request it answers (checkVerdict, by onVerdict).
func (l *Lease) validate(now time.Duration, from strategy.NodeID, m *peerv1.LeaseMessage) error {
	switch b := m.Body.(type) {
	case *peerv1.LeaseMessage_Forward:
		return l.checkForward(now, from, b.Forward)
	case *peerv1.LeaseMessage_Ask:
		return l.checkAsk(now, from, b.Ask)
	case *peerv1.LeaseMessage_Return:
		return checkReturn(from, b.Return)
	case *peerv1.LeaseMessage_Replicas:
		return l.checkReplicas(now, from, b.Replicas)
	case *peerv1.LeaseMessage_Replica:
		if b.Replica == nil {
			return fmt.Errorf("lease: message from %s has an empty replica", from)
		}
		return l.checkReplicas(now, from, oneReplica(b.Replica))
	case *peerv1.LeaseMessage_StateQuery:
		if b.StateQuery == nil {
			return fmt.Errorf("lease: message from %s has an empty state query", from)
		}
		return checkKey("state query", from, b.StateQuery.Key)
	case *peerv1.LeaseMessage_State:
		if b.State == nil {
			return fmt.Errorf("lease: message from %s has an empty state", from)
		}
		return l.checkAnswer(now, from, b.State)
	case *peerv1.LeaseMessage_Refund:
		return l.checkRefund(now, from, b.Refund)
	case *peerv1.LeaseMessage_ReturnAck, *peerv1.LeaseMessage_Verdict:
		return nil
	case *peerv1.LeaseMessage_Grant:
		return l.checkGrant(now, from, b.Grant)
	}
	return fmt.Errorf("lease: message from %s has no body", from)
}

// checkKey refuses an empty key or one above maxKeyBytes in a message of
// kind what.
func checkKey(what string, from strategy.NodeID, key string) error {
	if key == "" || len(key) > maxKeyBytes {
		return fmt.Errorf("lease: %s from %s: key of %d bytes (want 1..%d)", what, from, len(key), maxKeyBytes)
	}
	return nil
}

// checkForward checks a forwarded request: its key, extra_tokens in
// [0, 2^63-2], arrival_ns in [0, now + max_skew], max_wait_ns in [0,
// MaxWait].
func (l *Lease) checkForward(now time.Duration, from strategy.NodeID, f *peerv1.LeaseForward) error {
	if err := checkKey("forward", from, f.Key); err != nil {
		return err
	}
	future := now + l.maxSkew
	switch {
	case f.ExtraTokens < 0 || f.ExtraTokens >= math.MaxInt64:
		return fmt.Errorf("lease: forward from %s: extra_tokens %d outside [0, 2^63-2]", from, f.ExtraTokens)
	case f.ArrivalNs < 0 || time.Duration(f.ArrivalNs) > future:
		return fmt.Errorf("lease: forward from %s: arrival_ns %d outside [0, now+max_skew=%d]", from, f.ArrivalNs, future)
	case f.MaxWaitNs < 0 || f.MaxWaitNs > int64(MaxWait):
		return fmt.Errorf("lease: forward from %s: max_wait_ns %d outside [0, %v]", from, f.MaxWaitNs, MaxWait)
	}
	return nil
}

// checkAsk checks a lease ask: its key, a seq from 1, tokens in [1,
// burst], asked_at_ns in [0, now + max_skew], at most maxSpent spent
// leases and maxSpent partly used ones reported, each with used tokens in
// [1, burst].
func (l *Lease) checkAsk(now time.Duration, from strategy.NodeID, a *peerv1.LeaseAsk) error {
	if err := checkKey("ask", from, a.Key); err != nil {
		return err
	}
	future := now + l.maxSkew
	switch {
	case a.Seq == 0:
		return fmt.Errorf("lease: ask from %s: seq 0 (seqs start at 1)", from)
	case a.Tokens <= 0 || a.Tokens > l.sh.burst:
		return fmt.Errorf("lease: ask from %s: tokens %d outside [1, burst=%d]", from, a.Tokens, l.sh.burst)
	case a.AskedAtNs < 0 || time.Duration(a.AskedAtNs) > future:
		return fmt.Errorf("lease: ask from %s: asked_at_ns %d outside [0, now+max_skew=%d]", from, a.AskedAtNs, future)
	case len(a.Spent) > maxSpent:
		return fmt.Errorf("lease: ask from %s: %d spent leases reported, at most %d", from, len(a.Spent), maxSpent)
	case len(a.Used) > maxSpent:
		return fmt.Errorf("lease: ask from %s: %d partly used leases reported, at most %d", from, len(a.Used), maxSpent)
	}
	for _, u := range a.Used {
		if u == nil || u.Tokens <= 0 || u.Tokens > l.sh.burst {
			return fmt.Errorf("lease: ask from %s: a partly used lease reported with %d used tokens, outside [1, burst=%d]", from, u.GetTokens(), l.sh.burst)
		}
	}
	return nil
}

// checkReturn checks a lease return: its key, and unused tokens not
// negative.
func checkReturn(from strategy.NodeID, r *peerv1.LeaseReturn) error {
	if err := checkKey("return", from, r.Key); err != nil {
		return err
	}
	if r.Unused < 0 {
		return fmt.Errorf("lease: return from %s: unused %d is negative", from, r.Unused)
	}
	return nil
}

// oneReplica is one LeaseReplica as the LeaseReplicas it stands for (times
// from a base of 0).
func oneReplica(r *peerv1.LeaseReplica) *peerv1.LeaseReplicas {
	return &peerv1.LeaseReplicas{States: []*peerv1.LeaseReplica{r}}
}

// checkReplicas checks every state of m (replica.go): at most
// maxReplicasAccepted, base_ns and each state's time in [0, now + takeover
// + max_skew], each lease end in [its state's time, now + ttl + takeover +
// max_skew], and what every state from a peer keeps (checkState).
func (l *Lease) checkReplicas(now time.Duration, from strategy.NodeID, m *peerv1.LeaseReplicas) error {
	if len(m.States) > maxReplicasAccepted {
		return fmt.Errorf("lease: replicas from %s: %d states, at most %d", from, len(m.States), maxReplicasAccepted)
	}
	latest := now + l.takeover + l.maxSkew            // the latest state time accepted
	latestEnd := now + l.ttl + l.takeover + l.maxSkew // and lease end
	if m.BaseNs < 0 || time.Duration(m.BaseNs) > latest {
		return fmt.Errorf("lease: replicas from %s: base_ns %d outside [0, now+takeover+max_skew=%d]", from, m.BaseNs, latest)
	}
	base := time.Duration(m.BaseNs)
	for _, s := range m.States {
		// The relative times first (bounded, they cannot overflow), then
		// what every state from a peer keeps (checkState).
		switch {
		case s.SinceBaseNs < 0 || time.Duration(s.SinceBaseNs) > latest-base:
			return fmt.Errorf("lease: replicas from %s: key %q: base_ns + since_base_ns %d outside [0, now+takeover+max_skew=%d]", from, s.Key, s.SinceBaseNs, latest)
		case s.LentForNs < 0 || time.Duration(s.LentForNs) > latestEnd-base-time.Duration(s.SinceBaseNs):
			return fmt.Errorf("lease: replicas from %s: key %q: lent_for_ns %d: lease end outside [at, now+ttl+takeover+max_skew]", from, s.Key, s.LentForNs)
		}
		at := base + time.Duration(s.SinceBaseNs)
		if err := l.checkState(now, "replicas", from, s.Key, s.LevelTicks, int64(at), s.LentTokens, int64(at)+s.LentForNs); err != nil {
			return err
		}
	}
	return nil
}

// checkState checks a state from a peer (a replica or a warm-up answer)
// against the bounds every honest state keeps.
func (l *Lease) checkState(now time.Duration, what string, from strategy.NodeID, key string, level, atNs, lent, lentUntilNs int64) error {
	floor := -min(satMul(l.sh.tokensPerNs, int64(l.maxWait)), math.MaxInt64/2) - l.debtTicks // reservations, and an overdraft's debt
	switch {
	case key == "" || len(key) > maxKeyBytes:
		return fmt.Errorf("lease: %s from %s: key of %d bytes (want 1..%d)", what, from, len(key), maxKeyBytes)
	case lent < 0 || lent > l.sh.burst:
		return fmt.Errorf("lease: %s from %s: key %q: lent_tokens %d outside [0, burst=%d]", what, from, key, lent, l.sh.burst)
	case level < floor || level > (l.sh.burst-lent)*l.sh.per:
		return fmt.Errorf("lease: %s from %s: key %q: level_ticks %d outside [%d, (burst - lent_tokens) * %d ticks]", what, from, key, level, floor, l.sh.per)
	case atNs < 0 || time.Duration(atNs) > now+l.takeover+l.maxSkew:
		return fmt.Errorf("lease: %s from %s: key %q: at_ns %d outside [0, now+takeover+max_skew=%d]", what, from, key, atNs, now+l.takeover+l.maxSkew)
	case lentUntilNs < 0 || time.Duration(lentUntilNs) > now+l.ttl+l.takeover+l.maxSkew:
		return fmt.Errorf("lease: %s from %s: key %q: lent_until_ns %d outside [0, now+ttl+takeover+max_skew]", what, from, key, lentUntilNs)
	}
	return nil
}

// checkAnswer checks a warm-up answer (LeaseState, warmup.go): the key of
// a "none", or the bounds of a state (checkState).
func (l *Lease) checkAnswer(now time.Duration, from strategy.NodeID, a *peerv1.LeaseState) error {
	if a.None {
		return checkKey("state", from, a.Key)
	}
	return l.checkState(now, "state", from, a.Key, a.LevelTicks, a.AtNs, a.LentTokens, a.LentUntilNs)
}

// checkRefund checks a refund (overdraft.go): a bad key, non-positive
// tokens, a time before 0 or more than max_skew after now.
func (l *Lease) checkRefund(now time.Duration, from strategy.NodeID, r *peerv1.LeaseRefund) error {
	if err := checkKey("refund", from, r.Key); err != nil {
		return err
	}
	switch {
	case r.Tokens <= 0:
		return fmt.Errorf("lease: refund from %s: tokens %d must be positive", from, r.Tokens)
	case r.AtNs < 0 || time.Duration(r.AtNs) > now+l.maxSkew:
		return fmt.Errorf("lease: refund from %s: at_ns %d outside [0, now+max_skew=%d]", from, r.AtNs, now+l.maxSkew)
	}
	return nil
}

// checkGrant checks a lease grant: its key, tokens in [0, burst],
// expires_ns and empty_until_ns in [0, now + ttl + max_skew].
func (l *Lease) checkGrant(now time.Duration, from strategy.NodeID, g *peerv1.LeaseGrant) error {
	if err := checkKey("grant", from, g.Key); err != nil {
		return err
	}
	expires, until := time.Duration(g.ExpiresNs), time.Duration(g.EmptyUntilNs)
	switch {
	case g.Tokens < 0 || g.Tokens > l.sh.burst:
		return fmt.Errorf("lease: grant from %s: tokens %d outside [0, burst=%d]", from, g.Tokens, l.sh.burst)
	case g.ExpiresNs < 0 || expires > now+l.ttl+l.maxSkew:
		return fmt.Errorf("lease: grant from %s: expires_ns %d outside [0, now+ttl+max_skew=%d]", from, g.ExpiresNs, now+l.ttl+l.maxSkew)
	case g.EmptyUntilNs < 0 || until > now+l.ttl+l.maxSkew:
		return fmt.Errorf("lease: grant from %s: empty_until_ns %d outside [0, now+ttl+max_skew]", from, g.EmptyUntilNs)
	}
	return nil
}

// checkVerdict checks a verdict against the forwarded request p it
// answers: from a node p was forwarded to (forwarding.Pending.CheckFrom),
// empty_for_us (µs) at most takeover + max_skew + one token's refill +
// p's age + its max wait, and delay_ns within [0, p's max wait], 0 on a
// refusal (CheckDelay).
func (l *Lease) checkVerdict(now time.Duration, from strategy.NodeID, p *forwarding.Pending, v *peerv1.LeaseVerdict) error {
	if err := p.CheckFrom(from); err != nil {
		return fmt.Errorf("lease: %w", err)
	}
	maxFor := l.takeover + l.maxSkew + l.oneToken() + (now - p.Req.Arrival) + p.MaxWait
	if v.EmptyForUs > uint64(maxFor/time.Microsecond) {
		return fmt.Errorf("lease: verdict from %s: empty_for_us %d above %d (takeover + max_skew + one token's refill)", from, v.EmptyForUs, maxFor/time.Microsecond)
	}
	if err := p.CheckDelay(from, v.Allowed, v.DelayNs); err != nil {
		return fmt.Errorf("lease: %w", err)
	}
	return nil
}

// satMul is a*b, 0 when either is not positive, saturated at
// math.MaxInt64.
func satMul(a, b int64) int64 {
	if a <= 0 || b <= 0 {
		return 0
	}
	if a > math.MaxInt64/b {
		return math.MaxInt64
	}
	return a * b
}
