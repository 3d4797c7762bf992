package httplimit

import (
	"context"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"

	tokenmeshv1 "github.com/tokenmesh/tokenmesh/api/tokenmesh/v1"
	"github.com/tokenmesh/tokenmesh/cluster"
)

// Concurrency limits (Options.Concurrency): a rule of strategy
// concurrency allows at most N requests of a key in flight across the
// cluster (the throttling article's "concurrency" limit, seed 003). The
// middleware acquires a permit before the handler and releases it when
// the handler returns; a refusal is answered as a rate refusal (429 by
// default, RateLimit-Policy q = N and RateLimit r = the permits left when
// the deciding node knows them), without Retry-After (a slot frees when
// some holder finishes, which nobody can predict).

// Acquirer takes permits of a concurrency rule. A Checker that is also an
// Acquirer (GRPC, Local over a *cluster.Node, LocalNode) serves
// Options.Concurrency.
type Acquirer interface {
	// Acquire asks for one permit of key under rule. Result.Allowed
	// reports whether it was granted; then release gives it back
	// (idempotent; it must be called once the work is done), else release
	// is nil. Result.Limit is N, Remaining the permits left (-1 unknown).
	Acquire(ctx context.Context, rule, key string) (res Result, release func(), err error)
}

// releaseTimeout bounds a release call (a release that fails leaves the
// permit to lapse at its expiry, the rule's permit_ttl).
const releaseTimeout = 5 * time.Second

// acquireClient is the part of tokenmeshv1.RateLimitServiceClient the
// GRPC Checker's Acquire uses.
type acquireClient interface {
	Acquire(ctx context.Context, in *tokenmeshv1.AcquireRequest, opts ...grpc.CallOption) (*tokenmeshv1.AcquireResponse, error)
	Release(ctx context.Context, in *tokenmeshv1.ReleaseRequest, opts ...grpc.CallOption) (*tokenmeshv1.ReleaseResponse, error)
}

// Acquire implements Acquirer over tokenmesh.v1.RateLimitService/Acquire
// and Release. Errors: the client's that does not serve Acquire, and the
// call's.
func (g grpcChecker) Acquire(ctx context.Context, rule, key string) (Result, func(), error) {
	c, ok := g.c.(acquireClient)
	if !ok {
		return Result{}, nil, fmt.Errorf("httplimit: the gRPC client %T has no Acquire", g.c)
	}
	r, err := c.Acquire(ctx, &tokenmeshv1.AcquireRequest{Rule: rule, Key: key, Weight: 1})
	if err != nil {
		return Result{}, nil, err
	}
	res := permitResult(r.GetGranted(), r.GetLimit(), r.GetRemaining())
	if !r.GetGranted() {
		return res, nil, nil
	}
	permit := r.GetPermit()
	return res, once(func() {
		ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
		defer cancel()
		_, _ = c.Release(ctx, &tokenmeshv1.ReleaseRequest{Rule: rule, Key: key, Permit: permit})
	}), nil
}

// permitNode is *cluster.Node's Acquire and Release.
type permitNode interface {
	Acquire(ctx context.Context, rule, key string, weight int64) (cluster.AcquireResult, error)
	Release(ctx context.Context, rule, key string, permit uint64) error
}

// nodeAcquirer is a Checker over an in-process node that also acquires.
type nodeAcquirer struct {
	Checker
	node permitNode
}

func (n nodeAcquirer) Acquire(ctx context.Context, rule, key string) (Result, func(), error) {
	r, err := n.node.Acquire(ctx, rule, key, 1)
	if err != nil {
		return Result{}, nil, err
	}
	res := permitResult(r.Granted, r.Limit, r.Remaining)
	if !r.Granted {
		return res, nil, nil
	}
	return res, once(func() {
		ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
		defer cancel()
		_ = n.node.Release(ctx, rule, key, r.Permit.ID)
	}), nil
}

// withAcquire makes c an Acquirer too when node can hand out permits.
func withAcquire(c Checker, node any) Checker {
	if pn, ok := node.(permitNode); ok {
		return nodeAcquirer{Checker: c, node: pn}
	}
	return c
}

func permitResult(granted bool, limit, remaining int64) Result {
	return Result{Allowed: granted, Limit: limit, Window: -1, Remaining: remaining, Reset: -1, RetryAfter: -1}
}

func once(f func()) func() {
	var o sync.Once
	return func() { o.Do(f) }
}
