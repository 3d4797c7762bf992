package envoymodel

import (
	"testing"
	"time"

	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
)

// BlanketSettings pass the proto's validation (New) and decide as their
// rules say: before the first assignment, and after the TTL for
// expiredFor, then back to no_assignment_behavior.
func TestBlanketSettings(t *testing.T) {
	p := newProxy(t, BlanketSettings(time.Second, typev3.RateLimitStrategy_DENY_ALL, typev3.RateLimitStrategy_ALLOW_ALL, 10*time.Second))
	if got := admit(p, 0, web, 3); got != 0 {
		t.Fatalf("no_assignment DENY_ALL admitted %d", got)
	}
	apply(t, p, 0, assignment(web, tokenBucket(1, 1, sec(100)), dur(sec(2))))
	if got := admit(p, sec(1), web, 3); got != 1 {
		t.Fatalf("assigned: admitted %d of 3, want the bucket's 1", got)
	}
	p.Tick(sec(2))
	if got := admit(p, sec(2), web, 3); got != 3 {
		t.Fatalf("expired ALLOW_ALL admitted %d of 3", got)
	}
	p.Tick(sec(12))
	if got := admit(p, sec(12), web, 3); got != 0 {
		t.Fatalf("after expiredFor: admitted %d, want no_assignment's DENY_ALL", got)
	}
}
