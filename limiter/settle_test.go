package limiter

import (
	"context"
	"errors"
	"testing"

	"github.com/tokenmesh/tokenmesh/cluster"
	"github.com/tokenmesh/tokenmesh/rule"
)

// TestReserveSettle: on a rule of burst 10 that refills nothing during
// the test, with overdraft, under each strategy that keeps a bucket per
// key: a reservation of 4 settled at 2 gives 2 back (8 left); a refused
// one holds nothing and, settled at 3, charges 3 into debt; one of 4
// settled at 15 charges 11 more, into a debt of 5; in debt every check is
// refused; a second Settle is refused (ErrSettled) and changes nothing.
// Without overdraft, settling above the reservation charges nothing
// (ErrNoOverdraft); gdrl cannot give tokens back (cluster.ErrNoRefund).
func TestReserveSettle(t *testing.T) {
	ctx := context.Background()
	for _, strat := range []string{"local", "static", "owner", "lease"} {
		t.Run(strat, func(t *testing.T) {
			n := startSingle(t, rule.Rule{Name: "llm", Rate: perSec(0.001), Burst: 10, Strategy: strat, Params: []string{"overdraft=true"}})
			l := limiterFor(t, n, "llm")
			r, err := l.Reserve(ctx, "t", 4)
			if err != nil || !r.Allowed() || r.Held() != 4 {
				t.Fatalf("Reserve(4): %+v %v", r, err)
			}
			if err := r.Settle(ctx, 2); err != nil {
				t.Fatal(err)
			}
			if err := r.Settle(ctx, 0); !errors.Is(err, ErrSettled) {
				t.Fatalf("second Settle: %v, want ErrSettled", err)
			}
			if ok, _ := l.AllowN(ctx, "t", 8); !ok {
				t.Fatal("8 tokens refused after a refund of 2 of 4: want 8 left")
			}
			// Empty now: a reservation of 5 is refused (owner and local
			// would reserve it in waiting mode, but not 5,000 s ahead:
			// Reserve waits at most an hour), and holds nothing; settling
			// 3 on it charges 3 (debt 3).
			r, err = l.Reserve(ctx, "t", 5)
			if err != nil || r.Allowed() || r.Held() != 0 {
				t.Fatalf("Reserve(5) on an empty key: %+v %v, want refused, holding nothing", r, err)
			}
			if err := r.Settle(ctx, 3); err != nil {
				t.Fatal(err)
			}
			r2, _ := l.Reserve(ctx, "u", 4)
			if err := r2.Settle(ctx, 15); err != nil {
				t.Fatal(err)
			}
			for _, key := range []string{"t", "u"} {
				if ok, _ := l.AllowN(ctx, key, 1); ok {
					t.Fatalf("key %s: a check admitted in debt (the charge of Settle was not taken)", key)
				}
			}
		})
	}
	n := startSingle(t, rule.Rule{Name: "plain", Rate: perSec(0.001), Burst: 10, Strategy: "owner"},
		rule.Rule{Name: "g", Rate: perSec(0.001), Burst: 10, Strategy: "gdrl"})
	r, _ := limiterFor(t, n, "plain").Reserve(ctx, "k", 4)
	if err := r.Settle(ctx, 5); !errors.Is(err, ErrNoOverdraft) {
		t.Fatalf("Settle above the reservation without overdraft: %v, want ErrNoOverdraft", err)
	}
	if err := r.Settle(ctx, 4); err != nil {
		t.Fatalf("Settle at the reservation after a refused Settle: %v, want nil", err)
	}
	r, _ = limiterFor(t, n, "g").Reserve(ctx, "k", 4)
	if err := r.Settle(ctx, 1); !errors.Is(err, cluster.ErrNoRefund) {
		t.Fatalf("Settle below the reservation under gdrl: %v, want cluster.ErrNoRefund", err)
	}
	if err := r.Settle(ctx, -1); err == nil {
		t.Fatal("Settle(-1) accepted")
	}
}
