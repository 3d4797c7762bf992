package static

import (
	"time"

	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/internal/buckets"
)

// Grant hands the driver up to want whole tokens of this node's sub-token
// bucket (r/N, b_i) of key (strategy.Allowancer), at most
// strategy.AllowanceCap of the share, valid for
// strategy.AllowanceValidity. Every request of static is decided from
// the node's own share, so every key can be granted. Ours (issue 14's
// fast path on SRTM §1.2's static split).
func (s *Static) Grant(now time.Duration, key string, want int64, fx *strategy.Effects) (int64, time.Duration) {
	most := strategy.AllowanceCap(s.shareRate, s.shareBurst)
	if want <= 0 || most <= 0 {
		return 0, now
	}
	g := s.held.Grant(s.table.Get(key, now), now, key, want, most)
	return g, now + strategy.AllowanceValidity
}

// Return gives back the unused tokens of key's allowance and closes it
// (strategy.Allowancer).
func (s *Static) Return(now time.Duration, key string, unused int64, fx *strategy.Effects) {
	if s.held.Held(key) <= 0 {
		return
	}
	s.held.Return(s.table.Get(key, now), now, key, unused)
}

// clamp lowers key's sub-token bucket to b_i less the tokens held in the
// driver's allowance (no-op without allowances: the simulator's case).
func (s *Static) clamp(now time.Duration, key string) {
	if s.held.Len() == 0 {
		return
	}
	if b, ok := s.table.Lookup(key); ok {
		s.held.Clamp(b, now, key)
	}
}

// clampAll clamps every key with tokens held (before a sweep, a re-split
// or a snapshot, which read or change every bucket).
func (s *Static) clampAll(now time.Duration) {
	s.held.Keys(func(k string) { s.clamp(now, k) })
}

// remaining is Remaining with the held tokens out of the level, on a copy.
func (s *Static) remaining(now time.Duration, key string) int64 {
	if s.held.Len() > 0 && s.held.Held(key) > 0 {
		if b, ok := s.table.Lookup(key); ok {
			cp := *b
			s.held.Clamp(&cp, now, key)
			return buckets.Whole(cp, now)
		}
	}
	return s.table.Remaining(key, now)
}

var _ strategy.Allowancer = (*Static)(nil)
