package limiter

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/cluster"
	"github.com/tokenmesh/tokenmesh/rule"
)

// TestAcquire: limit 2 on one node: two permits, the third refused with
// ErrConcurrencyLimit; a release (called twice: idempotent) lets exactly
// one more in; a rate rule refuses Acquire with cluster.ErrNoPermits.
func TestAcquire(t *testing.T) {
	n, err := Start(context.Background(), Config{Name: "n1", Rules: []rule.Rule{
		{Name: "conc", Rate: rule.MustRate("1/s"), Burst: 1, Strategy: "concurrency", Params: []string{"limit=2", "permit_ttl=50ms"}},
		{Name: "rate", Rate: rule.MustRate("1/s"), Burst: 1, Strategy: "local"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	time.Sleep(110 * time.Millisecond) // no permit within permit_ttl + join_wait of the start
	l, err := n.Limiter("conc")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	r1, err := l.Acquire(ctx, "db")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Acquire(ctx, "db"); err != nil {
		t.Fatal(err)
	}
	if rel, err := l.Acquire(ctx, "db"); !errors.Is(err, ErrConcurrencyLimit) || rel != nil {
		t.Fatalf("third acquire at limit 2: %v, want ErrConcurrencyLimit and no release", err)
	}
	r1()
	r1()
	if _, err := l.Acquire(ctx, "db"); err != nil {
		t.Fatalf("after a release: %v", err)
	}
	if _, err := l.Acquire(ctx, "db"); !errors.Is(err, ErrConcurrencyLimit) {
		t.Fatalf("a second release of one permit freed another slot: %v", err)
	}
	rl, err := n.Limiter("rate")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rl.Acquire(ctx, "db"); !errors.Is(err, cluster.ErrNoPermits) {
		t.Fatalf("Acquire under local: %v, want cluster.ErrNoPermits", err)
	}
}
