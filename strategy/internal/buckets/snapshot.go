package buckets

import (
	"fmt"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// Export calls emit, in no particular order, with the state at now of
// every bucket that is not full (a full bucket equals an absent one) and
// for which keep (when not nil) returns true. It changes nothing: levels
// are read from copies (bucket.Bucket.LevelAt), so buckets last updated
// after now (owner decides at arrival times) are reported at their last
// update and left as they are. A level below 0 (a debt: owner's charges
// for decisions its peers took while it was unreachable) is exported as
// 0: a snapshot holds no debt, so a restart forgives at most one burst of
// it.
func (t *Table) Export(now time.Duration, keep func(key string) bool, emit func(strategy.KeyState)) {
	for k, b := range t.m {
		level, capacity, per := b.LevelAt(now)
		level = max(level, 0)
		if level >= capacity || (keep != nil && !keep(k)) {
			continue
		}
		emit(strategy.KeyState{Key: k, Level: level, Capacity: capacity, TicksPerToken: per, At: now})
	}
}

// Import sets the buckets of states (strategy.Snapshotter.Restore): each
// is validated (strategy.KeyState.Validate, and no key twice), then its
// level is rescaled to the table's ticks, capped at the table's burst and
// refilled at the table's rate from its At to now (not at all when At is
// after now). A bucket full at now is not kept (it equals an absent one).
// On error nothing is imported and the error names the state at fault.
func (t *Table) Import(now time.Duration, states []strategy.KeyState) error {
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
	for _, s := range states {
		at := min(s.At, now)
		if now-at < 0 { // now - At overflows: a state older than the bucket's arithmetic: long refilled
			continue
		}
		b := bucket.MustNew(t.rate, t.burst, at)     // parameters validated in New
		_ = b.SetLevel(at, s.Level, s.TicksPerToken) // validated above
		if old, ok := t.m[s.Key]; ok {
			*old = b
			continue
		}
		if b.Full(now) {
			continue
		}
		t.m[s.Key] = &b
		t.added(s.Key)
	}
	return nil
}
