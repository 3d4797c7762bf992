package envoymodel

import (
	"time"

	rlqfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
)

// BlanketSettings are the RateLimitQuotaBucketSettings of a filter whose
// fallbacks are blanket rules (ALLOW_ALL or DENY_ALL), as Config.Settings:
//
//   - noAssignment is no_assignment_behavior's fallback_rate_limit: it
//     decides a bucket's requests before its first assignment, and after
//     the expired fallback ends;
//   - expired is expired_assignment_behavior's fallback_rate_limit, for
//     expiredFor after an assignment's TTL ran out
//     (expired_assignment_behavior_timeout; Envoy uses its whole seconds,
//     and the proto wants it > 0);
//   - reporting_interval is report (the proto requires it, > 0.1 s; Envoy
//     ignores it: see EnvoyReportInterval).
func BlanketSettings(report time.Duration, noAssignment, expired typev3.RateLimitStrategy_BlanketRule, expiredFor time.Duration) *rlqfilterv3.RateLimitQuotaBucketSettings {
	rule := func(r typev3.RateLimitStrategy_BlanketRule) *typev3.RateLimitStrategy {
		return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: r}}
	}
	return &rlqfilterv3.RateLimitQuotaBucketSettings{
		ReportingInterval: durationpb.New(report),
		NoAssignmentBehavior: &rlqfilterv3.RateLimitQuotaBucketSettings_NoAssignmentBehavior{
			NoAssignmentBehavior: &rlqfilterv3.RateLimitQuotaBucketSettings_NoAssignmentBehavior_FallbackRateLimit{FallbackRateLimit: rule(noAssignment)}},
		ExpiredAssignmentBehavior: &rlqfilterv3.RateLimitQuotaBucketSettings_ExpiredAssignmentBehavior{
			ExpiredAssignmentBehaviorTimeout: durationpb.New(expiredFor),
			ExpiredAssignmentBehavior: &rlqfilterv3.RateLimitQuotaBucketSettings_ExpiredAssignmentBehavior_FallbackRateLimit{
				FallbackRateLimit: rule(expired)}},
	}
}
