package server

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"

	tokenmeshv1 "github.com/tokenmesh/tokenmesh/api/tokenmesh/v1"
	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/envoyrls"
	"github.com/tokenmesh/tokenmesh/rule"
)

// The service layer's own cost per unbatched call, without gRPC: Check
// and ShouldRateLimit called in-process on a single node, 10000 keys, a
// limit no check reaches (every check allowed, as in docs/PERFORMANCE.md):
//
//	go test ./server -run '^$' -bench 'ServiceCall' -benchmem -cpu 1
const benchKeys = 10000

func BenchmarkServiceCallCheck(b *testing.B) {
	for _, strat := range []string{"local", "owner"} {
		b.Run(strat, func(b *testing.B) {
			r, err := bucket.PerSecond(1e9)
			if err != nil {
				b.Fatal(err)
			}
			rules := []rule.Rule{{Name: "api", Rate: r, Burst: 1e9, Strategy: strat}}
			s := New(startTestNode(b, rules), rules)
			reqs := make([]*tokenmeshv1.CheckRequest, benchKeys)
			for i := range reqs {
				reqs[i] = &tokenmeshv1.CheckRequest{Checks: []*tokenmeshv1.CheckItem{{Rule: "api", Key: "k" + strconv.Itoa(i), Hits: 1}}}
			}
			ctx := context.Background()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				resp, err := s.Check(ctx, reqs[i%benchKeys])
				if err != nil || !resp.GetResults()[0].GetAllowed() {
					b.Fatal(resp, err)
				}
				i++
			}
		})
	}
}

// registrar keeps the implementation of the one service registered on it.
type registrar struct{ impl any }

func (r *registrar) RegisterService(_ *grpc.ServiceDesc, impl any) { r.impl = impl }

func BenchmarkServiceCallRLS(b *testing.B) {
	cfg, err := envoyrls.Parse("edge.yaml", []byte("domain: edge\ndescriptors:\n  - key: ip\n    rate_limit: {unit: second, requests_per_unit: 1000000000}\n"))
	if err != nil {
		b.Fatal(err)
	}
	rules := cfg.Rules(time.Time{})
	s := New(startTestNode(b, rules), rules)
	var reg registrar
	s.RegisterRLS(&reg, cfg)
	svc := reg.impl.(rlsv3.RateLimitServiceServer)
	reqs := make([]*rlsv3.RateLimitRequest, benchKeys)
	for i := range reqs {
		reqs[i] = &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{
			{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "ip", Value: "10.0." + strconv.Itoa(i)}}}}}
	}
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		resp, err := svc.ShouldRateLimit(ctx, reqs[i%benchKeys])
		if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
			b.Fatal(resp, err)
		}
		i++
	}
}

// BenchmarkServiceCallHTTP is POST /v1/check of one check through the
// HTTP/JSON API's handler (grpc-gateway, protojson), in-process.
func BenchmarkServiceCallHTTP(b *testing.B) {
	r, err := bucket.PerSecond(1e9)
	if err != nil {
		b.Fatal(err)
	}
	rules := []rule.Rule{{Name: "api", Rate: r, Burst: 1e9, Strategy: "owner"}}
	h := New(startTestNode(b, rules), rules).Handler()
	bodies := make([]string, benchKeys)
	for i := range bodies {
		bodies[i] = `{"checks":[{"rule":"api","key":"k` + strconv.Itoa(i) + `","hits":1}]}`
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		req := httptest.NewRequest(http.MethodPost, "/v1/check", strings.NewReader(bodies[i%benchKeys]))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `"allowed":true`) {
			b.Fatal(w.Code, w.Body.String())
		}
		i++
	}
}
