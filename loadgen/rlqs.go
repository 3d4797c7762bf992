package loadgen

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/tokenmesh/tokenmesh/rlqs/envoymodel"
	"github.com/tokenmesh/tokenmesh/rlqs/proxy"
	"github.com/tokenmesh/tokenmesh/workload"
)

// APIRLQS names Envoy's Rate Limit Quota Service
// (envoy.service.rate_limit_quota.v3.RateLimitQuotaService), which RunRLQS
// drives with a fleet of emulated Envoys.
const APIRLQS = "rlqs"

// rlqsService is the RLQS gRPC service's name, as a node's gRPC health
// service reports it.
var rlqsService = rlqsv3.RateLimitQuotaService_ServiceDesc.ServiceName

// expiredFor is how long the Expired fallback lasts after an assignment's
// TTL (expired_assignment_behavior_timeout): longer than any run.
const expiredFor = 365 * 24 * time.Hour

// RLQSOptions is one run of emulated Envoys (rlqs/proxy, deciding as
// Envoy's rate_limit_quota filter does) against RLQS servers.
type RLQSOptions struct {
	// Targets are the RLQS servers (tokenmesh nodes' gRPC addresses,
	// host:port), at least one: proxy i's stream goes to Targets[i mod n],
	// and on to the next one when it breaks.
	Targets []string
	// Domain is the filter's domain (a tokenmesh envoy config file's
	// domain); required.
	Domain string
	// DescriptorKey is the one entry of every bucket_id ("": "key"); the
	// entry's value is the request's key.
	DescriptorKey string
	// Rates are the requests per second offered to each proxy (Poisson
	// arrivals), one per proxy, each > 0: len(Rates) is the number of
	// proxies.
	Rates []float64
	// Keys is the number of distinct keys, >= 1, each request's drawn
	// uniformly (KeyPrefix + "0" .. KeyPrefix + "Keys-1"); with HotKey
	// every request has KeyPrefix + "0". KeyPrefix "" is "k".
	Keys      int
	HotKey    bool
	KeyPrefix string
	// Duration is how long the load is offered, > 0.
	Duration time.Duration
	// ReportInterval is the proxies' usage report interval; 0 is today's
	// Envoy (envoymodel.EnvoyReportInterval, 5 s).
	ReportInterval time.Duration
	// NoAssignment decides a bucket's requests before its first
	// assignment (no_assignment_behavior; the zero value is ALLOW_ALL,
	// Envoy's default), Expired after an assignment's TTL ran out
	// unrenewed, for the rest of the run (expired_assignment_behavior).
	NoAssignment, Expired typev3.RateLimitStrategy_BlanketRule
	// ClientIDs makes each proxy name itself on its streams (the
	// tokenmesh-client-id header, proxy.Config.ClientIDs).
	ClientIDs bool
	// Limit, when known, is every key's limit at the servers: the result
	// then holds the fleet's admissions to b + r*T.
	Limit *RLQSLimit
	// Seed seeds the arrivals and the key draws.
	Seed uint64
	// TLS, when set, connects with TLS; nil: plaintext.
	TLS *tls.Config
	// DialTimeout bounds the check of each target before the run; 0: 5s.
	DialTimeout time.Duration
	// RLSHop, when > 0, is how long to time ShouldRateLimit calls of
	// Domain (one at a time, keys of their own: RLSHopKeyPrefix) to the
	// targets after the run: the per-request hop RLQS replaces.
	RLSHop time.Duration
	// Progress, when set, is called about every 100 ms with the time done:
	// up to Duration during the fleet's run, then Duration plus the time
	// of the RLSHop calls (Duration + RLSHop in all).
	Progress func(done time.Duration)
}

// RLSHopKeyPrefix starts the keys of RLQSOptions.RLSHop's calls, so that
// they do not touch the fleet's buckets.
const RLSHopKeyPrefix = "rls-hop-"

// RLQSLimit is a key's token bucket: rate r and burst b.
type RLQSLimit struct {
	RatePerS float64 `json:"rate_per_s"` // r, tokens (requests) per second
	Burst    int64   `json:"burst"`      // b, tokens
}

// RLQSResult is what a RunRLQS measured. Times are since the fleet's
// start.
type RLQSResult struct {
	Targets           []string `json:"targets"`
	Domain            string   `json:"domain"`
	DescriptorKey     string   `json:"descriptor_key"`
	Keys              int      `json:"keys"` // 1 with HotKey
	HotKey            bool     `json:"hot_key"`
	ReportIntervalSec float64  `json:"report_interval_s"`
	NoAssignment      string   `json:"no_assignment_behavior"`
	Expired           string   `json:"expired_assignment_behavior"`
	ClientIDs         bool     `json:"client_ids"`
	// ElapsedSec is the time the load was offered: Duration, or less when
	// interrupted.
	ElapsedSec float64 `json:"elapsed_s"`
	// WallSec is how long the fleet ran; well beyond ElapsedSec when the
	// proxies fell behind their arrivals.
	WallSec float64 `json:"wall_s"`

	Proxies []RLQSProxy `json:"proxies"`
	Total   RLQSCounts  `json:"total"`

	// Limit is RLQSOptions.Limit; with it, Ceiling is the sum over the
	// keys of min(offered, r*T + b) (T = ElapsedSec), AdmittedOfCeilingPct
	// the admitted requests as a percentage of it, and WorstExcess the
	// most requests of one key the fleet admitted in any window of length
	// T' beyond b + r*T' (0: within the bound; workload.EnvelopeExcess).
	Limit                *RLQSLimit `json:"limit,omitempty"`
	Ceiling              *float64   `json:"ceiling,omitempty"`
	AdmittedOfCeilingPct *float64   `json:"admitted_of_ceiling_pct,omitempty"`
	WorstExcess          *float64   `json:"worst_window_excess,omitempty"`

	Stream RLQSStream `json:"stream"`
	// DecisionUS is the proxies' decision latency (the model's, local: no
	// call), in microseconds.
	DecisionUS LatencyUS `json:"decision_latency_us"`
	// RLSHop is the per-request ShouldRateLimit round trip to the same
	// targets (RLQSOptions.RLSHop), nil when not measured.
	RLSHop *RLSHop `json:"rls_hop,omitempty"`
	// CPUCores is this process's CPU over the fleet's run (the emulated
	// proxies' cost, beside servers on the same machine).
	CPUCores float64 `json:"client_cpu_cores"`
}

// RLQSCounts are one proxy's counts, or the fleet's.
type RLQSCounts struct {
	Offered     int     `json:"offered"`
	Admitted    int     `json:"admitted"`
	Denied      int     `json:"denied"`
	AdmittedPct float64 `json:"admitted_pct"` // of Offered
	// Assignments are the bucket actions applied (a token bucket, new,
	// changed or renewed, or a blanket rule).
	Assignments int `json:"assignments"`
	// ReportsSent went on a stream; ReportsDropped were built with no
	// stream to send them on (Envoy drops them with their counts).
	ReportsSent    int   `json:"reports_sent"`
	ReportsDropped int   `json:"reports_dropped"`
	Responses      int   `json:"responses"`
	ReportBytes    int64 `json:"report_bytes"`   // protobuf bytes of the reports sent
	ResponseBytes  int64 `json:"response_bytes"` // protobuf bytes of the responses received
}

// RLQSProxy is one emulated Envoy's part.
type RLQSProxy struct {
	Proxy    int     `json:"proxy"`
	Target   string  `json:"target"`        // its first stream's server
	RatePerS float64 `json:"offered_per_s"` // RLQSOptions.Rates[i]
	RLQSCounts
	// FirstAssignmentSec is when its first assignment was applied; nil:
	// never.
	FirstAssignmentSec *float64 `json:"first_assignment_s"`
	// LastTokenBucket is the last token bucket assigned ("50 per 1s, max
	// 60"), "" when none was.
	LastTokenBucket string `json:"last_token_bucket,omitempty"`
}

// RLQSStream is the fleet's stream traffic: reports sent and responses
// received (protobuf sizes; gRPC adds 5 bytes of framing per message), in
// all and per offered request, and what happened to the streams.
type RLQSStream struct {
	Messages           int64   `json:"messages"`
	Bytes              int64   `json:"bytes"`
	MessagesPerRequest float64 `json:"messages_per_request"`
	BytesPerRequest    float64 `json:"bytes_per_request"`
	Opened             int     `json:"opened"`
	OpenFailed         int     `json:"open_failed"`
	Broken             int     `json:"broken"`
	BadResponses       int     `json:"bad_responses"`
	// Errors samples why streams failed, broke or were refused.
	Errors []string `json:"errors,omitempty"`
}

// LatencyUS is latency percentiles in microseconds.
type LatencyUS struct {
	P50  float64 `json:"p50"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p999"`
	Max  float64 `json:"max"`
}

// RLSHop is the timed ShouldRateLimit calls (one in flight, fresh keys):
// the round trip a proxy would wait for on every request with RLS.
type RLSHop struct {
	Calls     int64     `json:"calls"`
	Failed    int64     `json:"failed"`
	LatencyMS LatencyMS `json:"latency_ms"`
	// Error is why the calls could not be made (the run's result stands).
	Error string `json:"error,omitempty"`
}

// Validate checks o; the error names the field.
func (o *RLQSOptions) Validate() error {
	switch {
	case len(o.Targets) == 0:
		return errors.New("Targets: need at least one host:port")
	case o.Domain == "":
		return errors.New("Domain: is required")
	case len(o.Rates) == 0:
		return errors.New("Rates: need the offered rate of at least one proxy")
	case !o.HotKey && o.Keys < 1:
		return fmt.Errorf("Keys %d: need at least 1 key", o.Keys)
	case o.Duration <= 0:
		return fmt.Errorf("Duration %v: must be positive", o.Duration)
	case o.ReportInterval < 0:
		return fmt.Errorf("ReportInterval %v: must not be negative", o.ReportInterval)
	case o.RLSHop < 0:
		return fmt.Errorf("RLSHop %v: must not be negative", o.RLSHop)
	case o.Limit != nil && (!(o.Limit.RatePerS >= 0) || math.IsInf(o.Limit.RatePerS, 1) || o.Limit.Burst < 0):
		return fmt.Errorf("Limit %+v: want a finite rate >= 0 and a burst >= 0", *o.Limit)
	}
	return o.validateLists()
}

// validateLists checks each of Rates, the blanket rules and Targets.
func (o *RLQSOptions) validateLists() error {
	for i, r := range o.Rates {
		if !(r > 0) || math.IsInf(r, 1) {
			return fmt.Errorf("Rates[%d] %v: want a positive finite number of requests per second", i, r)
		}
	}
	for _, b := range []typev3.RateLimitStrategy_BlanketRule{o.NoAssignment, o.Expired} {
		if b != typev3.RateLimitStrategy_ALLOW_ALL && b != typev3.RateLimitStrategy_DENY_ALL {
			return fmt.Errorf("NoAssignment, Expired: blanket rule %v, want ALLOW_ALL or DENY_ALL", b)
		}
	}
	for _, t := range o.Targets {
		if _, _, err := splitHostPort(t); err != nil {
			return fmt.Errorf("Targets: %q: %v", t, err)
		}
	}
	return nil
}

// RunRLQS runs a fleet of len(o.Rates) emulated Envoys against the
// targets: proxy i offers o.Rates[i] requests per second (Poisson) for
// o.Duration, each of a key drawn as Run draws them, matched into the
// bucket {DescriptorKey: key}; it decides each request locally from its
// assignment (or its fallbacks), reports usage on its stream every
// ReportInterval and applies the assignments it receives. Before the run
// it checks that each target serves RLQS (the gRPC health service; a
// server without one is taken as it is): a target that does not is a
// *TargetError. When ctx ends early it returns what was measured so far
// with ctx's error.
func RunRLQS(ctx context.Context, o RLQSOptions) (*RLQSResult, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if err := checkRLQS(ctx, &o); err != nil {
		return nil, err
	}
	entry := o.DescriptorKey
	if entry == "" {
		entry = "key"
	}
	keys := o.Keys
	if o.HotKey {
		keys = 1
	}
	report := o.ReportInterval
	if report == 0 {
		report = envoymodel.EnvoyReportInterval
	}
	cfg := o.fleetConfig(entry, keys, report)

	cpu0 := processCPU()
	fleet, err := proxy.Start(ctx, cfg)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	rec := waitFleet(fleet, o.Progress, start, o.Duration)
	wall := time.Since(start)
	cpu := processCPU() - cpu0

	r := &RLQSResult{Targets: slices.Clone(o.Targets), Domain: o.Domain, DescriptorKey: entry, Keys: keys, HotKey: o.HotKey,
		ReportIntervalSec: report.Seconds(), NoAssignment: o.NoAssignment.String(), Expired: o.Expired.String(), ClientIDs: o.ClientIDs,
		ElapsedSec: o.Duration.Seconds(), WallSec: wall.Seconds(), Limit: o.Limit}
	if ctx.Err() != nil {
		r.ElapsedSec = min(wall, o.Duration).Seconds()
	}
	if wall > 0 {
		r.CPUCores = cpu.Seconds() / wall.Seconds()
	}
	tallyRLQS(r, rec, cfg)
	if o.Limit != nil {
		bound(r, rec, *o.Limit)
	}
	if o.RLSHop > 0 && ctx.Err() == nil {
		r.RLSHop = rlsHop(ctx, &o, entry)
	}
	return r, ctx.Err()
}

// fleetConfig is the emulated Envoys' config: one proxy per rate, each
// offering its rate over the keys' buckets {entry: key}, reporting every
// report.
func (o *RLQSOptions) fleetConfig(entry string, keys int, report time.Duration) proxy.Config {
	prefix := o.KeyPrefix
	if prefix == "" {
		prefix = "k"
	}
	ids := make([]envoymodel.BucketID, keys)
	for i := range ids {
		ids[i] = envoymodel.NewBucketID(map[string]string{entry: prefix + strconv.Itoa(i)})
	}
	cfg := proxy.Config{Proxies: len(o.Rates), Addrs: slices.Clone(o.Targets), Spread: true, Seed: o.Seed, TLS: o.TLS, ClientIDs: o.ClientIDs,
		Model: envoymodel.Config{Domain: o.Domain, ReportInterval: report,
			Settings: envoymodel.BlanketSettings(report, o.NoAssignment, o.Expired, expiredFor)}}
	for i, rate := range o.Rates {
		l := proxy.Load{Proxy: i, Bucket: ids[0], Rate: rate, Arrivals: proxy.Poisson, Duration: o.Duration}
		if len(ids) > 1 {
			l.Buckets = ids
		}
		cfg.Loads = append(cfg.Loads, l)
	}
	return cfg
}

// waitFleet waits for the fleet's record, telling progress (if set) the
// time since start, at most duration, every 100 ms.
func waitFleet(fleet *proxy.Fleet, progress func(time.Duration), start time.Time, duration time.Duration) *proxy.Record {
	done := make(chan *proxy.Record)
	go func() { done <- fleet.Wait() }()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var rec *proxy.Record
	for rec == nil {
		select {
		case rec = <-done:
		case <-tick.C:
			if progress != nil {
				progress(min(time.Since(start), duration))
			}
		}
	}
	return rec
}

// checkRLQS asks each target's gRPC health service whether it serves RLQS.
func checkRLQS(ctx context.Context, o *RLQSOptions) error {
	creds := insecure.NewCredentials()
	if o.TLS != nil {
		creds = credentials.NewTLS(o.TLS)
	}
	timeout := o.DialTimeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	for _, t := range o.Targets {
		conn, err := grpc.NewClient(t, grpc.WithTransportCredentials(creds))
		if err != nil {
			return &TargetError{t, err}
		}
		cctx, cancel := context.WithTimeout(ctx, timeout)
		resp, err := healthpb.NewHealthClient(conn).Check(cctx, &healthpb.HealthCheckRequest{Service: rlqsService})
		cancel()
		_ = conn.Close()
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case status.Code(err) == codes.Unimplemented:
			// no health service: some other RLQS server; the streams will tell
		case status.Code(err) == codes.NotFound:
			return &TargetError{t, errors.New("serves no RLQS (a tokenmesh node serves it with --envoy-config DIR)")}
		case err != nil:
			return &TargetError{t, fmt.Errorf("no gRPC server answers there (is `tokenmesh serve` running with node.grpc_addr %s?): %v", t, err)}
		case resp.GetStatus() != healthpb.HealthCheckResponse_SERVING:
			return &TargetError{t, fmt.Errorf("RLQS is %v there (the node is not ready)", resp.GetStatus())}
		}
	}
	return nil
}

// maxStreamErrors bounds RLQSStream.Errors.
const maxStreamErrors = 5

// tallyRLQS fills r's per-proxy and total counts, stream traffic and
// decision latency from rec.
func tallyRLQS(r *RLQSResult, rec *proxy.Record, cfg proxy.Config) {
	r.Proxies = make([]RLQSProxy, cfg.Proxies)
	for i := range r.Proxies {
		r.Proxies[i] = RLQSProxy{Proxy: i, Target: cfg.Addrs[i%len(cfg.Addrs)], RatePerS: cfg.Loads[i].Rate}
	}
	hist := hdrhistogram.New(1, int64(10*time.Second), 3) // nanoseconds
	for _, d := range rec.Decisions {
		p := &r.Proxies[d.Proxy]
		p.Offered++
		if d.Allowed {
			p.Admitted++
		} else {
			p.Denied++
		}
		_ = hist.RecordValue(max(int64(d.Took), 1))
	}
	tallyAssignments(r, rec)
	tallyTraffic(r, rec)
	tallyStreams(r, rec)
	r.total()
	if hist.TotalCount() > 0 {
		us := func(ns int64) float64 { return float64(ns) / 1e3 }
		r.DecisionUS = LatencyUS{P50: us(hist.ValueAtQuantile(50)), P99: us(hist.ValueAtQuantile(99)),
			P999: us(hist.ValueAtQuantile(99.9)), Max: us(hist.Max())}
	}
}

// tallyAssignments counts each proxy's assignments (those that set a
// bucket's token bucket or blanket rule) and notes its first and last.
func tallyAssignments(r *RLQSResult, rec *proxy.Record) {
	for _, a := range rec.Assignments {
		switch a.Effect {
		case envoymodel.NewTokenBucket, envoymodel.ChangedTokenBucket, envoymodel.RenewedTokenBucket, envoymodel.Blanket:
		default:
			continue
		}
		p := &r.Proxies[a.Proxy]
		p.Assignments++
		if p.FirstAssignmentSec == nil {
			s := a.At.Seconds()
			p.FirstAssignmentSec = &s
		}
		if tb := a.TokenBucket(); tb != nil {
			p.LastTokenBucket = fmt.Sprintf("%d per %v, max %d", tb.GetTokensPerFill().GetValue(), tb.GetFillInterval().AsDuration(), tb.GetMaxTokens())
		}
	}
}

// tallyTraffic counts each proxy's reports (sent and dropped) and
// responses, and their bytes.
func tallyTraffic(r *RLQSResult, rec *proxy.Record) {
	for _, x := range rec.Reports {
		p := &r.Proxies[x.Proxy]
		if x.Addr == "" {
			p.ReportsDropped++
			continue
		}
		p.ReportsSent++
		p.ReportBytes += int64(x.Bytes)
	}
	for _, x := range rec.Responses {
		p := &r.Proxies[x.Proxy]
		p.Responses++
		p.ResponseBytes += int64(x.Bytes)
	}
}

// tallyStreams counts the stream events by kind and keeps the first
// errors.
func tallyStreams(r *RLQSResult, rec *proxy.Record) {
	for _, e := range rec.Streams {
		switch e.Kind {
		case proxy.Opened:
			r.Stream.Opened++
		case proxy.OpenFailed:
			r.Stream.OpenFailed++
		case proxy.Broken:
			r.Stream.Broken++
		case proxy.BadResponse:
			r.Stream.BadResponses++
		}
		if e.Err != "" && len(r.Stream.Errors) < maxStreamErrors {
			msg := fmt.Sprintf("proxy %d, %s, %v: %s", e.Proxy, e.Addr, e.Kind, e.Err)
			r.Stream.Errors = append(r.Stream.Errors, msg)
		}
	}
}

// total sums the proxies into r.Total and the stream's traffic.
func (r *RLQSResult) total() {
	t := &r.Total
	for i := range r.Proxies {
		p := &r.Proxies[i]
		p.AdmittedPct = pct(p.Admitted, p.Offered)
		t.Offered += p.Offered
		t.Admitted += p.Admitted
		t.Denied += p.Denied
		t.Assignments += p.Assignments
		t.ReportsSent += p.ReportsSent
		t.ReportsDropped += p.ReportsDropped
		t.Responses += p.Responses
		t.ReportBytes += p.ReportBytes
		t.ResponseBytes += p.ResponseBytes
	}
	t.AdmittedPct = pct(t.Admitted, t.Offered)
	r.Stream.Messages = int64(t.ReportsSent + t.Responses)
	r.Stream.Bytes = t.ReportBytes + t.ResponseBytes
	if t.Offered > 0 {
		r.Stream.MessagesPerRequest = float64(r.Stream.Messages) / float64(t.Offered)
		r.Stream.BytesPerRequest = float64(r.Stream.Bytes) / float64(t.Offered)
	}
}

// bound holds the fleet's admissions to b + r*T per key: the ceiling
// (the sum over keys of min(offered, r*T + b)), the admitted share of it,
// and the worst window's excess.
func bound(r *RLQSResult, rec *proxy.Record, l RLQSLimit) {
	offered := map[string]int{}
	for _, d := range rec.Decisions {
		offered[d.Bucket]++
	}
	perKey := l.RatePerS*r.ElapsedSec + float64(l.Burst)
	ceiling := 0.0
	for _, n := range offered {
		ceiling += math.Min(float64(n), perKey)
	}
	reqs, allowed := rec.Workload()
	excess := workload.EnvelopeExcess(reqs, allowed, l.RatePerS, l.Burst)
	r.Ceiling, r.WorstExcess = &ceiling, &excess
	if ceiling > 0 {
		p := 100 * float64(r.Total.Admitted) / ceiling
		r.AdmittedOfCeilingPct = &p
	}
}

// rlsHop times o.RLSHop of ShouldRateLimit calls, one at a time, to the
// targets (Run with API rls; its check of the targets opens the
// connections, so the timed calls find them ready).
func rlsHop(ctx context.Context, o *RLQSOptions, entry string) *RLSHop {
	ro := Options{Targets: o.Targets, API: APIRLS, Domain: o.Domain, DescriptorKey: entry, Concurrency: 1, Batch: 1,
		Keys: 1000, KeyPrefix: RLSHopKeyPrefix, Duration: o.RLSHop, TLS: o.TLS, Seed: o.Seed, DialTimeout: o.DialTimeout}
	if o.Progress != nil {
		ro.Progress = func(done time.Duration) { o.Progress(o.Duration + done) }
	}
	res, err := Run(ctx, ro)
	if res == nil {
		return &RLSHop{Error: err.Error()}
	}
	h := &RLSHop{Calls: res.RPCs, Failed: res.FailedRPCs, LatencyMS: res.LatencyMS}
	if len(res.ErrorSample) > 0 {
		h.Error = res.ErrorSample[0]
	}
	return h
}

func pct(n, of int) float64 {
	if of == 0 {
		return 0
	}
	return 100 * float64(n) / float64(of)
}
