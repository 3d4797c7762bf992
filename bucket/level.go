package bucket

import (
	"fmt"
	"time"
)

// Level is the bucket's exact level in ticks (TicksPerToken ticks are one
// token; negative while a debt or reservations wait) and the time it is
// valid at (the last update). Together they are the whole state a peer
// needs to continue the bucket (owner's replicas and hand-over): a bucket
// with the same rate and burst, given this level with MergeLevel, refills
// from it exactly.
func (b *Bucket) Level() (ticks int64, at time.Duration) { return b.level, b.last }

// TicksPerToken is the number of ticks one token costs (the rate's Per in
// nanoseconds).
func (b *Bucket) TicksPerToken() int64 { return b.per }

// CapacityTicks is the burst in ticks, the highest level.
func (b *Bucket) CapacityTicks() int64 { return b.capacity }

// MergeLevel merges another copy of this bucket, whose level was ticks at
// time at, into b, keeping the more consumed of the two: both are refilled
// to the later of at and b's last update, and b takes the lower level. It
// never raises b's level, so merging any number of copies in any order
// never admits more than the most consumed copy would (issue 11's rule).
//
// Errors: ticks outside [-capacity, capacity] (a copy of a bucket with
// this rate and burst never holds that), or a negative at; b is then
// unchanged.
func (b *Bucket) MergeLevel(ticks int64, at time.Duration) error {
	if ticks < -b.capacity || ticks > b.capacity {
		return fmt.Errorf("level %d ticks is outside [-%d, %d] (the burst in ticks)", ticks, b.capacity, b.capacity)
	}
	if at < 0 {
		return fmt.Errorf("level time %v is negative", at)
	}
	t := max(b.last, at)
	other := *b
	other.level, other.last = ticks, at
	other.advance(t)
	b.advance(t)
	b.level = min(b.level, other.level)
	return nil
}

// Debit takes n tokens at now whatever the level, down to a debt of one
// burst (level -capacity): tokens a peer already admitted on this bucket's
// behalf (owner's fallback decisions, charged to the owner later). n <= 0
// takes nothing. It reports the tokens actually taken (less than n when
// the debt bound was reached).
func (b *Bucket) Debit(now time.Duration, n int64) int64 {
	b.advance(now)
	if n <= 0 {
		return 0
	}
	room := (b.level + b.capacity) / b.per // whole tokens above -capacity
	n = min(n, room)
	if n <= 0 {
		return 0
	}
	b.level -= n * b.per
	return n
}
