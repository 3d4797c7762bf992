// Package quotamsg converts between the quota strategy's values
// (strategy.QuotaAssignment, strategy.QuotaUsage) and the messages of
// Envoy's Rate Limit Quota Service (envoy.service.rate_limit_quota.v3):
// the one encoding shared by the RLQS server (package rlqs) and the
// simulator's proxy tier (package sim), so that both send the same bytes.
// Ours; the protocol is Envoy's (rlqs.proto).
package quotamsg

import (
	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tokenmesh/tokenmesh/strategy"
)

// TokenBucket is the response that pushes assignment a to the bucket id:
// one quota_assignment_action whose token_bucket has a's max_tokens,
// tokens_per_fill and fill_interval, valid for a.TTL
// (assignment_time_to_live); for a DENY_ALL assignment (a.DenyAll) a
// DENY_ALL blanket rule valid for a.TTL instead; for a.Abandon an
// abandon_action (Envoy forgets the bucket). The counts are Envoy's
// uint32 fields: the quota strategy keeps them within that range.
func TokenBucket(id *rlqsv3.BucketId, a strategy.QuotaAssignment) *rlqsv3.RateLimitQuotaResponse {
	if a.Abandon {
		return &rlqsv3.RateLimitQuotaResponse{BucketAction: []*rlqsv3.RateLimitQuotaResponse_BucketAction{{
			BucketId: id,
			BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction_{
				AbandonAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction{}},
		}}}
	}
	if a.DenyAll() {
		return Action(id, durationpb.New(a.TTL), &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{
			BlanketRule: typev3.RateLimitStrategy_DENY_ALL}})
	}
	return Action(id, durationpb.New(a.TTL), &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{
		TokenBucket: &typev3.TokenBucket{MaxTokens: uint32(a.MaxTokens), TokensPerFill: wrapperspb.UInt32(uint32(a.TokensPerFill)),
			FillInterval: durationpb.New(a.FillInterval)}}})
}

// Action is the response with one quota_assignment_action for the bucket
// id: the strategy rs (nil: none) valid for ttl (nil: unset, which Envoy
// takes as an immediate expiry).
func Action(id *rlqsv3.BucketId, ttl *durationpb.Duration, rs *typev3.RateLimitStrategy) *rlqsv3.RateLimitQuotaResponse {
	return &rlqsv3.RateLimitQuotaResponse{BucketAction: []*rlqsv3.RateLimitQuotaResponse_BucketAction{{
		BucketId: id,
		BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{
			QuotaAssignmentAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
				AssignmentTimeToLive: ttl, RateLimitStrategy: rs}},
	}}}
}

// Usage is one bucket's usage u, reported by client for key, as the quota
// strategy takes it: the requests allowed and denied and time_elapsed, as
// they are (a count above MaxInt64 turns negative, which
// strategy.QuotaUsage.Validate refuses).
func Usage(client strategy.QuotaClient, key string, u *rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage) strategy.QuotaUsage {
	return strategy.QuotaUsage{Client: client, Key: key, Allowed: int64(u.GetNumRequestsAllowed()), Denied: int64(u.GetNumRequestsDenied()),
		Elapsed: u.GetTimeElapsed().AsDuration()}
}

// ClientIDHeader is the gRPC metadata header (an HTTP/2 header) that names
// an RLQS client: operators set it per Envoy in the rate_limit_quota
// filter's grpc_service.initial_metadata (e.g. to the Envoy's node id), and
// tokenmesh treats a new stream with the id as the client that had it
// (strategy/quota, # Client ids). Ours.
const ClientIDHeader = "tokenmesh-client-id"
