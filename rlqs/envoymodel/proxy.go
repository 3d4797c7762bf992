package envoymodel

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	rlqfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rate_limit_quota/v3"
	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tokenmesh/tokenmesh/internal/minheap"
)

// EnvoyReportInterval is the interval of Envoy's usage reports whatever the
// bucket settings' reporting_interval says: filter_persistence.cc initTlsStore
// hardcodes 5000 ms ("Currently this is not supported and all usage is
// reported on a hardcoded interval").
const EnvoyReportInterval = 5 * time.Second

// Config is one Envoy's rate_limit_quota filter, as far as the model needs it.
type Config struct {
	// Domain is RateLimitQuotaFilterConfig.domain, set in every report
	// (global_client_impl.cc buildReports). Required.
	Domain string

	// Settings are the RateLimitQuotaBucketSettings of the matcher action that
	// put the requests in their buckets; every bucket of the proxy has them
	// (one matcher action). nil means none set: requests are allowed until an
	// assignment arrives and an expired assignment leaves no fallback. When
	// set, they must pass the proto's validation (as Envoy's config load
	// requires: reporting_interval is required, > 0.1 s), and the model reads
	// them as filter.cc recordBucketUsage does:
	//
	//   - no_assignment_behavior.fallback_rate_limit is the bucket's default
	//     action (ALLOW_ALL when unset): a blanket rule, or
	//     requests_per_time_unit, which shouldAllowRequest allows (it is not
	//     implemented). A token_bucket is refused: Envoy creates the bucket's
	//     default action without a token bucket and shouldAllowRequest then
	//     dereferences the null token_bucket_limiter (a crash), so there is no
	//     behaviour to model;
	//   - expired_assignment_behavior.fallback_rate_limit is the fallback after
	//     an assignment's TTL (any strategy); reuse_last_assignment is not
	//     implemented and counts as no fallback;
	//   - expired_assignment_behavior_timeout, in whole seconds (its nanos are
	//     dropped), is how long the fallback lasts; unset is 0, so the
	//     fallback ends as soon as it starts;
	//   - reporting_interval is ignored, as Envoy ignores it (see
	//     EnvoyReportInterval); deny_response_settings and bucket_id_builder
	//     do not change decisions.
	Settings *rlqfilterv3.RateLimitQuotaBucketSettings

	// ReportInterval is the time between periodic usage reports: 0 means
	// today's Envoy (EnvoyReportInterval, 5 s); another positive value
	// models an Envoy that reports that often (not today's).
	ReportInterval time.Duration
}

// Phase is where a bucket is in the filter's assignment cycle.
type Phase uint8

const (
	// NoAssignment: no cached action, the default action
	// (no_assignment_behavior) decides: before the first assignment, after an
	// expiry without fallback, after the fallback's timeout.
	NoAssignment Phase = iota
	// Assigned: an RLQS assignment decides until its TTL.
	Assigned
	// Fallback: the expired_assignment_behavior's fallback_rate_limit
	// decides until its timeout.
	Fallback
)

func (p Phase) String() string {
	switch p {
	case NoAssignment:
		return "no-assignment"
	case Assigned:
		return "assigned"
	case Fallback:
		return "fallback"
	}
	return fmt.Sprintf("Phase(%d)", uint8(p))
}

// Effect is what one BucketAction of a response did to its bucket
// (global_client_impl.cc onQuotaResponseImpl).
type Effect uint8

const (
	// NewTokenBucket: a token bucket started full, the bucket had none (no
	// assignment, a blanket rule, or an expired one).
	NewTokenBucket Effect = iota
	// ChangedTokenBucket: a different token bucket replaced the bucket's,
	// starting at its fill ratio (rounded down to whole tokens).
	ChangedTokenBucket
	// RenewedTokenBucket: an identical token bucket (same max_tokens,
	// tokens_per_fill and fill_interval nanos): the bucket's is kept as it
	// is, only the TTL restarts.
	RenewedTokenBucket
	// Blanket: an ALLOW_ALL or DENY_ALL rule (any token bucket dropped).
	Blanket
	// Abandoned: the bucket is forgotten, with its unreported counts.
	Abandoned
	// UnknownBucket: ignored, the proxy has no such bucket (never matched,
	// or abandoned).
	UnknownBucket
	// Unsupported: ignored, a requests_per_time_unit strategy or none at
	// all; the bucket keeps its assignment and its TTL.
	Unsupported
)

func (e Effect) String() string {
	switch e {
	case NewTokenBucket:
		return "new-token-bucket"
	case ChangedTokenBucket:
		return "changed-token-bucket"
	case RenewedTokenBucket:
		return "renewed-token-bucket"
	case Blanket:
		return "blanket-rule"
	case Abandoned:
		return "abandoned"
	case UnknownBucket:
		return "unknown-bucket"
	case Unsupported:
		return "unsupported"
	}
	return fmt.Sprintf("Effect(%d)", uint8(e))
}

// Outcome is the effect of one BucketAction, in the response's order.
type Outcome struct {
	Bucket BucketID
	Effect Effect
	// Until is the new assignment's expiry (the time Apply was called plus
	// the TTL's whole seconds) for the token bucket and blanket effects.
	Until time.Duration
}

// BucketState is a read-only view of one bucket (Proxy.Bucket).
type BucketState struct {
	ID    BucketID
	Phase Phase
	// Strategy decides the bucket's requests: the cached assignment's or
	// fallback's, else the default action's (ALLOW_ALL when
	// no_assignment_behavior is unset). A copy.
	Strategy *typev3.RateLimitStrategy
	// Until is when the Assigned or Fallback phase ends.
	Until time.Duration
	// Allowed and Denied are the requests counted since the last report.
	Allowed, Denied uint64
	// LastReport is when the bucket last went into a report (its creation
	// at first).
	LastReport time.Duration
	// TokenBucket is the token bucket enforcing a token_bucket strategy, nil
	// for other strategies.
	TokenBucket *TokenBucketState
}

// TokenBucketState is the token bucket Envoy enforces for a bucket.
type TokenBucketState struct {
	MaxTokens uint64
	// RatePerSecond is the refill rate Envoy computed, in tokens per second:
	// tokens_per_fill over the fill interval's whole seconds, at least one
	// token a year; +Inf when the interval truncated to 0 s (the bucket
	// admits everything unless MaxTokens is 0).
	RatePerSecond float64
	// Tokens is the tokens held at the time asked (fractional).
	Tokens float64
}

// Proxy is the deterministic model of one Envoy's rate_limit_quota filter
// (one filter config, so one RLQS client and bucket cache): its buckets,
// their counters, assignments, token buckets and timers, and whether its RLQS
// stream is up. It has no clock, goroutines or sockets: every method takes
// the time now (a time.Duration since an epoch the driver chooses), and a now
// earlier than one already seen is taken as that one (time never goes
// backwards). Each method first runs the TTL timers due at or before now
// (Tick), and Apply runs them again after applying (a TTL of 0 expires at
// once). A Proxy is not safe for concurrent use.
type Proxy struct {
	domain      string
	interval    time.Duration
	defaultRule *typev3.RateLimitStrategy // the default action's strategy
	allowFirst  bool                      // noAssignmentBehaviorShouldAllow
	fallback    *typev3.RateLimitStrategy // nil: no expired_assignment_behavior fallback
	fallbackTTL time.Duration

	buckets    map[string]*bucket
	timers     *minheap.Heap[timer]
	seq        uint64
	now        time.Duration
	started    bool // the report timer runs (a bucket was created once)
	nextReport time.Duration
	streamUp   bool
}

// bucket is Envoy's CachedBucket (quota_bucket_cache.h): usage counters,
// the cached action and its token bucket.
type bucket struct {
	id              BucketID
	allowed, denied uint64
	lastReport      time.Duration
	phase           Phase
	action          *typev3.RateLimitStrategy // cached_action's strategy; nil in NoAssignment
	lim             *limiter                  // token_bucket_limiter: non-nil exactly when action is a token bucket
	until           time.Duration
	timer           uint64 // seq of the live timer; older ones are stale
}

// timer is an armed expiry: the action or fallback expiration timer of the
// bucket with key, valid while the bucket's timer is seq.
type timer struct {
	at  time.Duration
	seq uint64
	key string
}

// New returns a Proxy with no buckets and no stream (Envoy starts both with
// the first bucket). Errors: an empty Domain, a negative ReportInterval,
// Settings that fail the proto's validation, or a token_bucket
// no_assignment_behavior (see Config.Settings).
func New(cfg Config) (*Proxy, error) {
	if cfg.Domain == "" {
		return nil, errors.New("envoymodel: Config.Domain is empty (RateLimitQuotaFilterConfig.domain requires one)")
	}
	if cfg.ReportInterval < 0 {
		return nil, fmt.Errorf("envoymodel: Config.ReportInterval %v is negative", cfg.ReportInterval)
	}
	p := &Proxy{
		domain:      cfg.Domain,
		interval:    orDefault(cfg.ReportInterval, EnvoyReportInterval),
		defaultRule: blanket(typev3.RateLimitStrategy_ALLOW_ALL),
		allowFirst:  true,
		buckets:     map[string]*bucket{},
		timers: minheap.New(func(a, b timer) bool {
			return a.at < b.at || (a.at == b.at && a.seq < b.seq)
		}),
	}
	s := cfg.Settings
	if s == nil {
		return p, nil
	}
	if err := s.ValidateAll(); err != nil {
		return nil, fmt.Errorf("envoymodel: Config.Settings: %w", err)
	}
	if nab := s.GetNoAssignmentBehavior(); nab != nil {
		rule := nab.GetFallbackRateLimit()
		if rule.GetTokenBucket() != nil {
			return nil, errors.New("envoymodel: Config.Settings: no_assignment_behavior with a token_bucket is not modelled: " +
				"Envoy gives the default action no token bucket and dereferences it at the bucket's second request (filter.cc shouldAllowRequest)")
		}
		p.defaultRule = proto.Clone(rule).(*typev3.RateLimitStrategy)
		p.allowFirst = !isBlanket(rule, typev3.RateLimitStrategy_DENY_ALL) // noAssignmentBehaviorShouldAllow
	}
	if eab := s.GetExpiredAssignmentBehavior(); eab != nil {
		if f := eab.GetFallbackRateLimit(); f != nil {
			p.fallback = proto.Clone(f).(*typev3.RateLimitStrategy)
		}
		p.fallbackTTL = wholeSeconds(eab.GetExpiredAssignmentBehaviorTimeout())
	}
	return p, nil
}

// Request decides one request matched into the bucket id at now
// (filter.cc recordBucketUsage) and counts it for the next report.
//
// A bucket seen for the first time is created (createBucketImpl): the
// request is allowed unless no_assignment_behavior is a DENY_ALL blanket
// rule, and Envoy sends the bucket's initial report at once, returned as
// initial: this bucket alone, its one request, time_elapsed 0, counters reset.
// initial is nil when the bucket existed, and when the stream is down (Envoy
// drops the report; the request's count is lost with it). The first bucket
// ever also starts the report timer and the stream.
//
// An existing bucket decides by its strategy (shouldAllowRequest): ALLOW_ALL
// allows, DENY_ALL denies, a token bucket allows when it holds a whole token
// and takes it, requests_per_time_unit allows.
func (p *Proxy) Request(now time.Duration, id BucketID) (allowed bool, initial *rlqsv3.RateLimitQuotaUsageReports) {
	now = p.advance(now)
	if b, ok := p.buckets[id.key]; ok {
		allowed = p.decide(now, b)
		if allowed {
			b.allowed++
		} else {
			b.denied++
		}
		return allowed, nil
	}
	if !p.started {
		p.started, p.streamUp = true, true
		p.nextReport = now + p.interval
	}
	b := &bucket{id: id, lastReport: now}
	if p.allowFirst {
		b.allowed = 1
	} else {
		b.denied = 1
	}
	p.buckets[id.key] = b
	r := p.newReport()
	r.BucketQuotaUsages = append(r.BucketQuotaUsages, b.usage(now))
	if !p.streamUp {
		return p.allowFirst, nil
	}
	return p.allowFirst, r
}

func (p *Proxy) decide(now time.Duration, b *bucket) bool {
	rule := b.action
	if rule == nil {
		rule = p.defaultRule
	}
	switch rule.GetStrategy().(type) {
	case *typev3.RateLimitStrategy_BlanketRule_:
		return rule.GetBlanketRule() != typev3.RateLimitStrategy_DENY_ALL
	case *typev3.RateLimitStrategy_TokenBucket:
		return b.lim.take(now)
	}
	return true // requests_per_time_unit: "not yet supported", allowed
}

// Report is the periodic report Envoy's timer sends at now
// (onSendReportsTimer, buildReports): every bucket the proxy holds, idle ones
// included, sorted by key (Envoy's order is its hash map's), each with the
// requests allowed and denied since its last report and time_elapsed, the
// time since then truncated to whole seconds; the counters restart from 0.
// Envoy restarts a closed stream before sending, so the stream is up
// afterwards (a driver that fails to deliver the report calls StreamReset:
// its counts are lost, as Envoy's are). Envoy sends the report even when
// every bucket was abandoned (no bucket_quota_usages, which the proto does
// not allow). The next report is due interval after now (NextReport).
//
// nil before the first bucket: Envoy's report timer starts with it.
func (p *Proxy) Report(now time.Duration) *rlqsv3.RateLimitQuotaUsageReports {
	now = p.advance(now)
	if !p.started {
		return nil
	}
	r := p.newReport()
	for _, k := range slices.Sorted(maps.Keys(p.buckets)) {
		r.BucketQuotaUsages = append(r.BucketQuotaUsages, p.buckets[k].usage(now))
	}
	p.streamUp = true
	p.nextReport = now + p.interval
	return r
}

// NextReport is when Envoy's report timer fires next: the first bucket's
// creation plus the interval, then the last Report plus the interval (Envoy
// re-arms the timer after each report). ok is false before the first bucket.
func (p *Proxy) NextReport() (at time.Duration, ok bool) {
	return p.nextReport, p.started
}

func (p *Proxy) newReport() *rlqsv3.RateLimitQuotaUsageReports {
	return &rlqsv3.RateLimitQuotaUsageReports{Domain: p.domain}
}

// usage is getUsageFromBucket: the counts since the last report, which it
// resets, and the whole seconds since then.
func (b *bucket) usage(now time.Duration) *rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage {
	u := &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
		BucketId:           b.id.Proto(),
		TimeElapsed:        &durationpb.Duration{Seconds: int64((now - b.lastReport) / time.Second)},
		NumRequestsAllowed: b.allowed,
		NumRequestsDenied:  b.denied,
	}
	b.allowed, b.denied, b.lastReport = 0, 0, now
	return u
}

// Apply applies an RLQS response received at now, its actions in order
// (onQuotaResponseImpl), and returns what each did:
//
//   - an action for a bucket the proxy does not hold is ignored;
//   - an abandon_action forgets the bucket, counters included (a later
//     request creates it anew);
//   - a blanket rule is cached (any token bucket dropped);
//   - a token_bucket identical to the cached action's (same max_tokens,
//     tokens_per_fill, and fill_interval nanos: its seconds are not compared,
//     so an interval changed by whole seconds counts as identical and the
//     bucket keeps its old rate) keeps the bucket's token bucket as it is;
//     a different one replaces it at its fill ratio, and one replacing none
//     starts full (see NewTokenBucket, ChangedTokenBucket);
//   - requests_per_time_unit, or a quota_assignment_action with no
//     rate_limit_strategy, is ignored: the bucket keeps its assignment and
//     TTL (the proto says the latter allows all; Envoy skips it);
//   - every applied assignment (re)starts the TTL: now plus
//     assignment_time_to_live in whole seconds (nanos dropped; unset or 0:
//     it expires at once, not "no expiration" as the proto says).
//
// A response that fails the proto's validation (no actions, an action
// without bucket_id or without an action, an empty key or value in a
// BucketId, a negative TTL, a token bucket without a positive
// fill_interval, a tokens_per_fill of 0, an undefined blanket rule) is an
// error naming the field, and changes nothing, not even due timers. Envoy
// does not validate responses: it skips an action without a bucket id and
// applies the rest, and applies what the proto forbids; the model refuses
// them because a server sending them is wrong.
func (p *Proxy) Apply(now time.Duration, resp *rlqsv3.RateLimitQuotaResponse) ([]Outcome, error) {
	r, err := wireCopy(resp)
	if err != nil {
		return nil, err
	}
	now = p.advance(now)
	out := make([]Outcome, 0, len(r.GetBucketAction()))
	for _, a := range r.GetBucketAction() {
		id := BucketIDFromProto(a.GetBucketId())
		o := Outcome{Bucket: id}
		b, ok := p.buckets[id.key]
		switch {
		case !ok:
			o.Effect = UnknownBucket
		case a.GetAbandonAction() != nil:
			delete(p.buckets, id.key)
			o.Effect = Abandoned
		default:
			qa := a.GetQuotaAssignmentAction()
			rule := qa.GetRateLimitStrategy()
			o.Effect = p.assign(now, b, rule, false)
			if o.Effect != Unsupported {
				b.phase = Assigned
				o.Until = p.arm(b, now, wholeSeconds(qa.GetAssignmentTimeToLive()))
			}
		}
		out = append(out, o)
	}
	p.advance(now)
	return out, nil
}

// assign caches rule as b's action at now, with its token bucket, and
// returns the effect; Unsupported leaves b unchanged. Apply and the fallback
// at expiry share it (onQuotaResponseImpl and onActionExpirationTimer decide
// the token bucket alike), except that a requests_per_time_unit fallback is
// cached (and allows all) where a response's is skipped.
func (p *Proxy) assign(now time.Duration, b *bucket, rule *typev3.RateLimitStrategy, fallback bool) Effect {
	var e Effect
	switch rule.GetStrategy().(type) {
	case *typev3.RateLimitStrategy_BlanketRule_:
		b.lim, e = nil, Blanket
	case *typev3.RateLimitStrategy_TokenBucket:
		// shouldReplaceTokenBucket / protoTokenBucketsEq.
		tb, old := rule.GetTokenBucket(), b.action.GetTokenBucket()
		switch {
		case old != nil && sameTokenBucket(tb, old):
			e = RenewedTokenBucket
		case b.lim == nil:
			b.lim, e = newLimiter(tb, now, nil), NewTokenBucket
		default:
			b.lim, e = newLimiter(tb, now, b.lim), ChangedTokenBucket
		}
	case *typev3.RateLimitStrategy_RequestsPerTimeUnit_:
		if !fallback {
			return Unsupported
		}
		b.lim, e = nil, Unsupported
	default:
		return Unsupported
	}
	b.action = rule
	return e
}

// sameTokenBucket is protoTokenBucketsEq (global_client_impl.cc).
func sameTokenBucket(a, b *typev3.TokenBucket) bool {
	return a.GetMaxTokens() == b.GetMaxTokens() &&
		a.GetTokensPerFill().GetValue() == b.GetTokensPerFill().GetValue() &&
		a.GetFillInterval().GetNanos() == b.GetFillInterval().GetNanos()
}

// arm (re)starts b's expiry timer to fire at now+d (saturating) and returns
// that time; earlier timers of b become stale.
func (p *Proxy) arm(b *bucket, now, d time.Duration) time.Duration {
	at := now + d
	if at < now {
		at = math.MaxInt64
	}
	p.seq++
	b.timer, b.until = p.seq, at
	p.timers.Push(timer{at: at, seq: p.seq, key: b.id.key})
	return at
}

// Tick runs the expiry timers due at or before now, in order of their time,
// each at its own time:
//
//   - an assignment's TTL (onActionExpirationTimer): without a fallback the
//     bucket returns to NoAssignment and drops its token bucket; with one,
//     the fallback is cached for expired_assignment_behavior_timeout, its
//     token bucket kept when identical to the expired one's, else started at
//     its fill ratio (full after a blanket rule);
//   - a fallback's timeout (onFallbackExpirationTimer): the bucket returns
//     to NoAssignment and drops its token bucket. Neither abandons the
//     bucket (the proto says an unset expired_assignment_behavior and the
//     end of its timeout abandon it; Envoy does not).
func (p *Proxy) Tick(now time.Duration) { p.advance(now) }

// advance takes now forward to the latest time seen, runs the timers due by
// then (Tick), and returns it.
func (p *Proxy) advance(now time.Duration) time.Duration {
	if now < p.now {
		now = p.now
	}
	p.now = now
	for p.timers.Len() > 0 && p.timers.Peek().at <= now {
		t := p.timers.Pop()
		b, ok := p.buckets[t.key]
		if !ok || b.timer != t.seq {
			continue // abandoned, or re-armed since
		}
		if b.phase == Assigned && p.fallback != nil {
			p.assign(t.at, b, p.fallback, true)
			b.phase = Fallback
			p.arm(b, t.at, p.fallbackTTL)
			continue
		}
		b.phase, b.action, b.lim, b.timer = NoAssignment, nil, nil, 0
	}
	return now
}

// NextExpiry is the time of the earliest armed expiry timer (an assignment's
// TTL or a fallback's timeout), so a driver can call Tick then; ok is false
// when none is armed. It may name a timer made stale by a later assignment:
// Tick then does nothing.
func (p *Proxy) NextExpiry() (at time.Duration, ok bool) {
	if p.timers.Len() == 0 {
		return 0, false
	}
	return p.timers.Peek().at, true
}

// StreamReset records that the RLQS stream broke at now (onRemoteClose):
// nothing else changes, assignments keep deciding until their TTL. While
// the stream is down, initial reports of new buckets are dropped (Request
// returns none); the next Report restarts it, as Envoy does at its next
// report timer (there is no other reconnection).
func (p *Proxy) StreamReset(now time.Duration) {
	p.advance(now)
	p.streamUp = false
}

// StreamUp reports whether the model's stream is up: from the first bucket
// until a StreamReset, and again from the next Report.
func (p *Proxy) StreamUp() bool { return p.streamUp }

// Buckets returns the ids of the buckets the proxy holds, sorted by key.
func (p *Proxy) Buckets() []BucketID {
	ids := make([]BucketID, 0, len(p.buckets))
	for _, k := range slices.Sorted(maps.Keys(p.buckets)) {
		ids = append(ids, p.buckets[k].id)
	}
	return ids
}

// Bucket returns the state of bucket id, its token bucket's tokens read at
// now, without changing anything (timers due by now have not run unless a
// call at now ran them: call Tick first). ok is false when the proxy does
// not hold the bucket.
func (p *Proxy) Bucket(now time.Duration, id BucketID) (st BucketState, ok bool) {
	b, ok := p.buckets[id.key]
	if !ok {
		return BucketState{}, false
	}
	rule := b.action
	if rule == nil {
		rule = p.defaultRule
	}
	st = BucketState{
		ID: b.id, Phase: b.phase, Strategy: proto.Clone(rule).(*typev3.RateLimitStrategy),
		Until: b.until, Allowed: b.allowed, Denied: b.denied, LastReport: b.lastReport,
	}
	if b.lim != nil {
		st.TokenBucket = &TokenBucketState{MaxTokens: b.lim.max, RatePerSecond: b.lim.ratePerSecond(), Tokens: b.lim.tokens(max(now, p.now))}
	}
	return st, true
}

// wireCopy returns resp as Envoy would decode it from the wire (a private
// copy: typed-nil oneofs become empty messages) once it passes the proto's
// validation.
func wireCopy(resp *rlqsv3.RateLimitQuotaResponse) (*rlqsv3.RateLimitQuotaResponse, error) {
	if resp == nil {
		return nil, errors.New("envoymodel: malformed RLQS response: nil")
	}
	wire, err := proto.Marshal(resp)
	if err != nil {
		return nil, fmt.Errorf("envoymodel: malformed RLQS response: %w", err)
	}
	r := &rlqsv3.RateLimitQuotaResponse{}
	if err := proto.Unmarshal(wire, r); err != nil {
		return nil, fmt.Errorf("envoymodel: malformed RLQS response: %w", err)
	}
	if err := r.ValidateAll(); err != nil {
		return nil, fmt.Errorf("envoymodel: malformed RLQS response: %w", err)
	}
	return r, nil
}

// wholeSeconds is a Duration's seconds field as a time.Duration, saturating
// (Envoy's std::chrono::seconds(d.seconds()): nanos dropped; nil is 0).
func wholeSeconds(d *durationpb.Duration) time.Duration {
	s := d.GetSeconds()
	if s > math.MaxInt64/int64(time.Second) {
		return math.MaxInt64
	}
	return time.Duration(s) * time.Second
}

func blanket(r typev3.RateLimitStrategy_BlanketRule) *typev3.RateLimitStrategy {
	return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: r}}
}

func isBlanket(s *typev3.RateLimitStrategy, r typev3.RateLimitStrategy_BlanketRule) bool {
	_, ok := s.GetStrategy().(*typev3.RateLimitStrategy_BlanketRule_)
	return ok && s.GetBlanketRule() == r
}

// orDefault returns d, or def when d is 0.
func orDefault(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}
