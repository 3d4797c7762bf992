package limiter_test

import (
	"context"
	"fmt"
	"time"

	"github.com/tokenmesh/tokenmesh/limiter"
	"github.com/tokenmesh/tokenmesh/rule"
)

func ExampleLimiter_Wait() {
	ctx := context.Background()
	// A single in-process node; add Peer to join a cluster.
	node, err := limiter.Start(ctx, limiter.Config{
		Name:  "example",
		Rules: []rule.Rule{{Name: "api", Rate: rule.MustRate("100/s"), Burst: 2, Strategy: "owner"}},
	})
	if err != nil {
		panic(err)
	}
	defer node.Close()
	lim, err := node.Limiter("api")
	if err != nil {
		panic(err)
	}
	// The burst admits two requests of "alice" at once; the third is refused.
	fmt.Println(lim.Allow("alice"), lim.Allow("alice"), lim.Allow("alice"))
	// Wait blocks until the rule's rate (100/s) has refilled a token.
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if err := lim.Wait(ctx, "alice", 1); err != nil {
		panic(err)
	}
	fmt.Println("alice admitted after waiting")
	// Asking for more than the burst fails at once.
	fmt.Println(lim.Wait(ctx, "alice", 3))
	// Output:
	// true true false
	// alice admitted after waiting
	// limiter: tokens exceed the burst: Wait(n=3) on rule "api" with burst 2
}
