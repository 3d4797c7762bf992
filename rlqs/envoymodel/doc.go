// Package envoymodel is a deterministic model of one Envoy's
// rate_limit_quota HTTP filter (envoy.filters.http.rate_limit_quota), the
// client side of the Rate Limit Quota Service (RLQS,
// envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas):
// per bucket, what Envoy allows, counts, reports, and does with the
// assignments an RLQS server pushes. It is a pure state machine (no clock,
// goroutines or sockets; time is passed in), so the simulator and the live
// emulator (package rlqs/proxy) decide with the same code.
//
// # Source
//
// Everything here is read from Envoy's source, main as of July 2026
// (commit cb2a49b0), not from the API documentation where the two differ
// (the differences are listed below):
//
//   - source/extensions/filters/http/rate_limit_quota/global_client_impl.cc:
//     createBucketImpl (bucket creation, the initial report, the report timer
//     and stream start), getUsageFromBucket and buildReports (reports),
//     onQuotaResponseImpl, shouldReplaceTokenBucket, protoTokenBucketsEq and
//     createTokenBucketFromAction (assignments), startActionExpirationTimer,
//     onActionExpirationTimer, onFallbackExpirationTimer (TTLs),
//     onRemoteClose, onSendReportsTimer and startStreamImpl (the stream);
//   - filter.cc: recordBucketUsage (no_assignment_behavior,
//     expired_assignment_behavior, the first request), shouldAllowRequest
//     and processCachedBucket (decisions and counts);
//   - filter_persistence.cc initTlsStore (the 5 s report interval);
//   - quota_bucket_cache.h (CachedBucket, QuotaUsage);
//   - source/common/common/token_bucket_impl.cc AtomicTokenBucketImpl (the
//     token bucket), and the protos rlqs.proto, rate_limit_quota.proto,
//     type/v3 ratelimit_strategy.proto and token_bucket.proto.
//
// # What Envoy does (and the model)
//
// A request matched into a bucket for the first time creates it: it is
// allowed unless no_assignment_behavior is a DENY_ALL blanket rule, counted,
// and reported at once in a report of that bucket alone with time_elapsed 0.
// The first bucket also starts the stream and a report timer; from then on
// every 5 s (whatever reporting_interval says) Envoy reports every bucket it
// holds, idle ones included: requests allowed and denied since the bucket's
// last report, and time_elapsed, the time since then truncated to whole
// seconds. Building a report resets the counters, whether or not the
// report can be sent.
//
// An assignment (a BucketAction's quota_assignment_action) caches its
// strategy: a blanket rule, or a token bucket. The token bucket's rate is
// tokens_per_fill over fill_interval truncated to whole seconds (under one
// second: unlimited); it starts full when the bucket had no token bucket, at
// the replaced bucket's fill ratio (rounded down to whole tokens) when it
// differs from the cached one, and is kept as it is (only the TTL restarts)
// when it is identical, identical meaning the same max_tokens,
// tokens_per_fill and fill_interval nanos. The TTL is
// assignment_time_to_live's whole seconds; unset or 0 expires at once. At
// the TTL the bucket falls back to expired_assignment_behavior's
// fallback_rate_limit for its timeout's whole seconds, then (or at once
// without a fallback) to no_assignment_behavior. requests_per_time_unit is
// skipped in a response and allows all in the settings;
// reuse_last_assignment is not implemented (no fallback). An abandon_action
// forgets the bucket and its counts. When the stream breaks, nothing but the
// stream changes: assignments decide until their TTL, initial reports are
// dropped, and the next report timer restarts the stream.
//
// # Where the source and the API documentation differ
//
// The model follows the source: an unset assignment_time_to_live expires at
// once (the proto: never); an unset expired_assignment_behavior, and the end
// of its timeout, return the bucket to no_assignment_behavior (the proto:
// the bucket is abandoned); an unset expired_assignment_behavior_timeout
// ends the fallback at once; a quota_assignment_action without
// rate_limit_strategy is skipped (the proto: allow all); an unset
// tokens_per_fill refills one token a year (the proto: one token per
// fill_interval); reporting_interval is ignored; time_elapsed may be 0 (the
// proto: > 0); Envoy does not report a bucket when a new assignment arrives
// and never purges a bucket that gets no assignment (the proto says it
// does both).
//
// # Not modelled
//
// Matching (the model is handed each request's bucket id), the deny
// response, filter_enabled and filter_enforced, preview (keep_matching)
// matchers, per-bucket settings (one Settings for every bucket of a Proxy),
// a no_assignment_behavior token bucket (Envoy crashes; New refuses it),
// the races of Envoy's worker threads (here a bucket is created, and an
// assignment or expiry takes effect, at the instant of the call: in Envoy
// requests racing a bucket's creation are all decided by
// no_assignment_behavior, and a TTL of 0 may still decide requests until
// the main thread's next loop), Envoy's double rounding (the model's token
// bucket is exact), and responses the proto's validation refuses (Envoy
// would apply them; Apply returns an error).
package envoymodel
