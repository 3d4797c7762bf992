package cluster

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/tokenmesh/tokenmesh/rule"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// RuleSnapshot is one rule's bucket states as Node.Snapshot or
// Node.SnapshotChanges takes them.
type RuleSnapshot struct {
	// Strategy is the rule's strategy (a name from strategy/registry), the one
	// whose states these are.
	Strategy string
	// States' At is wall-clock time, nanoseconds since the Unix epoch.
	// Every key not full (Changes false), or the keys changed since the
	// previous SnapshotChanges (Changes).
	States []strategy.KeyState
	// Changes: States and Gone are the changes since the previous
	// SnapshotChanges (strategy.ChangeSnapshotter.SnapshotChanges).
	Changes bool
	// Gone is, with Changes, the keys dropped (full, swept, no longer
	// this node's) since the previous SnapshotChanges.
	Gone []string
}

// Snapshot takes, in the node's goroutine (the strategies stay
// single-threaded), the bucket states of every rule whose strategy is a
// strategy.Snapshotter, by rule name, with the name of the strategy that
// holds them (taken in the same event: a reload cannot come between the
// two). Each state's At is converted from the strategies' time to
// wall-clock time, nanoseconds since the Unix epoch, so the snapshot
// stays valid across restarts whose Epoch differs (Config.Restore). The loop is busy for the time it takes to copy the
// states (docs/PERFORMANCE.md); writing them out is the caller's, outside
// the loop. reuse, when not nil, is an earlier result whose slices are
// reused (overwritten: the caller must be done with them), which spares
// the loop the allocations. Errors: ctx.Err(), ErrClosed. Ours (see
// package statestore).
func (n *Node) Snapshot(ctx context.Context, reuse map[string]RuleSnapshot) (map[string]RuleSnapshot, error) {
	out := map[string]RuleSnapshot{}
	err := n.Inspect(ctx, func(now time.Duration, rule rule.Rule, s strategy.Strategy) {
		sn, ok := s.(strategy.Snapshotter)
		if !ok {
			return
		}
		states := reuse[rule.Name].States[:0]
		sn.Snapshot(now, func(st strategy.KeyState) {
			st.At = n.wallNanos(st.At)
			states = append(states, st)
		})
		out[rule.Name] = RuleSnapshot{Strategy: rule.Strategy, States: states}
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// SnapshotChanges is Snapshot in proportion to the keys changed: in the
// node's goroutine, for every rule whose strategy is a
// strategy.ChangeSnapshotter, the states of the keys changed and the keys
// dropped since the previous SnapshotChanges (Changes set; the loop busy
// for a time in proportion to those keys, docs/PERFORMANCE.md), or, when
// full is true or the strategy cannot tell its changes (its first
// snapshot, a new strategy after a reload, a Restore, a rate or
// membership change: strategy.ChangeSnapshotter), every key not full
// (SnapshotFull: Changes false, O(keys)), which the next SnapshotChanges
// reports changes from. A rule whose strategy is a plain Snapshotter is
// given whole. Applied in order (a whole rule replacing what a store
// holds of it, changes over it), the results hold what Snapshot would, at
// most fewer tokens for a key Snapshot leaves out as full (see
// strategy.ChangeSnapshotter). A result the caller fails to store
// breaks the chain: call with full then. At converted as in Snapshot;
// reuse as in Snapshot (its States and Gone are overwritten). Errors:
// ctx.Err(), ErrClosed (the changes the strategies gave up are lost:
// full the next time). Ours.
func (n *Node) SnapshotChanges(ctx context.Context, full bool, reuse map[string]RuleSnapshot) (map[string]RuleSnapshot, error) {
	out := map[string]RuleSnapshot{}
	err := n.Inspect(ctx, func(now time.Duration, rule rule.Rule, s strategy.Strategy) {
		sn, ok := s.(strategy.Snapshotter)
		if !ok {
			return
		}
		old := reuse[rule.Name]
		rs := RuleSnapshot{Strategy: rule.Strategy, States: old.States[:0], Gone: old.Gone[:0]}
		emit := func(st strategy.KeyState) {
			st.At = n.wallNanos(st.At)
			rs.States = append(rs.States, st)
		}
		cs, ok := s.(strategy.ChangeSnapshotter)
		switch {
		case !ok:
			sn.Snapshot(now, emit)
		case !full && cs.SnapshotChanges(now, emit, func(key string) { rs.Gone = append(rs.Gone, key) }):
			rs.Changes = true
		default:
			cs.SnapshotFull(now, emit)
		}
		out[rule.Name] = rs
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Restored is, per rule, the number of key states Config.Restore handed
// to its strategy at start (rules whose strategy is not a
// strategy.Snapshotter are absent).
func (n *Node) Restored() map[string]int { return n.restored }

// wallBase is the wall-clock time of strategy time 0, ns since 1970.
func (n *Node) wallBase() int64 { return n.start.UnixNano() - int64(n.offset) }

// wallNanos converts a strategy time to wall-clock ns since 1970.
func (n *Node) wallNanos(t time.Duration) time.Duration {
	return time.Duration(n.wallBase()) + t
}

// strategyTime converts wall-clock ns since 1970 to strategy time; a
// time too old for the arithmetic becomes a time long enough ago that
// every bucket has refilled.
func (n *Node) strategyTime(wall time.Duration) time.Duration {
	base := n.wallBase()
	if int64(wall) < math.MinInt64/2+base {
		return math.MinInt64 / 2
	}
	return wall - time.Duration(base)
}

// arrivalAt is a check's arrival for a strategy.ArrivalOrderer: created
// (BatchItem.CreatedAtUnixNs, wall-clock ns since 1970) on the strategy
// clock, within [now - MaxCreatedAge, now] (a caller's clock ahead of
// this node's counts as now, one far behind as MaxCreatedAge ago).
func (n *Node) arrivalAt(created int64, now time.Duration) time.Duration {
	return strategy.EdgeArrival(n.strategyTime(time.Duration(created)), now)
}

// restore hands cfg.Restore's states to the rules' strategies at now
// (New, before any event). Errors name the rule; a strategy refuses the
// whole rule's states when one is invalid (strategy.Snapshotter).
func (n *Node) restore(now time.Duration, saved map[string][]strategy.KeyState) error {
	n.restored = map[string]int{}
	for _, rs := range n.order {
		sn, ok := rs.s.(strategy.Snapshotter)
		if !ok {
			continue
		}
		states := saved[rs.rule.Name]
		conv := make([]strategy.KeyState, len(states))
		for i, st := range states {
			st.At = n.strategyTime(st.At)
			conv[i] = st
		}
		if err := sn.Restore(now, conv); err != nil {
			return fmt.Errorf("cluster: restoring rule %q: %w", rs.rule.Name, err)
		}
		n.restored[rs.rule.Name] = len(states)
	}
	return nil
}
