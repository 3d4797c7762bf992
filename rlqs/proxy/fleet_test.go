package proxy

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"math"
	"math/big"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	rlqfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rate_limit_quota/v3"
	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tokenmesh/tokenmesh/eval"
	"github.com/tokenmesh/tokenmesh/rlqs/envoymodel"
)

var web = envoymodel.NewBucketID(map[string]string{"name": "web"})

// fakeServer is a scripted RLQS server on 127.0.0.1:0: it answers every
// report with answer's response (none when answer returns nil).
type fakeServer struct {
	rlqsv3.UnimplementedRateLimitQuotaServiceServer
	addr   string
	srv    *grpc.Server
	answer func(*rlqsv3.RateLimitQuotaUsageReports) *rlqsv3.RateLimitQuotaResponse

	mu      sync.Mutex
	reports []*rlqsv3.RateLimitQuotaUsageReports
}

func startFake(t *testing.T, answer func(*rlqsv3.RateLimitQuotaUsageReports) *rlqsv3.RateLimitQuotaResponse, opts ...grpc.ServerOption) *fakeServer {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeServer{addr: lis.Addr().String(), srv: grpc.NewServer(opts...), answer: answer}
	rlqsv3.RegisterRateLimitQuotaServiceServer(f.srv, f)
	go f.srv.Serve(lis)
	t.Cleanup(f.srv.Stop)
	return f
}

func (f *fakeServer) StreamRateLimitQuotas(stream rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasServer) error {
	for {
		r, err := stream.Recv()
		if err != nil {
			return err
		}
		f.mu.Lock()
		f.reports = append(f.reports, r)
		f.mu.Unlock()
		if resp := f.answer(r); resp != nil {
			if err := stream.Send(resp); err != nil {
				return err
			}
		}
	}
}

func tokenBucket(max, perSecond uint32) *typev3.RateLimitStrategy {
	return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{TokenBucket: &typev3.TokenBucket{
		MaxTokens: max, TokensPerFill: wrapperspb.UInt32(perSecond), FillInterval: durationpb.New(time.Second)}}}
}

// assignEvery answers a report with rule, for a minute, for each bucket in it.
func assignEvery(rule *typev3.RateLimitStrategy) func(*rlqsv3.RateLimitQuotaUsageReports) *rlqsv3.RateLimitQuotaResponse {
	return func(r *rlqsv3.RateLimitQuotaUsageReports) *rlqsv3.RateLimitQuotaResponse {
		resp := &rlqsv3.RateLimitQuotaResponse{}
		for _, u := range r.GetBucketQuotaUsages() {
			resp.BucketAction = append(resp.BucketAction, &rlqsv3.RateLimitQuotaResponse_BucketAction{
				BucketId: u.GetBucketId(),
				BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{
					QuotaAssignmentAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
						AssignmentTimeToLive: durationpb.New(time.Minute), RateLimitStrategy: rule}}})
		}
		if len(resp.BucketAction) == 0 {
			return nil
		}
		return resp
	}
}

// denyFirst are bucket settings whose no_assignment_behavior denies, so that
// every admission comes from an assignment.
func denyFirst() *rlqfilterv3.RateLimitQuotaBucketSettings {
	return &rlqfilterv3.RateLimitQuotaBucketSettings{
		ReportingInterval: durationpb.New(time.Second),
		NoAssignmentBehavior: &rlqfilterv3.RateLimitQuotaBucketSettings_NoAssignmentBehavior{
			NoAssignmentBehavior: &rlqfilterv3.RateLimitQuotaBucketSettings_NoAssignmentBehavior_FallbackRateLimit{
				FallbackRateLimit: &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: typev3.RateLimitStrategy_DENY_ALL}}}}}
}

func deadAddr(t *testing.T) string {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	return addr
}

func run(t *testing.T, cfg Config) *Record {
	t.Helper()
	f, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return f.Wait()
}

// Two proxies under load against one server that assigns each a token bucket
// of 5 per second, burst 5: the fleet admits at most 10 + 10*T in any
// window (the first requests are denied until the assignment), reports at
// once for a new bucket and then on the interval.
func TestFleetEnforcesAssignments(t *testing.T) {
	srv := startFake(t, assignEvery(tokenBucket(5, 5)))
	rec := run(t, Config{
		Proxies: 2, Addrs: []string{srv.addr},
		Model: envoymodel.Config{Domain: "d", Settings: denyFirst(), ReportInterval: 500 * time.Millisecond},
		Loads: []Load{
			{Proxy: 0, Bucket: web, Rate: 100, Arrivals: Uniform, Duration: 2 * time.Second},
			{Proxy: 1, Bucket: web, Rate: 100, Arrivals: Uniform, Duration: 2 * time.Second},
		},
	})
	if len(rec.Decisions) != 400 {
		t.Fatalf("%d decisions, want 2 x 200", len(rec.Decisions))
	}
	reqs, allowed := rec.Workload()
	if v := eval.EnvelopeViolation(reqs, allowed, 10, 10); v > 0 {
		t.Fatalf("fleet admitted %v tokens beyond 10 + 10*T", v)
	}
	for i := range 2 {
		mine := rec.Proxy(i)
		q, r := mine.Workload()
		if v := eval.EnvelopeViolation(q, r, 5, 5); v > 0 {
			t.Errorf("proxy %d admitted %v beyond 5 + 5*T", i, v)
		}
		if n := rec.Admitted(web.Key(), i, 0, time.Hour); n < 5 || n > 5+5*3 {
			t.Errorf("proxy %d admitted %d over ~2 s, want 5 + 5/s", i, n)
		}
		first := mine.Reports[0]
		u := first.Usage.GetBucketQuotaUsages()[0]
		if !first.Initial || first.Addr != srv.addr || u.GetNumRequestsDenied() != 1 || u.GetTimeElapsed().AsDuration() != 0 {
			t.Errorf("proxy %d first report %+v: want the initial report, 1 denied, time_elapsed 0", i, first)
		}
		if len(mine.Reports) < 4 {
			t.Errorf("proxy %d sent %d reports in 2 s at 500 ms", i, len(mine.Reports))
		}
		as := mine.Assignments
		if len(as) < 2 || as[0].Effect != envoymodel.NewTokenBucket || as[1].Effect != envoymodel.RenewedTokenBucket ||
			as[0].TokenBucket().GetMaxTokens() != 5 || as[0].TTL != time.Minute {
			t.Errorf("proxy %d assignments %+v: want a new token bucket, then renewals", i, as)
		}
		// The fake answers every report with one action: a response per
		// assignment, each with its size, as each report has its own.
		if len(mine.Responses) != len(as) || mine.Responses[0].Actions != 1 || mine.Responses[0].Bytes != proto.Size(assignEvery(tokenBucket(5, 5))(first.Usage)) {
			t.Errorf("proxy %d: responses %+v for %d assignments, want one each with its protobuf size", i, mine.Responses, len(as))
		}
		if first.Bytes != proto.Size(first.Usage) {
			t.Errorf("proxy %d: first report's Bytes %d, want its protobuf size %d", i, first.Bytes, proto.Size(first.Usage))
		}
	}
	took := false
	for _, d := range rec.Decisions {
		took = took || d.Took > 0
	}
	if !took {
		t.Error("no decision has a Took: want the model's decision time")
	}
}

// A load over several buckets draws each request's bucket uniformly, the
// same draws for the same seed.
func TestLoadDrawsBuckets(t *testing.T) {
	ids := []envoymodel.BucketID{web, envoymodel.NewBucketID(map[string]string{"name": "a"}), envoymodel.NewBucketID(map[string]string{"name": "b"})}
	draws := func() []string {
		rec := run(t, Config{
			Proxies: 1, Addrs: []string{deadAddr(t)}, ConnectTimeout: 50 * time.Millisecond,
			Model: envoymodel.Config{Domain: "d"},
			Loads: []Load{{Bucket: web, Buckets: ids, Rate: 3000, Arrivals: Uniform, Count: 300}},
			Seed:  3,
		})
		var keys []string
		for _, d := range rec.Decisions {
			keys = append(keys, d.Bucket)
		}
		return keys
	}
	first := draws()
	n := map[string]int{}
	for _, k := range first {
		n[k]++
	}
	// 100 expected each; outside 60..140 is a 5-sigma event.
	for _, id := range ids {
		if c := n[id.Key()]; c < 60 || c > 140 {
			t.Errorf("bucket %s drawn %d times of 300, want about 100 (%v)", id.Key(), c, n)
		}
	}
	if len(n) != len(ids) {
		t.Errorf("drawn buckets %v, want only %d of Buckets", n, len(ids))
	}
	if again := draws(); !slices.Equal(first, again) {
		t.Error("the same seed drew other buckets")
	}
}

// The first server dies mid-run: the proxy's stream breaks, its assignment
// keeps deciding, and the next report timer opens a stream to the second
// server, whose (different) token bucket then replaces the first one at its
// fill ratio.
func TestFailoverToSecondServer(t *testing.T) {
	a := startFake(t, assignEvery(tokenBucket(10, 10)))
	b := startFake(t, assignEvery(tokenBucket(20, 20)))
	time.AfterFunc(time.Second, a.srv.Stop)
	rec := run(t, Config{
		Proxies: 1, Addrs: []string{a.addr, b.addr},
		Model: envoymodel.Config{Domain: "d", Settings: denyFirst(), ReportInterval: 300 * time.Millisecond},
		Loads: []Load{{Bucket: web, Rate: 50, Arrivals: Uniform, Duration: 2500 * time.Millisecond}},
	})
	var kinds []string
	for _, e := range rec.Streams {
		kinds = append(kinds, e.Kind.String()+"@"+map[string]string{a.addr: "a", b.addr: "b"}[e.Addr])
	}
	if got := strings.Join(kinds, " "); !strings.HasPrefix(got, "opened@a broken@a opened@b") {
		t.Fatalf("stream events %q, want opened@a broken@a opened@b", got)
	}
	broke, reopened := rec.Streams[1].At, rec.Streams[2].At
	// slack of 1.7 s beyond the interval for a loaded machine (the dial and the scheduler)
	if gap := reopened - broke; gap > 300*time.Millisecond+1700*time.Millisecond {
		t.Errorf("reopened %v after the break, want at the next report tick (300 ms interval)", gap)
	}
	var fromB []Assignment
	for _, x := range rec.Assignments {
		if x.Addr == b.addr {
			fromB = append(fromB, x)
		} else if x.At > broke {
			t.Errorf("assignment from a after its stream broke: %+v", x)
		}
	}
	if len(fromB) == 0 || fromB[0].Effect != envoymodel.ChangedTokenBucket {
		t.Fatalf("assignments from b %+v: want the first to change a's token bucket (kept through the break)", fromB)
	}
	for _, r := range rec.Reports {
		if r.At > reopened && r.Addr != b.addr {
			t.Errorf("report at %v after failover went to %q", r.At, r.Addr)
		}
	}
	reqs, allowed := rec.Workload()
	if v := eval.EnvelopeViolation(reqs, allowed, 20, 20); v > 0 {
		t.Errorf("admitted %v beyond b's 20 + 20*T", v)
	}
}

// The first address is dead: the first stream cannot open (the initial
// report is dropped), and the next report timer opens one to the second.
func TestOpenFailureMovesToNextAddress(t *testing.T) {
	b := startFake(t, assignEvery(tokenBucket(5, 5)))
	dead := deadAddr(t)
	rec := run(t, Config{
		Proxies: 1, Addrs: []string{dead, b.addr}, ConnectTimeout: 200 * time.Millisecond,
		Model: envoymodel.Config{Domain: "d", ReportInterval: 200 * time.Millisecond},
		Loads: []Load{{Bucket: web, Rate: 20, Arrivals: Uniform, Duration: time.Second}},
	})
	if len(rec.Streams) < 2 || rec.Streams[0].Kind != OpenFailed || rec.Streams[0].Addr != dead ||
		rec.Streams[1].Kind != Opened || rec.Streams[1].Addr != b.addr {
		t.Fatalf("stream events %+v: want open-failed at the dead address, then opened at b", rec.Streams)
	}
	if r := rec.Reports[0]; !r.Initial || r.Addr != "" {
		t.Errorf("first report %+v: want the initial report, dropped", r)
	}
	if len(rec.Assignments) == 0 || rec.Assignments[0].Addr != b.addr {
		t.Errorf("assignments %+v: want b's", rec.Assignments)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.reports) == 0 {
		t.Fatal("b got no report")
	}
	if u := b.reports[0].GetBucketQuotaUsages()[0]; u.GetNumRequestsAllowed() < 2 {
		t.Errorf("b's first report %v: want a periodic one with the requests since the dropped initial report", u)
	}
}

// The fleet dials over TLS when Config.TLS is set. One request opens the
// stream and reports the bucket (denied: no assignment yet); ten more
// come 2 s later, once the assignment (burst 3, 1/s) is surely there (the
// ten used to start at once, and under load the handshake and the first
// answer could outlast their half second).
func TestTLS(t *testing.T) {
	cert, pool := selfSigned(t)
	srv := startFake(t, assignEvery(tokenBucket(3, 1)), grpc.Creds(credentials.NewServerTLSFromCert(&cert)))
	const later = 2 * time.Second
	rec := run(t, Config{
		Proxies: 1, Addrs: []string{srv.addr}, TLS: &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"},
		Model: envoymodel.Config{Domain: "d", Settings: denyFirst()},
		Loads: []Load{{Bucket: web, Rate: 20, Arrivals: Uniform, Count: 1},
			{Bucket: web, Rate: 20, Arrivals: Uniform, Count: 10, Start: later}},
	})
	if len(rec.Assignments) == 0 || rec.Reports[0].Addr != srv.addr {
		t.Fatalf("over TLS: reports %+v, assignments %+v", rec.Reports, rec.Assignments)
	}
	if at := rec.Assignments[0].At; at >= later {
		t.Fatalf("the first assignment came %v after the start, after the ten requests began (%v)", at, later)
	}
	if n := rec.Admitted(web.Key(), 0, later, time.Hour); n != 3 {
		t.Errorf("admitted %d of the 10 later requests, want the burst of 3", n)
	}
}

// Loads stop by count or by time, whichever comes first; Poisson arrivals
// are drawn from the seed.
func TestLoadBounds(t *testing.T) {
	a := envoymodel.NewBucketID(map[string]string{"name": "a"})
	rec := run(t, Config{
		Proxies: 2, Addrs: []string{deadAddr(t)}, ConnectTimeout: 50 * time.Millisecond,
		Model: envoymodel.Config{Domain: "d"},
		Loads: []Load{
			{Proxy: 0, Bucket: web, Rate: 200, Arrivals: Uniform, Count: 25, Duration: time.Hour},
			{Proxy: 0, Bucket: a, Rate: 100, Arrivals: Uniform, Start: 100 * time.Millisecond, Duration: 300 * time.Millisecond},
			{Proxy: 1, Bucket: web, Rate: 200, Arrivals: Poisson, Duration: 500 * time.Millisecond},
		},
		Seed: 7,
	})
	count := func(proxy int, bucket envoymodel.BucketID) (n int, first time.Duration) {
		first = -1
		for _, d := range rec.Decisions {
			if d.Proxy == proxy && d.Bucket == bucket.Key() {
				if n++; first < 0 {
					first = d.At
				}
			}
		}
		return n, first
	}
	if n, _ := count(0, web); n != 25 {
		t.Errorf("count-bound load: %d requests, want 25", n)
	}
	if n, first := count(0, a); n != 30 || first < 100*time.Millisecond {
		t.Errorf("time-bound load: %d requests from %v, want 30 from 100ms", n, first)
	}
	// 200/s for 0.5 s: 100 expected; a Poisson count beyond 60..140 is a 4-sigma event.
	if n, _ := count(1, web); n < 60 || n > 140 {
		t.Errorf("Poisson load: %d requests, want about 100", n)
	}
}

func TestConfigErrors(t *testing.T) {
	good := func() Config {
		return Config{Proxies: 1, Addrs: []string{"127.0.0.1:1"}, Model: envoymodel.Config{Domain: "d"},
			Loads: []Load{{Bucket: web, Rate: 1, Count: 1}}}
	}
	cases := map[string]struct {
		edit func(*Config)
		want string
	}{
		"no proxies":      {func(c *Config) { c.Proxies = 0 }, "Proxies"},
		"no addrs":        {func(c *Config) { c.Addrs = nil }, "Addrs"},
		"empty addr":      {func(c *Config) { c.Addrs = []string{""} }, "Addrs[0]"},
		"proxy out":       {func(c *Config) { c.Loads[0].Proxy = 1 }, "Loads[0]: Proxy 1"},
		"zero rate":       {func(c *Config) { c.Loads[0].Rate = 0 }, "Rate"},
		"unbounded":       {func(c *Config) { c.Loads[0].Count = 0 }, "never stop"},
		"bad arrivals":    {func(c *Config) { c.Loads[0].Arrivals = 9 }, "Arrivals"},
		"negative":        {func(c *Config) { c.Loads[0].Duration = -1 }, "negative"},
		"model":           {func(c *Config) { c.Model.Domain = "" }, "Config.Model"},
		"connect timeout": {func(c *Config) { c.ConnectTimeout = -1 }, "ConnectTimeout"},
		"max backoff":     {func(c *Config) { c.MaxBackoff = -1 }, "Config.MaxBackoff -1ns is negative"},
		"infinite rate":   {func(c *Config) { c.Loads[0].Rate = math.Inf(1) }, "Loads[0]: Rate +Inf"},
		"negative start":  {func(c *Config) { c.Loads[0].Start = -1 }, "Loads[0]: negative Start"},
		"second load":     {func(c *Config) { c.Loads = append(c.Loads, Load{Bucket: web, Rate: 1}) }, "Loads[1]: neither Count nor Duration"},
		"proxies first":   {func(c *Config) { c.Proxies, c.Addrs = 0, nil }, "Config.Proxies 0"},
	}
	for name, c := range cases {
		cfg := good()
		c.edit(&cfg)
		if _, err := Start(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one naming %q", name, err, c.want)
		}
	}
}

// selfSigned makes a certificate for 127.0.0.1 and a pool trusting it.
func selfSigned(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IsCA: true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
}
