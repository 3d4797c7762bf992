package bucket

import (
	"math"
	"math/bits"
	"time"
)

// SetRateKeepingDue is SetRate for a bucket whose negative level is
// reservations of waiting mode (ReserveN; SRTM §5.2): their delays were
// counted at the old rate, and the level is back at 0 when the last of
// them is due. SetRate keeps a debt in tokens, so a higher rate would
// repay it sooner and the bucket would admit new requests at once while
// reservations made earlier are still to proceed: counted when they
// proceed, more than the burst in a short interval. Here a higher rate
// scales the debt so that the new rate repays it at the same time (the
// refill in between is forfeited: a token is never created, the new
// level is at most SetRate's); a lower or equal rate keeps the debt in
// tokens as SetRate does (repaid later than the last reservation is due:
// the bucket admits less, never more). A level at or above 0 is SetRate.
// Errors as SetRate's; on error the bucket is unchanged. Ours.
func (b *Bucket) SetRateKeepingDue(now time.Duration, r Rate, burst int64) error {
	b.advance(now)
	if b.level >= 0 || b.tokens == 0 {
		return b.SetRate(now, r, burst)
	}
	due := (-b.level + b.tokens - 1) / b.tokens // ns until the level is back at 0
	oldTokens, oldPer := b.tokens, b.per
	if err := b.SetRate(now, r, burst); err != nil {
		return err
	}
	if b.tokens == 0 || !faster(b.tokens, b.per, oldTokens, oldPer) {
		return nil
	}
	debt := int64(math.MaxInt64 / 2)
	if hi, lo := bits.Mul64(uint64(due), uint64(b.tokens)); hi == 0 && lo <= math.MaxInt64/2 {
		debt = int64(lo)
	}
	b.level = min(b.level, -debt)
	return nil
}

// faster reports whether t1 ticks per ns at per1 ticks per token is a
// higher rate in tokens than t2 at per2: t1/per1 > t2/per2.
func faster(t1, per1, t2, per2 int64) bool {
	h1, l1 := bits.Mul64(uint64(t1), uint64(per2))
	h2, l2 := bits.Mul64(uint64(t2), uint64(per1))
	return h1 > h2 || (h1 == h2 && l1 > l2)
}
