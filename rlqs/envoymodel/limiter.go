package envoymodel

import (
	"math"
	"math/big"
	"time"

	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
)

// envoyMinFillSeconds is the period of Envoy's slowest refill: kMinFillRate,
// one token a year of 365 days (source/common/common/token_bucket_impl.cc),
// below which AtomicTokenBucketImpl raises any fill rate.
const envoyMinFillSeconds = 365 * 24 * 60 * 60

// limiter is the token bucket Envoy enforces for one token_bucket assignment:
// the AtomicTokenBucketImpl that createTokenBucketFromAction builds
// (global_client_impl.cc), with its arithmetic made exact.
//
// Envoy keeps a double "time the bucket was empty" and reads the tokens as
// min(max_tokens, (now - then) * fill_rate); a request takes one token when at
// least one is there (consume(1, false)). The model keeps the same bucket as
// an integer level in ticks: a token is perToken ticks and every nanosecond
// refills fill ticks, so that fill/perToken tokens per nanosecond is Envoy's
// fill_rate exactly (tokens_per_fill over the fill interval's whole seconds,
// or Envoy's minimum of one token a year) and nothing drifts. Decisions agree
// with Envoy's up to its double rounding (parts in 10^16).
type limiter struct {
	max       uint64 // max_tokens
	unlimited bool   // the fill interval truncated to 0 s: Envoy's rate is +Inf (or NaN), see newLimiter
	fill      uint64 // ticks per nanosecond
	perToken  u128   // ticks per token
	capacity  u128   // max * perToken
	level     u128   // ticks held at `at`
	at        time.Duration
}

// newLimiter is createTokenBucketFromAction (global_client_impl.cc) for the
// token bucket tb at now, replacing prev (nil when the bucket had no token
// bucket: no assignment yet, a blanket rule, or an expired one):
//
//   - the rate is tokens_per_fill.value() / fill_interval in whole seconds
//     (absl::ToInt64Seconds truncates: 1.9 s is 1 s); an unset
//     tokens_per_fill is 0 there, not the 1 the proto documents, and
//     AtomicTokenBucketImpl raises a rate below one token a year (0
//     included) to one token a year (kMinFillRate);
//   - a fill interval under one second truncates to 0 s: the rate is
//     tokens/0 = +Inf (or 0/0 = NaN), and AtomicTokenBucketImpl then reads
//     min(max_tokens, Inf or NaN) = max_tokens tokens at every request: the
//     bucket admits everything, unless max_tokens is 0 (then nothing);
//   - the bucket starts with initial_tokens = max_tokens * (prev's tokens /
//     prev's max_tokens), a double converted to uint64 (rounded down to whole
//     tokens): the fill ratio of the bucket it replaces; max_tokens (full)
//     when there is no prev. A prev with max_tokens 0 gives 0/0 = NaN there,
//     undefined behaviour in C++ (x86-64 converts it to 2^63, a full bucket;
//     arm64 to 0): the model starts full, as on x86-64.
func newLimiter(tb *typev3.TokenBucket, now time.Duration, prev *limiter) *limiter {
	l := &limiter{max: uint64(tb.GetMaxTokens()), at: now}
	seconds := tb.GetFillInterval().GetSeconds() // whole seconds; validated > 0 overall, so >= 0 here
	tokens := uint64(tb.GetTokensPerFill().GetValue())
	switch {
	case seconds == 0:
		l.unlimited = true
		return l
	case tokens*envoyMinFillSeconds < uint64(seconds): // tokens/seconds below one a year
		l.fill, l.perToken = 1, mul64(envoyMinFillSeconds, uint64(time.Second))
	default:
		l.fill, l.perToken = tokens, mul64(uint64(seconds), uint64(time.Second))
	}
	l.capacity = l.perToken.mul(l.max)
	initial := l.max
	if prev != nil {
		initial = prev.scaledTokens(now, l.max)
	}
	l.level = l.perToken.mul(initial)
	return l
}

// scaledTokens is Envoy's uint64_t(max * (remainingTokens() / maxTokens()))
// for this limiter at now, in exact arithmetic (see newLimiter).
func (l *limiter) scaledTokens(now time.Duration, max uint64) uint64 {
	if l.unlimited || l.max == 0 {
		return max // ratio 1 (an unlimited bucket reads full) or NaN (see newLimiter)
	}
	level := l.levelAt(now)
	n := new(big.Int).Mul(level.big(), new(big.Int).SetUint64(max))
	return n.Quo(n, l.capacity.big()).Uint64()
}

// levelAt is the level refilled to now (a now before the last update reads
// the last update's level).
func (l *limiter) levelAt(now time.Duration) u128 {
	if now <= l.at || !l.level.less(l.capacity) {
		return l.level
	}
	level := l.level.add(mul64(uint64(now-l.at), l.fill))
	if l.capacity.less(level) {
		return l.capacity
	}
	return level
}

// take is consume(1, false): it takes one token at now if the bucket holds
// one and reports whether it did.
func (l *limiter) take(now time.Duration) bool {
	if l.unlimited {
		return l.max > 0
	}
	l.level = l.levelAt(now)
	if now > l.at {
		l.at = now
	}
	if l.level.less(l.perToken) {
		return false
	}
	l.level = l.level.sub(l.perToken)
	return true
}

// tokens is remainingTokens(): the tokens held at now, as a float.
func (l *limiter) tokens(now time.Duration) float64 {
	if l.unlimited {
		return float64(l.max)
	}
	return l.levelAt(now).float() / l.perToken.float()
}

// ratePerSecond is AtomicTokenBucketImpl's fill_rate_ (tokens per second):
// +Inf for an unlimited bucket.
func (l *limiter) ratePerSecond() float64 {
	if l.unlimited {
		return math.Inf(1)
	}
	return float64(l.fill) * float64(time.Second) / l.perToken.float()
}
