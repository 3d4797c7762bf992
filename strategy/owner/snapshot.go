package owner

import (
	"fmt"
	"slices"
	"time"

	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/internal/buckets"
)

// Snapshot emits the bucket of every key this node owns in its current
// view whose bucket is not full at now (strategy.Snapshotter). Buckets of
// keys it no longer owns (left from before a membership change) are
// their new owner's to keep. Requests still in the ordering buffer are not
// part of the snapshot: a restart loses them.
//
// With split, every sub-bucket this node owns is emitted under its
// sub-key (the sub-buckets beyond the first were left out before: a
// restart gave them a fresh burst).
//
// With allowances open (strategy.Allowancer) their tokens count as spent:
// the levels are first clamped (which changes no decision to come).
func (o *Owner) Snapshot(now time.Duration, emit func(strategy.KeyState)) {
	o.clampAll(now)
	for _, t := range o.tables {
		t.Export(now, o.owns, emit)
	}
}

// SnapshotFull is Snapshot, and the point SnapshotChanges reports the
// changes from (strategy.ChangeSnapshotter): the tables start listing
// their changed keys, and the view that decides which keys this node
// keeps (its members, the peers that see it after a restart, the
// split's tables) is remembered. O(keys). Ours.
func (o *Owner) SnapshotFull(now time.Duration, emit func(strategy.KeyState)) {
	o.clampAll(now)
	for _, t := range o.tables {
		t.ExportFull(now, o.owns, emit)
	}
	o.snapView.take(o)
}

// SnapshotChanges emits the buckets of the keys this node owns that
// changed since the last SnapshotFull or SnapshotChanges (checks, charges,
// peers' levels, hand-overs), and as gone the keys dropped, full, or no
// longer its own since (strategy.ChangeSnapshotter). false when it cannot:
// no SnapshotFull yet, a Restore or a re-rating since, or the view
// changed (a membership change, a peer seen after a restart: keys no
// bucket of which changed may have changed hands). O(keys changed, plus
// the members, plus the keys with allowances open). Ours.
func (o *Owner) SnapshotChanges(now time.Duration, emit func(strategy.KeyState), gone func(key string)) bool {
	if !o.snapView.same(o) {
		return false
	}
	for _, t := range o.tables {
		if !t.Tracking() {
			return false
		}
	}
	o.clampAll(now)
	for _, t := range o.tables {
		t.ExportChanges(now, o.owns, emit, gone) // tracking: checked above, and clamps keep it
	}
	return true
}

// snapView is what decides which keys an owner node keeps in its
// snapshots (owns, Snapshot's tables), as of its last SnapshotFull.
type snapView struct {
	taken   bool
	members []strategy.NodeID
	seenBy  []strategy.NodeID // the restart's seenBy, sorted; nil when seenBy is nil
	seenAll bool              // seenBy is nil (no deferral)
	tables  []*buckets.Table
}

// take remembers o's view.
func (v *snapView) take(o *Owner) {
	v.taken = true
	v.members = append(v.members[:0], o.members...)
	v.seenAll = o.rs.seenBy == nil
	v.seenBy = v.seenBy[:0]
	for m := range o.rs.seenBy {
		v.seenBy = append(v.seenBy, m)
	}
	slices.Sort(v.seenBy)
	v.tables = append(v.tables[:0], o.tables...)
}

// same reports whether o's view is the one taken.
func (v *snapView) same(o *Owner) bool {
	if !v.taken || !slices.Equal(v.members, o.members) || v.seenAll != (o.rs.seenBy == nil) ||
		len(v.seenBy) != len(o.rs.seenBy) || !slices.Equal(v.tables, o.tables) {
		return false
	}
	for _, m := range v.seenBy {
		if !o.rs.seenBy[m] {
			return false
		}
	}
	return true
}

// Restore sets the buckets of states at now, refilled at (r, b) for the
// time since each was taken and capped at b (strategy.Snapshotter); a
// level below 0 (a debt) is kept, down to minus the larger of the burst
// and the rule's max_debt. It
// restores every state given, owned in the current view or not: right
// after a whole-cluster restart a node may see only itself, and keys it
// does not own once the others are back are swept as they go idle.
// With split, each state goes to its sub-bucket's table; a state whose
// key has no sub-bucket index of the current split (the split setting
// changed since the snapshot) is dropped, its bucket starting full.
// Errors: a state that fails strategy.KeyState.Validate, or a key given
// twice; nothing is restored then.
func (o *Owner) Restore(now time.Duration, states []strategy.KeyState) error {
	debt := func(key string) int64 { return o.debts[o.subOf(key)] }
	if o.split == 1 {
		return o.table.Import(now, states, debt)
	}
	seen := make(map[string]struct{}, len(states))
	per := make([][]strategy.KeyState, len(o.tables))
	for i, s := range states {
		if err := s.Validate(); err != nil {
			return fmt.Errorf("state %d: %w", i, err)
		}
		if _, dup := seen[s.Key]; dup {
			return fmt.Errorf("state %d: key %q is given twice", i, s.Key)
		}
		seen[s.Key] = struct{}{}
		if _, err := o.subIndex(s.Key); err == nil {
			sub := o.subOf(s.Key) // the sub-bucket's table (split=auto: of this node's K)
			per[sub] = append(per[sub], s)
		}
	}
	for sub, t := range o.tables {
		if err := t.Import(now, per[sub], debt); err != nil {
			return err // not reached: validated above
		}
	}
	return nil
}

// KeyLevel is key's bucket at this node refilled to now (tokens lent
// counted as spent), also for a key it holds as a replica; false when it
// holds none, or a full one (strategy.KeyLeveler). It changes no state.
func (o *Owner) KeyLevel(now time.Duration, key string) (strategy.KeyState, bool) {
	if o.split > 1 {
		if _, err := o.subIndex(key); err != nil {
			return strategy.KeyState{}, false
		}
	}
	return o.lend.KeyLevel(o.tab(key), now, key)
}

var (
	_ strategy.Snapshotter       = (*Owner)(nil)
	_ strategy.ChangeSnapshotter = (*Owner)(nil)
	_ strategy.KeyLeveler        = (*Owner)(nil)
)
