package static

import (
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// Grant hands the driver up to want whole tokens of this node's sub-token
// bucket (r/N, b_i) of key (strategy.Allowancer), at most
// strategy.AllowanceCap of the share, valid for
// strategy.AllowanceValidity. Every request of static is decided from
// the node's own share, so every key can be granted. Ours (the
// fast path on SRTM §1.2's static split).
func (s *Static) Grant(now time.Duration, key string, want int64, fx *strategy.Effects) (int64, time.Duration) {
	return s.lend.Grant(s.table, now, key, want, strategy.AllowanceCap(s.table.Shape()))
}

// Return gives back the unused tokens of key's allowance and closes it
// (strategy.Allowancer).
func (s *Static) Return(now time.Duration, key string, unused int64, fx *strategy.Effects) {
	s.lend.Return(s.table, now, key, unused)
}

var _ strategy.Allowancer = (*Static)(nil)

// Lend hands the driver this node's whole sub-token bucket (r/N, b_i) of
// key (strategy.BucketLender): every request of static is decided from it
// alone, so the driver can decide them as well, refilling it with its own
// clock, until it reclaims it (before any re-split). Ours (the fast
// path).
func (s *Static) Lend(now time.Duration, key string, fx *strategy.Effects) (bucket.Bucket, bool) {
	return s.lend.Lend(s.table, now, key)
}

// Reclaim takes key's bucket back from the driver (strategy.BucketLender).
func (s *Static) Reclaim(now time.Duration, key string, b bucket.Bucket, fx *strategy.Effects) {
	s.lend.Reclaim(s.table, now, key, b)
}

var _ strategy.BucketLender = (*Static)(nil)
