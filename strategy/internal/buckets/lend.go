package buckets

import (
	"time"

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
	Held strategy.AllowanceLedger
}

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
// a key with nothing lent is ignored.
func (l *Lender) Return(t *Table, now time.Duration, key string, unused int64) {
	if l.Held.Held(key) <= 0 {
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
