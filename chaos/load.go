package chaos

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	tokenmeshv1 "github.com/tokenmesh/tokenmesh/api/tokenmesh/v1"
)

// Checker is one node's client API as the load driver uses it: one check
// of tokens of key under the load's rule.
type Checker interface {
	Check(ctx context.Context, key string, tokens int64) (allowed bool, err error)
}

// GRPCChecker adapts a tokenmesh.v1 client to Checker for rule Rule.
type GRPCChecker struct {
	Client tokenmeshv1.RateLimitServiceClient
	Rule   string
}

// Check sends one CheckItem; a result carrying an error is returned as
// one.
func (g GRPCChecker) Check(ctx context.Context, key string, tokens int64) (bool, error) {
	resp, err := g.Client.Check(ctx, &tokenmeshv1.CheckRequest{Checks: []*tokenmeshv1.CheckItem{{Rule: g.Rule, Key: key, Hits: tokens}}})
	if err != nil {
		return false, err
	}
	if len(resp.GetResults()) != 1 {
		return false, fmt.Errorf("chaos: %d results for 1 check", len(resp.GetResults()))
	}
	r := resp.GetResults()[0]
	if r.GetError() != "" {
		return false, errors.New(r.GetError())
	}
	return r.GetAllowed(), nil
}

// Load is a bounded open-loop load: Keys keys (KeyPrefix + "0".."Keys-1"),
// each offered PerKeyPerSec checks of one token per second, spread
// round-robin over the live targets, for Duration or MaxChecks checks,
// whichever ends first. Each check waits at most Timeout for its answer.
type Load struct {
	Keys         int
	KeyPrefix    string  // "": "k"
	PerKeyPerSec float64 // checks per second per key, > 0
	Duration     time.Duration
	MaxChecks    int           // > 0: a hard bound on the checks sent
	Timeout      time.Duration // per check; 0: 2 s
	// MaxInFlight bounds the checks waiting for an answer at once (0: 256);
	// a check that finds the bound reached is recorded as an error, not
	// queued, so a stalled cluster cannot pile up goroutines.
	MaxInFlight int
}

// Validate reports a load that is not bounded or not well formed.
func (l Load) Validate() error {
	switch {
	case l.Keys < 1:
		return fmt.Errorf("chaos: load: keys %d, want >= 1", l.Keys)
	case !(l.PerKeyPerSec > 0) || l.PerKeyPerSec > 1e5:
		return fmt.Errorf("chaos: load: per-key rate %v/s, want in (0, 1e5]", l.PerKeyPerSec)
	case l.Duration <= 0:
		return fmt.Errorf("chaos: load: duration %v, want > 0", l.Duration)
	case l.MaxChecks <= 0:
		return fmt.Errorf("chaos: load: max checks %d, want > 0 (every load is bounded in count)", l.MaxChecks)
	case l.Timeout < 0 || l.MaxInFlight < 0:
		return fmt.Errorf("chaos: load: negative timeout or in-flight bound")
	}
	return nil
}

// ErrNoTarget is recorded for a check sent when no target is live.
var ErrNoTarget = errors.New("chaos: no live target")

// ErrInFlight is recorded for a check dropped because MaxInFlight checks
// were already waiting.
var ErrInFlight = errors.New("chaos: too many checks in flight")

// Drive runs l against the targets targets() returns at each send (the
// indices of live nodes and their checkers: a load balancer that knows
// which nodes are up), recording every decision in h with its time since
// start. It returns when the load is done or ctx ends, after every
// check it sent has been answered or timed out.
func Drive(ctx context.Context, l Load, start time.Time, targets func() ([]int, []Checker), h *History) error {
	if err := l.Validate(); err != nil {
		return err
	}
	prefix := l.KeyPrefix
	if prefix == "" {
		prefix = "k"
	}
	timeout := l.Timeout
	if timeout == 0 {
		timeout = 2 * time.Second
	}
	inflight := l.MaxInFlight
	if inflight == 0 {
		inflight = 256
	}
	keys := make([]string, l.Keys)
	for i := range keys {
		keys[i] = prefix + strconv.Itoa(i)
	}
	every := time.Duration(float64(time.Second) / (l.PerKeyPerSec * float64(l.Keys)))
	if every <= 0 {
		every = 1
	}
	sem := make(chan struct{}, inflight)
	var wg sync.WaitGroup
	defer wg.Wait()
	end := time.Now().Add(l.Duration)
	next := time.Now()
	for n := 0; n < l.MaxChecks; n++ {
		if !next.Before(end) {
			break
		}
		if err := waitUntil(ctx, next); err != nil {
			return err
		}
		at := next.Sub(start) // the scheduled time: no coordinated omission
		next = next.Add(every)
		key := keys[n%len(keys)]
		idx, cs := targets()
		if len(cs) == 0 {
			h.Add(Decision{At: at, Key: key, Tokens: 1, Node: -1, Err: ErrNoTarget})
			continue
		}
		// Round-robin over targets, shifted per key pass so each key
		// reaches every node: key k's p-th check goes to target (k + p)
		// mod targets. (n + n/keys was not: with keys + 1 a multiple of
		// the targets, 20 keys on 3 nodes, every key stayed on one node.)
		j := (n%len(keys) + n/len(keys)) % len(cs)
		select {
		case sem <- struct{}{}:
		default:
			h.Add(Decision{At: at, Key: key, Tokens: 1, Node: idx[j], Err: ErrInFlight})
			continue
		}
		wg.Add(1)
		go func(c Checker, node int, key string, at time.Duration) {
			defer wg.Done()
			defer func() { <-sem }()
			cctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			sent := time.Now()
			ok, err := c.Check(cctx, key, 1)
			h.Add(Decision{At: at, Key: key, Tokens: 1, Allowed: ok && err == nil, Latency: time.Since(sent), Node: node, Err: err})
		}(cs[j], idx[j], key, at)
	}
	return nil
}

// waitUntil waits until next, or returns ctx's error if it ends first (or
// has ended when next is past).
func waitUntil(ctx context.Context, next time.Time) error {
	d := time.Until(next)
	if d <= 0 {
		return ctx.Err()
	}
	return sleep(ctx, d)
}

// sleep waits for d, or returns ctx's error if it ends first. A d of 0 or
// less returns nil at once, even when ctx has ended (unlike waitUntil).
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	select {
	case <-ctx.Done():
		t.Stop()
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
