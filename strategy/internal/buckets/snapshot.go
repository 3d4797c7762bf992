package buckets

import (
	"fmt"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// Export calls emit, in no particular order, with the state of every
// bucket that is not full at now (a full bucket equals an absent one) and
// for which keep (when not nil) returns true. Each state is the bucket's
// raw level at its last update, At that update (bucket.Bucket.Level),
// not the level refilled to now: Import refills it from At all the same,
// and a bucket untouched since the last snapshot emits the same state
// again, so that a snapshot store can write only the keys that changed
// (package statestore, format 3). It changes nothing: buckets last
// updated after now (owner decides at arrival times) are reported at that
// update. A level below 0 (a debt: an overdraft's charges, owner's charges
// for decisions its peers took while it was unreachable, or tokens
// reserved ahead in waiting mode) is exported as it is, so that a restart
// keeps it (Import). A bucket of burst 0 is not exported: it admits
// nothing, debt or not.
func (t *Table) Export(now time.Duration, keep func(key string) bool, emit func(strategy.KeyState)) {
	for k, e := range t.m {
		if st, ok := exported(k, e, now, keep); ok {
			emit(st)
		}
	}
}

// exported is key k's state as Export emits it, and false when Export
// leaves it out (full at now, burst 0, or keep says no).
func exported(k string, e *entry, now time.Duration, keep func(key string) bool) (strategy.KeyState, bool) {
	b := &e.b
	level, capacity, per := b.LevelAt(now)
	if level >= capacity || capacity <= 0 || (keep != nil && !keep(k)) {
		return strategy.KeyState{}, false
	}
	raw, at := b.Level()
	return strategy.KeyState{Key: k, Level: raw, Capacity: capacity, TicksPerToken: per, At: at}, true
}

// Import sets the buckets of states (strategy.Snapshotter.Restore): each
// is validated (strategy.KeyState.Validate, and no key twice), then its
// level is rescaled to the table's ticks, kept within the table's burst
// and, below, the floor a bucket of key may hold (bucket.Bucket.FloorTicks
// of maxDebt(key) tokens: minus the larger of the burst and the key's
// overdraft debt; nil maxDebt: no overdraft), and refilled at the table's
// rate from its At to now (not at all when At is after now). A bucket full
// at now is not kept (it equals an absent one). On error nothing is
// imported and the error names the state at fault.
func (t *Table) Import(now time.Duration, states []strategy.KeyState, maxDebt func(key string) int64) error {
	seen := make(map[string]struct{}, len(states))
	for i, s := range states {
		if err := s.Validate(); err != nil {
			return fmt.Errorf("state %d: %w", i, err)
		}
		if _, dup := seen[s.Key]; dup {
			return fmt.Errorf("state %d: key %q is given twice", i, s.Key)
		}
		seen[s.Key] = struct{}{}
	}
	if len(states) > 0 {
		t.ch.invalidate() // the next snapshot of changes must be a full one
	}
	for _, s := range states {
		at := min(s.At, now)
		if now-at < 0 { // now - At overflows: a state older than the bucket's arithmetic: long refilled
			continue
		}
		b := bucket.MustNew(t.rate, t.burst, at) // parameters validated in New
		var debt int64
		if maxDebt != nil {
			debt = maxDebt(s.Key)
		}
		_ = b.SetLevelFloor(at, s.Level, s.TicksPerToken, b.FloorTicks(debt)) // validated above
		if old, ok := t.m[s.Key]; ok {
			old.b = b
			continue
		}
		if b.Full(now) {
			continue
		}
		t.add(s.Key, &entry{b: b})
	}
	return nil
}
