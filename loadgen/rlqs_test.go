package loadgen

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// fixedRLQS answers every report with a token bucket of 5 per second,
// burst 5, for each bucket in it (TTL a minute): two proxies hold at most
// 10 + 10*T of a key.
type fixedRLQS struct {
	rlqsv3.UnimplementedRateLimitQuotaServiceServer
}

func (fixedRLQS) StreamRateLimitQuotas(gs grpc.BidiStreamingServer[rlqsv3.RateLimitQuotaUsageReports, rlqsv3.RateLimitQuotaResponse]) error {
	for {
		m, err := gs.Recv()
		if err != nil {
			return err
		}
		resp := &rlqsv3.RateLimitQuotaResponse{}
		for _, u := range m.GetBucketQuotaUsages() {
			resp.BucketAction = append(resp.BucketAction, &rlqsv3.RateLimitQuotaResponse_BucketAction{BucketId: u.GetBucketId(),
				BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{
					QuotaAssignmentAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
						AssignmentTimeToLive: durationpb.New(time.Minute),
						RateLimitStrategy: &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{TokenBucket: &typev3.TokenBucket{
							MaxTokens: 5, TokensPerFill: wrapperspb.UInt32(5), FillInterval: durationpb.New(time.Second)}}}}}})
		}
		if err := gs.Send(resp); err != nil {
			return err
		}
	}
}

// okRLS answers every ShouldRateLimit OK.
type okRLS struct {
	rlsv3.UnimplementedRateLimitServiceServer
}

func (okRLS) ShouldRateLimit(_ context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}
	for range req.GetDescriptors() {
		resp.Statuses = append(resp.Statuses, &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK})
	}
	return resp, nil
}

// serveRLQS serves fixedRLQS (reported SERVING by a health service unless
// rlqs is false) and okRLS on 127.0.0.1:0.
func serveRLQS(t *testing.T, rlqs bool) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	hs := health.NewServer()
	healthpb.RegisterHealthServer(gs, hs)
	if rlqs {
		rlqsv3.RegisterRateLimitQuotaServiceServer(gs, fixedRLQS{})
		hs.SetServingStatus(rlqsService, healthpb.HealthCheckResponse_SERVING)
	}
	rlsv3.RegisterRateLimitServiceServer(gs, okRLS{})
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop)
	return ln.Addr().String()
}

// Two proxies offering 40/s each on three keys, each assigned 5/s burst
// 5 per key by the server: every proxy gets an assignment, admits within
// its buckets, and the fleet stays within 10 + 10*T per key; the counts
// add up, the streams carried reports and responses, and the RLS hop was
// timed.
func TestRunRLQS(t *testing.T) {
	addr := serveRLQS(t, true)
	var progress []time.Duration
	r, err := RunRLQS(context.Background(), RLQSOptions{Targets: []string{addr}, Domain: "d", DescriptorKey: "tenant",
		Rates: []float64{40, 40}, Keys: 3, Duration: 1500 * time.Millisecond, ReportInterval: time.Second,
		NoAssignment: typev3.RateLimitStrategy_DENY_ALL, Expired: typev3.RateLimitStrategy_DENY_ALL,
		Limit: &RLQSLimit{RatePerS: 10, Burst: 10}, Seed: 1, RLSHop: 200 * time.Millisecond,
		Progress: func(d time.Duration) { progress = append(progress, d) }})
	if err != nil {
		t.Fatal(err)
	}
	tot := r.Total
	// 2 x 40/s x 1.5 s: 120 expected; outside 60..180 is a 5-sigma event.
	if tot.Offered < 60 || tot.Offered > 180 || tot.Admitted+tot.Denied != tot.Offered || tot.Admitted == 0 || tot.Denied == 0 {
		t.Errorf("total %+v: want about 120 offered, some admitted, some denied", tot)
	}
	if r.Ceiling == nil || float64(tot.Admitted) > *r.Ceiling || r.WorstExcess == nil || *r.WorstExcess != 0 || r.AdmittedOfCeilingPct == nil {
		t.Errorf("bound: ceiling %v, admitted %d, worst excess %v: want admitted <= ceiling, no excess", r.Ceiling, tot.Admitted, r.WorstExcess)
	}
	sum := 0
	for _, p := range r.Proxies {
		sum += p.Offered
		if p.FirstAssignmentSec == nil || p.Assignments == 0 || p.LastTokenBucket != "5 per 1s, max 5" || p.ReportsSent == 0 || p.Responses == 0 || p.Target != addr {
			t.Errorf("proxy %+v: want assignments of 5 per 1s, reports and responses", p)
		}
	}
	if sum != tot.Offered || r.Keys != 3 || r.DescriptorKey != "tenant" || r.NoAssignment != "DENY_ALL" || r.ReportIntervalSec != 1 {
		t.Errorf("result %+v", r)
	}
	s := r.Stream
	if s.Messages != int64(tot.ReportsSent+tot.Responses) || s.Bytes != tot.ReportBytes+tot.ResponseBytes || s.Bytes == 0 ||
		s.MessagesPerRequest <= 0 || s.Opened != 2 || s.OpenFailed != 0 {
		t.Errorf("stream %+v, total %+v", s, tot)
	}
	if r.DecisionUS.P50 <= 0 || r.DecisionUS.Max < r.DecisionUS.P50 {
		t.Errorf("decision latency %+v", r.DecisionUS)
	}
	if r.RLSHop == nil || r.RLSHop.Calls == 0 || r.RLSHop.Failed != 0 || r.RLSHop.LatencyMS.P50 <= 0 {
		t.Errorf("RLS hop %+v: want timed calls", r.RLSHop)
	}
	if len(progress) == 0 || progress[len(progress)-1] > 1700*time.Millisecond {
		t.Errorf("progress %v: want calls up to Duration + RLSHop", progress)
	}
}

// Targets that do not serve RLQS are named before the run; bad options
// are refused naming the field.
func TestRunRLQSTargetsAndOptions(t *testing.T) {
	good := func() RLQSOptions {
		return RLQSOptions{Targets: []string{serveRLQS(t, false)}, Domain: "d", Rates: []float64{1}, Keys: 1, Duration: time.Second, DialTimeout: 2 * time.Second}
	}
	o := good()
	if _, err := RunRLQS(context.Background(), o); err == nil || !strings.Contains(err.Error(), "serves no RLQS") {
		t.Errorf("a server without RLQS: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	o.Targets = []string{dead}
	if _, err := RunRLQS(context.Background(), o); err == nil || !strings.Contains(err.Error(), "target "+dead+": no gRPC server answers there") {
		t.Errorf("a dead target: %v", err)
	}
	for field, edit := range map[string]func(*RLQSOptions){
		"Targets":      func(o *RLQSOptions) { o.Targets = nil },
		"Domain":       func(o *RLQSOptions) { o.Domain = "" },
		"Rates[0]":     func(o *RLQSOptions) { o.Rates = []float64{0} },
		"Rates:":       func(o *RLQSOptions) { o.Rates = nil },
		"Keys":         func(o *RLQSOptions) { o.Keys = 0 },
		"Duration":     func(o *RLQSOptions) { o.Duration = 0 },
		"NoAssignment": func(o *RLQSOptions) { o.NoAssignment = 7 },
		"Limit":        func(o *RLQSOptions) { o.Limit = &RLQSLimit{RatePerS: -1} },
		"Targets: ":    func(o *RLQSOptions) { o.Targets = []string{"nohostport"} },
	} {
		o := good()
		edit(&o)
		if err := o.Validate(); err == nil || !strings.Contains(err.Error(), strings.TrimSpace(field)) {
			t.Errorf("%s: %v, want an error naming it", field, err)
		}
	}
}
