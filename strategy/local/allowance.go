package local

import (
	"time"

	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/internal/buckets"
)

// Grant hands the driver up to want whole tokens of key's (r, b) bucket
// (strategy.Allowancer), at most strategy.AllowanceCap of the rule, valid
// for strategy.AllowanceValidity. Every request of local and central is
// decided from this node's bucket, so every key can be granted. Ours
// (issue 14's fast path; seed 002 §4.3.1's one bucket, kept exact).
func (l *Local) Grant(now time.Duration, key string, want int64, fx *strategy.Effects) (int64, time.Duration) {
	most := strategy.AllowanceCap(l.rate, l.burst)
	if want <= 0 || most <= 0 {
		return 0, now
	}
	g := l.held.Grant(l.table.Get(key, now), now, key, want, most)
	return g, now + strategy.AllowanceValidity
}

// Return gives back the unused tokens of key's allowance and closes it
// (strategy.Allowancer).
func (l *Local) Return(now time.Duration, key string, unused int64, fx *strategy.Effects) {
	if l.held.Held(key) <= 0 {
		return
	}
	l.held.Return(l.table.Get(key, now), now, key, unused)
}

// clamp lowers key's bucket to the burst less the tokens held in the
// driver's allowance (no-op without allowances: the simulator's case).
func (l *Local) clamp(now time.Duration, key string) {
	if l.held.Len() == 0 {
		return
	}
	if b, ok := l.table.Lookup(key); ok {
		l.held.Clamp(b, now, key)
	}
}

// clampAll clamps every key with tokens held (before a sweep or a
// snapshot, which read the levels of all buckets).
func (l *Local) clampAll(now time.Duration) {
	l.held.Keys(func(k string) { l.clamp(now, k) })
}

// remaining is Remaining with the held tokens out of the level, on a copy.
func (l *Local) remaining(now time.Duration, key string) int64 {
	if l.held.Len() > 0 && l.held.Held(key) > 0 {
		if b, ok := l.table.Lookup(key); ok {
			cp := *b
			l.held.Clamp(&cp, now, key)
			return buckets.Whole(cp, now)
		}
	}
	return l.table.Remaining(key, now)
}

var _ strategy.Allowancer = (*Local)(nil)
