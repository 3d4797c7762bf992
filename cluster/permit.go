package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tokenmesh/tokenmesh/strategy"
)

// Concurrency limits (strategy concurrency; the throttling article's
// "concurrency" limit, seed 003): Acquire takes a permit of a key, Release
// gives it back, and a permit never released lapses at its expiry.

// ErrNoPermits is wrapped by Acquire and Release for a rule whose strategy
// hands out no permits (it does not implement strategy.Releaser: every
// strategy but concurrency).
var ErrNoPermits = errors.New("cluster: the rule's strategy hands out no permits (use a rule of strategy concurrency)")

// Permit is a granted permit: ID (not 0) for Release, and when it lapses
// by itself (wall clock): the holder must be done by Expires.
type Permit struct {
	ID      uint64
	Expires time.Time
}

// AcquireResult is the decision on an Acquire.
type AcquireResult struct {
	Granted bool
	Permit  Permit // zero when not granted
	// Limit is the rule's N, the most permits (weights) of a key in
	// flight across the cluster.
	Limit int64
	// Remaining is Limit minus the key's permits in flight after the
	// decision when this node is the key's owner (it decided); -1 when
	// unknown (decided at another node).
	Remaining int64
}

// limitReporter is what Acquire reads of a Releaser: its N (concurrency's Limit).
type limitReporter interface{ Limit() int64 }

// Acquire asks for a permit of weight slots (usually 1) of key under rule,
// a rule of strategy concurrency, and blocks until the key's owner
// decides or ctx ends. Granted false when key already has its limit in
// flight, or the node cannot grant it now (the key's owner was
// unreachable within the rule's timeout, or took the key over less than
// permit_ttl ago). Errors: Check's for the rule, key and weight,
// ErrNoPermits (wrapped, naming the rule and strategy), ctx.Err() (a
// permit granted after ctx ended is never returned and lapses at its
// expiry), ErrClosed.
func (n *Node) Acquire(ctx context.Context, rule, key string, weight int64) (AcquireResult, error) {
	return n.AcquireWait(ctx, rule, key, weight, 0)
}

// AcquireWait is Acquire in waiting mode: with maxWait > 0 (at most
// MaxWait), an acquire that finds key at its limit waits in the key's
// queue at its owner, first come first served, and is granted as soon as a
// permit of the key is released or lapses, or refused once maxWait has
// passed (strategy.Waiter). Errors: Acquire's, and maxWait outside [0,
// MaxWait].
func (n *Node) AcquireWait(ctx context.Context, rule, key string, weight int64, maxWait time.Duration) (AcquireResult, error) {
	if maxWait < 0 || maxWait > MaxWait {
		return AcquireResult{}, fmt.Errorf("cluster: rule %q: max wait %v outside [0, %v]", rule, maxWait, MaxWait)
	}
	rs, err := n.validate(rule, key, weight)
	if err != nil {
		return AcquireResult{}, err
	}
	if _, ok := rs.s.(strategy.Releaser); !ok {
		return AcquireResult{}, fmt.Errorf("%w: rule %q, strategy %s", ErrNoPermits, rule, rs.rule.Strategy)
	}
	out := AcquireResult{Remaining: -1}
	if l, ok := rs.s.(limitReporter); ok {
		out.Limit = l.Limit()
	}
	r, err := n.check(ctx, event{kind: evRequest, rule: rs, key: key, tokens: weight, maxWait: maxWait})
	if err != nil {
		return AcquireResult{}, err
	}
	out.Remaining = r.Remaining
	if r.Allowed && r.Permit != 0 {
		out.Granted, out.Permit = true, Permit{ID: r.Permit, Expires: r.PermitExpires}
	}
	return out, nil
}

// Release gives back permit of key under rule (a rule of strategy
// concurrency), at this node or at the key's owner (one peer message, not
// retransmitted: a release lost on the way leaves the permit to lapse at
// its expiry). Releasing a permit that is unknown, released already or
// lapsed changes nothing. It returns once the strategy has the release in
// hand. Errors: Check's for the rule and key, permit 0, ErrNoPermits
// (wrapped), ctx.Err(), ErrClosed.
func (n *Node) Release(ctx context.Context, rule, key string, permit uint64) error {
	rs, err := n.validate(rule, key, 1)
	if err != nil {
		return err
	}
	if permit == 0 {
		return fmt.Errorf("cluster: rule %q: permit 0 (no permit has id 0)", rule)
	}
	if _, ok := rs.s.(strategy.Releaser); !ok {
		return fmt.Errorf("%w: rule %q, strategy %s", ErrNoPermits, rule, rs.rule.Strategy)
	}
	return n.call(ctx, event{kind: evRelease, rule: rs, key: key, permit: permit})
}

// handleRelease hands ev's release to its rule's strategy (loop goroutine).
func (n *Node) handleRelease(now time.Duration, ev event) {
	rs := n.current(ev.rule)
	if rs == nil {
		return // the rule was removed since validate
	}
	r, ok := rs.s.(strategy.Releaser)
	if !ok {
		return // replaced by a strategy without permits
	}
	n.h.Do(now, rs.idx, func(_ strategy.Strategy, fx *strategy.Effects) {
		r.Release(now, ev.key, ev.permit, fx)
	})
}

// withPermit adds d's permit to r: its id and its expiry on the wall
// clock (d.Expires is strategy time; now the loop's time of the call).
func withPermit(r CheckResult, now time.Duration, d strategy.Decision) CheckResult {
	if d.Permit != 0 {
		r.Permit, r.PermitExpires = d.Permit, time.Now().Add(d.Expires-now)
	}
	return r
}
