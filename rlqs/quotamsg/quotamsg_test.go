package quotamsg

import (
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tokenmesh/tokenmesh/strategy"
)

// An assignment's response passes the proto's validation and carries its
// bucket as Envoy reads it; a usage report maps field by field.
func TestRoundTrip(t *testing.T) {
	id := &rlqsv3.BucketId{Bucket: map[string]string{"key": "tenant1"}}
	a := strategy.QuotaAssignment{Client: 3, Key: "tenant1", MaxTokens: 40, TokensPerFill: 250, FillInterval: 2 * time.Second, TTL: 2 * time.Second}
	resp := TokenBucket(id, a)
	if err := resp.ValidateAll(); err != nil {
		t.Fatal(err)
	}
	qa := resp.GetBucketAction()[0].GetQuotaAssignmentAction()
	tb := qa.GetRateLimitStrategy().GetTokenBucket()
	if tb.GetMaxTokens() != 40 || tb.GetTokensPerFill().GetValue() != 250 || tb.GetFillInterval().AsDuration() != 2*time.Second ||
		qa.GetAssignmentTimeToLive().AsDuration() != 2*time.Second || resp.GetBucketAction()[0].GetBucketId() != id {
		t.Fatalf("response %v for %+v", resp, a)
	}
	u := Usage(3, "tenant1", &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{BucketId: id, NumRequestsAllowed: 7, NumRequestsDenied: 2,
		TimeElapsed: durationpb.New(5 * time.Second)})
	if want := (strategy.QuotaUsage{Client: 3, Key: "tenant1", Allowed: 7, Denied: 2, Elapsed: 5 * time.Second}); u != want {
		t.Fatalf("usage %+v, want %+v", u, want)
	}
	if u := Usage(3, "k", &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{NumRequestsAllowed: 1 << 63}); u.Validate() == nil {
		t.Fatalf("a count above MaxInt64 validates: %+v", u)
	}
}
