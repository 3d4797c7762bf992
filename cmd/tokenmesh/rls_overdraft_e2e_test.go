package main

// The measured target of overdraft (costs charged after the
// response), on real serve processes through Envoy's RLS API.

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// TestRLSOverdraftE2E: an AI gateway's traffic against a 1,000
// tokens/min key with overdraft (burst 1,000, max_debt the default, one
// burst), on 3 serve processes (owner): 100 times, a check (hits_addend
// 0, counted as 1 when admitted, retried every 50 ms while refused), then,
// after the "response", a charge of a random 1 to 20 tokens (the
// descriptor's hits_addend, as Envoy's apply_on_stream_done sends it),
// each call to the next node in turn (so most go through the key's
// owner by a forward). Every charge must be counted: the
// tokens admitted over any window, from a request's send to a later
// one's answer (T, so a loaded machine only loosens the bound), checks
// admitted and charges all counted, stay within b + r*T + the largest
// single charge; and once the charges are done, the key admits a check
// no earlier than the refill allows had every charge been taken (a lost
// charge would reopen it early).
func TestRLSOverdraftE2E(t *testing.T) {
	const cfg = `domain: llm
descriptors:
  - key: tenant
    tokenmesh: {params: {overdraft: true}}
    rate_limit: {unit: minute, requests_per_unit: 1000}
`
	_, cls := startRLSCluster(t, 3, map[string]string{"llm.yaml": cfg})
	const (
		burst   = 1000.0
		perSec  = 1000.0 / 60
		charges = 100
		// maxCharge: charges of 1 to 25 tokens, 1,300 in all with the
		// checks, so that the key goes into debt after about 1,000 (the
		// burst) and the refill paces the last ones: about 25 s.
		maxCharge = 25
	)
	type hit struct {
		sent, answered time.Time
		tokens         int64 // counted: an admitted check's 1, or a charge
	}
	var hits []hit
	node := 0
	call := func(hitsAddend *wrapperspb.UInt64Value) (bool, time.Time, time.Time) {
		d := rlsDesc("tenant", "acme")
		d.HitsAddend = hitsAddend
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		sent := time.Now()
		resp, err := cls[node%3].ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "llm", Descriptors: []*ratelimitv3.RateLimitDescriptor{d}})
		if err != nil {
			t.Fatalf("ShouldRateLimit at n%d: %v", node%3, err)
		}
		node++
		return resp.GetOverallCode() == rlsOK, sent, time.Now()
	}
	rnd := rand.New(rand.NewPCG(23, 5))
	var largest, charged int64
	refused := 0
	for range charges {
		for {
			ok, sent, answered := call(wrapperspb.UInt64(0)) // a peek: a check
			if ok {
				hits = append(hits, hit{sent, answered, 1})
				break
			}
			refused++
			time.Sleep(50 * time.Millisecond)
		}
		n := rnd.Int64N(maxCharge) + 1
		_, sent, answered := call(wrapperspb.UInt64(uint64(n))) // the response's tokens: a charge
		hits = append(hits, hit{sent, answered, n})
		largest, charged = max(largest, n), charged+n
	}
	// The key reopens: probe until a check is admitted (refused checks
	// take nothing).
	var reopened time.Time
	for deadline := time.Now().Add(time.Minute); reopened.IsZero(); {
		ok, _, answered := call(nil)
		if ok {
			reopened = answered
		} else if time.Now().After(deadline) {
			t.Fatal("the key never reopened")
		}
		time.Sleep(20 * time.Millisecond)
	}
	first := hits[0].sent
	var counted int64
	for _, h := range hits {
		counted += h.tokens
	}
	// Reopening takes level >= 1; the level is at most b + r*(t - first)
	// less every token counted before (the bucket was full at first).
	earliest := first.Add(time.Duration((float64(counted) + 1 - burst) / perSec * float64(time.Second)))
	// The worst window: the counted tokens sent at or after hits[i].sent
	// and answered by hits[j].answered, over b + r*T + the largest charge.
	worst, worstBound, worstT := 0.0, math.Inf(1), time.Duration(0)
	for i := range hits {
		var sum int64
		for j := i; j < len(hits); j++ {
			sum += hits[j].tokens
			T := hits[j].answered.Sub(hits[i].sent)
			bound := burst + perSec*T.Seconds() + float64(largest)
			if float64(sum)-bound > worst-worstBound {
				worst, worstBound, worstT = float64(sum), bound, T
			}
		}
	}
	t.Logf("%d charges of 1-%d tokens (largest %d, %d in all) and %d admitted checks counted, %d checks refused while in debt, over %v",
		charges, maxCharge, largest, charged, len(hits)-charges, refused, hits[len(hits)-1].answered.Sub(first).Round(time.Millisecond))
	t.Logf("worst window: %.0f tokens in %v, bound b + r*T + largest charge = %.1f (margin %.1f)", worst, worstT.Round(time.Millisecond), worstBound, worstBound-worst)
	t.Logf("reopened %v after the first check; the charges, all counted, allow it %v after it at the earliest",
		reopened.Sub(first).Round(time.Millisecond), earliest.Sub(first).Round(time.Millisecond))
	if worst > worstBound {
		t.Errorf("%.0f tokens counted in a window of %v: above b + r*T + the largest charge = %.1f", worst, worstT, worstBound)
	}
	if reopened.Before(earliest) {
		t.Errorf("the key reopened %v after the first check, %v before the refill could repay the %d tokens counted: a charge was lost",
			reopened.Sub(first), earliest.Sub(reopened), counted)
	}
	if refused == 0 {
		t.Errorf("no check was refused: the %d tokens counted never drove the key into debt", counted)
	}
}
