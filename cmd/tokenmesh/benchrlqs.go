package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/spf13/pflag"
	"gopkg.in/yaml.v3"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/envoyrls"
	"github.com/tokenmesh/tokenmesh/loadgen"
	"github.com/tokenmesh/tokenmesh/rlqs"
	"github.com/tokenmesh/tokenmesh/rlqs/envoymodel"
	"github.com/tokenmesh/tokenmesh/sim"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/quota"
)

// rlqsFlags are bench's --api rlqs flags : a fleet of emulated
// Envoys (rlqs/proxy) instead of workers. The fallback flags have the
// names and defaults of `tokenmesh sim --proxies` (proxyFlags).
type rlqsFlags struct {
	proxies               int
	proxyRates            []float64
	reportInterval        time.Duration
	noAssignment, expired string
	rlsHop                time.Duration
	clientIDs             bool
}

// Defaults of the --api rlqs flags.
const (
	defaultRLQSProxies = 6
	// defaultProxyRate is each proxy's offered load, requests per second,
	// without --proxy-rates or --rate.
	defaultProxyRate = 100
	defaultRLSHop    = time.Second
	// quotaStrategy is the strategy that serves RLQS (strategy/quota).
	quotaStrategy = "quota"
)

// rlqsOnlyFlags are the flags that mean something with --api rlqs only.
var rlqsOnlyFlags = []string{"proxies", "proxy-rates", "report-interval", "no-assignment-behavior", "expired-assignment-behavior", "rls-hop", "client-ids"}

// add defines the --api rlqs flags on fl.
func (f *rlqsFlags) add(fl *pflag.FlagSet) {
	fl.IntVar(&f.proxies, "proxies", defaultRLQSProxies, "with --api rlqs: emulated Envoys, each with one RLQS stream; proxy i starts at target i mod the targets (or spawned nodes) and fails over to the next")
	fl.Float64SliceVar(&f.proxyRates, "proxy-rates", nil, "with --api rlqs: requests per second offered to each proxy (Poisson), comma-separated, one per proxy (sets --proxies); default: --rate split evenly, or 100/s each")
	fl.DurationVar(&f.reportInterval, "report-interval", envoymodel.EnvoyReportInterval, "with --api rlqs: the proxies' usage report interval (today's Envoy: 5s whatever its config says); whole seconds, at least 1s")
	fl.StringVar(&f.noAssignment, "no-assignment-behavior", string(sim.AllowAll), "with --api rlqs: what a proxy does for a bucket before its first assignment: ALLOW_ALL (Envoy's default) or DENY_ALL")
	fl.StringVar(&f.expired, "expired-assignment-behavior", string(sim.DenyAll), "with --api rlqs: what a proxy does for a bucket after its assignment expired unrenewed: DENY_ALL (under which quota's bound holds) or ALLOW_ALL")
	fl.BoolVar(&f.clientIDs, "client-ids", false, "with --api rlqs: proxy i names itself envoy-i in the tokenmesh-client-id header of its streams (Envoy's grpc_service.initial_metadata), so that a proxy failing over to another node keeps its share (docs/RLQS.md)")
	fl.DurationVar(&f.rlsHop, "rls-hop", defaultRLSHop, "with --api rlqs: after the run, time ShouldRateLimit calls (one at a time) to the same nodes for this long: the per-request hop RLQS replaces (0: none)")
}

// checkAPIs refuses the --api rlqs flags with another API, and with --api
// rlqs the flags of the others; errors name the flag.
func (f *benchFlags) checkAPIs(fl *pflag.FlagSet) error {
	if f.api != loadgen.APIRLQS {
		for _, n := range rlqsOnlyFlags {
			if fl.Changed(n) {
				return usageErr("--%s: only with --api rlqs", n)
			}
		}
		return nil
	}
	for _, check := range []func(*pflag.FlagSet) error{
		f.checkNotWithRLQS,
		f.checkProxyFlags,
		f.checkRLQSFlags,
		f.checkProxyRates,
	} {
		if err := check(fl); err != nil {
			return err
		}
	}
	return nil
}

// checkNotWithRLQS refuses the flags of the other APIs with --api rlqs.
func (f *benchFlags) checkNotWithRLQS(fl *pflag.FlagSet) error {
	for _, c := range []struct{ name, why string }{
		{"burst-test", "the burst test drives the tokenmesh API only"},
		{"batch", "an Envoy decides each request on its own"},
		{"hits", "RLQS counts requests, one token each"},
		{"concurrency", "the load is offered at --proxy-rates or --rate, not by workers"},
		{"conns", "each emulated Envoy holds one stream"},
		{"warmup", "the run counts from the first request: the first assignments are part of what RLQS costs"},
		{"rule", "RLQS buckets are matched against the envoy config: --domain, --descriptor-key"},
		{"strategy", "the generated limit's strategy is quota, the one that serves RLQS"},
	} {
		if fl.Changed(c.name) && (c.name != "strategy" || f.strategy != quotaStrategy) {
			return usageErr("--%s: not with --api rlqs (%s)", c.name, c.why)
		}
	}
	return nil
}

// checkProxyFlags checks --proxies, --proxy-rates and --rate with --api
// rlqs (the rates' values: checkProxyRates).
func (f *benchFlags) checkProxyFlags(fl *pflag.FlagSet) error {
	r := &f.rlqs
	switch {
	case r.proxies < 1 || r.proxies > maxProxies:
		return usageErr("--proxies %d: want 1 to %d emulated Envoys", r.proxies, maxProxies)
	case fl.Changed("proxy-rates") && fl.Changed("rate"):
		return usageErr("--proxy-rates and --rate: give one (the rate of each proxy, or the total split evenly)")
	case fl.Changed("proxy-rates") && len(r.proxyRates) == 0:
		return usageErr("--proxy-rates: give one rate per proxy (requests per second, comma-separated)")
	case fl.Changed("proxy-rates") && fl.Changed("proxies") && len(r.proxyRates) != r.proxies:
		return usageErr("--proxy-rates: %d rates for --proxies %d: give one per proxy (or leave --proxies out)", len(r.proxyRates), r.proxies)
	case len(r.proxyRates) > maxProxies:
		return usageErr("--proxy-rates: %d rates: at most %d proxies", len(r.proxyRates), maxProxies)
	case fl.Changed("rate") && !(f.rate > 0):
		return usageErr("--rate %v: with --api rlqs, the requests per second offered in all (split evenly over --proxies); want > 0", f.rate)
	}
	return nil
}

// checkRLQSFlags checks the emulated Envoys' settings, --rls-hop, --keys
// and the spawned limit's flags with --api rlqs.
func (f *benchFlags) checkRLQSFlags(fl *pflag.FlagSet) error {
	r := &f.rlqs
	noAssign, expired := sim.Blanket(strings.ToUpper(r.noAssignment)), sim.Blanket(strings.ToUpper(r.expired))
	switch {
	case r.reportInterval < time.Second || r.reportInterval%time.Second != 0:
		return usageErr("--report-interval %v: want whole seconds, at least 1s (Envoy reports time_elapsed in whole seconds)", r.reportInterval)
	case noAssign != sim.AllowAll && noAssign != sim.DenyAll:
		return usageErr("--no-assignment-behavior %q: want ALLOW_ALL or DENY_ALL", r.noAssignment)
	case expired != sim.AllowAll && expired != sim.DenyAll:
		return usageErr("--expired-assignment-behavior %q: want DENY_ALL or ALLOW_ALL", r.expired)
	case r.rlsHop < 0:
		return usageErr("--rls-hop %v: want a duration >= 0 (0: none)", r.rlsHop)
	case !f.hotKey && f.keys > rlqs.MaxBucketsPerStream:
		return usageErr("--keys %d: an Envoy reports every bucket it holds on its one stream, and a node takes at most %d buckets per stream", f.keys, rlqs.MaxBucketsPerStream)
	case f.spawn == 0 && (fl.Changed("limit-rate") || fl.Changed("limit-burst")):
		return usageErr("--limit-rate and --limit-burst: with --api rlqs only with --spawn N (with --target, --envoy-config DIR tells bench the targets' limits)")
	}
	return nil
}

// checkProxyRates checks each rate of --proxy-rates.
func (f *benchFlags) checkProxyRates(*pflag.FlagSet) error {
	for i, x := range f.rlqs.proxyRates {
		if !(x > 0) || math.IsInf(x, 1) {
			return usageErr("--proxy-rates: rate %d is %v: want requests per second > 0", i+1, x)
		}
	}
	return nil
}

// proxyRates is the rate offered to each proxy: --proxy-rates, or --rate
// split evenly over --proxies, or defaultProxyRate each.
func (f *benchFlags) proxyRates() []float64 {
	if len(f.rlqs.proxyRates) > 0 {
		return slices.Clone(f.rlqs.proxyRates)
	}
	each := float64(defaultProxyRate)
	if f.rate > 0 {
		each = f.rate / float64(f.rlqs.proxies)
	}
	rates := make([]float64, f.rlqs.proxies)
	for i := range rates {
		rates[i] = each
	}
	return rates
}

// benchEnvoyFile is an envoy ratelimit config file as bench generates it
// for its spawned nodes (envoyrls reads it).
type benchEnvoyFile struct {
	Domain      string            `yaml:"domain"`
	Tokenmesh   *benchEnvoyExt    `yaml:"tokenmesh,omitempty"`
	Descriptors []benchDescriptor `yaml:"descriptors"`
}

type benchDescriptor struct {
	Key       string         `yaml:"key"`
	RateLimit benchRateLimit `yaml:"rate_limit"`
	Tokenmesh *benchEnvoyExt `yaml:"tokenmesh,omitempty"`
}

type benchRateLimit struct {
	Unit            string `yaml:"unit"`
	RequestsPerUnit int64  `yaml:"requests_per_unit"`
}

// benchEnvoyExt is the tokenmesh extension of the envoy config.
type benchEnvoyExt struct {
	Strategy string            `yaml:"strategy"`
	Params   map[string]string `yaml:"params,omitempty"`
}

// writeBenchEnvoyConfig writes f as bench.yaml into a new temporary
// directory and returns it (the caller removes it).
func writeBenchEnvoyConfig(f benchEnvoyFile) (string, error) {
	text, err := yaml.Marshal(f)
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "tokenmesh-bench-envoy")
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "bench.yaml"), text, 0o644); err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	return dir, nil
}

// envoyUnits are the envoy config units bench writes a limit in.
var envoyUnits = []struct {
	name string
	d    time.Duration
}{{"second", time.Second}, {"minute", time.Minute}, {"hour", time.Hour}, {"day", 24 * time.Hour}}

// envoyUnit is the unit in which rate is burst requests per unit: an envoy
// ratelimit limit's burst is its requests_per_unit.
func envoyUnit(rate bucket.Rate, burst int64) (string, bool) {
	if burst < 1 || burst > math.MaxUint32 {
		return "", false
	}
	for _, u := range envoyUnits {
		if (bucket.Rate{Tokens: burst, Per: u.d}).Reduced() == rate.Reduced() {
			return u.name, true
		}
	}
	return "", false
}

// rlqsConfigFile is the config bench generates for --api rlqs --spawn: one
// descriptor, --descriptor-key, of --limit-rate and --limit-burst, strategy
// quota (with --param's).
func (f *benchFlags) rlqsConfigFile(rate bucket.Rate, params map[string]string) (benchEnvoyFile, error) {
	unit, ok := envoyUnit(rate, f.limitBurst)
	if !ok {
		return benchEnvoyFile{}, usageErr("--limit-rate %s and --limit-burst %d: an envoy ratelimit limit's burst is its requests_per_unit, so the generated config needs a burst equal to the rate over a second, minute, hour or day (%s: --limit-burst %s); or give --envoy-config DIR",
			f.limitRate, f.limitBurst, f.limitRate, plainNumber(rate.PerSec()))
	}
	return benchEnvoyFile{Domain: f.domain, Descriptors: []benchDescriptor{{Key: f.descKey,
		RateLimit: benchRateLimit{Unit: unit, RequestsPerUnit: f.limitBurst},
		Tokenmesh: &benchEnvoyExt{Strategy: quotaStrategy, Params: params}}}}, nil
}

// rlqsKeys are the keys of the run's buckets, as loadgen.RunRLQS draws
// them.
func (f *benchFlags) rlqsKeys() []string {
	n := f.keys
	if f.hotKey {
		n = 1
	}
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%d", i)
	}
	return keys
}

// rlqsLimit is the limit every key's bucket {--descriptor-key: key}
// matches in cfg, for the bound; nil, with why, when the keys match no
// limit, an unlimited one, or limits of different rates. warn, when not
// empty, is a warning about a matched limit that no node assigns.
func rlqsLimit(cfg *envoyrls.Config, domain, entry string, keys []string) (l *envoyrls.Limit, why, warn string) {
	for _, k := range keys {
		m, _ := cfg.MatchBucket(domain, map[string]string{entry: k})
		switch {
		case m == nil:
			return nil, fmt.Sprintf("the bucket {%s: %s} matches no limit of domain %q (the nodes answer it ALLOW_ALL)", entry, k, domain), ""
		case m.Unlimited || m.Rule == "":
			return nil, fmt.Sprintf("the bucket {%s: %s} matches %s, which is unlimited or 0 (answered ALLOW_ALL or DENY_ALL)", entry, k, m.Path), ""
		case l == nil:
			l = m
		case m.RequestsPerUnit != l.RequestsPerUnit || m.Unit != l.Unit:
			return nil, fmt.Sprintf("the keys match limits of different rates (%s and %s)", l.Path, m.Path), ""
		}
	}
	if l != nil && l.Strategy != quotaStrategy {
		warn = fmt.Sprintf("limit %s has strategy %s, not quota: no node assigns it to the proxies (they stay on no_assignment_behavior)", l.Path, l.Strategy)
	}
	return l, "", warn
}

// limitOf is l's token bucket: requests_per_unit per unit, burst
// requests_per_unit.
func limitOf(l *envoyrls.Limit) *loadgen.RLQSLimit {
	n := float64(l.RequestsPerUnit)
	return &loadgen.RLQSLimit{RatePerS: n / envoyrls.UnitDuration(l.Unit).Seconds(), Burst: int64(l.RequestsPerUnit)}
}

// quotaTakeover is how long a node that starts owning a key freezes it
// under strategy quota, with params (the limit's): ttl + apply_lag + 1 s
// + max_skew, as strategy/quota computes it (docs/RLQS.md). A spawned
// cluster's joins are such changes, so the fleet starts after it.
func quotaTakeover(params map[string]string) (time.Duration, error) {
	var pairs []string
	for k, v := range params {
		pairs = append(pairs, k+"="+v)
	}
	p, err := strategy.ParseParams(pairs)
	if err != nil {
		return 0, err
	}
	v, err := strategy.ReadParams(quotaStrategy, quota.Params, p)
	if err != nil {
		return 0, err
	}
	return v.Duration("ttl") + v.Duration("apply_lag") + time.Second + v.Duration("max_skew"), nil
}

// rlqsSettle is the wait after a spawned cluster formed for --api rlqs
// without --settle: quota's takeover after the joins, then the time the
// key's bucket takes to fill (the takeover leaves it empty), so that the
// run starts at a full bucket, as b + r*T assumes.
func rlqsSettle(l *envoyrls.Limit) (settle, takeover, fill time.Duration, err error) {
	if takeover, err = quotaTakeover(l.Params); err != nil {
		return 0, 0, 0, err
	}
	fill = envoyrls.UnitDuration(l.Unit) // requests_per_unit per unit, burst requests_per_unit
	return takeover + fill, takeover, fill, nil
}

// blanketRule is a checked --no-assignment-behavior or
// --expired-assignment-behavior value as the proto's rule.
func blanketRule(v string) typev3.RateLimitStrategy_BlanketRule {
	return sim.Blanket(strings.ToUpper(v)).Rule()
}

// runBenchRLQS runs the fleet against targets and prints the result; limit
// is every key's limit when known (nil: not), why says why not.
func runBenchRLQS(ctx context.Context, f *benchFlags, stdout, stderr io.Writer, o loadgen.Options, limit *loadgen.RLQSLimit, why string) error {
	ro := loadgen.RLQSOptions{Targets: o.Targets, Domain: f.domain, DescriptorKey: f.descKey, Rates: f.proxyRates(),
		Keys: len(f.rlqsKeys()), HotKey: f.hotKey, Duration: f.duration, ReportInterval: f.rlqs.reportInterval,
		NoAssignment: blanketRule(f.rlqs.noAssignment), Expired: blanketRule(f.rlqs.expired), ClientIDs: f.rlqs.clientIDs, Limit: limit,
		Seed: f.seed, TLS: o.TLS, RLSHop: f.rlqs.rlsHop}
	if bar := newProgress(f.progress, stderr, int((ro.Duration + ro.RLSHop).Milliseconds())); bar != nil {
		ro.Progress = func(done time.Duration) { _ = bar.Set(int(done.Milliseconds())) }
		defer bar.Finish()
	}
	res, err := loadgen.RunRLQS(ctx, ro)
	if res == nil {
		return targetErr(err)
	}
	if err != nil {
		fmt.Fprintf(stderr, "interrupted (%v): results so far\n", err)
	}
	if f.json {
		return writeJSON(stdout, res)
	}
	writeRLQS(stdout, res, why)
	return nil
}

// writeRLQS prints r as tables and lines; why says why the limit is
// unknown (when it is).
func writeRLQS(w io.Writer, r *loadgen.RLQSResult, why string) {
	keys := fmt.Sprint(r.Keys)
	if r.HotKey {
		keys = "1 (hot)"
	}
	fmt.Fprintf(w, "RLQS: %d emulated Envoys on %d targets, domain %s, bucket {%s: key} over %s keys, reports every %v, no_assignment_behavior %s, expired_assignment_behavior %s, %.1fs\n\n",
		len(r.Proxies), len(r.Targets), r.Domain, r.DescriptorKey, keys, time.Duration(r.ReportIntervalSec*float64(time.Second)), r.NoAssignment, r.Expired, r.ElapsedSec)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "proxy\ttarget\toffered/s\toffered\tadmitted\tdenied\tadmitted %\tassignments\tfirst at s\treports\tdropped\tresponses\t")
	for _, p := range r.Proxies {
		first := "never"
		if p.FirstAssignmentSec != nil {
			first = fmt.Sprintf("%.3f", *p.FirstAssignmentSec)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d\t%d\t%.1f\t%d\t%s\t%d\t%d\t%d\t\n", p.Proxy, p.Target, plainNumber(p.RatePerS),
			p.Offered, p.Admitted, p.Denied, p.AdmittedPct, p.Assignments, first, p.ReportsSent, p.ReportsDropped, p.Responses)
	}
	t := r.Total
	sum := 0.0
	for _, p := range r.Proxies {
		sum += p.RatePerS
	}
	fmt.Fprintf(tw, "all\t\t%s\t%d\t%d\t%d\t%.1f\t%d\t\t%d\t%d\t%d\t\n", plainNumber(sum), t.Offered, t.Admitted, t.Denied, t.AdmittedPct,
		t.Assignments, t.ReportsSent, t.ReportsDropped, t.Responses)
	_ = tw.Flush()
	fmt.Fprintln(w)
	if r.Limit != nil {
		fmt.Fprintf(w, "limit %s/s, burst %d per key: admitted %d of min(offered, r*T + b) = %.0f: %.1f%%; the worst window's excess over b + r*T: %.3f requests\n",
			plainNumber(r.Limit.RatePerS), r.Limit.Burst, t.Admitted, *r.Ceiling, deref(r.AdmittedOfCeilingPct), *r.WorstExcess)
	} else {
		fmt.Fprintf(w, "limit unknown (%s): admissions not held to b + r*T\n", why)
	}
	s := r.Stream
	fmt.Fprintf(w, "streams: %d messages (%d reports sent, %d responses), %d protobuf bytes: %.4f messages and %.2f bytes per request; streams opened %d, failed to open %d, broken %d; bad responses %d\n",
		s.Messages, t.ReportsSent, t.Responses, s.Bytes, s.MessagesPerRequest, s.BytesPerRequest, s.Opened, s.OpenFailed, s.Broken, s.BadResponses)
	d := r.DecisionUS
	fmt.Fprintf(w, "decision at the proxy (local, the model's): p50 %.2f us, p99 %.2f us, p999 %.2f us, max %.1f us\n", d.P50, d.P99, d.P999, d.Max)
	if h := r.RLSHop; h != nil {
		if h.Calls > 0 {
			fmt.Fprintf(w, "the RLS hop it replaces (ShouldRateLimit to the same nodes, one at a time, after the run): p50 %.3f ms, p99 %.3f ms, p999 %.3f ms over %d calls (%d failed)\n",
				h.LatencyMS.P50, h.LatencyMS.P99, h.LatencyMS.P999, h.Calls, h.Failed)
		}
		if h.Error != "" {
			fmt.Fprintf(w, "the RLS hop: %s\n", h.Error)
		}
	}
	fmt.Fprintf(w, "client CPU: %.2f cores\n", r.CPUCores)
	for _, p := range r.Proxies {
		if p.FirstAssignmentSec == nil {
			fmt.Fprintf(w, "note: proxy %d got no assignment: it decided every request by its no_assignment_behavior (%s)\n", p.Proxy, r.NoAssignment)
		}
	}
	if r.WallSec > r.ElapsedSec+1 {
		fmt.Fprintf(w, "note: the proxies took %.1fs for %.1fs of arrivals: they fell behind (lower the rates, or fewer proxies)\n", r.WallSec, r.ElapsedSec)
	}
	for _, e := range s.Errors {
		fmt.Fprintf(w, "stream error: %s\n", e)
	}
}

func deref(p *float64) float64 {
	if p == nil {
		return 0
	}
	return *p
}
