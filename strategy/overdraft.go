package strategy

import (
	"fmt"
	"strconv"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
)

// Overdraft (ours): costs charged after the response.
// An AI gateway behind Envoy checks a tenant before an LLM call and, once
// the response is done (apply_on_stream_done), sends a ShouldRateLimit
// whose hits_addend is the tokens the response used. A plain token bucket
// refuses a hit larger than what is left and takes nothing, so such a
// tenant is never charged. Under a rule with overdraft a request marked as
// a charge (Request.Charge) is always taken: its tokens leave the key's
// bucket whatever its level, which goes below zero down to a debt of
// max_debt tokens (the part of a charge beyond it is forgiven); the charge
// is decided Allowed when its tokens were there (bucket.Bucket.ChargeN).
// Checks (every other request) are decided as without overdraft: admitted
// when their tokens are there, taking nothing when refused, so a key in
// debt refuses every check until the refill at the rate has repaid it.
// The admitted checks and charges stay within b + r*T (each was admitted
// with its tokens there); a client that checks before each call and
// charges after it, one call at a time, is charged within b + r*T plus
// its largest single charge over any window T.
//
// The strategies that keep a token bucket per key implement it (central,
// local, static, owner, lease: they declare OverdraftSpecs among their
// parameters and read them with ReadOverdraft); the others refuse the
// parameters with an error naming the strategy (OverdraftUnsupported).

// The overdraft parameters, declared once in OverdraftSpecs.
const (
	// OverdraftParam turns overdraft on (bool).
	OverdraftParam = "overdraft"
	// MaxDebtParam bounds the debt, in tokens (int; default the burst).
	MaxDebtParam = "max_debt"
)

// OverdraftStrategies names the strategies that implement overdraft, for
// the error of the others (a test in strategy/registry checks it against the
// registry).
const OverdraftStrategies = "central, local, static, owner and lease"

// OverdraftSpecs declares the overdraft parameters; a strategy that keeps
// a bucket per key appends them to its own Params (config validation,
// --param and `tokenmesh strategies` read them from there).
var OverdraftSpecs = []ParamSpec{
	{Name: OverdraftParam, Type: ParamBool, Default: "false", Example: "true",
		Doc: "charges (costs known after the response: Envoy's apply_on_stream_done hits, limiter's Settle) are taken whatever the key's level, which goes below zero (a debt, at most max_debt); checks are refused until the refill repays it."},
	{Name: MaxDebtParam, Type: ParamInt, Unit: "tokens", Default: "burst", Example: "5000",
		Doc: "with overdraft, the deepest debt of a key (at least 1; setting it turns overdraft on): the part of a charge beyond it is forgiven; a debt of D takes D/r to repay."},
}

// Overdraft is a rule's overdraft setting, as ReadOverdraft reads it.
type Overdraft struct {
	On      bool
	MaxDebt int64 // tokens, >= 1 when On (0 when off)
}

// ReadOverdraft reads the parameters of OverdraftSpecs from v (the
// strategy declares them) for a rule of rate and burst tokens: overdraft
// is on when overdraft=true, or when max_debt is given without overdraft.
// Errors, naming the strategy: max_debt with overdraft=false, max_debt
// below 1,
// or a debt too deep for the rate's tick arithmetic (max_debt times the
// rate's period in nanoseconds above 2^62, as for a burst:
// bucket.ErrBurstTooLarge).
func ReadOverdraft(v *Values, rate bucket.Rate, burst int64) (Overdraft, error) {
	given := v.Has(MaxDebtParam)
	set := v.Has(OverdraftParam)
	on := v.BoolOr(OverdraftParam, given)
	debt := int64(v.IntOr(MaxDebtParam, int(burst)))
	switch {
	case given && set && !on:
		return Overdraft{}, fmt.Errorf("%s: parameter %s=%d is set with %s=false (it bounds the debt of an overdraft)", v.strategy, MaxDebtParam, debt, OverdraftParam)
	case !on:
		return Overdraft{}, nil
	case debt < 1:
		return Overdraft{}, fmt.Errorf("%s: parameter %s=%d must be at least 1 (tokens)", v.strategy, MaxDebtParam, debt)
	}
	if _, err := bucket.New(rate, debt, 0); err != nil {
		return Overdraft{}, fmt.Errorf("%s: parameter %s=%d: %w", v.strategy, MaxDebtParam, debt, err)
	}
	return Overdraft{On: true, MaxDebt: debt}, nil
}

// OverdraftUnsupported is the error for an overdraft parameter (name, one
// of OverdraftSpecs) given to a strategy that does not declare it.
func OverdraftUnsupported(strategy, name string) error {
	return fmt.Errorf("strategy %s does not implement overdraft (parameter %s): it keeps no token bucket per key to charge; %s do", strategy, name, OverdraftStrategies)
}

// isOverdraftParam reports whether name is one of OverdraftSpecs.
func isOverdraftParam(name string) bool { return name == OverdraftParam || name == MaxDebtParam }

// Refunder is implemented by the strategies that keep a token bucket per
// key (local, central, static, owner, lease): it gives tokens back into
// the key's bucket, the unused part of a reservation settled below its
// size (limiter's Reservation.Settle). Ours.
type Refunder interface {
	// Refund gives back tokens (> 0) of key at now, capped at the burst
	// (bucket.Bucket.Refund): at this node's bucket, or sent to the node
	// holding the key's bucket (owner, lease). id is unique among the
	// driver's requests (host.Host.NextRequestID): a peer that gets the
	// refund twice credits it once. Nothing is decided and nothing comes
	// back; a refund lost on the way is not credited (the tokens stay
	// spent: conservative).
	Refund(now time.Duration, id uint64, key string, tokens int64, fx *Effects)
}

// OverdraftIn reports whether params (unprefixed name=value pairs, as a
// rule's) turn overdraft on, as ReadOverdraft reads them: overdraft=true,
// or max_debt given without overdraft. Values that do not parse count as
// off (the strategy's constructor refuses them).
func OverdraftIn(p Params) bool {
	v, set := p.values[OverdraftParam]
	if set {
		on, err := strconv.ParseBool(v)
		return err == nil && on
	}
	_, debt := p.values[MaxDebtParam]
	return debt
}
