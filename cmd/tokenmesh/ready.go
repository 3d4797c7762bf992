package main

import (
	"context"
	"time"

	"github.com/tokenmesh/tokenmesh/cluster"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// readyPoll is how often serve asks the strategies whether they are ready.
const readyPoll = 5 * time.Millisecond

// strategiesReady reports whether every rule's strategy that is a
// strategy.Readier is Ready (gdrl: a joiner holds its default share).
// Errors: those of cluster.Node.Inspect (ctx ended, node closed).
func strategiesReady(ctx context.Context, node *cluster.Node) (bool, error) {
	ready := true
	err := node.Inspect(ctx, func(now time.Duration, _ cluster.Rule, s strategy.Strategy) {
		if r, ok := s.(strategy.Readier); ok && !r.Ready(now) {
			ready = false
		}
	})
	return ready && err == nil, err
}

// readiness holds the API not ready until the strategies are (see
// strategy.Readier), then calls setReady(true) once; stop ends the wait
// and returns when setReady can no longer be called, so that the caller
// may report not ready for good (shutdown).
type readiness struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// waitReady starts the wait: setReady(false) at once if some strategy is
// not ready, and setReady(true) when all are, polling every readyPoll.
func waitReady(ctx context.Context, node *cluster.Node, setReady func(bool)) *readiness {
	ctx, cancel := context.WithCancel(ctx)
	r := &readiness{cancel: cancel, done: make(chan struct{})}
	if ok, err := strategiesReady(ctx, node); ok || err != nil {
		close(r.done)
		return r
	}
	setReady(false)
	go func() {
		defer close(r.done)
		t := time.NewTicker(readyPoll)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if ok, err := strategiesReady(ctx, node); err != nil {
				return
			} else if ok {
				setReady(true)
				return
			}
		}
	}()
	return r
}

// stop ends the wait and returns once setReady will not be called again.
func (r *readiness) stop() {
	r.cancel()
	<-r.done
}
