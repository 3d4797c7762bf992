package limiter

import (
	"context"
	"errors"
	"fmt"

	"github.com/tokenmesh/tokenmesh/cluster"
)

// Reserve-then-settle (ours): a caller that learns the
// cost of its work only afterwards (an LLM call's tokens) reserves an
// estimate with Reserve, does the work when the Reservation is Allowed,
// and settles the actual cost with Settle: the difference is charged
// (more than reserved: an overdraft) or given back (less).

// ErrNoOverdraft is wrapped by Reservation.Settle when actual is above the
// tokens the reservation holds on a rule without overdraft (its params
// have neither overdraft=true nor max_debt): the difference could not be
// charged, as nothing lets a key's level go below zero.
var ErrNoOverdraft = errors.New("limiter: the rule has no overdraft (params overdraft=true or max_debt)")

// ErrSettled is wrapped by Reservation.Settle on a reservation settled
// already.
var ErrSettled = errors.New("limiter: the reservation is settled already")

// Held is the tokens the reservation took from the key: Tokens when it
// was Allowed, 0 when it was refused or not OK (nothing was taken).
func (r *Reservation) Held() int64 {
	if r.allowed {
		return r.tokens
	}
	return 0
}

// Settle tells the cluster what the work this reservation was made for
// actually used, actual tokens (>= 0), once the work is done, against
// Held (Tokens for an Allowed reservation, else 0):
//
//   - actual > Held: the difference is charged to the key as a cost
//     already incurred (cluster.BatchItem.Charge): under the rule's
//     overdraft it is taken whatever the key's level, which may go below
//     zero down to the rule's max_debt (the part beyond is forgiven), and
//     the key's checks are refused until the refill at the rate has
//     repaid the debt. It needs a rule with overdraft (its params
//     overdraft=true or max_debt=N; strategy.OverdraftSpecs): without,
//     Settle charges nothing and returns ErrNoOverdraft (wrapped).
//   - actual < Held: the unused Held - actual tokens are given back to
//     the key's bucket (cluster.Node.Refund), capped at the burst; under
//     owner and lease they go to the key's owner in one message, not
//     retransmitted (a lost refund is not credited: the tokens stay
//     spent). Strategies that keep no bucket per key (gdrl, gcounter,
//     tbqueue, adaptive, quota) cannot: cluster.ErrNoRefund (wrapped).
//   - actual == Held: nothing to do.
//
// A reservation is settled once: a later call returns ErrSettled
// (wrapped) and does nothing, as does a call that failed before reaching
// the cluster (bad actual, ErrNoOverdraft). Other errors are the
// cluster's: a difference above the node's tokens per request, ctx.Err()
// (a charge may still be taken after ctx ended, as with AllowN),
// cluster.ErrClosed. Under overdraft the charge's own verdict (whether
// its tokens were there) does not matter: it is taken either way.
func (r *Reservation) Settle(ctx context.Context, actual int64) error {
	if r.l == nil {
		return fmt.Errorf("limiter: Settle on a Reservation not made by Reserve")
	}
	if actual < 0 {
		return fmt.Errorf("limiter: Settle(%d) on rule %q: actual tokens are negative", actual, r.l.rule)
	}
	held := r.Held()
	if actual > held && !r.l.overdraft {
		return fmt.Errorf("%w: Settle(%d) of a reservation holding %d on rule %q", ErrNoOverdraft, actual, held, r.l.rule)
	}
	if !r.settled.CompareAndSwap(false, true) {
		return fmt.Errorf("%w: key %q on rule %q", ErrSettled, r.key, r.l.rule)
	}
	switch {
	case actual > held:
		_, err := r.l.node.CheckItem(ctx, cluster.BatchItem{Rule: r.l.rule, Key: r.key, Tokens: actual - held, Charge: true})
		return err
	case actual < held:
		return r.l.node.Refund(ctx, r.l.rule, r.key, held-actual)
	}
	return nil
}
