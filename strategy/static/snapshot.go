package static

import (
	"time"

	"github.com/tokenmesh/tokenmesh/strategy"
)

// Snapshot emits this node's sub-token bucket (r/N, b_i) of every key
// that is not full at now (strategy.Snapshotter); Capacity is the share
// b_i of the split at the time. Ours.
//
// With allowances open (strategy.Allowancer) their tokens count as spent:
// the levels are first clamped (which changes no decision to come).
func (s *Static) Snapshot(now time.Duration, emit func(strategy.KeyState)) {
	s.lend.ClampAll(s.table, now)
	s.table.Export(now, nil, emit)
}

// SnapshotFull is Snapshot, and the point SnapshotChanges reports the
// changes from (strategy.ChangeSnapshotter). O(keys). Ours.
func (s *Static) SnapshotFull(now time.Duration, emit func(strategy.KeyState)) {
	s.lend.ClampAll(s.table, now)
	s.table.ExportFull(now, nil, emit)
}

// SnapshotChanges emits the keys whose bucket changed since the last
// SnapshotFull or SnapshotChanges, and the keys dropped or full since
// (strategy.ChangeSnapshotter); false when the table does not track them
// (no SnapshotFull yet; a membership change re-rated every bucket; a
// Restore). O(keys changed, plus the keys with allowances open). Ours.
func (s *Static) SnapshotChanges(now time.Duration, emit func(strategy.KeyState), gone func(key string)) bool {
	if !s.table.Tracking() {
		return false
	}
	s.lend.ClampAll(s.table, now)
	return s.table.ExportChanges(now, nil, emit, gone)
}

// Restore sets the sub-token buckets of states at now, refilled at the
// current share r/N for the time since each was taken and capped at the
// current share b_i (a restart into a different membership keeps at most
// the new share); a level below 0 (a debt) is kept, down to this node's
// share of max_debt (minus its share of the burst without overdraft). Errors: a state that fails strategy.KeyState.Validate,
// or a key given twice; nothing is restored then.
func (s *Static) Restore(now time.Duration, states []strategy.KeyState) error {
	return s.table.Import(now, states, func(string) int64 { return s.debt })
}

// KeyLevel is this node's share bucket of key refilled to now
// (tokens lent counted as spent); false when there is none, or a full one
// (strategy.KeyLeveler). It changes no state.
func (s *Static) KeyLevel(now time.Duration, key string) (strategy.KeyState, bool) {
	return s.lend.KeyLevel(s.table, now, key)
}

var (
	_ strategy.Snapshotter       = (*Static)(nil)
	_ strategy.ChangeSnapshotter = (*Static)(nil)
	_ strategy.KeyLeveler        = (*Static)(nil)
)
