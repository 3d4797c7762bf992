package cluster

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/rule"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/host"
)

// A quota client attached to n1 reports for a key n0 owns: the report goes
// to n0, and n0's assignment comes back to n1's sink (rule, client, key,
// an Envoy token bucket of the rule's (r, b) for the only client). A rule
// whose strategy is not quota refuses reports; an invalid report is an
// error naming it.
func TestQuotaUsageReachesTheOwnerAndBack(t *testing.T) {
	c := newCluster(t, 2, false,
		rule.Rule{Name: "q", Rate: rule.MustRate("100/s"), Burst: 100, Strategy: "quota"},
		rule.Rule{Name: "o", Rate: rule.MustRate("100/s"), Burst: 100, Strategy: "owner"})
	key := keyOwnedBy(t, "n0", c.ids)
	n1 := c.nodes["n1"]
	var mu sync.Mutex
	var got []strategy.QuotaAssignment
	arrived := make(chan struct{}, 8)
	n1.SetQuotaSink(func(rule string, a strategy.QuotaAssignment) {
		if rule != "q" {
			t.Errorf("assignment for rule %q", rule)
		}
		mu.Lock()
		got = append(got, a)
		mu.Unlock()
		arrived <- struct{}{}
	})
	client := n1.NewQuotaClient()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := n1.QuotaUsage(ctx, "q", strategy.QuotaUsage{Client: client, Key: key}); err != nil {
		t.Fatal(err)
	}
	// first a DENY_ALL blanket rule (the share is not paid until the key's
	// first clients have been gathered), then the token bucket
	var a strategy.QuotaAssignment
	for i := 0; i < 2; i++ {
		select {
		case <-arrived:
		case <-ctx.Done():
			t.Fatalf("%d assignments within 5 s, want 2", i)
		}
		mu.Lock()
		a = got[i]
		mu.Unlock()
		if i == 0 && !a.DenyAll() {
			t.Fatalf("first answer %+v, want a DENY_ALL blanket rule", a)
		}
	}
	want := strategy.QuotaAssignment{Client: client, Key: key, MaxTokens: 100, TokensPerFill: 100, FillInterval: time.Second, TTL: 2 * time.Second, Seq: 2}
	if a != want {
		t.Fatalf("assignment %+v, want %+v (the whole (r, b) for the only client)", a, want)
	}
	if err := n1.QuotaUsage(ctx, "o", strategy.QuotaUsage{Client: client, Key: key}); !errors.Is(err, host.ErrNotQuoter) {
		t.Fatalf("report for an owner rule: %v, want ErrNotQuoter", err)
	}
	if err := n1.QuotaUsage(ctx, "q", strategy.QuotaUsage{Client: client, Key: key, Allowed: -1}); err == nil {
		t.Fatal("a negative count was accepted")
	}
	if err := n1.QuotaUsage(ctx, "nope", strategy.QuotaUsage{Client: client, Key: key}); err == nil {
		t.Fatal("an unknown rule was accepted")
	}
	if err := n1.QuotaDelivered(ctx, "q", a); err != nil {
		t.Fatal(err)
	}
	if err := n1.QuotaDelivered(ctx, "nope", a); err == nil {
		t.Fatal("a delivery for an unknown rule was accepted")
	}
	if err := n1.QuotaDetach(ctx, "q", client, ""); err != nil {
		t.Fatal(err)
	}
}
