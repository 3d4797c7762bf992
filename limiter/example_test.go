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
		Rules: []rule.Rule{{Name: "api", Rate: rule.MustRate("5/s"), Burst: 2, Strategy: "owner"}},
	})
	if err != nil {
		panic(err)
	}
	defer node.Close()
	lim, err := node.Limiter("api")
	if err != nil {
		panic(err)
	}
	// The burst admits two requests of "alice" at once; the third is
	// refused (unless 200 ms, a token's refill, passed in between).
	fmt.Println(lim.Allow("alice"), lim.Allow("alice"), lim.Allow("alice"))
	// Wait blocks until the rule's rate (5/s) has refilled a token.
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

// An LLM tenant's tokens: reserve an estimate, call the model, settle
// what the response used. The rule's overdraft lets the charge go beyond
// what is left; the tenant is then refused until the refill repays it.
func ExampleReservation_Settle() {
	ctx := context.Background()
	node, err := limiter.Start(ctx, limiter.Config{
		Name: "example",
		Rules: []rule.Rule{{Name: "llm", Rate: rule.MustRate("1000/m"), Burst: 1000, Strategy: "owner",
			Params: []string{"overdraft=true", "max_debt=5000"}}},
	})
	if err != nil {
		panic(err)
	}
	defer node.Close()
	lim, err := node.Limiter("llm")
	if err != nil {
		panic(err)
	}
	r, err := lim.Reserve(ctx, "tenant-1", 500) // the estimate
	if err != nil || !r.Allowed() {
		panic(fmt.Sprint("refused: ", err))
	}
	// ... the model answers with 1,800 tokens: 1,300 more than reserved,
	// 800 beyond the 500 left: a debt of 800 tokens (48 s at 1,000/min).
	if err := r.Settle(ctx, 1800); err != nil {
		panic(err)
	}
	ok, err := lim.AllowN(ctx, "tenant-1", 1)
	fmt.Println(ok, err)
	// Output:
	// false <nil>
}
