package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/limiter"
	"github.com/tokenmesh/tokenmesh/loadgen"
	"github.com/tokenmesh/tokenmesh/rule"
	"github.com/tokenmesh/tokenmesh/server"
)

// benchServer serves a single node's gRPC API in this process, rule
// "api" (rate/s, burst), and returns its address.
func benchServer(t *testing.T, rate float64, burst int64) string {
	t.Helper()
	r, err := bucket.PerSecond(rate)
	if err != nil {
		t.Fatal(err)
	}
	rules := []rule.Rule{{Name: "api", Rate: r, Burst: burst, Strategy: "owner"}}
	node, err := limiter.Start(context.Background(), limiter.Config{Name: "n1", Rules: rules})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	server.New(node, rules).RegisterGRPC(gs)
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(func() {
		gs.Stop()
		_ = node.Close()
	})
	return ln.Addr().String()
}

func TestBenchBadFlags(t *testing.T) {
	dead := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	for _, c := range []struct {
		args []string
		want string
		code int
	}{
		{[]string{"--batch", "0"}, "--batch 0", 2},
		{[]string{"--batch", "1001"}, "--batch 1001", 2},
		{[]string{"--concurrency", "0"}, "--concurrency 0", 2},
		{[]string{"--duration", "-1s"}, "--duration -1s", 2},
		{[]string{"--warmup", "-1s"}, "--warmup -1s", 2},
		{[]string{"--keys", "0"}, "--keys 0", 2},
		{[]string{"--hits", "0"}, "--hits 0", 2},
		{[]string{"--rate", "-5"}, "--rate -5", 2},
		{[]string{"--progress", "sometimes"}, "--progress", 2},
		{[]string{"--target", ""}, "--target", 2},
		{[]string{"--target", "nohostport"}, `--target "nohostport"`, 2},
		{[]string{"--spawn", "-1"}, "--spawn -1", 2},
		{[]string{"--spawn", "2", "--settle", "-1s"}, "--settle -1s", 2},
		{[]string{"--spawn", "2", "--target", dead}, "--spawn and --target", 2},
		{[]string{"--spawn", "2", "--limit-rate", "fast"}, "--limit-rate", 2},
		{[]string{"--spawn", "2", "--limit-burst", "0"}, "--limit-burst 0", 2},
		{[]string{"--tls-ca", "/nonexistent/ca.pem"}, "--tls-ca", 2},
		{[]string{"--tls-cert", "c.pem"}, "--tls-cert and --tls-key", 2},
		{[]string{"--spawn", "1", "--tls"}, "--spawn and --tls", 2},
		{[]string{"--burst-test", "--burst-window", "0s"}, "--burst-window 0s", 2},
		{[]string{"--keys-dist", "pareto"}, `--keys-dist "pareto": unknown distribution`, 2},
		{[]string{"--keys-dist", "zipf", "--keys", "5"}, "--keys is for --keys-dist uniform", 2},
		{[]string{"--keys-dist", "tenants:3", "--hot-key"}, "--hot-key and --keys-dist tenants:3", 2},
		{[]string{"--keys-dist", "tenants:3", "--api", "rlqs"}, "only uniform keys with --api rlqs", 2},
		{[]string{"--accuracy", "--burst-test"}, "--accuracy: not with --api rlqs or --burst-test", 2},
		{[]string{"--target", dead, "--duration", "100ms"}, "--target " + dead + ": no tokenmesh gRPC API answers there (is `tokenmesh serve` running", 1},
	} {
		_, errOut, code := tokenmesh(t, append([]string{"bench"}, c.args...)...)
		if code != c.code || !strings.Contains(errOut, c.want) {
			t.Errorf("bench %v: exit %d, stderr %q; want exit %d naming %q", c.args, code, errOut, c.code, c.want)
		}
	}
}

type benchJSON struct {
	Targets     []string `json:"targets"`
	Concurrency int      `json:"concurrency"`
	Batch       int      `json:"batch"`
	Keys        int      `json:"keys"`
	Checks      int64    `json:"checks"`
	Allowed     int64    `json:"allowed"`
	Refused     int64    `json:"refused"`
	ChecksPerS  float64  `json:"checks_per_s"`
	RPCsPerS    float64  `json:"rpcs_per_s"`
	AllowedPct  float64  `json:"allowed_pct"`
	Latency     struct {
		P50, P99, P999 *float64
	} `json:"latency_ms"`
	CPU *float64 `json:"client_cpu_cores"`
}

func TestBenchJSONAndTable(t *testing.T) {
	addr := benchServer(t, 1e6, 1e6)
	out, errOut, code := tokenmesh(t, "bench", "--target", addr+","+addr, "--rule", "api", "--concurrency", "4",
		"--batch", "10", "--keys", "50", "--duration", "300ms", "--warmup", "50ms", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var r benchJSON
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("bad JSON: %v\n%s", err, out)
	}
	if len(r.Targets) != 2 || r.Concurrency != 4 || r.Batch != 10 || r.Keys != 50 || r.Checks <= 0 ||
		r.Allowed+r.Refused != r.Checks || r.ChecksPerS <= 0 || r.AllowedPct != 100 ||
		r.Latency.P50 == nil || r.Latency.P99 == nil || r.Latency.P999 == nil || r.CPU == nil {
		t.Errorf("JSON %+v:\n%s", r, out)
	}

	out, errOut, code = tokenmesh(t, "bench", "--target", addr, "--rule", "api", "--hot-key", "--duration", "100ms", "--warmup", "0")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, s := range []string{"checks/s", "RPC/s", "allowed %", "p999 ms", "1 (hot)", "client CPU"} {
		if !strings.Contains(out, s) {
			t.Errorf("table lacks %q:\n%s", s, out)
		}
	}

	_, errOut, code = tokenmesh(t, "bench", "--target", addr, "--rule", "nope", "--duration", "100ms")
	if code == 0 || !strings.Contains(errOut, `--target `+addr+`: rule "nope" is not a rule of this node (it has: api)`) {
		t.Errorf("unknown rule: exit %d, %q", code, errOut)
	}
}

// --keys-dist and --accuracy against one exact node (an owner rule of
// 100/s, burst 20, offered 400 checks/s over 4 tenant keys): the keys are
// the tenants, nothing exceeds b + r*T, and against the exact replay on
// the client's clock little is missed or extra (timing: the answers'
// times, not the node's decisions); the JSON carries the same account.
func TestBenchAccuracy(t *testing.T) {
	addr := benchServer(t, 100, 20)
	args := []string{"bench", "--target", addr, "--rule", "api", "--keys-dist", "tenants:4", "--rate", "400",
		"--duration", "2s", "--warmup", "200ms", "--accuracy", "--progress", "never"}
	out, errOut, code := tokenmesh(t, append(args, "--json")...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var r struct {
		Keys     int `json:"keys"`
		Accuracy struct {
			Excess struct {
				Worst   float64 `json:"worst_window_excess"`
				Sliding float64 `json:"sliding_excess"`
			}
			Shortfall struct {
				Exact    int64 `json:"exact_admitted"`
				Admitted int64
				Missed   int64
				Extra    int64
			}
			MissedPct float64 `json:"missed_pct"`
		}
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("bad JSON: %v\n%s", err, out)
	}
	a := r.Accuracy
	t.Logf("keys %d, accuracy %+v", r.Keys, a)
	// 4 keys at 100/s over 2 s: about 800 exact. Scored at the answers'
	// times: a token or two of slack a key for a window's edge, and a
	// loaded machine's stalls move answers (so the stricter sliding
	// excess is logged, not asserted); a limiter that ignored the limit
	// would be ~800 extra, one that refused everything ~800 missed.
	if r.Keys != 4 || a.Shortfall.Exact < 400 || a.Excess.Worst > 2 ||
		float64(a.Shortfall.Missed+a.Shortfall.Extra) > 0.1*float64(a.Shortfall.Exact)+10 {
		t.Errorf("one exact node: %+v\n%s", r, out)
	}
	out, errOut, code = tokenmesh(t, args...)
	if code != 0 || !strings.Contains(out, "accuracy against one exact token bucket per key (100/s, burst 20)") ||
		!strings.Contains(out, "exact bucket admits") || !strings.Contains(out, "excess over b + r x T") {
		t.Errorf("table: exit %d, %s\n%s", code, out, errOut)
	}
}

// A single bucket, reached through two targets, never exceeds the envelope.
func TestBenchBurstTest(t *testing.T) {
	addr := benchServer(t, 10, 20)
	out, errOut, code := tokenmesh(t, "bench", "--target", addr+","+addr, "--rule", "api", "--burst-test", "--burst-window", "300ms")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "envelope (burst + rate x elapsed)") || !strings.Contains(out, "admitted: ") ||
		!strings.HasSuffix(strings.TrimSpace(out), "OK") {
		t.Errorf("burst test output:\n%s", out)
	}
	out, errOut, code = tokenmesh(t, "bench", "--target", addr, "--rule", "api", "--burst-test", "--burst-window", "100ms", "--json")
	var br struct {
		Sent     int     `json:"sent"`
		Admitted int64   `json:"admitted"`
		Envelope float64 `json:"envelope"`
		OK       bool    `json:"ok"`
	}
	if err := json.Unmarshal([]byte(out), &br); err != nil || code != 0 {
		t.Fatalf("exit %d, %v: %s %s", code, err, out, errOut)
	}
	if br.Sent != 20 || br.Admitted < 20 || float64(br.Admitted) > br.Envelope || !br.OK {
		t.Errorf("burst test %+v", br)
	}
}

// --spawn starts real `tokenmesh serve` processes; local (no coordination)
// admits each node's own burst, beyond the envelope.
func TestBenchSpawnBurstTest(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 2-node cluster (about 4s)")
	}
	out, errOut, code := tokenmesh(t, "bench", "--spawn", "2", "--rule", "api", "--limit-rate", "1/s", "--limit-burst", "50",
		"--strategy", "local", "--burst-test", "--burst-window", "200ms", "--json")
	var br struct {
		Targets  []string `json:"targets"`
		Sent     int      `json:"sent"`
		Admitted int64    `json:"admitted"`
		Envelope float64  `json:"envelope"`
		OK       bool     `json:"ok"`
	}
	if err := json.Unmarshal([]byte(out), &br); err != nil || code != 0 {
		t.Fatalf("exit %d, %v: %s %s", code, err, out, errOut)
	}
	if len(br.Targets) != 2 || br.Sent != 100 || float64(br.Admitted) <= br.Envelope || br.OK {
		t.Errorf("local over 2 nodes: %+v, want more admitted than the envelope", br)
	}
}

// --api rls drives Envoy's ShouldRateLimit on spawned nodes (a generated
// envoy config): one hot key of 20 per second admits the burst and about
// 20/s after it, and refuses the rest.
func TestBenchRLSSpawn(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real process")
	}
	out, errOut, code := tokenmesh(t, "bench", "--api", "rls", "--spawn", "1", "--limit-burst", "20", "--hot-key",
		"--concurrency", "4", "--duration", "500ms", "--warmup", "0s", "--json", "--progress", "never")
	var r struct {
		Rule    string `json:"rule"`
		Checks  int64  `json:"checks"`
		Allowed int64  `json:"allowed"`
		Refused int64  `json:"refused"`
		Failed  int64  `json:"failed_rpcs"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil || code != 0 {
		t.Fatalf("exit %d, %v: %s %s", code, err, out, errOut)
	}
	// burst 20 + 20/s over at most ~1.5 s of calls (measurement and the
	// calls in flight around it).
	if r.Rule != "rls:bench" || r.Failed != 0 || r.Allowed < 1 || r.Allowed > 20+30 || r.Refused < 1 {
		t.Errorf("%+v: want some allowed (at most 50), some refused, none failed", r)
	}
	_, errOut, code = tokenmesh(t, "bench", "--api", "rls", "--burst-test")
	if code != 2 || !strings.Contains(errOut, "--burst-test and --api rls") {
		t.Errorf("--burst-test with rls: exit %d, %q", code, errOut)
	}
}

// Readiness: a gdrl cluster that reports ready refuses nothing
// under a limit it cannot reach, even with the load right after it formed
// (no settle, no warm-up). The joiners report ready only once they hold
// their default share; before that, about a sixth of the first seconds'
// checks were refused.
func TestBenchSpawnGdrlNoSettleRefusesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster (about 5s)")
	}
	out, errOut, code := tokenmesh(t, "bench", "--spawn", "3", "--strategy", "gdrl", "--settle", "0", "--warmup", "0",
		"--duration", "1s", "--concurrency", "8", "--limit-rate", "1000000000/s", "--limit-burst", "1000000000", "--json")
	var r struct {
		Checks  int64 `json:"checks"`
		Allowed int64 `json:"allowed"`
		Refused int64 `json:"refused"`
		Errors  int64 `json:"check_errors"`
		Failed  int64 `json:"failed_rpcs"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil || code != 0 {
		t.Fatalf("exit %d, %v: %s %s", code, err, out, errOut)
	}
	if r.Checks < 100 || r.Refused != 0 || r.Errors != 0 || r.Failed != 0 || r.Allowed != r.Checks {
		t.Errorf("gdrl under a limit of 10^9/s with no settle: %+v, want every check allowed", r)
	}
}

// A fresh 3-node cluster refuses no check of one hot key under a limit it
// cannot reach, for every strategy that keeps a limit in a cluster, at
// the bench's default settle and with no warm-up (the first checks count),
// with one worker, with 8 and with batches of 10. Before, lease refused
// some: the owner started the key empty for its takeover (a node sees
// itself alone before it joins, and that view counted as one whose state
// a restart forgot), and forwards that timed out together under load were
// refused by a fallback bucket that started empty at the timeout instead
// of at the request's arrival. quota refused a key for its takeover
// (ttl + apply_lag + 1 s + max_skew) after a cluster's start (16,507 of
// 46,591 checks in a 5 s run) before its warm-up (strategy/quota
// warmup.go). regionlease refused a key for its takeover (region_ttl +
// 1 s) after a cluster's start (21,600 to 22,673 of 138,553 to 144,909
// checks in a 5 s run) before its warm-up (strategy/regionlease
// warmup.go). Not in the list: central (not a cluster strategy).
//
// A strategy whose run refused checks is run once more on a fresh cluster
// and fails only if that run refuses too. On a machine loaded by other
// jobs (a load average of 20 on these 2 cores, beside a soak and other
// packages' tests) a peer's answer once took longer than the default
// timeout (3 x latency_hint + 100 ms; the hint is not measured yet at a
// start): a key's warm-up then gives up and freezes it for the takeover,
// as it must when it cannot know the key's state (lease refused 3,390 of
// 8,090, quota all 4,400 of a 1 s run). A logic error refuses in both runs;
// the first run's result is logged either way.
func TestBenchSpawnHotKeyRefusesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 3-node clusters (about 3 s each)")
	}
	strategies := []string{"local", "static", "owner", "gcounter", "tbqueue", "gdrl", "adaptive", "lease", "fixedwindow", "quota", "regionlease"}
	loads := [][]string{{"--concurrency", "1"}, {"--concurrency", "8"}, {"--concurrency", "4", "--batch", "10"}}
	for i, s := range strategies {
		load := loads[i%len(loads)]
		if s == "lease" || s == "owner" || s == "quota" {
			load = []string{"--concurrency", "8", "--batch", "10"}
		}
		t.Run(s, func(t *testing.T) {
			t.Parallel()
			args := append([]string{"bench", "--spawn", "3", "--strategy", s, "--hot-key", "--warmup", "0", "--duration", "1s",
				"--limit-rate", "1000000000/s", "--limit-burst", "1000000000", "--json"}, load...)
			type result struct {
				Checks  int64 `json:"checks"`
				Allowed int64 `json:"allowed"`
				Refused int64 `json:"refused"`
				Errors  int64 `json:"check_errors"`
				Failed  int64 `json:"failed_rpcs"`
			}
			run := func() result {
				out, errOut, code := tokenmesh(t, args...)
				var r result
				if err := json.Unmarshal([]byte(out), &r); err != nil || code != 0 {
					t.Fatalf("exit %d, %v: %s %s", code, err, out, errOut)
				}
				return r
			}
			ok := func(r result) bool {
				return r.Checks >= 50 && r.Refused == 0 && r.Errors == 0 && r.Failed == 0 && r.Allowed == r.Checks
			}
			r := run()
			if ok(r) {
				return
			}
			t.Logf("%s %v: %+v; once more on a fresh cluster (see the test's doc)", s, load, r)
			if r2 := run(); !ok(r2) {
				t.Errorf("%s %v under a limit of 10^9/s: %+v, then %+v, want every check allowed", s, load, r, r2)
			}
		})
	}
}

// --api rlqs: bad flag combinations are usage errors naming the flag; a
// target that serves no RLQS is named.
func TestBenchRLQSBadFlags(t *testing.T) {
	dead := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	for _, c := range []struct {
		args []string
		want string
		code int
	}{
		{[]string{"--api", "soap"}, `--api "soap": want tokenmesh, rls or rlqs`, 2},
		{[]string{"--api", "rlqs", "--batch", "10"}, "--batch: not with --api rlqs", 2},
		{[]string{"--api", "rlqs", "--warmup", "1s"}, "--warmup: not with --api rlqs", 2},
		{[]string{"--api", "rlqs", "--concurrency", "4"}, "--concurrency: not with --api rlqs", 2},
		{[]string{"--api", "rlqs", "--hits", "2"}, "--hits: not with --api rlqs", 2},
		{[]string{"--api", "rlqs", "--burst-test"}, "--burst-test: not with --api rlqs", 2},
		{[]string{"--api", "rlqs", "--rule", "api"}, "--rule: not with --api rlqs", 2},
		{[]string{"--api", "rlqs", "--domain", ""}, "--domain: is required with --api rlqs", 2},
		{[]string{"--api", "rlqs", "--proxies", "0"}, "--proxies 0", 2},
		{[]string{"--api", "rlqs", "--proxy-rates", "1,2", "--rate", "10"}, "--proxy-rates and --rate", 2},
		{[]string{"--api", "rlqs", "--proxy-rates", "1,2", "--proxies", "3"}, "--proxy-rates: 2 rates for --proxies 3", 2},
		{[]string{"--api", "rlqs", "--proxy-rates", "1,0"}, "--proxy-rates: rate 2 is 0", 2},
		{[]string{"--api", "rlqs", "--rate", "0"}, "--rate 0", 2},
		{[]string{"--api", "rlqs", "--report-interval", "1500ms"}, "--report-interval 1.5s", 2},
		{[]string{"--api", "rlqs", "--report-interval", "0s"}, "--report-interval 0s", 2},
		{[]string{"--api", "rlqs", "--no-assignment-behavior", "MAYBE"}, `--no-assignment-behavior "MAYBE"`, 2},
		{[]string{"--api", "rlqs", "--expired-assignment-behavior", "x"}, `--expired-assignment-behavior "x"`, 2},
		{[]string{"--api", "rlqs", "--rls-hop", "-1s"}, "--rls-hop -1s", 2},
		{[]string{"--api", "rlqs", "--keys", "10001"}, "--keys 10001", 2},
		{[]string{"--api", "rlqs", "--limit-rate", "100/s"}, "--limit-rate and --limit-burst: with --api rlqs only with --spawn N", 2},
		{[]string{"--api", "rlqs", "--spawn", "2", "--strategy", "owner"}, "--strategy: not with --api rlqs", 2},
		{[]string{"--api", "rlqs", "--spawn", "2", "--limit-rate", "100/s", "--limit-burst", "50"}, "--limit-rate 100/s and --limit-burst 50: an envoy ratelimit limit's burst is its requests_per_unit", 2},
		{[]string{"--api", "rlqs", "--spawn", "2", "--param", "owner.hold=1ms"}, "--param owner.hold: the spawned rule's strategy is quota", 2},
		{[]string{"--api", "rlqs", "--spawn", "2", "--param", "quota.nope=1"}, "--param quota.nope", 2},
		{[]string{"--api", "rlqs", "--target", dead, "--envoy-config", "/nonexistent/dir"}, "--envoy-config /nonexistent/dir", 2},
		{[]string{"--param", "quota.ttl=3s"}, "--param: only with --spawn N", 2},
		{[]string{"--proxies", "3"}, "--proxies: only with --api rlqs", 2},
		{[]string{"--client-ids"}, "--client-ids: only with --api rlqs", 2},
		{[]string{"--api", "rls", "--report-interval", "1s"}, "--report-interval: only with --api rlqs", 2},
		{[]string{"--api", "rlqs", "--target", dead, "--duration", "1s"}, "--target " + dead + ": no gRPC server answers there", 1},
	} {
		_, errOut, code := tokenmesh(t, append([]string{"bench"}, c.args...)...)
		if code != c.code || !strings.Contains(errOut, c.want) {
			t.Errorf("bench %v: exit %d, stderr %q; want exit %d naming %q", c.args, code, errOut, c.code, c.want)
		}
	}
}

// --api rlqs --spawn 3: the skewed fleet (two Envoys at 150/s,
// four at 10/s) on one bucket of 100/s, burst 100, for a few seconds;
// every Envoy gets an assignment, the fleet admits no more than
// min(offered, r*T + b), the counts add up. The quota params are the
// e2e test's (apply_lag 1s, ttl 3s: the bound assumes every assignment
// applied within apply_lag, and this machine may be loaded); the proxies
// name themselves (--client-ids: the tokenmesh-client-id header).
func TestBenchRLQSSpawn(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster (about 20s)")
	}
	out, errOut, code := tokenmesh(t, "bench", "--api", "rlqs", "--spawn", "3", "--proxy-rates", "150,150,10,10,10,10",
		"--limit-rate", "100/s", "--limit-burst", "100", "--duration", "6s", "--report-interval", "1s",
		"--no-assignment-behavior", "DENY_ALL", "--param", "quota.apply_lag=1s", "--param", "quota.ttl=3s",
		"--rls-hop", "300ms", "--client-ids", "--json", "--progress", "never")
	var r loadgen.RLQSResult
	if err := json.Unmarshal([]byte(out), &r); err != nil || code != 0 {
		t.Fatalf("exit %d, %v: %s %s", code, err, out, errOut)
	}
	if !r.ClientIDs {
		t.Errorf("result %+v: want client_ids (--client-ids: the proxies name themselves)", r)
	}
	if !strings.Contains(errOut, "quota's takeover after the joins (5.1s)") {
		t.Errorf("stderr %q: want the wait for quota's takeover (ttl 3s + apply_lag 1s + 1s + max_skew 100ms)", errOut)
	}
	tot := r.Total
	if len(r.Targets) != 3 || len(r.Proxies) != 6 || r.Limit == nil || r.Limit.RatePerS != 100 || r.Limit.Burst != 100 ||
		r.Ceiling == nil || r.WorstExcess == nil || r.ElapsedSec != 6 {
		t.Fatalf("result %+v: want 3 targets, 6 proxies, limit 100/s burst 100, the bound", r)
	}
	// 340/s for 6 s: 2,040 expected.
	if tot.Offered < 1500 || tot.Offered > 2600 || tot.Admitted+tot.Denied != tot.Offered || tot.Admitted == 0 {
		t.Errorf("total %+v: want about 2,040 offered, some admitted", tot)
	}
	if float64(tot.Admitted) > *r.Ceiling {
		t.Errorf("admitted %d, above min(offered, r*T + b) = %.0f", tot.Admitted, *r.Ceiling)
	}
	t.Logf("admitted %d of %.0f (%.1f%%); worst window excess %.3f; %.4f messages and %.2f bytes per request; decision p50 %.2f us; RLS hop %+v",
		tot.Admitted, *r.Ceiling, deref(r.AdmittedOfCeilingPct), *r.WorstExcess, r.Stream.MessagesPerRequest, r.Stream.BytesPerRequest, r.DecisionUS.P50, r.RLSHop)
	for _, p := range r.Proxies {
		if p.FirstAssignmentSec == nil || p.LastTokenBucket == "" || p.ReportsSent == 0 {
			t.Errorf("proxy %d: first assignment %v, last token bucket %q, %d reports: want a token bucket assigned", p.Proxy, p.FirstAssignmentSec, p.LastTokenBucket, p.ReportsSent)
		}
	}
	if r.Stream.Opened != 6 || r.Stream.MessagesPerRequest <= 0 || r.DecisionUS.P50 <= 0 {
		t.Errorf("stream %+v, decision latency %+v", r.Stream, r.DecisionUS)
	}
	if r.RLSHop == nil || r.RLSHop.Calls == 0 {
		t.Errorf("RLS hop %+v: want timed calls", r.RLSHop)
	}
}

// The text report: per proxy and total rows, the bound, the streams, the
// latencies, and notes.
func TestWriteRLQS(t *testing.T) {
	first, ceiling, pct, excess := 0.5, 700.0, 57.4, 0.0
	r := &loadgen.RLQSResult{Targets: []string{"a:1", "b:2"}, Domain: "bench", DescriptorKey: "key", Keys: 1, ReportIntervalSec: 5,
		NoAssignment: "ALLOW_ALL", Expired: "DENY_ALL", ElapsedSec: 6, WallSec: 6,
		Proxies: []loadgen.RLQSProxy{
			{Proxy: 0, Target: "a:1", RatePerS: 150, RLQSCounts: loadgen.RLQSCounts{Offered: 900, Admitted: 400, Denied: 500}, FirstAssignmentSec: &first},
			{Proxy: 1, Target: "b:2", RatePerS: 10, RLQSCounts: loadgen.RLQSCounts{Offered: 60, Denied: 60}},
		},
		Total: loadgen.RLQSCounts{Offered: 960, Admitted: 400, Denied: 560}, Limit: &loadgen.RLQSLimit{RatePerS: 100, Burst: 100},
		Ceiling: &ceiling, AdmittedOfCeilingPct: &pct, WorstExcess: &excess,
		RLSHop: &loadgen.RLSHop{Calls: 10, LatencyMS: loadgen.LatencyMS{P50: 0.5}}}
	var b strings.Builder
	writeRLQS(&b, r, "")
	for _, s := range []string{"offered/s", "first at s", "all", "160", "0.500", "never",
		"limit 100/s, burst 100 per key: admitted 400 of min(offered, r*T + b) = 700: 57.4%", "excess over b + r*T: 0.000",
		"messages and", "decision at the proxy", "the RLS hop it replaces", "note: proxy 1 got no assignment"} {
		if !strings.Contains(b.String(), s) {
			t.Errorf("report lacks %q:\n%s", s, b.String())
		}
	}
	r.Limit = nil
	b.Reset()
	writeRLQS(&b, r, "not spawned")
	if !strings.Contains(b.String(), "limit unknown (not spawned)") {
		t.Errorf("report without a limit:\n%s", b.String())
	}
}

// The generated config's unit: the burst is requests_per_unit; quota's
// takeover follows its params.
func TestEnvoyUnitAndTakeover(t *testing.T) {
	for _, c := range []struct {
		rate  string
		burst int64
		unit  string
	}{{"100/s", 100, "second"}, {"6000/min", 6000, "minute"}, {"100/s", 6000, "minute"}, {"1/s", 86400, "day"}, {"100/s", 50, ""}, {"1/3s", 1, ""}} {
		r, err := rule.ParseRate(c.rate)
		if err != nil {
			t.Fatal(err)
		}
		if u, ok := envoyUnit(r, c.burst); u != c.unit || ok != (c.unit != "") {
			t.Errorf("envoyUnit(%s, %d) = %q, %v; want %q", c.rate, c.burst, u, ok, c.unit)
		}
	}
	for params, want := range map[string]time.Duration{"": 3600 * time.Millisecond, "ttl=3s,apply_lag=1s": 5100 * time.Millisecond} {
		m := map[string]string{}
		for _, kv := range strings.Split(params, ",") {
			if k, v, ok := strings.Cut(kv, "="); ok {
				m[k] = v
			}
		}
		if got, err := quotaTakeover(m); err != nil || got != want {
			t.Errorf("quotaTakeover(%v) = %v, %v; want %v", m, got, err, want)
		}
	}
}

// TestBenchSpawnProfileDirCreated: --spawn-cpuprofile names a directory
// that does not exist yet; the spawned cluster's config creates it and
// passes each node a profile path inside it (a missing directory made
// every node fail at its start).
func TestBenchSpawnProfileDirCreated(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "profiles")
	f := &benchFlags{spawn: 3, rule: "default", limitRate: "1000/s", limitBurst: 1000, strategy: "owner", profileDir: dir}
	lc, _, written, err := f.spawnConfig("")
	if err != nil {
		t.Fatal(err)
	}
	if written != "" {
		t.Errorf("wrote an envoy config %q for the default API", written)
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		t.Fatalf("profile directory %s not created: %v", dir, err)
	}
	args := strings.Join(lc.ServeArgs, " ")
	if !strings.Contains(args, "--"+cpuProfileFlag+" "+filepath.Join(dir, "serve-")) {
		t.Errorf("serve args %q do not write a profile into %s", args, dir)
	}
	// A path under a file cannot be created: the error names the flag.
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	f.profileDir = filepath.Join(file, "profiles")
	if _, _, _, err := f.spawnConfig(""); err == nil || !strings.Contains(err.Error(), "--spawn-cpuprofile") {
		t.Errorf("profile directory under a file: err = %v, want one naming --spawn-cpuprofile", err)
	}
}
