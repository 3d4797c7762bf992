package local

import (
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// Grant hands the driver up to want whole tokens of key's (r, b) bucket
// (strategy.Allowancer), at most strategy.AllowanceCap of the rule, valid
// for strategy.AllowanceValidity. Every request of local and central is
// decided from this node's bucket, so every key can be granted. Ours
// (the fast path; the CRDT thesis §4.3.1's one bucket, kept exact).
func (l *Local) Grant(now time.Duration, key string, want int64, fx *strategy.Effects) (int64, time.Duration) {
	return l.lend.Grant(l.table, now, key, want, strategy.AllowanceCap(l.table.Shape()))
}

// Return gives back the unused tokens of key's allowance and closes it
// (strategy.Allowancer).
func (l *Local) Return(now time.Duration, key string, unused int64, fx *strategy.Effects) {
	l.lend.Return(l.table, now, key, unused)
}

var _ strategy.Allowancer = (*Local)(nil)

// Lend hands the driver key's whole (r, b) bucket
// (strategy.BucketLender): every request of local and central is decided
// from it alone, so the driver can decide them as well, refilling it with
// its own clock, until it reclaims it. Ours (the fast path).
func (l *Local) Lend(now time.Duration, key string, fx *strategy.Effects) (bucket.Bucket, bool) {
	return l.lend.Lend(l.table, now, key)
}

// Reclaim takes key's bucket back from the driver (strategy.BucketLender).
func (l *Local) Reclaim(now time.Duration, key string, b bucket.Bucket, fx *strategy.Effects) {
	l.lend.Reclaim(l.table, now, key, b)
}

var _ strategy.BucketLender = (*Local)(nil)
