package envoymodel

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	rlqfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rate_limit_quota/v3"
	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// tester is what the helpers need of *testing.T and *rapid.T.
type tester interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
}

var web = NewBucketID(map[string]string{"name": "web"})

func sec(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

func dur(d time.Duration) *durationpb.Duration { return durationpb.New(d) }

// tokenBucket is a token_bucket strategy; tokensPerFill 0 leaves it unset.
func tokenBucket(max, tokensPerFill uint32, interval time.Duration) *typev3.RateLimitStrategy {
	tb := &typev3.TokenBucket{MaxTokens: max, FillInterval: dur(interval)}
	if tokensPerFill > 0 {
		tb.TokensPerFill = wrapperspb.UInt32(tokensPerFill)
	}
	return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{TokenBucket: tb}}
}

func rptu(n uint64) *typev3.RateLimitStrategy {
	return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_RequestsPerTimeUnit_{
		RequestsPerTimeUnit: &typev3.RateLimitStrategy_RequestsPerTimeUnit{RequestsPerTimeUnit: n, TimeUnit: typev3.RateLimitUnit_SECOND}}}
}

// assignment is a BucketAction giving id rule for ttl (nil ttl: unset).
func assignment(id BucketID, rule *typev3.RateLimitStrategy, ttl *durationpb.Duration) *rlqsv3.RateLimitQuotaResponse_BucketAction {
	return &rlqsv3.RateLimitQuotaResponse_BucketAction{
		BucketId: id.Proto(),
		BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{
			QuotaAssignmentAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
				AssignmentTimeToLive: ttl, RateLimitStrategy: rule}}}
}

func abandon(id BucketID) *rlqsv3.RateLimitQuotaResponse_BucketAction {
	return &rlqsv3.RateLimitQuotaResponse_BucketAction{
		BucketId:     id.Proto(),
		BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction_{AbandonAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction{}}}
}

func response(actions ...*rlqsv3.RateLimitQuotaResponse_BucketAction) *rlqsv3.RateLimitQuotaResponse {
	return &rlqsv3.RateLimitQuotaResponse{BucketAction: actions}
}

// settings builds bucket settings (reporting_interval set, as the proto
// requires; Envoy ignores it).
func settings(noAssign, fallback *typev3.RateLimitStrategy, timeout *durationpb.Duration) *rlqfilterv3.RateLimitQuotaBucketSettings {
	s := &rlqfilterv3.RateLimitQuotaBucketSettings{ReportingInterval: dur(time.Second)}
	if noAssign != nil {
		s.NoAssignmentBehavior = &rlqfilterv3.RateLimitQuotaBucketSettings_NoAssignmentBehavior{
			NoAssignmentBehavior: &rlqfilterv3.RateLimitQuotaBucketSettings_NoAssignmentBehavior_FallbackRateLimit{FallbackRateLimit: noAssign}}
	}
	if fallback != nil || timeout != nil {
		e := &rlqfilterv3.RateLimitQuotaBucketSettings_ExpiredAssignmentBehavior{ExpiredAssignmentBehaviorTimeout: timeout}
		if fallback != nil {
			e.ExpiredAssignmentBehavior = &rlqfilterv3.RateLimitQuotaBucketSettings_ExpiredAssignmentBehavior_FallbackRateLimit{FallbackRateLimit: fallback}
		} else {
			e.ExpiredAssignmentBehavior = &rlqfilterv3.RateLimitQuotaBucketSettings_ExpiredAssignmentBehavior_ReuseLastAssignment_{
				ReuseLastAssignment: &rlqfilterv3.RateLimitQuotaBucketSettings_ExpiredAssignmentBehavior_ReuseLastAssignment{}}
		}
		s.ExpiredAssignmentBehavior = e
	}
	return s
}

func newProxy(t tester, s *rlqfilterv3.RateLimitQuotaBucketSettings) *Proxy {
	t.Helper()
	p, err := New(Config{Domain: "d", Settings: s})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func apply(t tester, p *Proxy, now time.Duration, actions ...*rlqsv3.RateLimitQuotaResponse_BucketAction) []Outcome {
	t.Helper()
	out, err := p.Apply(now, response(actions...))
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// admit makes n requests to id at now and returns how many were allowed.
func admit(p *Proxy, now time.Duration, id BucketID, n int) int {
	got := 0
	for range n {
		if ok, _ := p.Request(now, id); ok {
			got++
		}
	}
	return got
}

func state(t tester, p *Proxy, now time.Duration, id BucketID) BucketState {
	t.Helper()
	st, ok := p.Bucket(now, id)
	if !ok {
		t.Fatalf("no bucket %s", id)
	}
	return st
}

// snapshot renders the whole state of p, for "nothing changed" checks.
func snapshot(p *Proxy) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "now=%d seq=%d started=%v next=%d up=%v timers=%v\n", p.now, p.seq, p.started, p.nextReport, p.streamUp, p.timers.Items())
	for _, k := range slices.Sorted(maps.Keys(p.buckets)) {
		b := p.buckets[k]
		fmt.Fprintf(&sb, "%q a=%d d=%d last=%d phase=%v until=%d timer=%d action=%v", k, b.allowed, b.denied, b.lastReport, b.phase, b.until, b.timer, b.action)
		if b.lim != nil {
			fmt.Fprintf(&sb, " lim=%+v", *b.lim)
		}
		sb.WriteByte('\n')
	}
	return sb.String()
}

func usageOf(t tester, r *rlqsv3.RateLimitQuotaUsageReports, id BucketID) *rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage {
	t.Helper()
	for _, u := range r.GetBucketQuotaUsages() {
		if BucketIDFromProto(u.GetBucketId()).Key() == id.Key() {
			return u
		}
	}
	t.Fatalf("bucket %s not in report %v", id, r)
	return nil
}

func clone[M proto.Message](m M) M { return proto.Clone(m).(M) }
