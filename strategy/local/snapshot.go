package local

import (
	"time"

	"github.com/tokenmesh/tokenmesh/strategy"
)

// Snapshot emits this node's (r, b) bucket of every key that is not full
// at now (strategy.Snapshotter). Ours: the CRDT thesis and 003 keep no state
// across restarts; envoy ratelimit keeps its counters in Redis.
//
// With allowances open (strategy.Allowancer) their tokens count as spent:
// the levels are first clamped (which changes no decision to come).
func (l *Local) Snapshot(now time.Duration, emit func(strategy.KeyState)) {
	l.lend.ClampAll(l.table, now)
	l.table.Export(now, nil, emit)
}

// Restore sets the buckets of states at now, refilled at (r, b) for the
// time since each was taken and capped at b (strategy.Snapshotter); a
// level below 0 (a debt) is kept, down to the rule's max_debt (minus the
// burst without overdraft).
// Errors: a state that fails strategy.KeyState.Validate, or a key given
// twice; nothing is restored then.
func (l *Local) Restore(now time.Duration, states []strategy.KeyState) error {
	return l.table.Import(now, states, func(string) int64 {
		if l.od.On {
			return l.od.MaxDebt
		}
		return 0
	})
}

// KeyLevel is key's bucket refilled to now (tokens lent counted as
// spent); false when there is none, or a full one (strategy.KeyLeveler).
// It changes no state.
func (l *Local) KeyLevel(now time.Duration, key string) (strategy.KeyState, bool) {
	return l.lend.KeyLevel(l.table, now, key)
}

var (
	_ strategy.Snapshotter = (*Local)(nil)
	_ strategy.KeyLeveler  = (*Local)(nil)
)
