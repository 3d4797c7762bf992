package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/tokenmesh/tokenmesh/strategy"
)

// CheckResult is the answer to one Check.
type CheckResult struct {
	Allowed bool
	// Async is true when the strategy needed the network to decide (owner
	// forwarding to the key's owner).
	Async bool
	// Wait is the time from the node's loop taking the request to an
	// asynchronous decision; 0 for a synchronous one (decided at once).
	Wait time.Duration
	// Remaining is the whole tokens the deciding node's view of the key
	// held just after a synchronous decision (strategy.Remainer); -1 when
	// unknown: an asynchronous decision, or a strategy without a local
	// bucket. A decision on the fast path (an allowance, fastpath.go)
	// reports the bucket's tokens when the allowance was granted plus
	// those left in it: never more than the key holds, but without the
	// refill since the grant.
	Remaining int64
	// Delay is, for a check in waiting mode (CheckWait) admitted with a
	// reservation, how long after the check reached the node the caller
	// may proceed; 0 otherwise.
	Delay time.Duration
	// Permit is, under a rule whose strategy hands out permits
	// (strategy.Releaser: concurrency) and when Allowed, the permit's id
	// (not 0), for Release; 0 otherwise.
	Permit uint64
	// PermitExpires is when Permit lapses by itself (wall clock); zero
	// without a permit.
	PermitExpires time.Time
}

// BatchItem is one check of a CheckBatch: Tokens tokens of Key under the
// rule named Rule.
type BatchItem struct {
	Rule   string
	Key    string
	Tokens int64
	// MaxWait > 0 asks for waiting mode, as CheckWait (0 to MaxWait).
	MaxWait time.Duration
	// CreatedAtUnixNs, when not zero, is when the request reached the caller
	// (the edge), in wall-clock ns since the Unix epoch: a strategy.
	// ArrivalOrderer (owner) counts the item at that time, clamped to
	// [now - MaxCreatedAge, now] on this node's clock; others ignore it.
	CreatedAtUnixNs int64
	// Charge marks a cost already incurred (strategy.Request.Charge: an
	// Envoy apply_on_stream_done hit, limiter's Settle): under a rule with
	// overdraft its tokens are taken whatever the key's level (and
	// Allowed says whether they were there); otherwise it is a check. It
	// never waits (MaxWait is ignored for it under overdraft).
	Charge bool
}

// MaxCreatedAge bounds how far before the node's now a BatchItem's
// CreatedAtUnixNs counts (strategy.MaxCreatedAge, the simulator's bound too).
const MaxCreatedAge = strategy.MaxCreatedAge

// BatchResult is the outcome of one BatchItem: its CheckResult, or Err when
// it could not be decided (ErrClosed; the batch's ctx ended first).
type BatchResult struct {
	CheckResult
	Err error
}

// pendingCheck is a request waiting for an asynchronous decision: a
// Check's (reply) or an item of a batch (batch, idx).
type pendingCheck struct {
	reply   chan result
	batch   *batch
	idx     int
	arrival time.Duration
}

// batch is a CheckBatch in the loop. The loop records results; the caller
// reads them after done is closed, or abandons the batch (ctx ended) and
// takes a copy under mu.
type batch struct {
	items []BatchItem
	rules []*ruleState
	first int           // the items before were decided on the fast path
	done  chan struct{} // closed when every item is decided

	mu        sync.Mutex
	results   []BatchResult
	decided   []bool
	left      int
	abandoned bool
}

// finish records item i's result (loop goroutine).
func (b *batch) finish(i int, r BatchResult) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.abandoned || b.decided[i] {
		return
	}
	b.results[i], b.decided[i] = r, true
	b.left--
	if b.left == 0 {
		close(b.done)
	}
}

// abandon stops recording and returns the results, with err for every
// item not decided yet.
func (b *batch) abandon(err error) []BatchResult {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.abandoned = true
	out := slices.Clone(b.results)
	for i, ok := range b.decided {
		if !ok {
			out[i] = BatchResult{CheckResult: CheckResult{Remaining: -1}, Err: err}
		}
	}
	return out
}

// answer completes p with r.
func (p pendingCheck) answer(r result) {
	if p.batch != nil {
		p.batch.finish(p.idx, BatchResult{CheckResult: r.d, Err: r.err})
		return
	}
	p.reply <- r
}

// Check asks for tokens of key under rule and blocks until the rule's
// strategy decides or ctx ends. Errors: an unknown rule, an empty,
// over-long or non-UTF-8 key, tokens <= 0 or above the node's MaxTokens (no state
// changes); ctx.Err() when ctx ends first (the strategy may still decide
// the request later: for owner, the owner's bucket has then been charged);
// ErrClosed when the node is or gets closed.
//
// A check the strategy can decide from local state (strategy.Allowancer:
// local, central, static, and owner for the keys this node owns) is
// usually decided in the caller's goroutine from the key's allowance,
// without the node's loop (fastpath.go).
func (n *Node) Check(ctx context.Context, rule, key string, tokens int64) (CheckResult, error) {
	return n.checkRule(ctx, (*n.rulesView.Load())[rule], rule, key, tokens, 0)
}

// CheckItem is Check of one BatchItem: in waiting mode when it.MaxWait >
// 0 (as CheckWait), counted at it.CreatedAtUnixNs when set (see BatchItem).
// Errors: CheckWait's, and a negative CreatedAtUnixNs (no state changes).
func (n *Node) CheckItem(ctx context.Context, it BatchItem) (CheckResult, error) {
	if it.CreatedAtUnixNs < 0 {
		return CheckResult{}, fmt.Errorf("cluster: rule %q: created at %d ns is negative", it.Rule, it.CreatedAtUnixNs)
	}
	if it.MaxWait == 0 && !it.Charge {
		return n.checkRule(ctx, (*n.rulesView.Load())[it.Rule], it.Rule, it.Key, it.Tokens, it.CreatedAtUnixNs)
	}
	if it.MaxWait < 0 || it.MaxWait > MaxWait {
		return CheckResult{}, fmt.Errorf("cluster: rule %q: max wait %v outside [0, %v]", it.Rule, it.MaxWait, MaxWait)
	}
	rs, err := n.validate(it.Rule, it.Key, it.Tokens)
	if err != nil {
		return CheckResult{}, err
	}
	if it.Charge {
		// A charge covered by the key's allowance is admitted and taken
		// there (its tokens are there), as a check; otherwise the loop.
		if rs.fast != nil && it.MaxWait == 0 && ctx.Err() == nil {
			if d, ok := rs.fast.takeCovered(it.Key, it.Tokens); ok {
				return d, nil
			}
		}
	}
	return n.check(ctx, event{kind: evRequest, rule: rs, key: it.Key, tokens: it.Tokens, maxWait: it.MaxWait, created: it.CreatedAtUnixNs, charge: it.Charge})
}

// checkRule is Check with the rule looked up already (rs; nil when the
// node has no such rule) and a BatchItem.CreatedAtUnixNs (0 for none).
func (n *Node) checkRule(ctx context.Context, rs *ruleState, rule, key string, tokens, created int64) (CheckResult, error) {
	// The fast path: tokens of the key's allowance, in this goroutine. A
	// key found in the allowances was validated when the loop granted
	// them (an empty, over-long or non-UTF-8 key never is), so only the
	// tokens are checked before.
	if rs != nil && rs.fast != nil && tokens > 0 && tokens <= n.maxTokens && ctx.Err() == nil {
		if d, ok := rs.fast.take(key, tokens); ok {
			return d, nil
		}
	}
	rs, err := n.validate(rule, key, tokens)
	if err != nil {
		return CheckResult{}, err
	}
	return n.check(ctx, event{kind: evRequest, rule: rs, key: key, tokens: tokens, created: created})
}

// check hands the validated request ev to the loop and waits for its
// decision (Check, CheckWait).
func (n *Node) check(ctx context.Context, ev event) (CheckResult, error) {
	if err := ctx.Err(); err != nil {
		return CheckResult{}, err
	}
	reply := make(chan result, 1) // buffered: the loop never blocks on an abandoned check
	ev.reply = reply
	select {
	case n.events <- ev:
	case <-n.done:
		return CheckResult{}, ErrClosed
	case <-ctx.Done():
		return CheckResult{}, ctx.Err()
	}
	select {
	case r := <-reply:
		return r.d, r.err
	case <-ctx.Done():
		return CheckResult{}, ctx.Err()
	case <-n.stopped:
		select {
		case r := <-reply:
			return r.d, r.err
		default:
			return CheckResult{}, ErrClosed
		}
	}
}

// validate checks one request's input and returns its rule.
func (n *Node) validate(rule, key string, tokens int64) (*ruleState, error) {
	rs, ok := (*n.rulesView.Load())[rule]
	switch {
	case !ok:
		return nil, fmt.Errorf("cluster: rule %q is not defined on node %s", rule, n.self)
	case key == "":
		return nil, fmt.Errorf("cluster: rule %q: key is empty", rule)
	case len(key) > MaxKeyBytes:
		return nil, fmt.Errorf("cluster: rule %q: key is %d bytes, above the limit of %d", rule, len(key), MaxKeyBytes)
	case !utf8.ValidString(key):
		return nil, fmt.Errorf("cluster: rule %q: key is not valid UTF-8 (peer messages carry keys as protobuf strings)", rule)
	case strings.IndexByte(key, 0) >= 0:
		return nil, fmt.Errorf("cluster: rule %q: key contains a NUL byte (reserved: strategies name sub-keys with it, owner's split)", rule)
	case tokens <= 0:
		return nil, fmt.Errorf("cluster: rule %q: tokens %d must be positive", rule, tokens)
	case tokens > n.maxTokens:
		return nil, fmt.Errorf("cluster: rule %q: tokens %d is above the limit of %d per request", rule, tokens, n.maxTokens)
	}
	return rs, nil
}

// CheckBatch decides items in order, as one event of the node's loop (so
// a batch costs one hand-over instead of one per item, and two items of
// one key see each other), and blocks until every item is decided or ctx
// ends. The input is validated as a whole first: an invalid item (see
// Check) fails the call with an error naming its index ("item 3: ...")
// and nothing is decided. Once the batch is handed over, each item gets
// its own result: a CheckResult, or Err = ctx.Err() for items still
// undecided when ctx ended (they may still be decided later), or
// ErrClosed. A call error is returned only for invalid input, an empty
// batch, or ctx or the node ending before the hand-over.
//
// Items a key's allowance covers (the fast path, as in Check) are decided
// in the caller's goroutine, in order, up to the first one it does not
// cover; that one and every later item go to the loop as one event.
func (n *Node) CheckBatch(ctx context.Context, items []BatchItem) ([]BatchResult, error) {
	b, err := n.newBatch(items)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if b.takeFast(); b.left == 0 {
		return b.results, nil
	}
	select {
	case n.events <- event{kind: evBatch, batch: b}:
	case <-n.done:
		return nil, ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	select {
	case <-b.done:
		return b.results, nil
	case <-ctx.Done():
		return b.abandon(ctx.Err()), nil
	case <-n.stopped:
		select {
		case <-b.done:
			return b.results, nil
		default:
			return b.abandon(ErrClosed), nil
		}
	}
}

// newBatch validates items (each as Check does, and its max wait and
// creation time) and returns them as a batch to decide; errors name the
// first bad item.
func (n *Node) newBatch(items []BatchItem) (*batch, error) {
	if len(items) == 0 {
		return nil, errors.New("cluster: CheckBatch: no items")
	}
	b := &batch{items: items, rules: make([]*ruleState, len(items)), results: make([]BatchResult, len(items)),
		decided: make([]bool, len(items)), left: len(items), done: make(chan struct{})}
	for i, it := range items {
		rs, err := n.validate(it.Rule, it.Key, it.Tokens)
		if err != nil {
			return nil, fmt.Errorf("item %d: %w", i, err)
		}
		if it.MaxWait < 0 || it.MaxWait > MaxWait {
			return nil, fmt.Errorf("item %d: rule %q: max wait %v outside [0, %v]", i, it.Rule, it.MaxWait, MaxWait)
		}
		if it.CreatedAtUnixNs < 0 {
			return nil, fmt.Errorf("item %d: rule %q: created at %d ns is negative", i, it.Rule, it.CreatedAtUnixNs)
		}
		b.rules[i] = rs
	}
	return b, nil
}

// takeFast decides b's items on the fast path, in order: those up to the
// first one an allowance cannot cover (b.first on return); that one and
// the rest go to the loop, so the batch is still decided in order.
func (b *batch) takeFast() {
	for ; b.first < len(b.items); b.first++ {
		it, rs := b.items[b.first], b.rules[b.first]
		if rs.fast == nil || it.MaxWait > 0 {
			return
		}
		var d CheckResult
		var ok bool
		if it.Charge {
			d, ok = rs.fast.takeCovered(it.Key, it.Tokens) // a charge is not refused: only what the allowance covers
		} else {
			d, ok = rs.fast.take(it.Key, it.Tokens)
		}
		if !ok {
			return
		}
		b.results[b.first], b.decided[b.first] = BatchResult{CheckResult: d}, true
		b.left--
	}
}
