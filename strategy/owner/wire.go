package owner

import (
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/internal/forwarding"
)

// Decoding and validation of the peer messages (api/peer/v1/owner.proto):
// Receive decodes a payload (decodeMessage) and checks it (validate)
// before any handler may change state; every error names the sender, the
// message kind, the field and its value. What can only be checked against
// this node's state (a verdict from a node the request or charge was not
// sent to) is checked by the verdict's handler, still before it changes
// anything.

// decodeMessage decodes a peer's payload. Error: a payload that does not
// decode.
func decodeMessage(from strategy.NodeID, payload []byte) (*peerv1.OwnerMessage, error) {
	var m peerv1.OwnerMessage
	if err := proto.Unmarshal(payload, &m); err != nil {
		return nil, fmt.Errorf("owner: message from %s does not decode: %w", from, err)
	}
	return &m, nil
}

// validate checks a decoded message at now, before it may change any
// state: a body of a known kind, and every bound of that kind's check
// (checkForward, checkLevels, checkLevelQuery, checkRefund). A verdict is
// checked against the request or charge it answers (onVerdict,
// checkVerdict); a levels acknowledgement needs no check.
func (o *Owner) validate(now time.Duration, from strategy.NodeID, m *peerv1.OwnerMessage) error {
	switch b := m.Body.(type) {
	case *peerv1.OwnerMessage_Forward:
		return o.checkForward(now, from, b.Forward)
	case *peerv1.OwnerMessage_Verdict, *peerv1.OwnerMessage_LevelsAck:
		return nil
	case *peerv1.OwnerMessage_Levels:
		return o.checkLevels(now, from, b.Levels)
	case *peerv1.OwnerMessage_LevelQuery:
		return o.checkLevelQuery(from, b.LevelQuery)
	case *peerv1.OwnerMessage_Refund:
		return o.checkRefund(now, from, b.Refund)
	}
	return fmt.Errorf("owner: message from %s has no body", from)
}

// checkForward checks a forwarded request or charge: a key (with split,
// one with a valid sub-bucket index: subIndex), positive tokens,
// arrival_ns not negative (for a charge, at most slack after now),
// max_wait_ns in [0, MaxWait].
func (o *Owner) checkForward(now time.Duration, from strategy.NodeID, f *peerv1.OwnerForward) error {
	switch {
	case f.Key == "":
		return fmt.Errorf("owner: forward from %s: empty key", from)
	case f.Tokens <= 0:
		return fmt.Errorf("owner: forward from %s: tokens %d must be positive", from, f.Tokens)
	case f.ArrivalNs < 0:
		return fmt.Errorf("owner: forward from %s: negative arrival_ns %d", from, f.ArrivalNs)
	case f.MaxWaitNs < 0 || f.MaxWaitNs > int64(MaxWait):
		return fmt.Errorf("owner: forward from %s: max_wait_ns %d outside [0, %v]", from, f.MaxWaitNs, MaxWait)
	case f.Charge && time.Duration(f.ArrivalNs) > now+o.slack:
		return fmt.Errorf("owner: charge from %s: arrival_ns %d is more than %v after now (%d)", from, f.ArrivalNs, o.slack, now)
	}
	if _, err := o.subIndex(f.Key); err != nil {
		return fmt.Errorf("owner: forward from %s: %w", from, err)
	}
	return nil
}

// checkLevelQuery checks a warm-up's level query: at most
// maxLevelsAccepted keys, none empty, each with a valid sub-bucket index
// under split (subIndex).
func (o *Owner) checkLevelQuery(from strategy.NodeID, q *peerv1.OwnerLevelQuery) error {
	if len(q.Keys) > maxLevelsAccepted {
		return fmt.Errorf("owner: level query from %s: %d keys, more than the %d accepted in one message", from, len(q.Keys), maxLevelsAccepted)
	}
	for i, k := range q.Keys {
		if k == "" {
			return fmt.Errorf("owner: level query from %s: key %d is empty", from, i)
		}
		if _, err := o.subIndex(k); err != nil {
			return fmt.Errorf("owner: level query from %s: %w", from, err)
		}
	}
	return nil
}

// checkLevels checks levels shipped by a peer: at most maxLevelsAccepted,
// each with a key (a valid sub-bucket index under split), a level within
// its sub-bucket's [floor, burst] in ticks, and at_ns not negative nor
// more than slack after now.
func (o *Owner) checkLevels(now time.Duration, from strategy.NodeID, ls *peerv1.OwnerLevels) error {
	if len(ls.Levels) > maxLevelsAccepted {
		return fmt.Errorf("owner: levels from %s: %d levels, more than the %d accepted in one message", from, len(ls.Levels), maxLevelsAccepted)
	}
	if o.auto != nil && isRound(ls) {
		return o.checkRound(now, from, ls)
	}
	for i, l := range ls.Levels {
		if l.Key == "" {
			return fmt.Errorf("owner: levels from %s: level %d has an empty key", from, i)
		}
		sub, err := o.subIndex(l.Key)
		if err != nil {
			return fmt.Errorf("owner: levels from %s: %w", from, err)
		}
		capTicks, floor := o.levelBounds(sub)
		switch {
		case l.LevelTicks < floor || l.LevelTicks > capTicks:
			return fmt.Errorf("owner: levels from %s: key %q: level %d ticks is outside [%d, %d] (minus the burst or the overdraft's max_debt, and the burst, in ticks)", from, l.Key, l.LevelTicks, floor, capTicks)
		case l.AtNs < 0:
			return fmt.Errorf("owner: levels from %s: key %q: negative at_ns %d", from, l.Key, l.AtNs)
		case time.Duration(l.AtNs) > now+o.slack:
			return fmt.Errorf("owner: levels from %s: key %q: at_ns %d is more than %v after now (%d)", from, l.Key, l.AtNs, o.slack, now)
		}
	}
	return nil
}

// levelBounds is the [floor, burst] in ticks of a peer's level of
// sub-bucket sub; under split=auto, of the whole key in the wire's ticks
// (the sender's K may differ from this node's; fromWire keeps the level
// within the receiving sub-bucket's bounds).
func (o *Owner) levelBounds(sub int) (capTicks, floor int64) {
	if o.auto != nil {
		return o.auto.baseCap, -o.auto.baseCap
	}
	return o.caps[sub], o.floors[sub]
}

// checkRefund checks a refund (overdraft.go): an empty or invalid key,
// non-positive tokens, a negative time or one more than slack after now.
func (o *Owner) checkRefund(now time.Duration, from strategy.NodeID, r *peerv1.OwnerRefund) error {
	switch {
	case r.Key == "":
		return fmt.Errorf("owner: refund from %s: empty key", from)
	case r.Tokens <= 0:
		return fmt.Errorf("owner: refund from %s: tokens %d must be positive", from, r.Tokens)
	case r.AtNs < 0 || time.Duration(r.AtNs) > now+o.slack:
		return fmt.Errorf("owner: refund from %s: at_ns %d outside [0, now+slack=%d]", from, r.AtNs, now+o.slack)
	}
	if _, err := o.subIndex(r.Key); err != nil {
		return fmt.Errorf("owner: refund from %s: %w", from, err)
	}
	return nil
}

// checkVerdict checks a verdict against the forwarded request p it
// answers: from a node p was forwarded to (forwarding.Pending.CheckFrom),
// and delay_ns within [0, p's max wait], 0 on a refusal (CheckDelay).
func checkVerdict(from strategy.NodeID, p *forwarding.Pending, v *peerv1.OwnerVerdict) error {
	if err := p.CheckFrom(from); err != nil {
		return fmt.Errorf("owner: %w", err)
	}
	if err := p.CheckDelay(from, v.Allowed, v.DelayNs); err != nil {
		return fmt.Errorf("owner: %w", err)
	}
	return nil
}
