package limiter

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// ErrConcurrencyLimit is returned (wrapped, naming the rule and key) by
// Acquire when no permit was granted: the key has the rule's limit in
// flight across the cluster, or the node cannot grant one now (the key's
// owner did not answer within the rule's timeout, or took the key over
// less than permit_ttl ago).
var ErrConcurrencyLimit = errors.New("limiter: concurrency limit reached")

// ReleaseTimeout bounds the call a release func makes to the node (a
// release that cannot be handed over in time is dropped: the permit
// lapses at its expiry).
const ReleaseTimeout = 5 * time.Second

// Acquire takes one permit of key under the limiter's rule, a rule of
// strategy concurrency: at most the rule's limit N of a key in flight
// across the cluster (the throttling article's "concurrency" limit, seed
// 003; docs/CONCURRENCY.md). On success the caller holds the permit until
// it calls release (idempotent: later calls do nothing), and must be done
// by the rule's permit_ttl (default 10s), after which the permit lapses
// and another caller may take the slot. It blocks until the key's owner
// decides (a round trip at a node that does not own the key) or ctx ends.
//
//	release, err := l.Acquire(ctx, "tenant-42")
//	if err != nil { ... } // errors.Is(err, limiter.ErrConcurrencyLimit): busy
//	defer release()
//
// Errors: ErrConcurrencyLimit (wrapped) when refused; for a rule whose
// strategy hands out no permits, cluster.ErrNoPermits (wrapped); a bad
// key, ctx.Err() (a permit granted after ctx ended lapses at its expiry),
// cluster.ErrClosed. release is nil whenever err is not.
func (l *Limiter) Acquire(ctx context.Context, key string) (release func(), err error) {
	return l.AcquireWait(ctx, key, 0)
}

// AcquireWait is Acquire that, when key is at its limit, waits up to
// maxWait (at most cluster.MaxWait, an hour) in the key's queue at its
// owner, first come first served, for a permit to be released or lapse.
// Errors: Acquire's (ErrConcurrencyLimit when the wait ended without a
// permit), and maxWait outside [0, cluster.MaxWait].
func (l *Limiter) AcquireWait(ctx context.Context, key string, maxWait time.Duration) (release func(), err error) {
	r, err := l.node.AcquireWait(ctx, l.rule, key, 1, maxWait)
	if err != nil {
		return nil, err
	}
	if !r.Granted {
		return nil, fmt.Errorf("%w: rule %q, key %q (limit %d)", ErrConcurrencyLimit, l.rule, key, r.Limit)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), ReleaseTimeout)
			defer cancel()
			_ = l.node.Release(ctx, l.rule, key, r.Permit.ID) // a failed release lapses at the permit's expiry
		})
	}, nil
}
