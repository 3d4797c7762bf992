package loadgen

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	mrand "math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/proto"

	tokenmeshv1 "github.com/tokenmesh/tokenmesh/api/tokenmesh/v1"
	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/internal/pki"
	"github.com/tokenmesh/tokenmesh/limiter"
	"github.com/tokenmesh/tokenmesh/rule"
	"github.com/tokenmesh/tokenmesh/server"
)

// serve starts a single node with rule "api" (rate/s, burst) and serves
// its gRPC API on 127.0.0.1:0; it returns the address.
func serve(tb testing.TB, rate float64, burst int64, opts ...grpc.ServerOption) string {
	tb.Helper()
	r, err := bucket.PerSecond(rate)
	if err != nil {
		tb.Fatal(err)
	}
	return serveRules(tb, []rule.Rule{{Name: "api", Rate: r, Burst: burst, Strategy: "owner"}}, nil, opts...)
}

// serveRules starts a single node with rules and serves its gRPC API (and
// what register adds, when not nil) on 127.0.0.1:0 until the test ends;
// it returns the address.
func serveRules(tb testing.TB, rules []rule.Rule, register func(*server.Server, *grpc.Server), opts ...grpc.ServerOption) string {
	tb.Helper()
	node, err := limiter.Start(context.Background(), limiter.Config{Name: "n1", Rules: rules})
	if err != nil {
		tb.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	gs := grpc.NewServer(append(opts, server.GRPCServerOptions()...)...) // as serve does
	s := server.New(node, rules)
	s.RegisterGRPC(gs)
	if register != nil {
		register(s, gs)
	}
	go func() { _ = gs.Serve(ln) }()
	tb.Cleanup(func() {
		gs.Stop()
		_ = node.Close()
	})
	return ln.Addr().String()
}

func TestRunCounts(t *testing.T) {
	addr := serve(t, 1e6, 1e6)
	var progressed time.Duration
	res, err := Run(context.Background(), Options{Targets: []string{addr}, Rule: "api", Concurrency: 4, Batch: 3,
		Keys: 100, Duration: 300 * time.Millisecond, Warmup: 50 * time.Millisecond,
		Progress: func(d time.Duration) { progressed = d }})
	if err != nil {
		t.Fatal(err)
	}
	if res.Checks <= 0 || res.RPCs <= 0 || res.Checks != 3*res.RPCs {
		t.Fatalf("checks %d rpcs %d: want > 0 and checks = 3*rpcs", res.Checks, res.RPCs)
	}
	if res.Allowed+res.Refused != res.Checks || res.Errors != 0 || res.FailedRPCs != 0 {
		t.Errorf("allowed %d + refused %d != checks %d (errors %d, failed rpcs %d, samples %q)",
			res.Allowed, res.Refused, res.Checks, res.Errors, res.FailedRPCs, res.ErrorSample)
	}
	if res.Allowed != res.Checks {
		t.Errorf("a limit of 1e6/s refused %d of %d checks", res.Refused, res.Checks)
	}
	if res.P50 <= 0 || res.P50 > res.P99 || res.P99 > res.Max || res.ChecksPerS <= 0 {
		t.Errorf("latency p50 %v p99 %v max %v, checks/s %v", res.P50, res.P99, res.Max, res.ChecksPerS)
	}
	if res.Elapsed < 250*time.Millisecond || res.Elapsed > 400*time.Millisecond {
		t.Errorf("elapsed %v, want about 300ms", res.Elapsed)
	}
	if progressed != 350*time.Millisecond {
		t.Errorf("last progress %v, want 350ms", progressed)
	}
	if res.RuleRate != 1e6 || res.RuleBurst != 1e6 {
		t.Errorf("rule limit %v/%d", res.RuleRate, res.RuleBurst)
	}
}

// A hot key under a small limit admits the token bucket's envelope: the
// burst plus rate times the elapsed time, and not much less.
func TestHotKeyAdmitsEnvelope(t *testing.T) {
	const rate, burst = 100, 10
	addr := serve(t, rate, burst)
	res, err := Run(context.Background(), Options{Targets: []string{addr, addr}, Rule: "api", Concurrency: 8, Batch: 2,
		HotKey: true, Duration: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	env := burst + rate*res.Elapsed.Seconds()
	// The lower bound leaves room for the server being starved on a
	// loaded machine; a bucket that does not refill admits only the burst.
	if float64(res.Allowed) > env+2 || float64(res.Allowed) < burst+rate*res.Elapsed.Seconds()/2 {
		t.Errorf("admitted %d in %v, want about %.1f (burst %d + %d/s * elapsed)", res.Allowed, res.Elapsed, env, burst, rate)
	}
	if res.Refused == 0 || res.Allowed+res.Refused != res.Checks || res.Keys != 1 {
		t.Errorf("allowed %d refused %d checks %d keys %d", res.Allowed, res.Refused, res.Checks, res.Keys)
	}
}

// Open loop sends about Rate calls per second, whatever the server does.
func TestOpenLoopRate(t *testing.T) {
	addr := serve(t, 1e6, 1e6)
	res, err := Run(context.Background(), Options{Targets: []string{addr}, Rule: "api", Concurrency: 4, Batch: 1,
		Keys: 10, Duration: 400 * time.Millisecond, Rate: 200})
	if err != nil {
		t.Fatal(err)
	}
	if res.RPCs < 50 || res.RPCs > 81 {
		t.Errorf("%d calls in %v at 200/s, want about 80", res.RPCs, res.Elapsed)
	}
}

// Hits above the burst are check errors (never allowed), sampled once.
func TestCheckErrorsSampled(t *testing.T) {
	addr := serve(t, 10, 5)
	res, err := Run(context.Background(), Options{Targets: []string{addr}, Rule: "api", Concurrency: 2, Batch: 1,
		Keys: 3, Hits: 6, Duration: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if res.Errors == 0 || res.Errors != res.Checks || len(res.ErrorSample) != 1 || !strings.Contains(res.ErrorSample[0], "exceeds the burst") {
		t.Errorf("errors %d of %d, samples %q", res.Errors, res.Checks, res.ErrorSample)
	}
}

func TestBadOptions(t *testing.T) {
	addr := serve(t, 10, 5)
	good := Options{Targets: []string{addr}, Rule: "api", Concurrency: 1, Batch: 1, Keys: 1, Duration: time.Millisecond}
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	dead.Close()
	for _, tc := range []struct {
		edit func(*Options)
		want string
	}{
		{func(o *Options) { o.Targets = nil }, "Targets"},
		{func(o *Options) { o.Targets = []string{"localhost"} }, "host:port"},
		{func(o *Options) { o.Rule = "" }, "Rule"},
		{func(o *Options) { o.Concurrency = 0 }, "Concurrency 0"},
		{func(o *Options) { o.Batch = 0 }, "Batch 0"},
		{func(o *Options) { o.Batch = 1001 }, "Batch 1001"},
		{func(o *Options) { o.Keys = 0 }, "Keys 0"},
		{func(o *Options) { o.Hits = -1 }, "Hits -1"},
		{func(o *Options) { o.Duration = 0 }, "Duration 0"},
		{func(o *Options) { o.Warmup = -time.Second }, "Warmup -1s"},
		{func(o *Options) { o.Rate = -1 }, "Rate -1"},
		{func(o *Options) { o.Rule = "nope" }, `rule "nope" is not a rule of this node (it has: api)`},
		{func(o *Options) { o.Targets = []string{addr, deadAddr} }, "target " + deadAddr + ": no tokenmesh gRPC API answers there (is `tokenmesh serve` running"},
	} {
		o := good
		tc.edit(&o)
		if _, err := Run(context.Background(), o); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want %q", o, err, tc.want)
		}
	}
	if _, err := Run(context.Background(), good); err != nil {
		t.Errorf("good options: %v", err)
	}
	var te *TargetError
	o := good
	o.Targets = []string{deadAddr}
	if _, err := Run(context.Background(), o); !errors.As(err, &te) || te.Target != deadAddr {
		t.Errorf("unreachable: %v, want a TargetError", err)
	}
}

// A worker's request holds batch checks of the rule with keys drawn from
// keys, and tally counts a response's results (and flags a short one).
func TestRequestAndTally(t *testing.T) {
	r := newRequest("api", 5, 300)
	r.draw(newKeyPicker([]string{"k0", "k1", "k2"}, 0), mrand.New(mrand.NewPCG(1, 2)))
	b, err := proto.Marshal(r.msg)
	if err != nil {
		t.Fatal(err)
	}
	var req tokenmeshv1.CheckRequest
	if err := proto.Unmarshal(b, &req); err != nil {
		t.Fatal(err)
	}
	if len(req.Checks) != 5 {
		t.Fatalf("%d checks", len(req.Checks))
	}
	seen := map[string]bool{}
	for _, c := range req.Checks {
		if c.Rule != "api" || c.Hits != 300 || (c.Key != "k0" && c.Key != "k1" && c.Key != "k2") {
			t.Errorf("check %v", c)
		}
		seen[c.Key] = true
	}
	if len(seen) < 2 {
		t.Errorf("keys %v: 5 draws from 3 keys gave one key", seen)
	}
	resp := &tokenmeshv1.CheckResponse{Results: []*tokenmeshv1.CheckResult{
		{Allowed: true, LimitPerS: 1, Burst: 2, Remaining: 1},
		{Allowed: false, Remaining: -1, RetryAfterMs: 5},
		{Error: "checks[2]: not decided", RetryAfterMs: -1},
	}}
	st := &workerStats{}
	if a, rf, e, bad := tally(resp, 3, st); a != 1 || rf != 1 || e != 1 || bad != "" || len(st.samples) != 1 {
		t.Errorf("tally: %d allowed, %d refused, %d errors, %q, samples %v", a, rf, e, bad, st.samples)
	}
	if _, _, _, bad := tally(resp, 4, st); bad == "" {
		t.Error("3 results for 4 checks not flagged")
	}
}

// BenchmarkCheck runs client and server in this process: one op is one
// Check call of one check (32 workers, 10000 keys). For profiles of the
// server's hot path:
//
//	go test ./loadgen -run '^$' -bench Check -benchtime 200000x -cpuprofile cpu.out
func BenchmarkCheck(b *testing.B) {
	addr := serve(b, 1e9, 1e9)
	for _, conns := range []int{1, 4} {
		b.Run("conns="+string(rune('0'+conns)), func(b *testing.B) {
			res, err := Run(context.Background(), Options{Targets: []string{addr}, Rule: "api", Concurrency: 32,
				ConnsPerTarget: conns, Batch: 1, Keys: 10000, Duration: time.Hour, MaxRPCs: int64(b.N)})
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(res.ChecksPerS, "checks/s")
			b.ReportMetric(float64(res.P99.Microseconds()), "p99-us")
		})
	}
}

// One bucket reached through two targets stays within the envelope; the
// default check count is burst x targets.
func TestBurst(t *testing.T) {
	addr := serve(t, 10, 20)
	br, err := Burst(context.Background(), BurstOptions{Targets: []string{addr, addr}, Rule: "api", Window: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if br.Sent != 40 || br.Checks != 40 || br.Admitted < 20 || float64(br.Admitted) > br.Envelope || !br.OK {
		t.Errorf("%+v", br)
	}
	if br.ElapsedSec < 0.15 || br.ElapsedSec > 2 {
		t.Errorf("elapsed %vs, want about 0.2s", br.ElapsedSec)
	}
	if _, err := Burst(context.Background(), BurstOptions{Targets: []string{addr}, Rule: "api", Checks: -1}); err == nil {
		t.Error("Checks -1 accepted")
	}
}

// testCert returns a server certificate for 127.0.0.1 and a pool that
// trusts it (a throw-away CA of internal/pki).
func testCert(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	ca, err := pki.NewCA("loadgen test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := ca.Issue("127.0.0.1", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return srv.TLS, ca.Pool()
}

func TestTLS(t *testing.T) {
	cert, pool := testCert(t)
	addr := serve(t, 1e6, 1e6, grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})))
	o := Options{Targets: []string{addr}, Rule: "api", Concurrency: 2, Batch: 1, Keys: 5, Duration: 100 * time.Millisecond,
		TLS: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
	res, err := Run(context.Background(), o)
	if err != nil || res.Checks == 0 || res.FailedRPCs != 0 {
		t.Fatalf("TLS run: %v %+v", err, res)
	}
	o.TLS = nil
	if _, err := Run(context.Background(), o); err == nil {
		t.Error("plaintext against a TLS server succeeded")
	}
}

// TestClientProcess is BenchmarkServer's client, in a process of its own
// (so that the benchmark's CPU profile is the server's alone); it is
// skipped unless LOADGEN_CLIENT_TARGET is set. It also profiles the
// client alone against a running node:
//
//	LOADGEN_CLIENT_TARGET=127.0.0.1:8081 LOADGEN_CLIENT_RULE=default LOADGEN_CLIENT_RPCS=150000 LOADGEN_CLIENT_BATCH=1 \
//	    go test ./loadgen -run '^TestClientProcess$' -cpuprofile client.out
func TestClientProcess(t *testing.T) {
	target := os.Getenv("LOADGEN_CLIENT_TARGET")
	if target == "" {
		t.Skip("the client process of BenchmarkServer")
	}
	rpcs, _ := strconv.ParseInt(os.Getenv("LOADGEN_CLIENT_RPCS"), 10, 64)
	batch, _ := strconv.Atoi(os.Getenv("LOADGEN_CLIENT_BATCH"))
	rule := os.Getenv("LOADGEN_CLIENT_RULE")
	if rule == "" {
		rule = "api"
	}
	o := Options{Targets: []string{target}, Rule: rule, Concurrency: 32,
		Batch: batch, Keys: 10000, Duration: time.Hour, MaxRPCs: rpcs}
	if os.Getenv("LOADGEN_CLIENT_API") == APIRLS { // serveRLS's domain
		o.Rule, o.API, o.Domain, o.DescriptorKey = "", APIRLS, "d", "ip"
	}
	res, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.NewEncoder(os.Stdout).Encode(res); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkServer profiles the server alone: it serves in this process
// and the client (32 workers, 10000 keys, one op = one call) runs in a
// child process. server-cpu-ns/op is the server's CPU time (this
// process's, user+system) per call: steadier than ns/op, the wall time,
// on a shared machine.
//
//	go test ./loadgen -run '^$' -bench Server/batch=1 -benchtime 200000x -cpuprofile server.out
//
// Sub-benchmark rls is Envoy's ShouldRateLimit, one descriptor per call
// (a limit of 10^9 per second).
func BenchmarkServer(b *testing.B) {
	addr := serve(b, 1e9, 1e9)
	for _, batch := range []int{1, 100, 0} {
		name, api, target := "batch="+strconv.Itoa(batch), APITokenmesh, addr
		if batch == 0 {
			name, api, batch, target = "rls", APIRLS, 1, serveRLSUnit(b, "second", 1e9)
		}
		b.Run(name, func(b *testing.B) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestClientProcess$", "-test.count=1")
			cmd.Env = append(os.Environ(), "LOADGEN_CLIENT_TARGET="+target, "LOADGEN_CLIENT_RPCS="+strconv.Itoa(b.N),
				"LOADGEN_CLIENT_BATCH="+strconv.Itoa(batch), "LOADGEN_CLIENT_API="+api)
			cpu0 := processCPU() // this process's: the server's (the client is a child)
			out, err := cmd.Output()
			serverCPU := processCPU() - cpu0
			if err != nil {
				b.Fatalf("client: %v\n%s", err, out)
			}
			i := strings.IndexByte(string(out), '{')
			var res Result
			if i < 0 || json.NewDecoder(strings.NewReader(string(out[i:]))).Decode(&res) != nil {
				b.Fatalf("client output: %s", out)
			}
			b.ReportMetric(res.ChecksPerS, "checks/s")
			b.ReportMetric(res.LatencyMS.P99, "p99-ms")
			b.ReportMetric(res.CPUCores, "client-cores")
			b.ReportMetric(float64(serverCPU.Nanoseconds())/float64(b.N), "server-cpu-ns/op")
		})
	}
}
