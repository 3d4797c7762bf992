package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tokenmesh/tokenmesh/strategy"
)

// ErrNoRefund is wrapped by Refund for a rule whose strategy keeps no
// token bucket per key to give tokens back to (it does not implement
// strategy.Refunder: gdrl, gcounter, tbqueue, adaptive, quota,
// fixedwindow).
var ErrNoRefund = errors.New("cluster: the rule's strategy cannot give tokens back")

// Refund gives back tokens (> 0) of key under rule: the unused part of
// tokens a check or charge took (limiter's Reservation.Settle). The rule's
// strategy (strategy.Refunder: central, local, static, owner, lease)
// credits them to the key's bucket, capped at the burst, at this node or
// at the key's owner (one peer message, not retransmitted: a refund lost
// on the way is not credited, and the tokens stay spent). It returns once
// the strategy has taken the refund in hand, not when the owner credited
// it. Errors: Check's for the rule, key and tokens (no state changes),
// ErrNoRefund (wrapped, naming the strategy) for a strategy that cannot
// refund, ctx.Err(), ErrClosed.
func (n *Node) Refund(ctx context.Context, rule, key string, tokens int64) error {
	rs, err := n.validate(rule, key, tokens)
	if err != nil {
		return err
	}
	if _, ok := rs.s.(strategy.Refunder); !ok {
		return fmt.Errorf("%w: rule %q, strategy %s", ErrNoRefund, rule, rs.rule.Strategy)
	}
	return n.call(ctx, event{kind: evRefund, rule: rs, key: key, tokens: tokens})
}

// handleRefund hands ev's refund to its rule's strategy (loop goroutine),
// after the key's allowance went back (the strategy credits its exact
// level).
func (n *Node) handleRefund(now time.Duration, ev event) {
	rs := n.current(ev.rule)
	if rs == nil {
		return // the rule was removed since validate: nothing to credit
	}
	r, ok := rs.s.(strategy.Refunder)
	if !ok {
		return // replaced by a strategy that cannot refund
	}
	if rs.fast != nil {
		now = n.fastClose(now, rs, ev.key, true)
	}
	id := n.h.NextRequestID()
	n.h.Do(now, rs.idx, func(_ strategy.Strategy, fx *strategy.Effects) {
		r.Refund(now, id, ev.key, ev.tokens, fx)
	})
}
