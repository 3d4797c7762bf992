// Package peerbound holds the bounds the strategies check values from
// peers against (ours, not a source document's): a member's message can
// only claim what the rule allows since the state it describes began,
// plus a small slack for clock skew between nodes, so that one bad or
// buggy frame cannot lock a key for years or hand out capacity the rule
// does not have.
package peerbound

import (
	"math"
	"math/bits"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
)

// ClockSkew is the slack allowed to a time or an amount of refill a peer
// reports beyond the receiver's own clock: nodes in different processes
// share an epoch (cluster.Config.Epoch) but not a clock.
const ClockSkew = 10 * time.Second

// Refill returns the whole tokens rate r refills in d (floor(d*r)), 0 for
// d <= 0, saturating at math.MaxInt64/4 (so that sums of a few stay
// exact).
func Refill(r bucket.Rate, d time.Duration) int64 {
	const limit = math.MaxInt64 / 4
	if d <= 0 || r.Tokens <= 0 || r.Per <= 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(d), uint64(r.Tokens))
	if hi >= uint64(r.Per) {
		return limit
	}
	q, _ := bits.Div64(hi, lo, uint64(r.Per))
	if q > limit {
		return limit
	}
	return int64(q)
}

// Tokens is the most tokens a bucket of rate r and burst b can have handed
// out from start to now: b + Refill(r, now - start + ClockSkew),
// saturating at math.MaxInt64/4.
func Tokens(r bucket.Rate, b int64, start, now time.Duration) int64 {
	const limit = math.MaxInt64 / 4
	d := now - start
	if d < math.MaxInt64-ClockSkew {
		d += ClockSkew
	}
	t := Refill(r, d)
	if b > limit-t {
		return limit
	}
	return b + t
}
