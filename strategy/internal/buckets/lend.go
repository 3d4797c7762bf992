package buckets

import (
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// Lender is the part of the live driver's fast path (strategy.Allowancer)
// that strategies deciding a key from one bucket of a Table share (local,
// central, static, owner for its own keys): it lends whole tokens of the
// key's bucket and keeps the table exact with a strategy.AllowanceLedger
// (level + tokens lent <= burst). The zero value lends nothing and is
// ready. The simulator never lends, so with nothing lent every method is
// a no-op or the Table's own answer. Not safe for concurrent use. Ours.
type Lender struct {
	// Held is the tokens lent per key: an allowance's (Grant), or the
	// burst of a key whose whole bucket is lent (Lend: Held.Whole).
	Held strategy.AllowanceLedger
}

// MemoryBytes estimates the heap the lender takes, in bytes: its ledger's
// map (strategy.AllowanceLedger.MemoryBytes). A live node's fast path
// lends a bucket per key it decides (local, static): ~56 MB at a million
// keys. Ours.
func (l *Lender) MemoryBytes() int { return l.Held.MemoryBytes() }

// Grant lends up to want whole tokens of key's bucket in t at now, at most
// most (strategy.AllowanceCap of the bucket's shape; 0: none), valid for
// strategy.AllowanceValidity. It returns the tokens lent and their expiry.
func (l *Lender) Grant(t *Table, now time.Duration, key string, want, most int64) (int64, time.Duration) {
	if want <= 0 || most <= 0 {
		return 0, now
	}
	return l.Held.Grant(t.Get(key, now), now, key, want, most), now + strategy.AllowanceValidity
}

// Return takes back the unused tokens of key's allowance and closes it;
// a key with nothing lent, or whose whole bucket is lent (Lend), is
// ignored.
func (l *Lender) Return(t *Table, now time.Duration, key string, unused int64) {
	if l.Held.Held(key) <= 0 || l.IsLent(key) {
		return
	}
	l.Held.Return(t.Get(key, now), now, key, unused)
}

// Clamp lowers key's bucket to its burst less the tokens lent for key.
func (l *Lender) Clamp(t *Table, now time.Duration, key string) {
	if l.Held.Len() == 0 {
		return
	}
	if b, ok := t.Lookup(key); ok {
		l.Held.Clamp(b, now, key)
	}
}

// Keeper is, for a sweep (Table.SweepStep), whether it must keep a key's
// bucket though it looks full: tokens of it are held by the driver (the
// keys ClampAll clamps, so that the old sweep in one go never saw them
// full); nil when no key has tokens held.
func (l *Lender) Keeper() func(key string) bool {
	if l.Held.Len() == 0 {
		return nil
	}
	return func(key string) bool { return l.Held.Held(key) > 0 }
}

// ClampAll clamps every key with tokens lent (before a sweep, a re-split
// or a snapshot, which read or change every bucket).
func (l *Lender) ClampAll(t *Table, now time.Duration) {
	l.Held.Keys(func(k string) { l.Clamp(t, now, k) })
}

// Remaining is t.Remaining with the tokens lent for key out of the level
// (on a copy: nothing changes).
func (l *Lender) Remaining(t *Table, now time.Duration, key string) int64 {
	if l.Held.Len() > 0 && l.Held.Held(key) > 0 {
		if b, ok := t.Lookup(key); ok {
			cp := *b
			l.Held.Clamp(&cp, now, key)
			return Whole(cp, now)
		}
	}
	return t.Remaining(key, now)
}

// KeyLevel is key's bucket in t refilled to now (At now), with the
// tokens lent for key out of the level (on a copy: nothing changes); false
// when t holds no bucket for key or it is full (strategy.KeyLeveler).
func (l *Lender) KeyLevel(t *Table, now time.Duration, key string) (strategy.KeyState, bool) {
	b, ok := t.Lookup(key)
	if !ok {
		return strategy.KeyState{}, false
	}
	cp := *b
	if l.Held.Len() > 0 && l.Held.Held(key) > 0 {
		l.Held.Clamp(&cp, now, key)
	}
	level, capacity, per := cp.LevelAt(now)
	level = max(level, 0)
	if level >= capacity {
		return strategy.KeyState{}, false
	}
	return strategy.KeyState{Key: key, Level: level, Capacity: capacity, TicksPerToken: per, At: now}, true
}

// Lend lends the driver key's whole bucket in t at now
// (strategy.BucketLender): it returns a copy, and the table's bucket holds
// no token (its burst is held for key) until Reclaim. false when an
// allowance of key is open or the key is lent already.
func (l *Lender) Lend(t *Table, now time.Duration, key string) (bucket.Bucket, bool) {
	if l.Held.Held(key) > 0 {
		return bucket.Bucket{}, false
	}
	b := t.Get(key, now)
	cp := *b
	_, burst := t.Shape()
	l.Held.Hold(key, max(burst, 1)) // a burst of 0 holds nothing anyway
	l.Held.Clamp(b, now, key)
	return cp, true
}

// Reclaim takes key's bucket back from the driver at now: the table's
// bucket becomes d (the lent copy with the driver's admissions taken
// out), when d has the table's rate and burst; otherwise it holds no
// token at the later of now and d's last update (d's tokens are dropped:
// spent; the driver may have admitted tokens from d until then, so the
// table's bucket refills from there, not from now). A key not lent is
// ignored.
func (l *Lender) Reclaim(t *Table, now time.Duration, key string, d bucket.Bucket) {
	if !l.IsLent(key) {
		return
	}
	b := t.Get(key, now)
	if d.Rate() == b.Rate() && d.CapacityTicks() == b.CapacityTicks() {
		l.Held.Drop(key)
		*b = d
		return
	}
	_, at := d.Level()
	l.Held.Clamp(b, max(now, at), key) // the burst is held: no token at the later time
	l.Held.Drop(key)
}

// IsLent reports whether key's whole bucket is lent to the driver.
func (l *Lender) IsLent(key string) bool { return l.Held.Whole(key) }
