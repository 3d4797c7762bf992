package bucket

// Overdraft (ours, costs charged after the response): a
// charge, a cost known only after the work (an LLM response's tokens, sent
// by Envoy's apply_on_stream_done with hits_addend), is taken whatever
// the level, admitted or not, so that it is never lost (ChargeN). The
// level may go below 0, down to a debt of maxDebt tokens, and requests
// that need their tokens there (AllowN) are refused until the refill has
// repaid the debt. Refund is the other half of a reservation settled
// below its size (limiter's Reserve and Settle).

import (
	"math"
	"time"
)

// DebtTicks is a debt of maxDebt tokens in b's ticks (maxDebt tokens of
// Rate.Per nanoseconds' worth of ticks each), capped at the largest
// capacity a bucket may have (math.MaxInt64/2 ticks) so that it never
// overflows; maxDebt <= 0 is 0.
func (b *Bucket) DebtTicks(maxDebt int64) int64 {
	b.zeroTicks()
	if maxDebt <= 0 {
		return 0
	}
	if maxDebt > (math.MaxInt64/2)/b.per {
		return math.MaxInt64 / 2
	}
	return maxDebt * b.per
}

// FloorTicks is the lowest level, in ticks, a copy of this bucket may
// hold when its rule allows a debt of maxDebt tokens: minus the larger of
// the burst (waiting-mode reservations and owner's charges of fallback
// admissions go down to it) and that debt. The bound within which a peer's
// copy of the level is accepted (MergeLevelFloor).
func (b *Bucket) FloorTicks(maxDebt int64) int64 {
	return -max(b.capacity, b.DebtTicks(maxDebt))
}

// ChargeN decides a charge of n tokens at now and takes it whatever the
// verdict: allowed is AllowN's verdict (the bucket holds the n tokens,
// counted as AllowN counts them for a late now; never for n above the
// burst), and the n tokens are taken in both cases, down to a level of
// -maxDebt tokens; the part of n beyond that bound is not taken (forgiven)
// and taken is what was. n <= 0 is allowed and takes nothing. A bucket in
// debt refuses every AllowN until the refill at the rate has repaid the
// debt; a charge is allowed only when its tokens are there, so the
// allowed requests stay within b + r*T exactly as with AllowN alone.
func (b *Bucket) ChargeN(now time.Duration, n, maxDebt int64) (allowed bool, taken int64) {
	b.advance(now)
	if n <= 0 {
		return true, 0
	}
	allowed = n <= b.capacity/b.per && b.spare(now) >= n*b.per
	return allowed, b.overdraw(n, b.DebtTicks(maxDebt))
}

// Overdraw takes n tokens at now whatever the level, down to a level of
// -maxDebt tokens, and returns the tokens taken (fewer than n when the
// bound was reached; 0 for n <= 0): ChargeN without the verdict, for a
// charge a peer already decided (owner's charges of fallback admissions
// under overdraft).
func (b *Bucket) Overdraw(now time.Duration, n, maxDebt int64) int64 {
	b.advance(now)
	if n <= 0 {
		return 0
	}
	return b.overdraw(n, b.DebtTicks(maxDebt))
}

// overdraw takes up to n whole tokens, leaving the level at or above
// -floor ticks (floor >= 0), after advance.
func (b *Bucket) overdraw(n, floor int64) int64 {
	room := (b.level + floor) / b.per // whole tokens above -floor; level + floor cannot overflow (both <= MaxInt64/2)
	n = min(n, room)
	if n <= 0 {
		return 0
	}
	b.level -= n * b.per
	return n
}

// Refund gives back n tokens at now (the unused part of a reservation
// settled below its size): the level rises by n tokens, capped at the
// burst, so a refund never makes a bucket hold more than a full one. It
// returns the ticks credited (less than n tokens' worth when the cap was
// reached; 0 for n <= 0). Giving back tokens that a request took and did
// not use admits at most what a bucket that never took them would: its
// level is never above that bucket's.
func (b *Bucket) Refund(now time.Duration, n int64) int64 {
	b.advance(now)
	if n <= 0 || b.level >= b.capacity {
		return 0
	}
	room := b.capacity - b.level // > 0
	credit := room
	if n <= room/b.per {
		credit = n * b.per
	}
	b.level += credit
	return credit
}

// MergeLevelFloor is MergeLevel for a rule whose levels may go below minus
// the burst (overdraft: FloorTicks): ticks is accepted in [floor,
// capacity] (floor <= -capacity; a floor above that is taken as
// -capacity). Errors as MergeLevel's, with that range.
func (b *Bucket) MergeLevelFloor(ticks int64, at time.Duration, floor int64) error {
	return b.mergeLevel(ticks, at, min(floor, -b.capacity))
}

// MergeLevelAtFloor is MergeLevelAt with MergeLevelFloor's range: a copy
// observed ahead of now is taken at the lowest level it can have had at
// now, not below floor.
func (b *Bucket) MergeLevelAtFloor(now time.Duration, ticks int64, at time.Duration, floor int64) error {
	return b.mergeLevelAt(now, ticks, at, min(floor, -b.capacity))
}
