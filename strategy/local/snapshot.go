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

// SnapshotFull is Snapshot, and the point SnapshotChanges reports the
// changes from (strategy.ChangeSnapshotter). O(keys). Ours.
func (l *Local) SnapshotFull(now time.Duration, emit func(strategy.KeyState)) {
	l.lend.ClampAll(l.table, now)
	l.table.ExportFull(now, nil, emit)
}

// SnapshotChanges emits the keys whose bucket changed since the last
// SnapshotFull or SnapshotChanges, and the keys dropped or full since
// (strategy.ChangeSnapshotter); false when the table does not track them
// (no SnapshotFull yet, a Restore since). O(keys changed, plus the keys
// with allowances open). Ours.
func (l *Local) SnapshotChanges(now time.Duration, emit func(strategy.KeyState), gone func(key string)) bool {
	if !l.table.Tracking() {
		return false
	}
	l.lend.ClampAll(l.table, now)
	return l.table.ExportChanges(now, nil, emit, gone)
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
	_ strategy.Snapshotter       = (*Local)(nil)
	_ strategy.ChangeSnapshotter = (*Local)(nil)
	_ strategy.KeyLeveler        = (*Local)(nil)
)
