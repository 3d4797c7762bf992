// Package loadgen drives tokenmesh nodes' gRPC API
// (tokenmesh.v1.RateLimitService/Check) with synthetic load and measures
// throughput, decisions and latency: the engine of `tokenmesh bench`.
// With Options.API "rls" it drives Envoy's rate limit service instead
// (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit), as
// tokenmesh serves it with --envoy-config and envoyproxy/ratelimit does:
// a call is one request of Options.Domain with Batch descriptors, each one
// entry (Options.DescriptorKey, key); a descriptor answered OK counts as
// allowed, OVER_LIMIT as refused. With Options.API "gubernator" it drives
// Gubernator v2 (pb.gubernator.V1/GetRateLimits): a call carries Batch
// rate limits of name Options.Rule, each with the limit of
// Options.Gubernator and a drawn unique_key; UNDER_LIMIT counts as
// allowed, OVER_LIMIT as refused, an item with an error as a check error.
// RunRLQS drives Envoy's Rate Limit Quota Service instead
// (envoy.service.rate_limit_quota.v3.RateLimitQuotaService): a fleet of
// emulated Envoys (rlqs/proxy) each holds one stream, decides its offered
// requests locally from its assignments, and the result counts what they
// offered, admitted and sent, held to b + r*T when the limit is known.
//
// Each of Options.Concurrency workers sends unary Check calls, one at a
// time, spread round-robin over Options.Targets. A call carries
// Options.Batch checks of one rule; keys ("k0".."k{n-1}") are drawn
// uniformly by a per-worker seeded PRNG, or by Zipf's law (Options.ZipfS),
// or all checks use one key (Options.HotKey). With
// Options.RecordAdmissions the result lists every admitted check (key, time
// of the answer), and WindowExcess holds them to a token bucket's
// b + r*T per key. Closed loop (Rate 0) each worker sends its next call as
// soon as the previous answered; open loop (Rate > 0) calls are scheduled
// at fixed intervals and latency is measured from the scheduled time, so a
// slow server is not hidden by a slow client (no coordinated omission).
//
// The client is built to cost little CPU, since it usually shares the
// machine with the server under test: each worker builds its request
// message once and only rewrites the keys per call, and reuses one
// response message. Latency goes into one HDR histogram per worker (1 us
// to 60 s, 3 significant digits), merged at the end: no lock on the hot
// path.
package loadgen

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
)

// APIs Options.API names.
const (
	APITokenmesh  = "tokenmesh"  // tokenmesh.v1.RateLimitService/Check (the default)
	APIRLS        = "rls"        // envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit
	APIGubernator = "gubernator" // pb.gubernator.V1/GetRateLimits (Gubernator v2)
)

// Limits of the options (the server's: server.MaxChecks, server.MaxHits).
const (
	MaxBatch = 1000
	MaxHits  = 1_000_000_000
	// maxErrorSamples bounds Result.ErrorSamples.
	maxErrorSamples = 5
	// histogram range, microseconds.
	histMin, histMax, histDigits = 1, 60_000_000, 3
)

// Options is one run.
type Options struct {
	// Targets are the nodes' gRPC API addresses, host:port; at least one.
	Targets []string
	// Rule is the rule every check names; it must exist on every target.
	// Unused with API "rls"; with API "gubernator" it is the rate limits'
	// name.
	Rule string
	// API is APITokenmesh ("" too), APIRLS or APIGubernator.
	API string
	// Gubernator is the limit sent with every rate limit (API
	// "gubernator" only; required there).
	Gubernator *GubernatorRule
	// Domain is the RLS domain of every request (API "rls" only; required).
	Domain string
	// DescriptorKey is the entry key of every RLS descriptor (API "rls";
	// "": "key"); the entry's value is the drawn key.
	DescriptorKey string
	// Concurrency is the number of workers, each with one call in flight.
	Concurrency int
	// ConnsPerTarget is the number of gRPC connections to each target,
	// shared by the workers (worker w uses connection w mod n); 0: 1.
	ConnsPerTarget int
	// Batch is the checks per call, 1..MaxBatch.
	Batch int
	// Keys is the number of distinct keys, >= 1 (ignored with HotKey).
	Keys int
	// HotKey makes every check use one key (KeyPrefix + "0").
	HotKey bool
	// ZipfS, when > 0, draws key i (from 0, of Keys) with probability
	// proportional to (i+1)^-ZipfS (Zipf's law, as workload's heavy
	// generator; KeyPrefix + "0" the hottest) instead of uniformly; 0:
	// uniform. Finite, at most 100.
	ZipfS float64
	// RecordAdmissions makes Result.Admissions list every admitted check
	// of the measured Duration, for a per-key account against the limit
	// (WindowExcess), and Result.Answered every answered check of the
	// warmup and the measured Duration, admitted or refused, for the
	// account of what an exact bucket would have admitted (Shortfall). It
	// costs an append or two per check.
	RecordAdmissions bool
	// KeyPrefix starts every key name; "": "k".
	KeyPrefix string
	// Hits is the tokens each check asks for, 1..MaxHits; 0: 1.
	Hits int64
	// Duration is the measured time, > 0; Warmup runs before it, unrecorded.
	Duration, Warmup time.Duration
	// Rate, when > 0, is the open-loop target in calls per second over all
	// workers; 0: closed loop, as fast as the workers go.
	Rate float64
	// MaxRPCs, when > 0, ends the run after this many calls in all (split
	// over the workers; warmup calls count), or at Duration, whichever
	// comes first.
	MaxRPCs int64
	// TLS, when set, connects with TLS; nil: plaintext.
	TLS *tls.Config
	// Seed seeds the workers' key choice (worker w uses Seed and w).
	Seed uint64
	// DialTimeout bounds the initial check of each target; 0: 5s.
	DialTimeout time.Duration
	// Progress, when set, is called about every 100 ms with the time since
	// the start (warmup included; the run lasts Warmup + Duration).
	Progress func(done time.Duration)
}

// Result is what a run measured, over the Duration after the Warmup.
type Result struct {
	Targets     []string `json:"targets"`
	Rule        string   `json:"rule"`
	Concurrency int      `json:"concurrency"`
	Batch       int      `json:"batch"`
	Keys        int      `json:"keys"` // 1 with HotKey
	HotKey      bool     `json:"hot_key"`
	Hits        int64    `json:"hits"`
	Rate        float64  `json:"target_rate_rpc_per_s"` // 0: closed loop
	// RuleRate and RuleBurst are the rule's limit as the first target
	// reported it (ListRules): tokens/s and tokens.
	RuleRate  float64 `json:"rule_limit_per_s"`
	RuleBurst int64   `json:"rule_burst"`

	// MeasureStart is the wall-clock time the measured Duration began
	// (the origin of Admissions' and Answered's At), to place two runs'
	// logs on one time line.
	MeasureStart time.Time     `json:"-"`
	Elapsed      time.Duration `json:"-"`
	ElapsedSec   float64       `json:"elapsed_s"`
	RPCs         int64         `json:"rpcs"`        // calls answered OK
	FailedRPCs   int64         `json:"failed_rpcs"` // calls that failed (their checks are not counted below)
	Checks       int64         `json:"checks"`      // = Allowed + Refused + Errors
	Allowed      int64         `json:"allowed"`
	Refused      int64         `json:"refused"`      // not allowed, no error
	Errors       int64         `json:"check_errors"` // not allowed, error set (undecided, hits above burst)
	ChecksPerS   float64       `json:"checks_per_s"`
	RPCsPerS     float64       `json:"rpcs_per_s"`
	AllowedPct   float64       `json:"allowed_pct"` // of Checks
	ErrorSample  []string      `json:"error_samples,omitempty"`

	// Latency of answered calls, send (the scheduled send, open loop) to answer.
	P50, P90, P99, P999, Max time.Duration `json:"-"`
	LatencyMS                LatencyMS     `json:"latency_ms"`

	// ProcessCPU is this process's CPU time (user+system) during the
	// measured Duration, and CPUCores that over the elapsed time: the
	// client's cost when the server runs in another process.
	ProcessCPU time.Duration `json:"-"`
	CPUCores   float64       `json:"client_cpu_cores"`

	// Admissions are the admitted checks of the measured Duration, with
	// Options.RecordAdmissions (in no particular order); see WindowExcess.
	Admissions []Admission `json:"-"`
	// Answered are the checks answered (admitted or refused, not failed)
	// in the warmup and the measured Duration, with
	// Options.RecordAdmissions, in no particular order; At is from the
	// start of the measured Duration (negative in the warmup). See
	// Shortfall.
	Answered []Answered `json:"-"`
}

// LatencyMS is the latency percentiles in milliseconds.
type LatencyMS struct {
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p999"`
	Max  float64 `json:"max"`
}

// Validate checks o; the error names the field.
func (o *Options) Validate() error {
	for _, check := range []func() error{o.validateAPI, o.validateLoad, o.validatePacing} {
		if err := check(); err != nil {
			return err
		}
	}
	if o.API == APIGubernator {
		if err := o.Gubernator.validate(); err != nil {
			return err
		}
	}
	for _, t := range o.Targets {
		if _, _, err := splitHostPort(t); err != nil {
			return fmt.Errorf("Targets: %q: %v", t, err)
		}
	}
	if len(o.Rule) > 4096 {
		return errors.New("Rule: too long")
	}
	return nil
}

// validateAPI checks API, Targets and what the API needs (Domain, Rule).
func (o *Options) validateAPI() error {
	rls := o.API == APIRLS
	switch {
	case o.API != "" && o.API != APITokenmesh && !rls && o.API != APIGubernator:
		return fmt.Errorf("API %q: want %s, %s or %s", o.API, APITokenmesh, APIRLS, APIGubernator)
	case len(o.Targets) == 0:
		return errors.New("Targets: need at least one host:port")
	case rls && o.Domain == "":
		return errors.New("Domain: is required with API rls")
	case !rls && o.Rule == "":
		return errors.New("Rule: is required")
	}
	return nil
}

// validateLoad checks the load's shape: workers, connections, batch,
// keys, hits and durations.
func (o *Options) validateLoad() error {
	switch {
	case o.Concurrency < 1:
		return fmt.Errorf("Concurrency %d: need at least 1 worker", o.Concurrency)
	case o.ConnsPerTarget < 0:
		return fmt.Errorf("ConnsPerTarget %d: must be >= 0", o.ConnsPerTarget)
	case o.Batch < 1 || o.Batch > MaxBatch:
		return fmt.Errorf("Batch %d: must be between 1 and %d checks per call", o.Batch, MaxBatch)
	case !o.HotKey && o.Keys < 1:
		return fmt.Errorf("Keys %d: need at least 1 key", o.Keys)
	case o.Hits < 0 || o.Hits > MaxHits:
		return fmt.Errorf("Hits %d: must be between 1 and %d", o.Hits, MaxHits)
	case o.Duration <= 0:
		return fmt.Errorf("Duration %v: must be positive", o.Duration)
	case o.Warmup < 0:
		return fmt.Errorf("Warmup %v: must not be negative", o.Warmup)
	}
	return nil
}

// validatePacing checks Rate, MaxRPCs and ZipfS.
func (o *Options) validatePacing() error {
	switch {
	case math.IsNaN(o.Rate) || math.IsInf(o.Rate, 0) || o.Rate < 0:
		return fmt.Errorf("Rate %v: must be a finite number of calls per second >= 0", o.Rate)
	case o.MaxRPCs < 0:
		return fmt.Errorf("MaxRPCs %d: must be >= 0", o.MaxRPCs)
	case math.IsNaN(o.ZipfS) || o.ZipfS < 0 || o.ZipfS > 100:
		return fmt.Errorf("ZipfS %v: must be between 0 (uniform keys) and 100", o.ZipfS)
	}
	return nil
}

func splitHostPort(t string) (string, string, error) {
	i := strings.LastIndexByte(t, ':')
	if i < 0 || i == len(t)-1 {
		return "", "", errors.New("want host:port")
	}
	if _, err := strconv.ParseUint(t[i+1:], 10, 16); err != nil {
		return "", "", errors.New("want host:port with a numeric port")
	}
	return t[:i], t[i+1:], nil
}

// TargetError is a target that could not be used (unreachable, or lacking
// the rule).
type TargetError struct {
	Target string
	Err    error
}

func (e *TargetError) Error() string { return "target " + e.Target + ": " + e.Err.Error() }
func (e *TargetError) Unwrap() error { return e.Err }

// workerStats is one worker's tally; merged at the end.
type workerStats struct {
	rpcs, failed, allowed, refused, errs int64
	hist                                 *hdrhistogram.Histogram
	samples                              []string
	admissions                           []Admission
	answered                             []Answered
}

func (s *workerStats) sample(msg string) {
	if len(s.samples) >= maxErrorSamples || slices.Contains(s.samples, msg) {
		return
	}
	s.samples = append(s.samples, msg)
}

// Run runs o against the targets. When ctx ends early it returns what was
// measured so far with ctx's error.
func Run(ctx context.Context, o Options) (*Result, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if o.Hits == 0 {
		o.Hits = 1
	}
	keys := o.Keys
	if o.HotKey {
		keys = 1
	}
	conns, ruleRate, ruleBurst, err := dial(ctx, &o)
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, cs := range conns {
			for _, c := range cs {
				_ = c.Close()
			}
		}
	}()

	picker := newKeyPicker(keyNames(o.KeyPrefix, keys), o.ZipfS)
	start := time.Now()
	measureStart := start.Add(o.Warmup)
	end := measureStart.Add(o.Duration)
	stats := make([]workerStats, o.Concurrency)
	if o.MaxRPCs > 0 && o.MaxRPCs < int64(o.Concurrency) {
		o.Concurrency = int(o.MaxRPCs)
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for w := range o.Concurrency {
		wg.Add(1)
		quota := workerQuota(o.MaxRPCs, o.Concurrency, w)
		go func() {
			defer wg.Done()
			stats[w] = runWorker(runCtx, &o, w, conns, picker, start, measureStart, end, quota)
		}()
	}
	workersDone := make(chan struct{})
	go func() { wg.Wait(); close(workersDone) }()
	cw := coordinate(&o, start, measureStart, workersDone)

	r := &Result{Targets: slices.Clone(o.Targets), Rule: o.resultRule(), Concurrency: o.Concurrency, Batch: o.Batch,
		Keys: keys, HotKey: o.HotKey, Hits: o.Hits, Rate: o.Rate, RuleRate: ruleRate, RuleBurst: ruleBurst}
	r.MeasureStart = measureStart
	r.Elapsed = min(cw.stopped.Sub(measureStart), o.Duration)
	if r.Elapsed < 0 {
		r.Elapsed = 0
	}
	hist := r.merge(stats)
	r.rates(cw)
	us := func(q float64) time.Duration { return time.Duration(hist.ValueAtQuantile(q)) * time.Microsecond }
	if hist.TotalCount() > 0 {
		r.P50, r.P90, r.P99, r.P999 = us(50), us(90), us(99), us(99.9)
		r.Max = time.Duration(hist.Max()) * time.Microsecond
	}
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
	r.LatencyMS = LatencyMS{P50: ms(r.P50), P90: ms(r.P90), P99: ms(r.P99), P999: ms(r.P999), Max: ms(r.Max)}
	return r, ctx.Err()
}

// keyNames are the keys' names: prefix (default "k") and an index.
func keyNames(prefix string, keys int) []string {
	if prefix == "" {
		prefix = "k"
	}
	names := make([]string, keys)
	for i := range names {
		names[i] = prefix + strconv.Itoa(i)
	}
	return names
}

// resultRule is the Result's Rule: the rule, "gubernator:" and the rule,
// or "rls:" and the domain.
func (o *Options) resultRule() string {
	rule := o.Rule
	if o.API == APIGubernator {
		rule = "gubernator:" + o.Rule
	}
	if o.API == APIRLS {
		rule = "rls:" + o.Domain
	}
	return rule
}

// workerQuota is worker w's share of maxRPCs calls over concurrency
// workers (0: no limit).
func workerQuota(maxRPCs int64, concurrency, w int) int64 {
	if maxRPCs <= 0 {
		return 0
	}
	quota := maxRPCs / int64(concurrency)
	if int64(w) < maxRPCs%int64(concurrency) {
		quota++
	}
	return quota
}

// coordinated is what the coordinator measured: the process CPU at the
// start (cpu0, at cpuT0; zero if never reached) and the end of the
// measured window (cpu1), and when the last worker stopped.
type coordinated struct {
	cpu0, cpu1 time.Duration
	cpuT0      time.Time
	stopped    time.Time
}

// coordinate reads the CPU at the measurement's start and end, tells the
// progress every 100 ms, and returns once workersDone closes.
func coordinate(o *Options, start, measureStart time.Time, workersDone <-chan struct{}) coordinated {
	var cw coordinated
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	startTimer := time.NewTimer(time.Until(measureStart))
	defer startTimer.Stop()
loop:
	for {
		select {
		case <-startTimer.C:
			cw.cpu0, cw.cpuT0 = processCPU(), time.Now()
		case <-tick.C:
			if o.Progress != nil {
				o.Progress(min(time.Since(start), o.Warmup+o.Duration))
			}
		case <-workersDone:
			cw.stopped = time.Now()
			break loop
		}
	}
	cw.cpu1 = processCPU()
	if o.Progress != nil {
		o.Progress(min(time.Since(start), o.Warmup+o.Duration))
	}
	return cw
}

// merge adds the workers' tallies into r and returns their merged
// latency histogram.
func (r *Result) merge(stats []workerStats) *hdrhistogram.Histogram {
	hist := hdrhistogram.New(histMin, histMax, histDigits)
	for i := range stats {
		s := &stats[i]
		r.RPCs += s.rpcs
		r.FailedRPCs += s.failed
		r.Allowed += s.allowed
		r.Refused += s.refused
		r.Errors += s.errs
		if s.hist != nil {
			hist.Merge(s.hist)
		}
		r.Admissions = append(r.Admissions, s.admissions...)
		r.Answered = append(r.Answered, s.answered...)
		for _, m := range s.samples {
			if len(r.ErrorSample) < maxErrorSamples && !slices.Contains(r.ErrorSample, m) {
				r.ErrorSample = append(r.ErrorSample, m)
			}
		}
	}
	return hist
}

// rates sets r's checks, rates, CPU (from cw) and allowed %.
func (r *Result) rates(cw coordinated) {
	r.Checks = r.Allowed + r.Refused + r.Errors
	if sec := r.Elapsed.Seconds(); sec > 0 {
		r.ElapsedSec = sec
		r.ChecksPerS = float64(r.Checks) / sec
		r.RPCsPerS = float64(r.RPCs) / sec
	}
	if !cw.cpuT0.IsZero() && cw.stopped.After(cw.cpuT0) {
		// CPU from the measurement's start to the last worker's end (which
		// may be a little after Duration, for calls in flight).
		r.ProcessCPU = cw.cpu1 - cw.cpu0
		r.CPUCores = r.ProcessCPU.Seconds() / cw.stopped.Sub(cw.cpuT0).Seconds()
	}
	if r.Checks > 0 {
		r.AllowedPct = 100 * float64(r.Allowed) / float64(r.Checks)
	}
}

// processCPU is this process's user+system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BurstOptions is an envelope check: Checks single-check calls of one
// fresh key, spread round-robin over Targets and paced evenly over Window.
type BurstOptions struct {
	Targets []string
	Rule    string
	// Checks is the number of checks; 0: the rule's burst times the
	// number of targets (what per-node buckets that do not coordinate
	// would admit at once).
	Checks int
	// Window is the time the checks are spread over; 0: 1s.
	Window time.Duration
	TLS    *tls.Config
}

// BurstResult is what an envelope check found. The token bucket (rate r,
// burst b) of one key admits at most b + r*T tokens in any T; Admitted
// above Envelope = b + r*Elapsed means the cluster let the key exceed its
// limit.
type BurstResult struct {
	Targets     []string `json:"targets"`
	Rule        string   `json:"rule"`
	Key         string   `json:"key"`
	RuleRate    float64  `json:"rule_limit_per_s"`
	RuleBurst   int64    `json:"rule_burst"`
	Sent        int      `json:"sent"`
	Checks      int64    `json:"checks"` // answered
	Admitted    int64    `json:"admitted"`
	Refused     int64    `json:"refused"`
	Errors      int64    `json:"check_errors"`
	FailedRPCs  int64    `json:"failed_rpcs"`
	ElapsedSec  float64  `json:"elapsed_s"` // first send to last answer
	Envelope    float64  `json:"envelope"`  // RuleBurst + RuleRate*ElapsedSec
	OK          bool     `json:"ok"`        // Admitted <= Envelope
	ErrorSample []string `json:"error_samples,omitempty"`
}

// Burst runs an envelope check.
func Burst(ctx context.Context, bo BurstOptions) (*BurstResult, error) {
	if bo.Checks < 0 {
		return nil, fmt.Errorf("Checks %d: must be >= 0", bo.Checks)
	}
	if bo.Window < 0 {
		return nil, fmt.Errorf("Window %v: must not be negative", bo.Window)
	}
	window := bo.Window
	if window == 0 {
		window = time.Second
	}
	checks := bo.Checks
	if checks == 0 {
		o := Options{Targets: bo.Targets, Rule: bo.Rule, Concurrency: 1, Batch: 1, Keys: 1, Duration: 1, TLS: bo.TLS}
		if err := o.Validate(); err != nil {
			return nil, err
		}
		conns, _, burst, err := dial(ctx, &o)
		if err != nil {
			return nil, err
		}
		for _, cs := range conns {
			for _, c := range cs {
				_ = c.Close()
			}
		}
		if burst > 1_000_000 {
			return nil, fmt.Errorf("rule %q: burst %d is too large for a burst test (at most 1000000 checks)", bo.Rule, burst)
		}
		checks = int(max(burst, 1)) * len(bo.Targets)
	}
	prefix := fmt.Sprintf("burst-%d-", time.Now().UnixNano())
	o := Options{Targets: bo.Targets, Rule: bo.Rule, Concurrency: min(checks, 64), Batch: 1, HotKey: true,
		KeyPrefix: prefix, Duration: window + 10*time.Second, Rate: float64(checks) / window.Seconds(),
		MaxRPCs: int64(checks), TLS: bo.TLS}
	res, err := Run(ctx, o)
	if err != nil {
		return nil, err
	}
	br := &BurstResult{Targets: res.Targets, Rule: res.Rule, Key: prefix + "0", RuleRate: res.RuleRate,
		RuleBurst: res.RuleBurst, Sent: checks, Checks: res.Checks, Admitted: res.Allowed, Refused: res.Refused,
		Errors: res.Errors, FailedRPCs: res.FailedRPCs, ElapsedSec: res.ElapsedSec, ErrorSample: res.ErrorSample}
	br.Envelope = float64(br.RuleBurst) + br.RuleRate*br.ElapsedSec
	br.OK = float64(br.Admitted) <= br.Envelope+1e-9
	return br, nil
}
