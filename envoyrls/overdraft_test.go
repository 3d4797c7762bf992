package envoyrls

import (
	"context"
	"slices"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tokenmesh/tokenmesh/cluster"
)

// overdraftYAML: an LLM tenant's tokens, 1,000 a minute, with overdraft
// (the descriptor's tokenmesh extension), and a limit without it.
const overdraftYAML = `
domain: llm
descriptors:
  - key: tenant
    tokenmesh: {params: {overdraft: true, max_debt: 5000}}
    rate_limit: {unit: minute, requests_per_unit: 1000}
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 10}
`

// TestOverdraftConfigAndCharges: the extension's overdraft parameters
// reach the rule, and a descriptor's hits are a charge
// (cluster.BatchItem.Charge) exactly when a hits_addend of 1 or more was
// given, the descriptor's or else the request's: 0 or none is a check
// (counted as 1).
func TestOverdraftConfigAndCharges(t *testing.T) {
	c := mustParse(t, overdraftYAML)
	rules := c.Rules(time.Time{})
	if len(rules) != 2 || !slices.Contains(rules[0].Params, "overdraft=true") || !slices.Contains(rules[0].Params, "max_debt=5000") || len(rules[1].Params) != 0 {
		t.Fatalf("rules %+v: want the tenant's with overdraft=true and max_debt=5000, the user's without", rules)
	}
	f := newFake(c)
	s := New(c, f, nil)
	d := func(hits *uint64) *ratelimitv3.RateLimitDescriptor {
		x := desc("tenant", "acme")
		if hits != nil {
			x.HitsAddend = wrapperspb.UInt64(*hits)
		}
		return x
	}
	u := func(v uint64) *uint64 { return &v }
	for _, x := range []struct {
		reqHits  uint32
		descHits *uint64
		tokens   int64
		charge   bool
	}{
		{0, nil, 1, false},    // Envoy's request-time check
		{0, u(0), 1, false},   // an AI gateway's peek: hits_addend 0 on the descriptor
		{1, nil, 1, true},     // a charge of 1
		{420, nil, 420, true}, // the response's tokens, request-level (filter state)
		{0, u(730), 730, true},
		{5, u(0), 1, false}, // the descriptor's 0 wins: a check
	} {
		if _, err := s.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "llm", HitsAddend: x.reqHits,
			Descriptors: []*ratelimitv3.RateLimitDescriptor{d(x.descHits)}}); err != nil {
			t.Fatal(err)
		}
		it := f.calls[len(f.calls)-1][0]
		if it.Tokens != x.tokens || it.Charge != x.charge {
			t.Errorf("hits_addend %d, descriptor's %v: item of %d tokens, charge %v; want %d, %v", x.reqHits, x.descHits, it.Tokens, it.Charge, x.tokens, x.charge)
		}
	}
}

// refundFake is a fakeChecker that records refunds.
type refundFake struct {
	*fakeChecker
	refunds []cluster.BatchItem
}

func (f *refundFake) Refund(_ context.Context, rule, key string, tokens int64) error {
	f.refunds = append(f.refunds, cluster.BatchItem{Rule: rule, Key: key, Tokens: tokens})
	return nil
}

// TestNegativeHitsRefund: a descriptor with is_negative_hits gives its
// hits back (Refunder) and is answered OK without a limit; nothing is
// checked for it, while the request's other descriptors are.
func TestNegativeHitsRefund(t *testing.T) {
	c := mustParse(t, overdraftYAML)
	f := &refundFake{fakeChecker: newFake(c)}
	s := New(c, f, nil)
	neg := desc("tenant", "acme")
	neg.HitsAddend, neg.IsNegativeHits = wrapperspb.UInt64(300), true
	resp, err := s.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "llm",
		Descriptors: []*ratelimitv3.RateLimitDescriptor{neg, desc("user", "u1")}})
	if err != nil {
		t.Fatal(err)
	}
	if len(f.refunds) != 1 || f.refunds[0].Tokens != 300 || f.refunds[0].Key != "acme" {
		t.Fatalf("refunds %+v, want 300 tokens of acme", f.refunds)
	}
	if len(f.calls) != 1 || len(f.calls[0]) != 1 || f.calls[0][0].Key != "u1" {
		t.Fatalf("checks %+v, want the user's only", f.calls)
	}
	if st := resp.GetStatuses()[0]; st.GetCode() != rlsv3.RateLimitResponse_OK || st.GetCurrentLimit() != nil {
		t.Fatalf("the refund's status %v, want OK without a limit", st)
	}
}
