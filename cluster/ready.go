package cluster

import (
	"context"
	"time"

	"github.com/tokenmesh/tokenmesh/rule"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// ReadyPoll is how often WaitReady asks the strategies whether they are
// ready.
const ReadyPoll = 5 * time.Millisecond

// Ready reports whether every rule's strategy that is a strategy.Readier
// is Ready: whether the node decides as the cluster would (gdrl: a node
// that joined holds its default share; before, its checks would be
// refused for lack of one). Strategies that are no Readier are always
// ready. Errors: ctx.Err(), ErrClosed (then ready is false).
func (n *Node) Ready(ctx context.Context) (bool, error) {
	ready := true
	err := n.Peek(ctx, func(now time.Duration, _ rule.Rule, s strategy.Strategy) {
		if r, ok := s.(strategy.Readier); ok && !r.Ready(now) {
			ready = false
		}
	})
	return ready && err == nil, err
}

// WaitReady returns nil once the node is Ready, asking every ReadyPoll.
// A server in front of the node should report itself not ready (health,
// readiness probes) until then. Errors: ctx.Err() when ctx ends first,
// ErrClosed.
func (n *Node) WaitReady(ctx context.Context) error {
	var t *time.Timer
	for {
		ok, err := n.Ready(ctx)
		if err != nil || ok {
			return err
		}
		if t == nil {
			t = time.NewTimer(ReadyPoll)
			defer t.Stop()
		} else {
			t.Reset(ReadyPoll)
		}
		select {
		case <-t.C:
		case <-n.done:
			return ErrClosed
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
