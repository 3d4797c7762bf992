package envoymodel

import (
	"math"
	"strings"
	"testing"
	"time"

	rlqfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rate_limit_quota/v3"
	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

var (
	allowAll = blanket(typev3.RateLimitStrategy_ALLOW_ALL)
	denyAll  = blanket(typev3.RateLimitStrategy_DENY_ALL)
)

// createBucketImpl: the first request creates the bucket, is allowed by
// default, and goes out at once in a report of its own with time_elapsed 0;
// the counters restart; the report timer and the stream start with it.
func TestFirstRequestReportsAtOnce(t *testing.T) {
	p := newProxy(t, nil)
	if _, ok := p.NextReport(); ok {
		t.Fatal("report timer runs before any bucket")
	}
	if r := p.Report(sec(1)); r != nil {
		t.Fatalf("Report before any bucket = %v, want nil", r)
	}
	allowed, initial := p.Request(sec(2), web)
	if !allowed || initial == nil {
		t.Fatalf("first request: allowed %v, initial %v", allowed, initial)
	}
	want := &rlqsv3.RateLimitQuotaUsageReports{Domain: "d", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{{
		BucketId: web.Proto(), TimeElapsed: &durationpb.Duration{}, NumRequestsAllowed: 1}}}
	if !proto.Equal(initial, want) {
		t.Fatalf("initial report %v, want %v", initial, want)
	}
	if st := state(t, p, sec(2), web); st.Allowed != 0 || st.Denied != 0 || st.LastReport != sec(2) {
		t.Fatalf("after the initial report: %+v", st)
	}
	if at, ok := p.NextReport(); !ok || at != sec(7) {
		t.Fatalf("NextReport = %v %v, want 7s (5 s after the first bucket)", at, ok)
	}
	if !p.StreamUp() {
		t.Fatal("stream not started with the first bucket")
	}
	if allowed, initial := p.Request(sec(3), web); !allowed || initial != nil {
		t.Fatalf("second request: allowed %v, initial %v", allowed, initial)
	}
}

// noAssignmentBehaviorShouldAllow: only a DENY_ALL blanket rule refuses the
// first request; the default action then decides until an assignment.
func TestNoAssignmentBehavior(t *testing.T) {
	p := newProxy(t, settings(denyAll, nil, nil))
	allowed, initial := p.Request(0, web)
	if allowed || initial.GetBucketQuotaUsages()[0].GetNumRequestsDenied() != 1 {
		t.Fatalf("DENY_ALL first request: allowed %v, initial %v", allowed, initial)
	}
	if got := admit(p, sec(1), web, 3); got != 0 {
		t.Fatalf("DENY_ALL admitted %d", got)
	}
	p = newProxy(t, settings(rptu(1), nil, nil))
	if got := admit(p, 0, web, 5); got != 5 {
		t.Fatalf("requests_per_time_unit default admitted %d of 5, want all (not implemented: allowed)", got)
	}
}

// buildReports: every bucket, idle ones too, sorted by key, counts since the
// last report (then reset), time_elapsed truncated to whole seconds.
func TestPeriodicReport(t *testing.T) {
	p := newProxy(t, settings(nil, nil, nil))
	api := NewBucketID(map[string]string{"name": "api"})
	p.Request(0, web)
	p.Request(sec(1), api)
	admit(p, sec(2), web, 3)
	r := p.Report(sec(5.9))
	if len(r.GetBucketQuotaUsages()) != 2 || BucketIDFromProto(r.GetBucketQuotaUsages()[0].GetBucketId()).Key() != "name=api" {
		t.Fatalf("report %v: want api then web", r)
	}
	w := usageOf(t, r, web)
	if w.GetNumRequestsAllowed() != 3 || w.GetTimeElapsed().AsDuration() != sec(5) {
		t.Fatalf("web usage %v: want 3 allowed over 5 s (5.9 s truncated)", w)
	}
	if a := usageOf(t, r, api); a.GetNumRequestsAllowed() != 0 || a.GetTimeElapsed().AsDuration() != sec(4) {
		t.Fatalf("idle api usage %v: want 0 allowed, 4 s", a)
	}
	if at, _ := p.NextReport(); at != sec(10.9) {
		t.Fatalf("NextReport %v, want 10.9s (re-armed after the report)", at)
	}
	if w := usageOf(t, p.Report(sec(7)), web); w.GetNumRequestsAllowed() != 0 || w.GetTimeElapsed().AsDuration() != sec(1) {
		t.Fatalf("second report %v: counters not reset", w)
	}
	q, err := New(Config{Domain: "d", ReportInterval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	q.Request(0, web)
	if at, _ := q.NextReport(); at != time.Second {
		t.Fatalf("ReportInterval 1s: NextReport %v", at)
	}
}

// createTokenBucketFromAction: a first token bucket starts full and refills
// at tokens_per_fill over whole seconds of fill_interval.
func TestTokenBucketStartsFullAndRefills(t *testing.T) {
	p := newProxy(t, nil)
	p.Request(0, web)
	out := apply(t, p, sec(1), assignment(web, tokenBucket(5, 2, sec(1.5)), dur(sec(60))))
	if out[0].Effect != NewTokenBucket || out[0].Until != sec(61) {
		t.Fatalf("outcome %+v", out)
	}
	st := state(t, p, sec(1), web)
	if st.Phase != Assigned || st.TokenBucket.Tokens != 5 || st.TokenBucket.RatePerSecond != 2 {
		t.Fatalf("state %+v %+v: want full 5 tokens at 2/s (1.5 s truncated to 1 s)", st, st.TokenBucket)
	}
	if got := admit(p, sec(1), web, 7); got != 5 {
		t.Fatalf("admitted %d of 7 from a full bucket of 5", got)
	}
	if got := admit(p, sec(2.4), web, 3); got != 2 {
		t.Fatalf("admitted %d after 1.4 s at 2/s, want 2", got)
	}
	if got := admit(p, sec(2.5), web, 1); got != 1 {
		t.Fatalf("admitted %d at 2.5 s (0.8+0.2 tokens = 1), want 1", got)
	}
}

// An interval under a second truncates to 0 s: the bucket admits everything
// (max_tokens 0: nothing). An unset tokens_per_fill refills one token a year.
func TestTokenBucketEdges(t *testing.T) {
	p := newProxy(t, nil)
	p.Request(0, web)
	apply(t, p, 0, assignment(web, tokenBucket(1, 1, 500*time.Millisecond), dur(sec(60))))
	if got := admit(p, sec(1), web, 1000); got != 1000 {
		t.Fatalf("sub-second interval admitted %d of 1000, want all", got)
	}
	if st := state(t, p, sec(1), web); !math.IsInf(st.TokenBucket.RatePerSecond, 1) {
		t.Fatalf("rate %v, want +Inf", st.TokenBucket.RatePerSecond)
	}
	apply(t, p, sec(1), assignment(web, tokenBucket(0, 1, 500*time.Millisecond), dur(sec(60))))
	if got := admit(p, sec(2), web, 10); got != 0 {
		t.Fatalf("max_tokens 0 admitted %d", got)
	}
	apply(t, p, sec(2), assignment(web, tokenBucket(2, 0, sec(1)), dur(sec(1e9))))
	year := sec(365 * 24 * 3600)
	if got := admit(p, sec(2), web, 3); got != 2 {
		t.Fatalf("unset tokens_per_fill admitted %d of a full 2", got)
	}
	if got := admit(p, sec(2)+year-time.Second, web, 1); got != 0 {
		t.Fatal("a token refilled before a year")
	}
	if got := admit(p, sec(2)+year, web, 2); got != 1 {
		t.Fatalf("admitted %d a year later, want one token", got)
	}
	// 1 token per 2 years is below Envoy's minimum: raised to one a year.
	apply(t, p, sec(3), assignment(web, tokenBucket(1, 1, 2*year), dur(sec(1e9))))
	if st := state(t, p, sec(3), web); st.TokenBucket.RatePerSecond != 1/year.Seconds() {
		t.Fatalf("rate %v, want Envoy's minimum %v", st.TokenBucket.RatePerSecond, 1/year.Seconds())
	}
}

// A changed token bucket starts at the old one's fill ratio, rounded down to
// whole tokens: raising max_tokens of an idle, full bucket hands it tokens at
// once.
func TestChangedTokenBucketKeepsFillRatio(t *testing.T) {
	p := newProxy(t, nil)
	p.Request(0, web)
	apply(t, p, 0, assignment(web, tokenBucket(10, 1, sec(10)), dur(sec(60))))
	admit(p, 0, web, 6) // 4 of 10 left: ratio 0.4
	out := apply(t, p, 0, assignment(web, tokenBucket(25, 1, sec(10)), dur(sec(60))))
	if out[0].Effect != ChangedTokenBucket {
		t.Fatalf("effect %v", out[0].Effect)
	}
	if st := state(t, p, 0, web); st.TokenBucket.Tokens != 10 {
		t.Fatalf("tokens %v, want 25*0.4 = 10", st.TokenBucket.Tokens)
	}
	admit(p, 0, web, 9) // 1 of 25 left: ratio 0.04, 0.04*20 = 0.8 -> 0
	apply(t, p, 0, assignment(web, tokenBucket(20, 1, sec(10)), dur(sec(60))))
	if st := state(t, p, 0, web); st.TokenBucket.Tokens != 0 {
		t.Fatalf("tokens %v, want 0.8 rounded down to 0", st.TokenBucket.Tokens)
	}
	// Idle and full: a bigger bucket is full at once.
	apply(t, p, sec(1000), assignment(web, tokenBucket(100, 1, sec(10)), dur(sec(60))))
	if got := admit(p, sec(1000), web, 200); got != 100 {
		t.Fatalf("raised max_tokens of a full bucket: admitted %d, want 100", got)
	}
	// A blanket rule drops the token bucket: the next one starts full.
	apply(t, p, sec(1000), assignment(web, allowAll, dur(sec(60))))
	if out := apply(t, p, sec(1000), assignment(web, tokenBucket(3, 1, sec(10)), dur(sec(60)))); out[0].Effect != NewTokenBucket {
		t.Fatalf("after a blanket rule: %v", out[0].Effect)
	}
	if got := admit(p, sec(1000), web, 5); got != 3 {
		t.Fatalf("after a blanket rule admitted %d, want a full 3", got)
	}
}

// protoTokenBucketsEq compares max_tokens, tokens_per_fill and only the nanos
// of fill_interval: an identical bucket is kept (only the TTL restarts), and
// so is one whose interval changed by whole seconds, with its old rate.
func TestIdenticalTokenBucketRenewsTTL(t *testing.T) {
	p := newProxy(t, nil)
	p.Request(0, web)
	apply(t, p, 0, assignment(web, tokenBucket(10, 10, sec(1)), dur(sec(5))))
	admit(p, 0, web, 10)
	lim := p.buckets[web.Key()].lim
	before := *lim
	out := apply(t, p, sec(4), assignment(web, tokenBucket(10, 10, sec(1)), dur(sec(5))))
	if out[0].Effect != RenewedTokenBucket || out[0].Until != sec(9) {
		t.Fatalf("outcome %+v, want renewed until 9s", out[0])
	}
	if p.buckets[web.Key()].lim != lim || *lim != before {
		t.Fatal("identical assignment changed the token bucket")
	}
	if got := admit(p, sec(4), web, 100); got != 10 {
		t.Fatalf("admitted %d after 4 s at 10/s of max 10, want 10", got)
	}
	p.Tick(sec(8.9))
	if st := state(t, p, sec(8.9), web); st.Phase != Assigned {
		t.Fatalf("phase %v at 8.9s, want still assigned (TTL renewed to 9s)", st.Phase)
	}
	// 10 per 60 s has the same nanos as 10 per 1 s: "identical", the 10/s
	// bucket stays.
	if out := apply(t, p, sec(8.9), assignment(web, tokenBucket(10, 10, sec(60)), dur(sec(60)))); out[0].Effect != RenewedTokenBucket {
		t.Fatalf("interval 1s -> 60s: %v, want renewed", out[0].Effect)
	}
	if st := state(t, p, sec(8.9), web); st.TokenBucket.RatePerSecond != 10 {
		t.Fatalf("rate %v, want the old 10/s", st.TokenBucket.RatePerSecond)
	}
	// Nanos differ: changed.
	if out := apply(t, p, sec(9), assignment(web, tokenBucket(10, 10, sec(60.5)), dur(sec(60)))); out[0].Effect != ChangedTokenBucket {
		t.Fatalf("interval nanos changed: %v", out[0].Effect)
	}
}

// startActionExpirationTimer: the TTL's whole seconds; unset or 0 expires at
// once; without a fallback the bucket returns to no_assignment_behavior and
// its next token bucket starts full.
func TestTTLExpiry(t *testing.T) {
	p := newProxy(t, settings(denyAll, nil, nil))
	p.Request(0, web)
	apply(t, p, 0, assignment(web, tokenBucket(3, 1, sec(100)), dur(sec(2.9))))
	admit(p, 0, web, 3)
	if next, _ := p.NextExpiry(); next != sec(2) {
		t.Fatalf("expiry at %v, want 2s (2.9 s truncated)", next)
	}
	if ok, _ := p.Request(sec(2), web); ok {
		t.Fatal("expired at 2s but still deciding by the token bucket? (DENY_ALL default)")
	}
	if st := state(t, p, sec(2), web); st.Phase != NoAssignment || st.TokenBucket != nil {
		t.Fatalf("after TTL: %+v", st)
	}
	for _, ttl := range []*durationpb.Duration{nil, dur(0), dur(sec(0.5))} {
		out := apply(t, p, sec(3), assignment(web, tokenBucket(3, 1, sec(100)), ttl))
		if out[0].Effect != NewTokenBucket {
			t.Fatalf("TTL %v: %v, want a new (full) bucket after expiry", ttl, out[0].Effect)
		}
		if st := state(t, p, sec(3), web); st.Phase != NoAssignment {
			t.Fatalf("TTL %v: phase %v, want expired at once", ttl, st.Phase)
		}
	}
}

// onActionExpirationTimer with a fallback: cached for the timeout's whole
// seconds, its token bucket at the expired one's fill ratio (kept when
// identical); then no_assignment_behavior. An unset timeout ends it at once;
// reuse_last_assignment is no fallback.
func TestExpiredAssignmentFallback(t *testing.T) {
	p := newProxy(t, settings(denyAll, tokenBucket(20, 1, sec(100)), dur(sec(10.7))))
	p.Request(0, web)
	apply(t, p, 0, assignment(web, tokenBucket(10, 1, sec(100)), dur(sec(5))))
	admit(p, 0, web, 5) // ratio 0.5
	p.Tick(sec(5))
	st := state(t, p, sec(5), web)
	if st.Phase != Fallback || st.Until != sec(15) || st.TokenBucket.MaxTokens != 20 {
		t.Fatalf("fallback state %+v", st)
	}
	if got := admit(p, sec(5), web, 20); got != 10 {
		t.Fatalf("fallback admitted %d, want 20*0.5 = 10", got)
	}
	p.Tick(sec(15))
	if st := state(t, p, sec(15), web); st.Phase != NoAssignment || admit(p, sec(15), web, 1) != 0 {
		t.Fatalf("after the fallback's timeout: %+v, want the DENY_ALL default", st)
	}
	// Identical fallback: the expired bucket is kept.
	apply(t, p, sec(20), assignment(web, tokenBucket(20, 1, sec(100)), dur(sec(1))))
	admit(p, sec(20), web, 19)
	lim := p.buckets[web.Key()].lim
	p.Tick(sec(21))
	if p.buckets[web.Key()].lim != lim || admit(p, sec(21), web, 5) != 1 {
		t.Fatal("identical fallback did not keep the expired token bucket")
	}

	p = newProxy(t, settings(nil, denyAll, nil))
	p.Request(0, web)
	apply(t, p, 0, assignment(web, allowAll, dur(sec(1))))
	if got := admit(p, sec(1), web, 3); got != 3 {
		t.Fatalf("unset timeout: admitted %d, want the ALLOW_ALL default at once", got)
	}
	p = newProxy(t, settings(denyAll, nil, dur(sec(30)))) // reuse_last_assignment
	p.Request(0, web)
	apply(t, p, 0, assignment(web, allowAll, dur(sec(1))))
	p.Tick(sec(1))
	if st := state(t, p, sec(1), web); st.Phase == Fallback || admit(p, sec(1), web, 1) != 0 {
		t.Fatal("reuse_last_assignment kept the assignment; Envoy does not implement it")
	}
}

// abandon_action erases the bucket with its counts; a request recreates it.
func TestAbandon(t *testing.T) {
	p := newProxy(t, nil)
	p.Request(0, web)
	admit(p, sec(1), web, 4)
	out := apply(t, p, sec(2), abandon(web), assignment(web, denyAll, dur(sec(9))))
	if out[0].Effect != Abandoned || out[1].Effect != UnknownBucket {
		t.Fatalf("outcomes %+v", out)
	}
	if _, ok := p.Bucket(sec(2), web); ok {
		t.Fatal("abandoned bucket still held")
	}
	if r := p.Report(sec(5)); r == nil || len(r.GetBucketQuotaUsages()) != 0 {
		t.Fatalf("report after abandon %v: want an empty report (Envoy still sends it)", r)
	}
	ok, initial := p.Request(sec(6), web)
	if !ok || initial.GetBucketQuotaUsages()[0].GetNumRequestsAllowed() != 1 {
		t.Fatalf("recreated bucket: %v %v, want a fresh initial report", ok, initial)
	}
}

// requests_per_time_unit and a missing rate_limit_strategy are skipped: the
// bucket keeps its assignment and its TTL. Unknown buckets are ignored.
func TestSkippedActions(t *testing.T) {
	p := newProxy(t, nil)
	p.Request(0, web)
	apply(t, p, 0, assignment(web, denyAll, dur(sec(10))))
	before := snapshot(p)
	out := apply(t, p, sec(0), assignment(web, rptu(100), dur(sec(60))), assignment(web, nil, dur(sec(60))),
		assignment(NewBucketID(map[string]string{"name": "other"}), allowAll, dur(sec(60))))
	for i, want := range []Effect{Unsupported, Unsupported, UnknownBucket} {
		if out[i].Effect != want {
			t.Fatalf("outcome %d: %v, want %v", i, out[i].Effect, want)
		}
	}
	if after := snapshot(p); after != before {
		t.Fatalf("skipped actions changed state:\n%s\n%s", before, after)
	}
}

// onRemoteClose only drops the stream: assignments decide until their TTL,
// initial reports are lost (with their counts), the next Report restarts it.
func TestStreamReset(t *testing.T) {
	p := newProxy(t, nil)
	p.Request(0, web)
	apply(t, p, 0, assignment(web, denyAll, dur(sec(10))))
	p.StreamReset(sec(1))
	if p.StreamUp() {
		t.Fatal("stream up after reset")
	}
	if admit(p, sec(2), web, 1) != 0 {
		t.Fatal("assignment dropped with the stream")
	}
	api := NewBucketID(map[string]string{"name": "api"})
	if ok, initial := p.Request(sec(3), api); !ok || initial != nil {
		t.Fatalf("new bucket while down: %v %v, want allowed and no report", ok, initial)
	}
	r := p.Report(sec(5))
	if !p.StreamUp() || usageOf(t, r, api).GetNumRequestsAllowed() != 0 || usageOf(t, r, web).GetNumRequestsDenied() != 1 {
		t.Fatalf("report after reset %v (the dropped initial count is lost)", r)
	}
	p.Tick(sec(10))
	if st := state(t, p, sec(10), web); st.Phase != NoAssignment {
		t.Fatalf("phase %v at the TTL", st.Phase)
	}
}

// A response the proto's validation refuses is an error and changes nothing,
// not even timers already due.
func TestApplyMalformed(t *testing.T) {
	good := assignment(web, tokenBucket(5, 1, sec(1)), dur(sec(60)))
	mut := func(f func(a *rlqsv3.RateLimitQuotaResponse_BucketAction)) *rlqsv3.RateLimitQuotaResponse {
		a := clone(good)
		f(a)
		return response(clone(good), a)
	}
	tb := func(a *rlqsv3.RateLimitQuotaResponse_BucketAction) *typev3.TokenBucket {
		return a.GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket()
	}
	cases := map[string]struct {
		resp *rlqsv3.RateLimitQuotaResponse
		want string
	}{
		"nil":          {nil, "nil"},
		"no actions":   {response(), "BucketAction"},
		"no bucket id": {mut(func(a *rlqsv3.RateLimitQuotaResponse_BucketAction) { a.BucketId = nil }), "BucketId"},
		"empty id":     {mut(func(a *rlqsv3.RateLimitQuotaResponse_BucketAction) { a.BucketId.Bucket = nil }), "Bucket"},
		"empty value":  {mut(func(a *rlqsv3.RateLimitQuotaResponse_BucketAction) { a.BucketId.Bucket["name"] = "" }), "Bucket"},
		"no action":    {mut(func(a *rlqsv3.RateLimitQuotaResponse_BucketAction) { a.BucketAction = nil }), "BucketAction"},
		"negative ttl": {mut(func(a *rlqsv3.RateLimitQuotaResponse_BucketAction) {
			a.GetQuotaAssignmentAction().AssignmentTimeToLive = dur(-time.Second)
		}), "AssignmentTimeToLive"},
		"no interval":   {mut(func(a *rlqsv3.RateLimitQuotaResponse_BucketAction) { tb(a).FillInterval = nil }), "FillInterval"},
		"zero interval": {mut(func(a *rlqsv3.RateLimitQuotaResponse_BucketAction) { tb(a).FillInterval = dur(0) }), "FillInterval"},
		"zero fill":     {mut(func(a *rlqsv3.RateLimitQuotaResponse_BucketAction) { tb(a).TokensPerFill.Value = 0 }), "TokensPerFill"},
		"bad enum": {mut(func(a *rlqsv3.RateLimitQuotaResponse_BucketAction) {
			a.GetQuotaAssignmentAction().RateLimitStrategy = blanket(7)
		}), "BlanketRule"},
		"empty strategy": {mut(func(a *rlqsv3.RateLimitQuotaResponse_BucketAction) {
			a.GetQuotaAssignmentAction().RateLimitStrategy = &typev3.RateLimitStrategy{}
		}), "Strategy"},
		"typed nil token bucket": {mut(func(a *rlqsv3.RateLimitQuotaResponse_BucketAction) {
			a.GetQuotaAssignmentAction().RateLimitStrategy = &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{}}
		}), "FillInterval"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			p := newProxy(t, nil)
			p.Request(0, web)
			apply(t, p, 0, assignment(web, allowAll, dur(sec(1))))
			before := snapshot(p)
			_, err := p.Apply(sec(5), c.resp)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one naming %q", err, c.want)
			}
			if after := snapshot(p); after != before {
				t.Fatalf("state changed:\n%s\n%s", before, after)
			}
		})
	}
}

func TestNewErrors(t *testing.T) {
	cases := map[string]struct {
		cfg  Config
		want string
	}{
		"no domain":         {Config{}, "Domain"},
		"negative interval": {Config{Domain: "d", ReportInterval: -1}, "ReportInterval"},
		"no reporting_interval": {Config{Domain: "d", Settings: &rlqfilterv3.RateLimitQuotaBucketSettings{}},
			"ReportingInterval"},
		"token bucket default": {Config{Domain: "d", Settings: settings(tokenBucket(1, 1, sec(1)), nil, nil)}, "no_assignment_behavior"},
		"zero timeout":         {Config{Domain: "d", Settings: settings(nil, denyAll, dur(0))}, "ExpiredAssignmentBehaviorTimeout"},
	}
	for name, c := range cases {
		if _, err := New(c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one naming %q", name, err, c.want)
		}
	}
}

func TestBucketIDKey(t *testing.T) {
	a := NewBucketID(map[string]string{"name": "web", "env": "prod"})
	if a.Key() != "env=prod,name=web" {
		t.Fatalf("key %q", a.Key())
	}
	m := map[string]string{"a": "1"}
	b := NewBucketID(m)
	m["a"] = "2"
	if b.Key() != "a=1" || b.Map()["a"] != "1" {
		t.Fatal("BucketID aliases its map")
	}
	// Escaping keeps keys distinct where separators appear in the data.
	x := NewBucketID(map[string]string{"a": "1,b=2"})
	y := NewBucketID(map[string]string{"a": "1", "b": "2"})
	if x.Key() == y.Key() {
		t.Fatalf("collision: %q", x.Key())
	}
	if NewBucketID(nil).Key() != "" || BucketIDFromProto(a.Proto()).Key() != a.Key() {
		t.Fatal("empty or round-tripped id")
	}
}

// A call earlier than one already seen is taken at the latest time.
func TestTimeNeverGoesBackwards(t *testing.T) {
	p := newProxy(t, nil)
	p.Request(sec(10), web)
	apply(t, p, sec(10), assignment(web, tokenBucket(1, 1, sec(1)), dur(sec(60))))
	admit(p, sec(10), web, 1)
	if got := admit(p, sec(5), web, 1); got != 0 {
		t.Fatal("a late call refilled the bucket")
	}
	if at, _ := p.NextReport(); at != sec(15) {
		t.Fatalf("NextReport %v", at)
	}
}

// The simulator's hot path: a request to a bucket with a token bucket.
func BenchmarkRequestTokenBucket(b *testing.B) {
	p := newProxy(b, nil)
	p.Request(0, web)
	apply(b, p, 0, assignment(web, tokenBucket(100, 100, sec(1)), dur(time.Hour)))
	b.ReportAllocs()
	for i := range b.N {
		p.Request(time.Duration(i)*time.Millisecond, web)
	}
}
