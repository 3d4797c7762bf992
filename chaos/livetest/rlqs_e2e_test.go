package livetest

// End-to-end test of Envoy's Rate Limit Quota Service on real `tokenmesh
// serve` processes : a fleet of emulated Envoys (rlqs/proxy,
// deciding as Envoy's rate_limit_quota filter does, rlqs/envoymodel) holds
// leases of one global bucket, decides every request locally, and the fleet
// stays within b + r*T while the owner of the bucket is killed.

import (
	"context"
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	rlqfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rate_limit_quota/v3"
	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tokenmesh/tokenmesh/eval"
	"github.com/tokenmesh/tokenmesh/localcluster"
	"github.com/tokenmesh/tokenmesh/rendezvous"
	"github.com/tokenmesh/tokenmesh/rlqs/envoymodel"
	"github.com/tokenmesh/tokenmesh/rlqs/proxy"
	"github.com/tokenmesh/tokenmesh/rule"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// rlqsLimits is one bucket of 100/s (burst 100: requests_per_unit) served
// by the quota strategy. apply_lag is 1 s, not the default 500 ms: the
// bound assumes every assignment applied within it, and this machine may
// be loaded by a parallel build (ttl 3 s keeps renewals ahead of it).
// renew_every 500 ms instead of ttl/2: after the owner's kill its successor
// renews every Envoy of a surviving node as soon as it sees the kill
// (2026-12-06, A-B-A-B on a loaded machine: those Envoys assigned again
// 1.36-1.42 s after the kill against 1.34-2.81 s at ttl/2; 89.4 % and 88.5
// % of the ceiling against 87.3 % and 87.4 %).
const rlqsLimits = `domain: edge
descriptors:
  - key: tenant
    rate_limit: {unit: second, requests_per_unit: 100}
    tokenmesh: {strategy: quota, params: {apply_lag: 1s, ttl: 3s, renew_every: 500ms}}
`

// rlqsTTL is rlqsLimits' ttl; rlqsIDsTTL the ttl of the runs whose Envoys
// name themselves (rlqsRun.ids): a share is sent again to its returning
// Envoy only while its last acknowledged assignment (at most renew_every
// before the kill) is valid when the resend arrives, so ttl must exceed
// renew_every + detection + replica_wait + apply_lag: 0.5 + about 1.5 +
// 0.1 + 1 s here (at 3 s a returning Envoy misses the window about half the
// time: strategy/quota TestOwnerCrashTakeoverClientIDs).
const (
	rlqsTTL    = 3 * time.Second
	rlqsIDsTTL = 4 * time.Second
)

// limitsWithTTL is rlqsLimits with the quota rule's ttl set to ttl.
func limitsWithTTL(ttl time.Duration) string {
	return strings.Replace(rlqsLimits, "ttl: 3s", fmt.Sprintf("ttl: %v", ttl), 1)
}

// denyUnassigned are the Envoys' bucket settings under which the bound
// holds: no admission without an assignment (no_assignment_behavior
// DENY_ALL; an expired assignment falls back to it, as Envoy does when
// expired_assignment_behavior is unset).
func denyUnassigned(report time.Duration) *rlqfilterv3.RateLimitQuotaBucketSettings {
	return &rlqfilterv3.RateLimitQuotaBucketSettings{
		ReportingInterval: durationpb.New(report),
		NoAssignmentBehavior: &rlqfilterv3.RateLimitQuotaBucketSettings_NoAssignmentBehavior{
			NoAssignmentBehavior: &rlqfilterv3.RateLimitQuotaBucketSettings_NoAssignmentBehavior_FallbackRateLimit{
				FallbackRateLimit: &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: typev3.RateLimitStrategy_DENY_ALL}}}}}
}

// rlqsTakeover is the quota strategy's takeover with rlqsLimits' params
// and ttl: ttl + apply_lag 1 s + 1 s + max_skew 100 ms (5.1 s at ttl 3 s).
func rlqsTakeover(ttl time.Duration) time.Duration { return ttl + 2100*time.Millisecond }

// rlqsCrashTakeover is the takeover when the previous owner left the view
// (a kill): no failure detector's delay to wait for, 1 s less.
func rlqsCrashTakeover(ttl time.Duration) time.Duration { return rlqsTakeover(ttl) - time.Second }

// rlqsProbe is the nodes' node.probe_interval: failure detection in about
// 6 of them (1.5 s) instead of the default's 6 s.
const rlqsProbe = 250 * time.Millisecond

// rlqsDetection is how long the survivors may take to see a killed node
// gone (memberlist at rlqsProbe; twice what it takes on a quiet machine).
const rlqsDetection = 3 * time.Second

// rlqsRun is one run of the skewed fleet: two Envoys offering 150/s and
// four 10/s to one bucket of 100/s burst 100, spread over the nodes.
type rlqsRun struct {
	report   time.Duration // the Envoys' report interval
	duration time.Duration
	killAt   time.Duration // 0: no kill; else kill -9 of the bucket's owner then
	// ids: every Envoy names itself (the tokenmesh-client-id header), at
	// ttl rlqsIDsTTL; ttl: the quota rule's ttl (0: rlqsTTL)
	ids bool
	ttl time.Duration
}

func (r rlqsRun) name() string {
	name := fmt.Sprintf("report_%v", r.report)
	if r.killAt > 0 {
		name += "_kill"
	}
	if r.ttl != 0 && r.ttl != rlqsTTL {
		name += fmt.Sprintf("_ttl_%v", r.ttl)
	}
	if r.ids {
		name += "_ids"
	}
	return name
}

// TestRLQSClusterE2E: 3 serve nodes, 6 emulated Envoys (2 at 150/s, 4 at
// 10/s) on one bucket of 100/s burst 100, reports every second, 30 s, the
// bucket's owner killed (-9) at 10 s. Every decision is an Envoy's own (no
// call per request); the fleet's admissions stay within b + r*T in every
// window (the Envoys decide in this process, so a decision's time is
// exact); every Envoy holds an assignment again within rlqsRecovery of the
// kill: failure detection, the new owner's takeover and two report
// intervals. The new owner continues from the killed one's replica (the
// quota strategy's replicas, default 2): an Envoy whose assignment is
// still valid long enough is renewed as soon as the new owner sees the
// kill, any other once its old assignment has surely expired (within ttl
// + apply_lag) and its new one is paid; without a replica the key would
// freeze for ttl + apply_lag + max_skew (rlqsCrashTakeover), the bound
// kept below. The fleet starts once the keys' takeover after the nodes'
// joins has passed (a node that starts owning a key freezes it; the
// cluster's own start is such a change). A second run gives every Envoy a
// client id (the tokenmesh-client-id header, as grpc_service.initial_metadata
// would) at ttl 4 s: the killed node's own Envoys, which reconnect to
// another node, take their shares over there (sent again as they were:
// Envoy renews them) instead of waiting as new clients until their old
// shares have surely expired (strategy/quota # Client ids).
// TOKENMESH_RLQS=full runs the 60 s runs instead: reports every 5 s
// and every 1 s, without and with the kill at 20 s; TOKENMESH_RLQS=ids runs
// the kill without and with ids at ttl 4 s, twice (A-B-A-B).
func TestRLQSClusterE2E(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	runs := []rlqsRun{{report: time.Second, duration: 30 * time.Second, killAt: 10 * time.Second},
		{report: time.Second, duration: 30 * time.Second, killAt: 10 * time.Second, ids: true, ttl: rlqsIDsTTL}}
	switch os.Getenv("TOKENMESH_RLQS") {
	case "ids":
		// A-B-A-B: the kill without and with client ids, at the same ttl
		runs = nil
		for range 2 {
			for _, ids := range []bool{false, true} {
				runs = append(runs, rlqsRun{report: time.Second, duration: 30 * time.Second, killAt: 10 * time.Second, ids: ids, ttl: rlqsIDsTTL})
			}
		}
	case "full":
		runs = nil
		for _, report := range []time.Duration{5 * time.Second, time.Second} {
			runs = append(runs, rlqsRun{report: report, duration: time.Minute}, rlqsRun{report: report, duration: time.Minute, killAt: 20 * time.Second})
		}
	}
	if os.Getenv("TOKENMESH_RLQS") == "full" {
		t.Run("static", func(t *testing.T) { runStaticRLQS(t, time.Minute) })
	}
	for _, r := range runs {
		t.Run(r.name(), func(t *testing.T) { runRLQS(t, r) })
	}
}

func runRLQS(t *testing.T, r rlqsRun) {
	dir := filepath.Join(t.TempDir(), "ratelimit")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if r.ttl == 0 {
		r.ttl = rlqsTTL
	}
	if err := os.WriteFile(filepath.Join(dir, "edge.yaml"), []byte(limitsWithTTL(r.ttl)), 0o644); err != nil {
		t.Fatal(err)
	}
	const nodes = 3
	c := startCluster(t, localcluster.Config{Nodes: nodes, ServeArgs: []string{"--envoy-config", dir}, ProbeInterval: rlqsProbe,
		Rules: []rule.Rule{{Name: "api", Rate: rule.MustRate("1/s"), Burst: 1}}})
	var addrs []string
	for _, n := range c.Nodes {
		addrs = append(addrs, n.GRPC)
	}
	// the keys' takeover after the joins: ttl + apply_lag 1 s + 1 s +
	// max_skew 100 ms
	time.Sleep(rlqsTakeover(r.ttl))
	const key = "acme"
	owner := slices.Index([]strategy.NodeID{"n0", "n1", "n2"}, rendezvous.Owner(key, []strategy.NodeID{"n0", "n1", "n2"}))
	bucket := envoymodel.NewBucketID(map[string]string{"tenant": key})
	rates, loads := skewedLoads(bucket, r.duration)
	ctx, cancel := context.WithTimeout(context.Background(), r.duration+time.Minute)
	defer cancel()
	fleet, err := proxy.Start(ctx, proxy.Config{Proxies: len(rates), Addrs: addrs, Spread: true, Seed: 1, ClientIDs: r.ids,
		Model: envoymodel.Config{Domain: "edge", Settings: denyUnassigned(r.report), ReportInterval: r.report}, Loads: loads})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now() // the fleet's times count from its start, just before
	var killed time.Duration
	if r.killAt > 0 {
		time.Sleep(r.killAt)
		if err := c.Kill(owner); err != nil {
			t.Fatal(err)
		}
		killed = time.Since(start)
		t.Logf("killed n%d, the bucket's owner, at %v", owner, killed.Round(time.Millisecond))
	}
	rec := fleet.Wait()

	reqs, allowed := rec.Workload()
	admitted := 0
	for _, a := range allowed {
		if a {
			admitted++
		}
	}
	v := eval.EnvelopeViolation(reqs, allowed, 100, 100)
	offered := float64(len(reqs))
	ceiling := math.Min(offered, 100*r.duration.Seconds()+100)
	t.Logf("%d requests offered, %d admitted: %.1f%% of min(offered, r*T + b) = %.0f; the most one window exceeded b + r*T by: %.3f tokens",
		len(reqs), admitted, 100*float64(admitted)/ceiling, ceiling, v)
	for i := range rates {
		var last string
		for _, a := range rec.Assignments {
			if a.Proxy == i {
				if tb := a.TokenBucket(); tb != nil {
					last = fmt.Sprintf("%d tokens per %v, max %d (via %s)", tb.GetTokensPerFill().GetValue(), tb.GetFillInterval().AsDuration(), tb.GetMaxTokens(), a.Addr)
				}
			}
		}
		t.Logf("envoy %d offering %.0f/s: last assignment %s", i, rates[i], last)
	}
	logRLQSShares(t, rec, rates, r.report, r.duration)
	if v > 0.001 {
		t.Errorf("the fleet exceeded b + r*T by %.3f tokens in some window (the bound is exact while assignments apply within apply_lag = 1s)", v)
	}
	// Without a kill the model admits 94-96% (strategy/quota
	// TestSkewedFleetLoss with the Envoys' Poisson starts; live 94.2-95.2%
	// on this machine, docs/RLQS.md); a kill costs detection + takeover of
	// nothing. The floor leaves room for a loaded machine (the 95%
	// is reported, not asserted: it is within the runs' noise).
	floor := 0.8
	if r.killAt > 0 {
		floor = 0.8 * (1 - (rlqsDetection+rlqsCrashTakeover(r.ttl)).Seconds()/r.duration.Seconds())
	}
	if float64(admitted) < floor*ceiling {
		t.Errorf("admitted %d, below %.0f%% of the ceiling %.0f", admitted, 100*floor, ceiling)
	}
	if r.killAt == 0 {
		return
	}
	checkAssignedAgain(t, rec, r, len(rates), owner, killed)
}

// checkAssignedAgain logs, per Envoy, how long after the kill it applied a
// token bucket again and what that did to its bucket (renewed: the share
// it held, sent again; changed: resized, its fill ratio kept; new: a first
// token bucket, after a DENY_ALL), and fails when one took longer than
// failure detection, the new owner's takeover and two report intervals.
// With client ids, the killed node's own Envoys (Spread: Envoy i started
// at node i mod 3) take their shares over on their new streams (1.4-1.6 s
// after the kill here, load 3-6) if the successor sees the kill in time
// (their last acknowledged assignment still valid when the resend arrives:
// about 2.5 s at ttl 4 s): whenever every surviving node's Envoy was
// renewed within takeoverSeen of the kill (the successor saw it that
// soon), each of them must have taken its share over (no new bucket)
// within detection + replica_wait + two report intervals. A slower failure
// detector (a loaded machine) lets them miss that window; they then wait
// as without ids, logged, held to the bound without ids.
func checkAssignedAgain(t *testing.T, rec *proxy.Record, r rlqsRun, n, killedNode int, killed time.Duration) {
	within := rlqsDetection + rlqsCrashTakeover(r.ttl) + 2*r.report
	got := make([]againAt, n)
	seenSoon := true // every surviving node's Envoy renewed within takeoverSeen
	var late, all, own []string
	for i := range n {
		got[i] = firstAfter(rec, i, killed)
		desc := fmt.Sprintf("envoy %d: %v %v", i, got[i].at.Round(time.Millisecond), got[i].effect)
		if i%3 == killedNode {
			desc += " (its node killed)"
			own = append(own, fmt.Sprintf("%v %v", got[i].at.Round(time.Millisecond), got[i].effect))
		} else if got[i].at < 0 || got[i].at > takeoverSeen || got[i].effect != envoymodel.RenewedTokenBucket {
			seenSoon = false
		}
		all = append(all, desc)
		if got[i].at < 0 || got[i].at > within {
			late = append(late, fmt.Sprintf("envoy %d: %v (want within %v)", i, got[i].at, within))
		}
	}
	t.Logf("assigned again after the kill: %s", strings.Join(all, ", "))
	t.Logf("the killed node's own Envoys assigned again after %s (client ids %v, ttl %v; the survivors all renewed within %v: %v)",
		strings.Join(own, ", "), r.ids, r.ttl, takeoverSeen, seenSoon)
	if r.ids && seenSoon {
		late = append(late, notTakenOver(got, killedNode, rlqsDetection+100*time.Millisecond+2*r.report)...)
	}
	if len(late) > 0 {
		t.Errorf("after the owner's kill, Envoys not assigned again in time (-1: never): %s", strings.Join(late, ", "))
	}
}

// takeoverSeen: when every surviving node's Envoy was renewed within it of
// the kill, the successor saw the kill in time for the killed node's
// Envoys with client ids to take their shares over (checkAssignedAgain).
const takeoverSeen = 2 * time.Second

// againAt is when an Envoy first applied a token bucket after the kill
// (-1: never) and what that did to its bucket.
type againAt struct {
	at     time.Duration
	effect envoymodel.Effect
}

// firstAfter is Envoy i's first token bucket after killed.
func firstAfter(rec *proxy.Record, i int, killed time.Duration) againAt {
	for _, a := range rec.Assignments {
		if a.Proxy == i && a.At > killed && a.TokenBucket() != nil {
			return againAt{a.At - killed, a.Effect}
		}
	}
	return againAt{at: -1}
}

// notTakenOver names the killed node's Envoys (i mod 3 == killedNode) that
// did not take their shares over (a new bucket, or none) within limit.
func notTakenOver(got []againAt, killedNode int, limit time.Duration) []string {
	var out []string
	for i, g := range got {
		if i%3 == killedNode && (g.at < 0 || g.at > limit || g.effect == envoymodel.NewTokenBucket) {
			out = append(out, fmt.Sprintf("envoy %d (its node killed, with a client id, the successor saw the kill by %v): %v %v (want its share taken over within %v)",
				i, takeoverSeen, g.at, g.effect, limit))
		}
	}
	return out
}

// logRLQSShares logs, per Envoy, what it admitted against the tokens its
// assignments refilled (tokens_per_fill over the fill interval, from each
// token bucket's arrival until the next assignment or its TTL's end: the
// difference is what its bucket lost full, or what was left in it), the
// token buckets it got new (full), changed and renewed, and when its first
// came; and the fleet's admissions in the first report interval and the
// rate no Envoy held (r*T less the refills: cuts held until their
// release, the first assignments' wait, a kill). Where the tokens go,
// live (the model's breakdown: strategy/quota TestSkewedFleetLoss).
func logRLQSShares(t *testing.T, rec *proxy.Record, rates []float64, report, d time.Duration) {
	var refills float64
	for i := range rates {
		var admitted int
		for _, x := range rec.Decisions {
			if x.Proxy == i && x.Allowed {
				admitted++
			}
		}
		var refill float64
		var counts [3]int
		first := time.Duration(-1)
		var as []proxy.Assignment
		for _, a := range rec.Assignments {
			if a.Proxy == i {
				as = append(as, a)
			}
		}
		for j, a := range as {
			if int(a.Effect) < len(counts) {
				counts[a.Effect]++
			}
			tb := a.TokenBucket()
			if tb == nil {
				continue
			}
			if first < 0 {
				first = a.At
			}
			end := min(a.At+a.TTL.Truncate(time.Second), d)
			if j+1 < len(as) {
				end = min(end, as[j+1].At)
			}
			if secs := tb.GetFillInterval().AsDuration().Truncate(time.Second).Seconds(); secs > 0 && end > a.At {
				refill += float64(tb.GetTokensPerFill().GetValue()) / secs * (end - a.At).Seconds()
			}
		}
		refills += refill
		t.Logf("envoy %d offering %.0f/s: admitted %d, its assignments refilled %.0f; token buckets new %d, changed %d, renewed %d; the first at %v",
			i, rates[i], admitted, refill, counts[envoymodel.NewTokenBucket], counts[envoymodel.ChangedTokenBucket], counts[envoymodel.RenewedTokenBucket], first.Round(time.Millisecond))
	}
	var early int
	for _, x := range rec.Decisions {
		if x.Allowed && x.At < report {
			early++
		}
	}
	t.Logf("admitted in the first report interval: %d of r*%v + b = %.0f; the rate no Envoy held: %.0f tokens of r*T = %.0f",
		early, report, 100*report.Seconds()+100, 100*d.Seconds()-refills, 100*d.Seconds())
}

// staticRLQS is what the open-source RLQS servers do: every Envoy gets the
// whole (r, b) (here 100/s, burst 100), whatever the others get.
type staticRLQS struct {
	rlqsv3.UnimplementedRateLimitQuotaServiceServer
}

func (staticRLQS) StreamRateLimitQuotas(gs grpc.BidiStreamingServer[rlqsv3.RateLimitQuotaUsageReports, rlqsv3.RateLimitQuotaResponse]) error {
	for {
		m, err := gs.Recv()
		if err != nil {
			return err
		}
		resp := &rlqsv3.RateLimitQuotaResponse{}
		for _, u := range m.BucketQuotaUsages {
			resp.BucketAction = append(resp.BucketAction, &rlqsv3.RateLimitQuotaResponse_BucketAction{BucketId: u.BucketId,
				BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{
					QuotaAssignmentAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
						AssignmentTimeToLive: durationpb.New(time.Minute),
						RateLimitStrategy: &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{TokenBucket: &typev3.TokenBucket{
							MaxTokens: 100, TokensPerFill: wrapperspb.UInt32(100), FillInterval: durationpb.New(time.Second)}}}}}})
		}
		if err := gs.Send(resp); err != nil {
			return err
		}
	}
}

// runStaticRLQS runs the skewed fleet against a static RLQS server and
// logs its excess over b + r*T: the comparison the issue asks for beside
// quota's.
func runStaticRLQS(t *testing.T, d time.Duration) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	rlqsv3.RegisterRateLimitQuotaServiceServer(g, staticRLQS{})
	go g.Serve(ln)
	defer g.Stop()
	bucket := envoymodel.NewBucketID(map[string]string{"tenant": "acme"})
	rates, loads := skewedLoads(bucket, d)
	ctx, cancel := context.WithTimeout(context.Background(), d+time.Minute)
	defer cancel()
	fleet, err := proxy.Start(ctx, proxy.Config{Proxies: len(rates), Addrs: []string{ln.Addr().String()}, Seed: 1,
		Model: envoymodel.Config{Domain: "edge", Settings: denyUnassigned(time.Second), ReportInterval: time.Second}, Loads: loads})
	if err != nil {
		t.Fatal(err)
	}
	reqs, allowed := fleet.Wait().Workload()
	admitted := 0
	for _, a := range allowed {
		if a {
			admitted++
		}
	}
	t.Logf("static RLQS (every Envoy the whole 100/s, burst 100): %d of %d admitted; the most one window exceeded b + r*T by %.0f tokens",
		admitted, len(reqs), eval.EnvelopeViolation(reqs, allowed, 100, 100))
}

// skewedLoads is the skewed fleet on bucket for d: two Envoys
// offering 150 requests/s and four 10/s (Poisson), and those rates.
func skewedLoads(bucket envoymodel.BucketID, d time.Duration) ([]float64, []proxy.Load) {
	rates := []float64{150, 150, 10, 10, 10, 10}
	loads := make([]proxy.Load, len(rates))
	for i, rate := range rates {
		loads[i] = proxy.Load{Proxy: i, Bucket: bucket, Rate: rate, Arrivals: proxy.Poisson, Duration: d}
	}
	return rates, loads
}
