package local

import (
	"time"

	"github.com/tokenmesh/tokenmesh/strategy"
)

// Grant hands the driver up to want whole tokens of key's (r, b) bucket
// (strategy.Allowancer), at most strategy.AllowanceCap of the rule, valid
// for strategy.AllowanceValidity. Every request of local and central is
// decided from this node's bucket, so every key can be granted. Ours
// (issue 14's fast path; seed 002 §4.3.1's one bucket, kept exact).
func (l *Local) Grant(now time.Duration, key string, want int64, fx *strategy.Effects) (int64, time.Duration) {
	return l.lend.Grant(l.table, now, key, want, strategy.AllowanceCap(l.table.Shape()))
}

// Return gives back the unused tokens of key's allowance and closes it
// (strategy.Allowancer).
func (l *Local) Return(now time.Duration, key string, unused int64, fx *strategy.Effects) {
	l.lend.Return(l.table, now, key, unused)
}

var _ strategy.Allowancer = (*Local)(nil)
