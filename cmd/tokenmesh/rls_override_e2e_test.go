package main

import (
	"context"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
)

// TestRLSOverrideClusterE2E: a descriptor's limit override (5 a second,
// on a descriptor configured at 1000 a second) holds across 3 serve
// processes (owner: decided at the key's owner, which derives the
// override's rule from the forwarded check's frame), checked at every
// node in turn: admitted within the token bucket envelope 5 + 5*T, T from
// the first send to the last answer (no assumption on how fast the
// machine is), and every node answers with the override as current_limit
// and refuses some. Without the override the configured limit applies.
func TestRLSOverrideClusterE2E(t *testing.T) {
	// A forward's timeout of 2 s: a loaded machine does not turn forwards
	// into on_timeout's local decisions (the override's rule inherits the
	// descriptor's params).
	c, cls := startRLSCluster(t, 3, map[string]string{"ovr.yaml": `domain: ovr
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 1000}
    tokenmesh: {strategy: owner, params: {timeout: 2s}}
`})
	ask := func(i int, addr string, override bool) *rlsv3.RateLimitResponse_DescriptorStatus {
		t.Helper()
		d := rlsDesc("remote_address", addr)
		if override {
			d.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 5, Unit: typev3.RateLimitUnit_SECOND}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := cls[i].ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "ovr", Descriptors: []*ratelimitv3.RateLimitDescriptor{d}})
		if err != nil {
			t.Fatalf("%s (override %v) at n%d: %v", addr, override, i, err)
		}
		return resp.GetStatuses()[0]
	}

	const r, b = 5, 5
	admitted, checks := 0, 0
	refusedAt := [3]int{}
	start := time.Now()
	// Two checks at n0 only: the other nodes have not seen the override.
	for range 2 {
		st := ask(0, "192.0.2.1", true)
		checks++
		if st.GetCode() == rlsOK {
			admitted++
		}
	}
	// The key's owner (or its replica, when n0 owns it) got the rule from
	// a peer frame: some other node holds an override rule by now.
	deadline := time.Now().Add(10 * time.Second)
	for derivedElsewhere := false; !derivedElsewhere; {
		for i := 1; i < 3; i++ {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			text, err := c.Metrics(ctx, i)
			cancel()
			if v, ok := metricValue(text, "tokenmesh_rls_override_rules"); err == nil && ok && v == 1 {
				derivedElsewhere = true
			}
		}
		if !derivedElsewhere && time.Now().After(deadline) {
			t.Fatal("no node but n0 derived the override's rule within 10 s: the forwarded check did not create it at the owner")
		}
		if !derivedElsewhere {
			time.Sleep(50 * time.Millisecond)
		}
	}
	// Round-robin for 1.5 s (some refill) and until every node has refused
	// a check (bounded: 3000 checks, 15 s), counting what is admitted.
	for checks < 3000 && time.Since(start) < 15*time.Second &&
		(time.Since(start) < 1500*time.Millisecond || refusedAt[0] == 0 || refusedAt[1] == 0 || refusedAt[2] == 0) {
		i := checks % 3
		st := ask(i, "192.0.2.1", true)
		checks++
		if lim := st.GetCurrentLimit(); lim.GetRequestsPerUnit() != 5 || lim.GetUnit() != rlsv3.RateLimitResponse_RateLimit_SECOND {
			t.Fatalf("check %d at n%d: current_limit %v, want the override 5 per second", checks, i, lim)
		}
		if st.GetCode() == rlsOK {
			admitted++
		} else {
			refusedAt[i]++
		}
	}
	elapsed := time.Since(start)
	envelope := b + r*elapsed.Seconds()
	t.Logf("override 5/s: %d of %d checks admitted in %v (envelope b + r*T = %.1f); refused per node %v",
		admitted, checks, elapsed.Round(time.Millisecond), envelope, refusedAt)
	if float64(admitted) > envelope {
		t.Errorf("%d admitted in %v: above the override's envelope %d + %d*T = %.1f (the configured 1000/s would admit all %d)",
			admitted, elapsed, b, r, envelope, checks)
	}
	if refusedAt[0] == 0 || refusedAt[1] == 0 || refusedAt[2] == 0 {
		t.Errorf("refusals per node %v after %d checks in %v: every node should refuse above 5 per second", refusedAt, checks, elapsed)
	}
	if admitted < 1 {
		t.Error("no check admitted: the override's burst is 5")
	}

	// Without the override: the configured 1000 a second, at every node.
	for j := range 30 {
		i := j % 3
		st := ask(i, "192.0.2.2", false)
		if st.GetCode() != rlsOK || st.GetCurrentLimit().GetRequestsPerUnit() != 1000 {
			t.Fatalf("without override, check %d at n%d: %v limit %v, want OK under the configured 1000/s", j, i, st.GetCode(), st.GetCurrentLimit())
		}
	}
}
