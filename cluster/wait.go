package cluster

import (
	"context"
	"time"
)

// MaxWait bounds CheckWait's maxWait (an hour), as the strategies bound the
// max_wait of a peer's forward.
const MaxWait = time.Hour

// CheckWait is Check in waiting mode (SRTM §5.2; strategy.Waiter): the
// rule's strategy may admit the request with a delay of at most maxWait
// instead of refusing it, its tokens reserved in arrival order at the
// key's bucket. CheckResult.Delay is then how long after the check reached
// this node the caller may proceed (the time the decision took to come
// back already subtracted: 0 when it has passed). Strategies without
// waiting mode (gcounter, tbqueue, regionlease: strategy.CheckWait says
// why) decide a plain check; lease and adaptive grant waits only up to
// their parameter max_wait. maxWait 0
// is Check. Errors: Check's, and a maxWait outside [0, MaxWait] (no state
// changes).
func (n *Node) CheckWait(ctx context.Context, rule, key string, tokens int64, maxWait time.Duration) (CheckResult, error) {
	return n.CheckItem(ctx, BatchItem{Rule: rule, Key: key, Tokens: tokens, MaxWait: maxWait})
}
