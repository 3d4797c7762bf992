package strategy

// Lent buckets: the fast path without the driver's loop (item
// 1). Ours. An allowance (Allowancer) is a few tokens of a key's bucket;
// when they run out, the driver's next check of the key goes through its
// loop to the strategy (return, decide, grant again). A strategy that
// decides every request of a key from one bucket of its own, with no peer
// involved (local, central, static), can instead lend the driver that
// whole bucket: the driver then refills and decides the key itself, in
// the caller's goroutine with its own clock, until it gives the bucket
// back. The strategy stays single-threaded and deterministic: it hands
// out a copy and takes a copy back, in its own goroutine.

import (
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
)

// BucketLender is implemented by Allowancers that can lend the driver a
// key's whole bucket (local, central, static). While the bucket is lent
// the driver decides every check of the key alone, exactly as the
// strategy would from that bucket (a LentBucket); the strategy counts
// every token of the key as spent (its own copy holds none and does not
// refill: Remaining is 0, a snapshot emits 0) and is asked nothing about
// the key: the driver reclaims the bucket before any other call about
// the key (Request, RequestWait, Grant, Return, Refund), before Snapshot
// if the levels matter, and before SetMembers, SetExpected and Leave (or
// drops it: its tokens stay spent, which is safe). The simulator never
// lends.
type BucketLender interface {
	Allowancer
	// Lend hands the driver key's bucket as it stands at now (a copy the
	// driver advances with its own clock, never read before now). ok is
	// false, and nothing changes, when the key cannot be lent now (an
	// allowance of it is open, or it is lent already).
	Lend(now time.Duration, key string, fx *Effects) (b bucket.Bucket, ok bool)
	// Reclaim takes key's bucket back at now: b is the lent copy with
	// every token the driver admitted taken out (LentBucket.Close). Its
	// last update may be after now (the driver's clock ran ahead of the
	// loop's): the strategy keeps it as it is, and a later decision at an
	// earlier time is a late one (bucket.Bucket.AllowN: exact). A key not
	// lent is ignored; a bucket of another shape (rate, burst) is
	// dropped, its tokens spent.
	Reclaim(now time.Duration, key string, b bucket.Bucket, fx *Effects)
}

// LentBucket is the driver's side of a lent bucket (BucketLender): the
// bucket, and the whole tokens of it handed to the driver's counter (the
// key's allowance, which checks consume without reading a clock) and not
// settled yet. It keeps level + held <= burst as AllowanceLedger does for
// a strategy's bucket, so the tokens the key can use (level + what the
// counter holds) form one bucket of the same (r, b): the admissions of
// the key in any window of length T stay within b + r*T, whichever
// goroutine admits them. Times passed in must not go backwards between
// calls by more than the bucket copes with (an earlier time is a late
// decision: exact, see bucket.Bucket.AllowN). Not safe for concurrent
// use: the driver guards it (one mutex per key). Ours.
type LentBucket struct {
	b    bucket.Bucket
	held int64 // whole tokens handed to the counter and not settled
}

// NewLentBucket is the driver's side of the bucket b a BucketLender lent,
// with nothing handed out.
func NewLentBucket(b bucket.Bucket) LentBucket { return LentBucket{b: b} }

// Held is the whole tokens handed out and not settled.
func (l *LentBucket) Held() int64 { return l.held }

// Shape is the lent bucket's rate and burst (whole tokens).
func (l *LentBucket) Shape() (bucket.Rate, int64) { return l.b.Rate(), l.b.Burst() }

// Refill settles the allowance at now and decides a request of n tokens
// (n >= 1) from the bucket: unused of the tokens handed out (what the
// counter still holds, taken from it by the caller) go back, the others
// count as admitted; then the request's n tokens are taken if the bucket
// holds them (allowed), and up to min(want, most) more whole tokens are
// handed out as the new allowance (grant: the counter's new value). left
// is the whole tokens the bucket holds beside the new allowance.
func (l *LentBucket) Refill(now time.Duration, unused, n, want, most int64) (allowed bool, grant, left int64) {
	l.settle(now, unused)
	return l.Decide(now, n, want, most)
}

// Settle settles one of several counters the tokens handed out were
// split over (the driver's per-P counters of one key): of the tokens held,
// handed were handed to that counter (at most Held; more is taken as
// Held), and unused of them (what it still holds, taken from it by the
// caller at a time not after now) go back; the others count as admitted.
// The tokens of the other counters stay held: level + held <= burst
// still. Settle(now, Held(), unused) is Refill's settling.
func (l *LentBucket) Settle(now time.Duration, handed, unused int64) {
	handed = min(max(handed, 0), l.held)
	returnHeld(&l.b, now, l.held, min(max(unused, 0), handed))
	l.held -= handed
}

// Decide decides a request of n tokens (n >= 1) at now from the bucket
// as Refill does after settling, and hands out up to min(want, most)
// whole tokens more as a new allowance (grant), held beside any the
// other counters hold. left is the whole tokens the bucket holds beside
// them.
func (l *LentBucket) Decide(now time.Duration, n, want, most int64) (allowed bool, grant, left int64) {
	clampHeld(&l.b, now, l.held)
	allowed = l.b.AllowN(now, n)
	grant = l.handOut(now, min(want, most))
	return allowed, grant, l.whole(now)
}

// Whole is the whole tokens the bucket holds at now beside the tokens
// handed out (at least 0), on a copy.
func (l *LentBucket) Whole(now time.Duration) int64 {
	cp := l.b
	clampHeld(&cp, now, l.held)
	level, _, per := cp.LevelAt(now)
	return max(level/per, 0)
}

// Grant settles the allowance at now as Refill does and hands out up to
// min(want, most) whole tokens as the new one, deciding no request: for
// the allowance the driver opens when the bucket is lent.
func (l *LentBucket) Grant(now time.Duration, unused, want, most int64) (grant, left int64) {
	l.settle(now, unused)
	grant = l.handOut(now, min(want, most))
	return grant, l.whole(now)
}

// Close settles the allowance at now (unused of the tokens handed out go
// back) and returns the bucket, for BucketLender.Reclaim. Nothing is held
// after.
func (l *LentBucket) Close(now time.Duration, unused int64) bucket.Bucket {
	l.settle(now, unused)
	return l.b
}

// KeyState is the lent bucket at now as a strategy's KeyLeveler reads its
// own (the tokens handed out counted as spent), on a copy; false when it
// is full.
func (l *LentBucket) KeyState(now time.Duration, key string) (KeyState, bool) {
	cp := l.b
	clampHeld(&cp, now, l.held)
	level, capacity, per := cp.LevelAt(now)
	level = max(level, 0)
	if level >= capacity {
		return KeyState{}, false
	}
	return KeyState{Key: key, Level: level, Capacity: capacity, TicksPerToken: per, At: max(now, 0)}, true
}

// settle clamps the bucket at now with the tokens held and gives unused
// of them back.
func (l *LentBucket) settle(now time.Duration, unused int64) {
	returnHeld(&l.b, now, l.held, unused)
	l.held = 0
}

// handOut takes up to most whole tokens out of the bucket as held.
func (l *LentBucket) handOut(now time.Duration, most int64) int64 {
	g := takeWhole(&l.b, now, most)
	l.held += g
	return g
}

// whole is the whole tokens the bucket holds at now (at least 0), on a
// copy (the level is clamped by the tokens held already).
func (l *LentBucket) whole(now time.Duration) int64 {
	level, _, per := l.b.LevelAt(now)
	return max(level/per, 0)
}
