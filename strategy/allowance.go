package strategy

// Allowances: the local fast path. Ours, not a source
// document's: SRTM §1.1's bucket is kept exact while part of its
// tokens sit in the driver's hands.

import (
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/strategy/internal/memsize"
)

// Allowancer is implemented by strategies that can decide some requests
// from local state alone and let the live driver take those decisions in
// the caller's goroutine, off the node's event loop (local, central,
// static). The strategy stays single-threaded and deterministic: it hands
// the driver an allowance of whole tokens of one key, taken out of the
// key's bucket as if admitted at the time of the Grant; the driver admits
// requests by consuming it (an atomic decrement) and gives back what is
// left with Return. The simulator never calls either method, so a strategy
// run without allowances behaves exactly as before.
//
// Exactness: tokens in an allowance count as spent. The strategy keeps the
// key's bucket level plus the tokens it has granted and not had back at
// most the burst (AllowanceLedger), so the tokens available to the key
// (level + unconsumed allowance) form a bucket of the same (r, b): the
// admissions of a key in any window of length T stay within b + r*T
// whatever the driver consumes and when. The price: while tokens granted
// but already consumed are still counted in an open allowance, the bucket
// stops refilling at b minus them, so up to one allowance may be refused
// that an exact bucket would have admitted (only when the key's bucket is
// nearly full); AllowanceCap keeps an allowance small for that reason.
//
// The driver holds at most one allowance per key, returns it before any
// other call about that key (Request, RequestWait), and returns every
// allowance before SetMembers, SetExpected or Leave (or drops them and
// returns 0: tokens dropped are lost, which is safe).
type Allowancer interface {
	// Grant takes up to want whole tokens of key (want >= 1) out of the
	// key's local bucket as if admitted at now and hands them to the
	// driver, who may admit requests for them until until (a time on the
	// strategy's clock, after now). tokens is 0 (and nothing changes)
	// when the strategy cannot decide key locally now, or the bucket
	// holds no whole token; never more than the burst. fx takes what the
	// strategy asks of its driver meanwhile (owner: a sync of the key's
	// level to its replicas).
	Grant(now time.Duration, key string, want int64, fx *Effects) (tokens int64, until time.Duration)
	// Return closes the driver's allowance of key: unused of its tokens
	// go back into the key's bucket (capped at what was granted and not
	// returned; a bucket in debt drops them), every other granted token
	// counts as admitted. A key with no allowance open is ignored.
	Return(now time.Duration, key string, unused int64, fx *Effects)
}

// ExpiringAllowancer is an Allowancer whose allowances must not be
// consumed at or after the until its Grant returned (lease: the tokens are
// part of a lease its owner releases then). The driver reads its clock
// before every consumption of such an allowance (a few tens of
// nanoseconds) instead of relying on its sweep to close the allowance
// some time after until.
type ExpiringAllowancer interface {
	Allowancer
	// AllowancesExpire marks the strategy as one whose allowances expire
	// at their until (it is never called).
	AllowancesExpire()
}

// AllowanceWindow is how much of the rule's rate one allowance may hold
// at most: an allowance never holds more than the refill of this long
// (nor more than a quarter of the burst; see AllowanceCap).
const AllowanceWindow = 5 * time.Millisecond

// AllowanceValidity is how long an allowance of local and static stays
// valid: the driver returns it by then, so tokens of a key that went idle
// are not held (and do not keep the key's bucket from refilling to the
// burst) for long.
const AllowanceValidity = time.Second

// AllowanceCap is the most tokens one allowance of a bucket (rate, burst)
// may hold: the refill of AllowanceWindow, at most a quarter of the burst
// (tokens, rounded down; 0 means no fast path: the rule's rate is too low
// for an allowance of a whole token to pay off). Ours.
func AllowanceCap(rate bucket.Rate, burst int64) int64 {
	if rate.Tokens == 0 || rate.Per <= 0 {
		return 0
	}
	// tokens in AllowanceWindow = Tokens * window / Per, in 128-bit-safe
	// steps: both factors are below 2^63, the window is small.
	w := int64(AllowanceWindow)
	var refill int64
	if rate.Tokens > (1<<62)/w {
		refill = burst // a rate above ~1e9 tokens/ns: bounded by the burst below
	} else {
		refill = rate.Tokens * w / int64(rate.Per)
	}
	return max(min(refill, burst/4), 0)
}

// AllowanceLedger is the strategy's side of the allowances of a table of
// per-key buckets: the tokens granted per key and not returned yet (held).
// It keeps level + held <= burst for every key (Clamp), which is what makes
// the fast path exact (see Allowancer). The zero value is empty and ready.
// Not safe for concurrent use (the strategy's goroutine owns it). Ours.
type AllowanceLedger struct {
	// held is the tokens held per key: > 0 for allowances (Grant), or
	// minus them for a key whose whole bucket is lent (Hold), so that
	// one map says both (a second one for the whole-bucket keys cost
	// ~56 MB more at a million keys lent).
	held map[string]int64
	keys memsize.Keys // held's entries, for MemoryBytes
}

// heldSlotBytes is a slot of held: a string header and an int64.
const heldSlotBytes = memsize.StringHeader + 8

// MemoryBytes estimates the heap the ledger takes, in bytes: its map's
// slots, sized by the most keys held at once since the map last shrank
// (a Go map keeps its slots after deletes; the ledger rebuilds it when
// under a quarter of them are used). The keys' strings are not counted:
// the ledger keeps the string the driver passed, which the driver's
// fast-path entry of the key (and the strategy's own table) hold too.
// 0 for an empty ledger that never held a key. Ours.
func (l *AllowanceLedger) MemoryBytes() int { return memsize.Map(l.keys.Peak(), heldSlotBytes) }

// add adds tokens to key's held count (inserting key when new).
func (l *AllowanceLedger) add(key string, tokens int64) {
	if l.held == nil {
		l.held = map[string]int64{}
	}
	if _, ok := l.held[key]; !ok {
		l.keys.Add(key)
	}
	l.held[key] += tokens
}

// forget deletes key, shrinking the map when it is mostly empty.
func (l *AllowanceLedger) forget(key string) {
	memsize.Delete(l.held, &l.keys, key)
	l.held = memsize.Shrink(l.held, &l.keys)
}

// Len is the number of keys with tokens held by the driver.
func (l *AllowanceLedger) Len() int { return len(l.held) }

// Held is the tokens of key granted (or held by Hold) and not returned.
func (l *AllowanceLedger) Held(key string) int64 {
	h := l.held[key]
	if h < 0 {
		return -h
	}
	return h
}

// Whole reports whether key's tokens are held by Hold (its whole bucket
// lent), until Drop or Return.
func (l *AllowanceLedger) Whole(key string) bool { return l.held[key] < 0 }

// Keys calls f for every key with tokens held (in no particular order).
func (l *AllowanceLedger) Keys(f func(key string)) {
	for k := range l.held {
		f(k)
	}
}

// Clamp brings b (key's bucket) to now and lowers its level to the burst
// less the tokens held for key, if above: the bucket refills only up to
// what the allowance leaves of the burst. Between two clamps at which the
// held tokens are the same, clamping at the second gives exactly the level
// a bucket of that smaller capacity would have (min(C-h, min(C, x)) =
// min(C-h, x)), so calling it before every use of b is exact. Nothing
// happens for a key with nothing held.
func (l *AllowanceLedger) Clamp(b *bucket.Bucket, now time.Duration, key string) {
	clampHeld(b, now, l.Held(key))
}

// clampHeld is Clamp of a bucket with h whole tokens held.
func clampHeld(b *bucket.Bucket, now time.Duration, h int64) {
	if h <= 0 {
		return
	}
	_, _, per := b.LevelAt(now)
	c := b.CapacityTicks()
	ceil := max(c-h*per, -c)    // h <= burst while the driver returns before re-splits
	_ = b.MergeLevel(ceil, now) // within [-c, c], now >= 0: cannot fail
}

// Grant takes up to min(want, most) whole tokens of key out of b at now
// (after Clamp) and records them as held; it returns how many (0 when the
// bucket holds no whole token, want or most is below 1, or the key's
// whole bucket is lent: Hold).
func (l *AllowanceLedger) Grant(b *bucket.Bucket, now time.Duration, key string, want, most int64) int64 {
	if want <= 0 || most <= 0 || l.Whole(key) {
		return 0
	}
	l.Clamp(b, now, key)
	g := takeWhole(b, now, min(want, most))
	if g <= 0 {
		return 0
	}
	l.add(key, g)
	return g
}

// takeWhole takes up to most whole tokens out of b at now (as many as it
// holds) and returns how many.
func takeWhole(b *bucket.Bucket, now time.Duration, most int64) int64 {
	if most <= 0 {
		return 0
	}
	level, _, per := b.LevelAt(now)
	g := min(most, max(level/per, 0))
	if g <= 0 || !b.AllowN(now, g) {
		return 0
	}
	return g
}

// Hold records tokens as held for key without taking them out of a
// bucket, and marks key as Whole: the strategy lent the key's whole
// bucket (BucketLender), and holding its burst keeps the strategy's own
// copy at no token until Drop. Tokens already held for key are kept in
// the count.
func (l *AllowanceLedger) Hold(key string, tokens int64) {
	if tokens <= 0 {
		return
	}
	h := l.Held(key)
	l.add(key, 0)
	l.held[key] = -(h + tokens)
}

// Drop forgets the tokens held for key without a bucket to return them
// to (the strategy dropped the key's bucket): they stay spent.
func (l *AllowanceLedger) Drop(key string) { l.forget(key) }

// Return closes key's allowance at now: b (key's bucket) is clamped with
// the tokens held, then unused of them (at most the tokens held) go back
// into it and nothing is held for key any more. A bucket in debt (waiting
// mode's reservations) drops the returned tokens, which is safe.
func (l *AllowanceLedger) Return(b *bucket.Bucket, now time.Duration, key string, unused int64) {
	h := l.Held(key)
	if h <= 0 {
		return
	}
	l.forget(key)
	returnHeld(b, now, h, unused)
}

// returnHeld clamps b at now with h whole tokens held, then gives back
// unused of them (at most h); b holds nothing for the driver after.
func returnHeld(b *bucket.Bucket, now time.Duration, h, unused int64) {
	if h <= 0 {
		return
	}
	clampHeld(b, now, h)
	u := min(max(unused, 0), h)
	if u == 0 {
		return
	}
	level, _, per := b.LevelAt(now)
	if level < 0 {
		return
	}
	_ = b.SetLevel(now, level+u*per, per) // level + u*per <= C - (h-u)*per: no overflow, no cap
}
