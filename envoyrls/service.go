package envoyrls

import (
	"context"
	"errors"
	"math"
	"slices"
	"strconv"
	"sync/atomic"
	"time"
	"unicode/utf8"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tokenmesh/tokenmesh/cluster"
)

// Limits of one ShouldRateLimit request.
const (
	// MaxDescriptors bounds the descriptors of one request.
	MaxDescriptors = 1000
	// MaxEntries bounds the entries of one descriptor.
	MaxEntries = 64
	// MaxHits bounds the hits one descriptor counts (as the tokenmesh.v1 API).
	MaxHits = 1_000_000_000
)

// Response header names, as envoyproxy/ratelimit's with
// LIMIT_RESPONSE_HEADERS_ENABLED and Envoy's x-ratelimit-* headers: Envoy's
// ratelimit filter adds response_headers_to_add to the client's response.
const (
	HeaderLimit     = "x-ratelimit-limit"     // requests_per_unit of the descriptor closest to its limit
	HeaderRemaining = "x-ratelimit-remaining" // its limit_remaining
	HeaderReset     = "x-ratelimit-reset"     // its duration_until_reset, whole seconds rounded up
)

// Checker decides batches of checks: *cluster.Node (the node's cluster, so
// decisions are the cluster's).
type Checker interface {
	CheckBatch(ctx context.Context, items []cluster.BatchItem) ([]cluster.BatchResult, error)
}

// SingleChecker is a Checker that also decides one check on its own
// (*cluster.Node's CheckItem, whose local fast path decides in the
// caller's goroutine). ShouldRateLimit uses it for a request with one
// check, the common case, instead of a batch of one, which costs the
// batch's allocations; the answer is the same (an error fails the call
// either way).
type SingleChecker interface {
	Checker
	CheckItem(ctx context.Context, it cluster.BatchItem) (cluster.CheckResult, error)
}

// RuleDeriver is a Checker that creates derived rules (*cluster.Node's
// EnsureDerived): ShouldRateLimit needs one for descriptors that carry a
// limit override.
type RuleDeriver interface {
	EnsureDerived(ctx context.Context, d cluster.Derived) error
}

// smallRequest is the number of descriptors whose per-descriptor slices
// ShouldRateLimit keeps on the stack.
const smallRequest = 4

// Observer, when set, is told of every decided check: the rule, the
// cluster's result, whether the check was answered OK and the time the
// batch took. The server uses it for its metrics.
type Observer func(rule string, r cluster.BatchResult, ok bool, waited time.Duration)

// Service implements envoy.service.ratelimit.v3.RateLimitService over a
// Config and a Checker. Safe for concurrent use; a Config handed to it
// must not change afterwards (SetConfig swaps in another one).
type Service struct {
	rlsv3.UnimplementedRateLimitServiceServer
	cfg      atomic.Pointer[Config] // swapped whole by SetConfig
	checker  Checker
	observe  Observer
	clock    func() time.Time          // fixed_window's duration_until_reset
	shadow   atomic.Bool               // the global shadow mode (SetShadowMode)
	shadowed atomic.Uint64             // responses it answered OK instead of OVER_LIMIT
	epoch    atomic.Pointer[time.Time] // the node's time base (SetEpoch)
	refused  atomic.Uint64             // limit overrides refused by the node's bound
}

// New returns the service for cfg's limits, decided by c (which must hold
// cfg.Rules(epoch)). observe may be nil. The global shadow mode is off.
func New(cfg *Config, c Checker, observe Observer) *Service {
	s := &Service{checker: c, observe: observe, clock: time.Now}
	s.cfg.Store(cfg)
	return s
}

// SetConfig makes cfg the limits of every call that starts from now on (a
// reload of the Envoy config files); calls in flight finish with the
// Config they started with. The Checker must hold cfg.Rules(epoch) by
// then (package daemon applies the rules to the node first). A nil cfg
// is ignored.
func (s *Service) SetConfig(cfg *Config) {
	if cfg != nil {
		s.cfg.Store(cfg)
	}
}

// SetEpoch sets the node's time base (limiter.Config.Epoch, the epoch
// Config.Rules was given): the rules of limit overrides on fixed_window
// descriptors align their windows with it, as Rules does. Zero (the
// default) refuses such overrides. Set it before serving.
func (s *Service) SetEpoch(epoch time.Time) { s.epoch.Store(&epoch) }

// OverridesRefused is the number of descriptors, since New, whose limit
// override was refused because the node holds as many override rules as
// its bound allows (RESOURCE_EXHAUSTED; cluster.ErrDerivedLimit).
func (s *Service) OverridesRefused() uint64 { return s.refused.Load() }

// Config is the Config in force (New's, or the last SetConfig's).
func (s *Service) Config() *Config { return s.cfg.Load() }

// SetShadowMode turns the global shadow mode on or off, as
// envoyproxy/ratelimit's SHADOW_MODE environment setting (tokenmesh:
// node.envoy_shadow_mode): every check is still decided and counted
// (tokens taken, tokenmesh_decisions_total counts it allowed, as a
// descriptor's own shadow_mode), each descriptor status keeps its code
// (OVER_LIMIT shows what would have been refused), and a response whose
// overall_code would be OVER_LIMIT is answered OK instead (counted in
// Shadowed). It applies to the calls that start from then on.
func (s *Service) SetShadowMode(on bool) { s.shadow.Store(on) }

// ShadowMode reports whether the global shadow mode is on.
func (s *Service) ShadowMode() bool { return s.shadow.Load() }

// Shadowed is the number of responses, since New, whose overall_code the
// global shadow mode turned from OVER_LIMIT to OK (envoyproxy/ratelimit's
// global_shadow_mode statistic).
func (s *Service) Shadowed() uint64 { return s.shadowed.Load() }

// ServiceName is the gRPC service's full name.
const ServiceName = "envoy.service.ratelimit.v3.RateLimitService"

// ShouldRateLimit answers one request (rls.proto):
//
//   - domain empty or no descriptors: INVALID_ARGUMENT (envoyproxy/ratelimit
//     answers an error too); more than MaxDescriptors descriptors, more than
//     MaxEntries entries, a key or value that is not UTF-8, a bucket key above
//     cluster.MaxKeyBytes: INVALID_ARGUMENT naming the descriptor;
//   - per descriptor: the limit Match finds; none (unknown domain, no match),
//     or a limit replaced by another matched limit's replaces: OK without
//     current_limit; unlimited: OK with limit_remaining 2^32-1; otherwise the
//     rule's verdict for the descriptor's hits (descriptor hits_addend if set,
//     else the request's; 0 counts as 1; a hits_addend of 1 or more is a
//     charge, cluster.BatchItem.Charge: under a rule with overdraft its
//     hits are taken whatever the key's level, and it is OK when they were
//     there; a descriptor with is_negative_hits gives its hits back
//     instead, cluster.Node.Refund, and is answered OK without a limit),
//     OVER_LIMIT when refused unless
//     shadow_mode or quota_mode (then OK; quota_mode without
//     duration_until_reset, as envoyproxy/ratelimit), with current_limit,
//     limit_remaining (the bucket's whole tokens left; 0 when over the limit
//     and when the deciding node is another one, whose count is not sent
//     back) and duration_until_reset (time until the bucket is full again;
//     one unit when the count is unknown); with algorithm fixed_window,
//     limit_remaining is requests_per_unit minus the window's count and
//     duration_until_reset the whole seconds to the window's end, as
//     envoyproxy/ratelimit computes them;
//   - requests_per_unit 0: always OVER_LIMIT (no rule);
//   - overall_code OVER_LIMIT if any descriptor is; OK instead in the
//     global shadow mode (SetShadowMode), the statuses as they are;
//   - response_headers_to_add: x-ratelimit-limit, -remaining, -reset (whole
//     seconds) of the descriptor closest to its limit, picked as
//     envoyproxy/ratelimit does (the last one over its limit, else the first
//     with the least limit_remaining), when any descriptor had a limit.
//
// A descriptor with a limit override (RateLimitDescriptor.limit) in a known
// domain is decided against it (Config.MatchOverride: requests_per_unit per
// unit_multiplier units, burst requests_per_unit; no shadow_mode,
// quota_mode, name or replaces; current_limit the override) by its derived
// rule, which the Checker creates first (RuleDeriver). An override with
// requests_per_unit 0, a unit that is not SECOND to YEAR, unit_multiplier
// 0, or a period the bucket cannot hold: INVALID_ARGUMENT naming
// descriptors[i].limit and the field. An override the node's bound on
// override rules refuses (cluster.ErrDerivedLimit): RESOURCE_EXHAUSTED
// naming it, counted in OverridesRefused; nothing is decided then.
//
// Items are decided in one batch in descriptor order (two descriptors of one
// bucket see each other). When the cluster cannot decide a check (node
// closing, ctx ended), the call fails with UNAVAILABLE (Envoy then applies
// its failure_mode_deny setting).
func (s *Service) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	ds := req.GetDescriptors()
	if err := checkRequest(req); err != nil {
		return nil, err
	}
	var (
		limitsBuf [smallRequest]*Limit
		keysBuf   [smallRequest]string
		hitsBuf   [smallRequest]int64
		idxBuf    [smallRequest]int
		itemsBuf  [smallRequest]cluster.BatchItem
		limits    []*Limit
		keys      []string
		hits      []int64 // > 0: counted as 1 when 0; < 0: -hits, a charge (hits_addend given, >= 1)
		idx       []int   // descriptor -> item, -1 for none
	)
	if len(ds) <= smallRequest {
		limits, keys, hits, idx = limitsBuf[:len(ds)], keysBuf[:len(ds)], hitsBuf[:len(ds)], idxBuf[:len(ds)]
	} else {
		limits, keys, hits, idx = make([]*Limit, len(ds)), make([]string, len(ds)), make([]int64, len(ds)), make([]int, len(ds))
	}
	cfg, shadow := s.cfg.Load(), s.shadow.Load() // one config, one mode for the whole call
	if err := s.matchAll(ctx, cfg, req, limits, keys, hits); err != nil {
		return nil, err
	}
	// is_negative_hits (Envoy's RateLimit.hits_addend.is_negative_hits):
	// the hits go back to the bucket (a refund), nothing is checked, and
	// the descriptor is answered OK without a limit.
	if err := s.refundNegative(ctx, ds, limits, keys, hits); err != nil {
		return nil, err
	}
	items := batchItems(itemsBuf[:0], limits, keys, hits, idx)
	var (
		results []cluster.BatchResult
		one     [1]cluster.BatchResult
	)
	if len(items) > 0 {
		start := time.Now()
		var err error
		results, err = s.decide(ctx, items, &one)
		if err != nil {
			return nil, err
		}
		s.observeAll(limits, idx, results, shadow, time.Since(start))
	}
	resp, r1 := newResponse(len(ds))
	closest, closestReset := s.fillStatuses(resp, limits, idx, results, r1)
	if shadow && resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT {
		// envoyproxy/ratelimit's SHADOW_MODE: the statuses say what would
		// have been refused, the request passes.
		resp.OverallCode = rlsv3.RateLimitResponse_OK
		s.shadowed.Add(1)
	}
	if closest != nil {
		var hs *headers
		if r1 != nil {
			hs = &r1.headers
		} else {
			hs = &headers{}
		}
		hs.set(closest, closestReset)
		resp.ResponseHeadersToAdd = hs.ptrs[:]
	}
	return resp, nil
}

// checkRequest checks the request as a whole: a domain, and 1 to
// MaxDescriptors descriptors. Errors: gRPC INVALID_ARGUMENT statuses.
func checkRequest(req *rlsv3.RateLimitRequest) error {
	ds := req.GetDescriptors()
	switch {
	case req.GetDomain() == "":
		return status.Error(codes.InvalidArgument, "domain: rate limit domain must not be empty")
	case len(ds) == 0:
		return status.Error(codes.InvalidArgument, "descriptors: rate limit descriptor list must not be empty")
	case len(ds) > MaxDescriptors:
		return status.Errorf(codes.InvalidArgument, "descriptors: %d descriptors; at most %d", len(ds), MaxDescriptors)
	}
	return nil
}

// matchAll fills limits, keys and hits for every descriptor of req
// (matchDescriptor), then drops the limits that a matched limit replaces.
// Errors: matchDescriptor's, for the first descriptor that has one.
func (s *Service) matchAll(ctx context.Context, cfg *Config, req *rlsv3.RateLimitRequest, limits []*Limit, keys []string, hits []int64) error {
	var replaced map[string]bool // made on the first limit that replaces another
	for i, d := range req.GetDescriptors() {
		l, key, h, err := s.matchDescriptor(ctx, cfg, req, i, d)
		if err != nil {
			return err
		}
		limits[i], keys[i], hits[i] = l, key, h
		if l == nil || d.GetLimit() != nil {
			continue // an override replaces nothing
		}
		for _, r := range l.Replaces {
			if replaced == nil {
				replaced = map[string]bool{}
			}
			replaced[r] = true
		}
	}
	dropReplaced(limits, replaced)
	return nil
}

// dropReplaced implements replaces, as envoyproxy/ratelimit: a named limit
// some matched limit replaces is not checked (an unlimited one stays
// unlimited).
func dropReplaced(limits []*Limit, replaced map[string]bool) {
	for i, l := range limits {
		if l != nil && !l.Unlimited && l.Name != "" && replaced[l.Name] {
			limits[i] = nil
		}
	}
}

// batchItems appends to items one check per descriptor with a limit that
// has a rule, in descriptor order, and records in idx the item of each
// descriptor (-1 for none).
func batchItems(items []cluster.BatchItem, limits []*Limit, keys []string, hits []int64, idx []int) []cluster.BatchItem {
	for i, l := range limits {
		idx[i] = -1
		if l != nil && l.Rule != "" {
			idx[i] = len(items)
			items = append(items, cluster.BatchItem{Rule: l.Rule, Key: keys[i], Tokens: max(hits[i], -hits[i]), Charge: hits[i] < 0})
		}
	}
	return items
}

// decide checks items (not empty) in one batch, or, for one item and a
// SingleChecker, alone (its result in one). Errors: the context's status
// when ctx ended, else UNAVAILABLE with the batch's or the first item's
// error.
func (s *Service) decide(ctx context.Context, items []cluster.BatchItem, one *[1]cluster.BatchResult) ([]cluster.BatchResult, error) {
	var (
		results []cluster.BatchResult
		err     error
	)
	if sc, ok := s.checker.(SingleChecker); ok && len(items) == 1 {
		var d cluster.CheckResult
		d, err = sc.CheckItem(ctx, items[0])
		one[0].CheckResult, results = d, one[:]
	} else {
		// CheckBatch may keep the items (a batch abandoned when ctx
		// ends): hand it a copy off the stack.
		results, err = s.checker.CheckBatch(ctx, slices.Clone(items))
	}
	if err == nil {
		err = firstItemError(results)
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, status.FromContextError(ctx.Err()).Err()
		}
		return nil, status.Errorf(codes.Unavailable, "deciding: %v", err)
	}
	return results, nil
}

// firstItemError is the first item's error among results (nil: none).
func firstItemError(results []cluster.BatchResult) error {
	for _, r := range results {
		if r.Err != nil {
			return r.Err
		}
	}
	return nil
}

// observeAll tells the Observer (if any) of every decided check: its
// rule, result, whether it was answered OK (allowed, or in a shadow or
// quota mode) and the time the checks took.
func (s *Service) observeAll(limits []*Limit, idx []int, results []cluster.BatchResult, shadow bool, waited time.Duration) {
	if s.observe == nil {
		return
	}
	for i, l := range limits {
		if idx[i] >= 0 {
			r := results[idx[i]]
			s.observe(l.Rule, r, r.Allowed || l.ShadowMode || l.QuotaMode || shadow, waited)
		}
	}
}

// newResponse is an OK response with n descriptor statuses to fill; for
// one descriptor, in one allocation (r1, its parts; nil otherwise).
func newResponse(n int) (*rlsv3.RateLimitResponse, *response1) {
	var (
		resp *rlsv3.RateLimitResponse
		r1   *response1 // the response's parts, for one descriptor
	)
	if n == 1 {
		r1 = &response1{}
		r1.statusPtrs[0] = &r1.status
		resp = &r1.resp
		resp.Statuses = r1.statusPtrs[:]
	} else {
		resp = &rlsv3.RateLimitResponse{Statuses: make([]*rlsv3.RateLimitResponse_DescriptorStatus, n)}
	}
	resp.OverallCode = rlsv3.RateLimitResponse_OK
	return resp, r1
}

// fillStatuses fills resp's status of every descriptor (fillStatus) and
// its overall code (OVER_LIMIT if any is), and returns the descriptor
// closest to its limit, as envoyproxy/ratelimit picks it for its headers
// (the first with the least limit_remaining, or the last over its limit,
// not in quota_mode), with its reset; nil when no descriptor had a limit.
func (s *Service) fillStatuses(resp *rlsv3.RateLimitResponse, limits []*Limit, idx []int, results []cluster.BatchResult,
	r1 *response1) (*rlsv3.RateLimitResponse_DescriptorStatus, time.Duration) {
	var closest *rlsv3.RateLimitResponse_DescriptorStatus
	var closestReset time.Duration
	minRemaining := uint32(math.MaxUint32)
	for i, l := range limits {
		st := resp.Statuses[i]
		if st == nil {
			st = &rlsv3.RateLimitResponse_DescriptorStatus{}
			resp.Statuses[i] = st
		}
		st.Code = rlsv3.RateLimitResponse_OK
		switch {
		case l == nil:
			continue
		case l.Unlimited:
			st.LimitRemaining = math.MaxUint32
			continue
		}
		var res *cluster.BatchResult
		if idx[i] >= 0 {
			res = &results[idx[i]]
		}
		reset := s.fillStatus(st, l, res, r1)
		if st.LimitRemaining < minRemaining {
			closest, closestReset, minRemaining = st, reset, st.LimitRemaining
		}
		if st.Code == rlsv3.RateLimitResponse_OVER_LIMIT {
			resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
			closest, closestReset, minRemaining = st, reset, 0
		}
	}
	return closest, closestReset
}

// set fills the x-ratelimit-* headers from the status closest to its
// limit and its reset (rounded up to whole seconds).
func (hs *headers) set(closest *rlsv3.RateLimitResponse_DescriptorStatus, reset time.Duration) {
	resetS := (reset + time.Second - 1) / time.Second
	hs.values = [3]corev3.HeaderValue{
		{Key: HeaderLimit, Value: strconv.FormatUint(uint64(closest.CurrentLimit.RequestsPerUnit), 10)},
		{Key: HeaderRemaining, Value: strconv.FormatUint(uint64(closest.LimitRemaining), 10)},
		{Key: HeaderReset, Value: strconv.FormatInt(int64(resetS), 10)},
	}
	hs.ptrs = [3]*corev3.HeaderValue{&hs.values[0], &hs.values[1], &hs.values[2]}
}

// refundNegative gives back the hits of the descriptors with
// is_negative_hits (Envoy's RateLimit.hits_addend.is_negative_hits) and
// takes them out of the check (limits[i] = nil: answered OK without a
// limit). Errors: refund's.
func (s *Service) refundNegative(ctx context.Context, ds []*ratelimitv3.RateLimitDescriptor, limits []*Limit, keys []string, hits []int64) error {
	var refunds []cluster.BatchItem
	for i, l := range limits {
		if l != nil && ds[i].GetIsNegativeHits() {
			if l.Rule != "" {
				refunds = append(refunds, cluster.BatchItem{Rule: l.Rule, Key: keys[i], Tokens: max(hits[i], -hits[i])})
			}
			limits[i] = nil
		}
	}
	if len(refunds) == 0 {
		return nil
	}
	return s.refund(ctx, refunds)
}

// fillStatus fills st, the status of a descriptor limited by l (not
// unlimited), from its check's result res (nil: not checked, as over its
// limit): current_limit, limit_remaining, duration_until_reset and the
// code (OVER_LIMIT, or OK in quota or shadow mode), in r1's parts for a
// one-descriptor response (nil: allocated). It returns the time until
// the bucket is back to requests_per_unit (fixed window: the window's
// end), for the x-ratelimit-reset header.
func (s *Service) fillStatus(st *rlsv3.RateLimitResponse_DescriptorStatus, l *Limit, res *cluster.BatchResult, r1 *response1) time.Duration {
	if r1 != nil {
		st.CurrentLimit = &r1.limit
	} else {
		st.CurrentLimit = &rlsv3.RateLimitResponse_RateLimit{}
	}
	st.CurrentLimit.Name, st.CurrentLimit.RequestsPerUnit, st.CurrentLimit.Unit = l.Name, l.RequestsPerUnit, l.Unit
	unit := l.Period()
	over := true
	reset := unit
	if res != nil {
		over = !res.Allowed
		if res.Remaining >= 0 && !over {
			rem := min(res.Remaining, int64(l.RequestsPerUnit))
			st.LimitRemaining = uint32(rem)
			// Time for the bucket to refill to requests_per_unit at
			// requests_per_unit per unit.
			missing := int64(l.RequestsPerUnit) - rem
			reset = time.Duration(math.Ceil(float64(unit) * float64(missing) / float64(l.RequestsPerUnit)))
		}
	}
	if l.Algorithm == AlgorithmFixedWindow {
		// envoyproxy/ratelimit's CalculateReset: unit - now % unit, in
		// whole seconds of Unix time.
		sec := int64(unit / time.Second)
		reset = time.Duration(sec-s.clock().Unix()%sec) * time.Second
	}
	if r1 != nil {
		// durationpb.New's fields, without its allocation.
		r1.reset.Seconds, r1.reset.Nanos = int64(reset/time.Second), int32(reset%time.Second)
		st.DurationUntilReset = &r1.reset
	} else {
		st.DurationUntilReset = durationpb.New(reset)
	}
	if over {
		st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
		switch {
		case l.QuotaMode:
			// envoyproxy/ratelimit answers a quota_mode violation OK,
			// without duration_until_reset.
			st.Code, st.DurationUntilReset = rlsv3.RateLimitResponse_OK, nil
		case l.ShadowMode:
			st.Code = rlsv3.RateLimitResponse_OK
		}
	}
	return reset
}

// matchDescriptor is descriptor i's limit and key (nil: none, for an
// unknown domain or no match) and its hits: > 0 a check of that many
// tokens (hits_addend 0 or unset counts 1), < 0 a charge of -hits
// (hits_addend set, at least 1: a rule with overdraft takes it whatever
// the level). A descriptor with a limit override gets its derived rule
// (override). Errors: gRPC INVALID_ARGUMENT statuses naming the
// descriptor (too many entries, not UTF-8, hits above MaxHits, a key
// above cluster.MaxKeyBytes), and override's.
func (s *Service) matchDescriptor(ctx context.Context, cfg *Config, req *rlsv3.RateLimitRequest, i int,
	d *ratelimitv3.RateLimitDescriptor) (*Limit, string, int64, error) {
	es := d.GetEntries()
	if len(es) > MaxEntries {
		return nil, "", 0, status.Errorf(codes.InvalidArgument, "descriptors[%d].entries: %d entries; at most %d", i, len(es), MaxEntries)
	}
	entries := make([]Entry, len(es))
	for j, e := range es {
		if !utf8.ValidString(e.GetKey()) || !utf8.ValidString(e.GetValue()) {
			return nil, "", 0, status.Errorf(codes.InvalidArgument, "descriptors[%d].entries[%d]: key and value must be UTF-8", i, j)
		}
		entries[j] = Entry{Key: e.GetKey(), Value: e.GetValue()}
	}
	raw := uint64(req.GetHitsAddend())
	if d.GetHitsAddend() != nil {
		raw = d.GetHitsAddend().GetValue()
	}
	h := int64(min(max(1, raw), MaxHits+1))
	if h > MaxHits {
		return nil, "", 0, status.Errorf(codes.InvalidArgument, "descriptors[%d].hits_addend: %d above %d", i, h, MaxHits)
	}
	if raw > 0 {
		h = -h
	}
	if ov := d.GetLimit(); ov != nil {
		l, key, err := s.override(ctx, cfg, req.GetDomain(), i, entries, ov)
		return l, key, h, err
	}
	l, key := cfg.Match(req.GetDomain(), entries)
	if l != nil && len(key) > cluster.MaxKeyBytes {
		return nil, "", 0, status.Errorf(codes.InvalidArgument, "descriptors[%d]: its values make a %d-byte key; at most %d", i, len(key), cluster.MaxKeyBytes)
	}
	return l, key, h, nil
}

// Refunder is a Checker that can give tokens back to a key's bucket
// (*cluster.Node's Refund): ShouldRateLimit uses it for a descriptor with
// is_negative_hits. Without it such a descriptor's hits are dropped.
type Refunder interface {
	Refund(ctx context.Context, rule, key string, tokens int64) error
}

// refund gives back each item's tokens (is_negative_hits descriptors),
// when the checker can; a rule whose strategy cannot refund
// (cluster.ErrNoRefund) keeps them spent. Other errors fail the call as a
// check's do.
func (s *Service) refund(ctx context.Context, items []cluster.BatchItem) error {
	rf, ok := s.checker.(Refunder)
	if !ok {
		return nil
	}
	for _, it := range items {
		if err := rf.Refund(ctx, it.Rule, it.Key, it.Tokens); err != nil && !errors.Is(err, cluster.ErrNoRefund) {
			if ctx.Err() != nil {
				return status.FromContextError(ctx.Err()).Err()
			}
			return status.Errorf(codes.Unavailable, "refunding: %v", err)
		}
	}
	return nil
}

// override is the limit and key of descriptor i, whose limit override is
// ov, with its derived rule created (see ShouldRateLimit); a nil limit
// for an unknown domain. Errors are gRPC statuses naming the descriptor.
func (s *Service) override(ctx context.Context, cfg *Config, domain string, i int, entries []Entry,
	ov *ratelimitv3.RateLimitDescriptor_RateLimitOverride) (*Limit, string, error) {
	o, err := ParseOverride(ov)
	if err != nil {
		return nil, "", status.Errorf(codes.InvalidArgument, "descriptors[%d].limit.%v", i, err)
	}
	var epoch time.Time
	if e := s.epoch.Load(); e != nil {
		epoch = *e
	}
	l, key, d, err := cfg.MatchOverride(domain, entries, o, epoch)
	switch {
	case err != nil:
		return nil, "", status.Errorf(codes.InvalidArgument, "descriptors[%d].limit: %v", i, err)
	case l == nil:
		return nil, "", nil
	case len(key) > cluster.MaxKeyBytes:
		return nil, "", status.Errorf(codes.InvalidArgument, "descriptors[%d]: its keys and values make a %d-byte key; at most %d", i, len(key), cluster.MaxKeyBytes)
	}
	dr, ok := s.checker.(RuleDeriver)
	if !ok {
		return nil, "", status.Errorf(codes.Unimplemented, "descriptors[%d].limit: limit overrides need a Checker that derives rules (cluster.Node)", i)
	}
	err = dr.EnsureDerived(ctx, d)
	switch {
	case err == nil:
		return l, key, nil
	case errors.Is(err, cluster.ErrDerivedLimit):
		s.refused.Add(1)
		return nil, "", status.Errorf(codes.ResourceExhausted,
			"descriptors[%d].limit: %s refused: this node holds as many distinct limit overrides of %s, or in all, as it may (node.envoy_max_overrides_per_descriptor, node.envoy_max_overrides): %v",
			i, o, l.Path, err)
	case ctx.Err() != nil:
		return nil, "", status.FromContextError(ctx.Err()).Err()
	default:
		return nil, "", status.Errorf(codes.Unavailable, "descriptors[%d].limit: creating the rule of %s: %v", i, o, err)
	}
}

// headers are a response's three x-ratelimit-* headers in one allocation.
type headers struct {
	ptrs   [3]*corev3.HeaderValue
	values [3]corev3.HeaderValue
}

// response1 is the response to a request of one descriptor, the common
// case, in one allocation instead of eight: the message, its one status,
// the status's limit and duration_until_reset, and the headers.
type response1 struct {
	resp       rlsv3.RateLimitResponse
	statusPtrs [1]*rlsv3.RateLimitResponse_DescriptorStatus
	status     rlsv3.RateLimitResponse_DescriptorStatus
	limit      rlsv3.RateLimitResponse_RateLimit
	reset      durationpb.Duration
	headers    headers
}
