package bucket

// The exact level of a bucket, in ticks (Rate.Per in nanoseconds make one
// token), for two uses (ours; SRTM §1.1's bucket state, exported):
//   - snapshots across a restart: LevelAt reads the level at a time from
//     a copy (the bucket is not advanced) and SetLevel writes a level
//     back, rescaled to another rate's ticks (strategy.KeyState);
//   - copies of one bucket on several nodes (owner's replicas and
//     hand-over): Level reads the raw level and the time it is valid at
//     (negative while a debt or reservations wait), MergeLevel merges a
//     peer's copy keeping the more consumed one, and Debit charges tokens
//     a peer already admitted.

import (
	"fmt"
	"time"
)

// LevelAt is the bucket's exact state at now, for a snapshot that must
// survive a restart: the tokens it holds in ticks, its capacity (burst) in
// ticks, and the ticks that make one token (Rate.Per in nanoseconds, or
// 1e9 for a zero rate). Tokens = level/ticksPerToken. It works on a copy
// (value receiver): b is not advanced, so a caller may take a snapshot
// between decisions at earlier times (owner's ordering buffer) without
// changing them. A time before the bucket's last update reads the level
// at that update.
func (b Bucket) LevelAt(now time.Duration) (level, capacity, ticksPerToken int64) {
	b.advance(now)
	return b.level, b.capacity, b.per
}

// SetLevel sets the tokens b holds at now to level ticks of size
// 1/ticksPerToken token (a Level read from a bucket whose rate may
// differ: the level is rescaled to b's ticks, rounding down), capped at
// b's burst. b's last update becomes now; a now before it is treated as
// it (time never goes backwards). Errors, leaving b unchanged: a
// negative level or a non-positive ticksPerToken.
func (b *Bucket) SetLevel(now time.Duration, level, ticksPerToken int64) error {
	switch {
	case ticksPerToken <= 0:
		return fmt.Errorf("bucket: %d ticks per token is not positive", ticksPerToken)
	case level < 0:
		return fmt.Errorf("bucket: level %d ticks is negative", level)
	}
	b.advance(now)
	b.level = min(rescale(level, ticksPerToken, b.per), b.capacity)
	b.fullUntil = 0 // a restored level's history is unknown
	return nil
}

// SetLevelFloor is SetLevel for a level that may be negative (a debt, or
// tokens reserved ahead in waiting mode, as a snapshot keeps them): the
// level is rescaled to b's ticks (rounding down, so a debt never
// shrinks) and kept within [floor, burst], floor being the lowest level
// b's rule lets it hold, in b's ticks (FloorTicks; taken as at most 0);
// level is in ticks of 1/ticksPerToken token. Errors, leaving b
// unchanged: a non-positive ticksPerToken. Ours (so that a restart keeps
// a debt).
func (b *Bucket) SetLevelFloor(now time.Duration, level, ticksPerToken, floor int64) error {
	if ticksPerToken <= 0 {
		return fmt.Errorf("bucket: %d ticks per token is not positive", ticksPerToken)
	}
	b.advance(now)
	b.level = min(max(rescale(level, ticksPerToken, b.per), min(floor, 0)), b.capacity)
	b.fullUntil = 0 // a restored level's history is unknown
	return nil
}

// Level is the bucket's exact level in ticks (TicksPerToken ticks are one
// token; negative while a debt or reservations wait) and the time it is
// valid at (the last update). Together they are the whole state a peer
// needs to continue the bucket (owner's replicas and hand-over): a bucket
// with the same rate and burst, given this level with MergeLevel, refills
// from it exactly.
func (b *Bucket) Level() (ticks int64, at time.Duration) { return b.level, b.last }

// CapacityTicks is the burst in ticks, the highest level.
func (b *Bucket) CapacityTicks() int64 { return b.capacity }

// MergeLevel merges another copy of this bucket, whose level was ticks at
// time at, into b, keeping the more consumed of the two: both are refilled
// to the later of at and b's last update, and b takes the lower level. It
// never raises b's level, so merging any number of copies in any order
// never admits more than the most consumed copy would (the merge rule: the more consumed copy wins).
//
// Errors: ticks outside [-capacity, capacity] (a copy of a bucket with
// this rate and burst never holds that), or a negative at; b is then
// unchanged.
func (b *Bucket) MergeLevel(ticks int64, at time.Duration) error {
	return b.mergeLevel(ticks, at, -b.capacity)
}

// mergeLevel is MergeLevel accepting ticks in [floor, capacity] (floor <=
// -capacity).
func (b *Bucket) mergeLevel(ticks int64, at time.Duration, floor int64) error {
	if ticks < floor || ticks > b.capacity {
		return fmt.Errorf("level %d ticks is outside [%d, %d] (the debt bound and the burst in ticks)", ticks, floor, b.capacity)
	}
	if at < 0 {
		return fmt.Errorf("level time %v is negative", at)
	}
	t := max(b.last, at)
	other := *b
	other.level, other.last = ticks, at
	other.advance(t)
	b.advance(t)
	if other.level < b.level {
		b.level = other.level
		b.fullUntil = 0 // the copy's consumption happened at unknown times
	}
	return nil
}

// MergeLevelAt is MergeLevel for a copy reported by a peer whose clock
// may be ahead of this node's: a copy observed at an at after now is
// merged as observed at now, at the lowest level it can have had then
// (ticks less the refill from now to at, not below one burst of debt), so
// that b is never advanced past now (later decisions at the right time
// would be late ones, held to the tokens spared since; see AllowN) and
// the merge stays conservative. Errors as MergeLevel's.
func (b *Bucket) MergeLevelAt(now time.Duration, ticks int64, at time.Duration) error {
	return b.mergeLevelAt(now, ticks, at, -b.capacity)
}

// mergeLevelAt is MergeLevelAt accepting ticks in [floor, capacity]
// (floor <= -capacity); a copy from ahead is not taken below floor.
func (b *Bucket) mergeLevelAt(now time.Duration, ticks int64, at time.Duration, floor int64) error {
	if ticks < floor || ticks > b.capacity {
		return fmt.Errorf("level %d ticks is outside [%d, %d] (the debt bound and the burst in ticks)", ticks, floor, b.capacity)
	}
	if at > now && now >= 0 {
		ahead := int64(at - now)
		if b.tokens > 0 && ahead >= (ticks-floor)/b.tokens+1 { // compare first: ahead*tokens may overflow
			ticks = floor
		} else {
			ticks -= ahead * b.tokens
		}
		at = now
	}
	return b.mergeLevel(ticks, at, floor)
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
