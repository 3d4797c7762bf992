package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	tokenmeshv1 "github.com/tokenmesh/tokenmesh/api/tokenmesh/v1"
	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/cluster"
	"github.com/tokenmesh/tokenmesh/limiter"
	"github.com/tokenmesh/tokenmesh/rendezvous"
	"github.com/tokenmesh/tokenmesh/rule"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// slow refills one token per 100 s (0.01 tokens/s): within a test a bucket
// only drains.
var slow = bucket.Rate{Tokens: 1, Per: 100 * time.Second}

// testRules is rule "api" (0.01/s, burst 3, owner) and rule "loc" (local,
// burst 5).
func testRules() []rule.Rule {
	return []rule.Rule{
		{Name: "api", Rate: slow, Burst: 3, Strategy: "owner", Params: []string{"hold=0s"}},
		{Name: "loc", Rate: slow, Burst: 5, Strategy: "local"},
	}
}

// startTestNode starts single-node limiter "n1" with rules, closed at the
// end of the test.
func startTestNode(t testing.TB, rules []rule.Rule) *limiter.Node {
	t.Helper()
	node, err := limiter.Start(context.Background(), limiter.Config{Name: "n1", Rules: rules})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = node.Close() })
	return node
}

// newTestServer serves a single-node limiter with testRules.
func newTestServer(t testing.TB) *Server {
	t.Helper()
	rules := testRules()
	return New(startTestNode(t, rules), rules)
}

// grpcClient serves s over gRPC on a loopback port, with the services of
// register too, and returns a client connection to it.
func grpcClient(t *testing.T, s *Server, register ...func(*grpc.Server)) *grpc.ClientConn {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	s.RegisterGRPC(g)
	for _, r := range register {
		r(g)
	}
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

func ctxT(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func item(rule, key string, hits int64) *tokenmeshv1.CheckItem {
	return &tokenmeshv1.CheckItem{Rule: rule, Key: key, Hits: hits}
}

func req(items ...*tokenmeshv1.CheckItem) *tokenmeshv1.CheckRequest {
	return &tokenmeshv1.CheckRequest{Checks: items}
}

// do serves one HTTP request with s's handler.
func do(s *Server, method, path, body string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	var r *http.Request
	if body == "" {
		r = httptest.NewRequest(method, path, nil)
	} else {
		r = httptest.NewRequest(method, path, strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
	}
	s.Handler().ServeHTTP(rec, r)
	return rec
}

// httpCheck posts body to /v1/check and decodes a 200 answer.
func httpCheck(t *testing.T, s *Server, body string) []*tokenmeshv1.CheckResult {
	t.Helper()
	rec := do(s, "POST", "/v1/check", body)
	if rec.Code != http.StatusOK {
		t.Fatalf("POST /v1/check %.200s: %d %s", body, rec.Code, rec.Body)
	}
	var resp tokenmeshv1.CheckResponse
	if err := protojson.Unmarshal(rec.Body.Bytes(), &resp); err != nil {
		t.Fatalf("answer %s: %v", rec.Body, err)
	}
	return resp.GetResults()
}

func mustJSON(t *testing.T, r *tokenmeshv1.CheckRequest) string {
	t.Helper()
	b, err := protojson.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// httpError is the JSON body of a failed HTTP call.
type httpError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func decodeError(t *testing.T, rec *httptest.ResponseRecorder) httpError {
	t.Helper()
	var e httpError
	if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil {
		t.Fatalf("error body %q is not JSON: %v", rec.Body, err)
	}
	return e
}

func TestBurstThenRefusedHTTP(t *testing.T) {
	s := newTestServer(t)
	one := `{"checks":[{"rule":"api","key":"tenant-1","hits":1}]}`
	for i := range 3 {
		res := httpCheck(t, s, one)
		if len(res) != 1 || !res[0].Allowed || res[0].Error != "" || res[0].RetryAfterMs != 0 {
			t.Fatalf("request %d: %v, want allowed", i, res)
		}
		if res[0].LimitPerS != 0.01 || res[0].Burst != 3 {
			t.Errorf("limit %v burst %d, want 0.01 and 3", res[0].LimitPerS, res[0].Burst)
		}
		checkRemaining(t, res[0], int64(2-i))
	}
	res := httpCheck(t, s, one)
	// The one token missing refills in 100 s at 0.01/s.
	if len(res) != 1 || res[0].Allowed || res[0].Error != "" || res[0].RetryAfterMs != 100_000 {
		t.Fatalf("after the burst: %v, want refused with retry_after_ms 100000", res)
	}
	checkRemaining(t, res[0], 0)
	// Numbers as JSON strings are accepted too (proto3 JSON), and another
	// key has its own bucket.
	res = httpCheck(t, s, `{"checks":[{"rule":"api","key":"tenant-2","hits":"3"}]}`)
	if !res[0].Allowed {
		t.Fatalf("another key: %v, want allowed", res)
	}
	// The answer's JSON uses the .proto names, int64 as strings, and
	// emits unpopulated fields.
	rec := do(s, "POST", "/v1/check", one)
	var raw map[string][]map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &raw); err != nil {
		t.Fatalf("%s: %v", rec.Body, err)
	}
	r0 := raw["results"][0]
	for _, f := range []string{"allowed", "limit_per_s", "burst", "remaining", "reset_after_ms", "retry_after_ms", "error"} {
		if _, ok := r0[f]; !ok {
			t.Errorf("answer %s lacks %q", rec.Body, f)
		}
	}
	if r0["burst"] != "3" || r0["allowed"] != false {
		t.Errorf("answer %s: want burst \"3\" (a string) and allowed false", rec.Body)
	}
	if ct := rec.Header().Get("Content-Type"); !strings.Contains(ct, "application/json") {
		t.Errorf("Content-Type %q", ct)
	}
}

// checkRemaining checks a result of rule "api" (0.01/s, burst 3):
// remaining is want, or -1 when the strategy cannot tell, and
// reset_after_ms follows from it.
func checkRemaining(t *testing.T, r *tokenmeshv1.CheckResult, want int64) {
	t.Helper()
	switch r.Remaining {
	case -1:
		if r.ResetAfterMs != -1 {
			t.Errorf("%v: remaining unknown, want reset_after_ms -1", r)
		}
	case want:
		if r.ResetAfterMs != (3-want)*100_000 {
			t.Errorf("%v: want reset_after_ms %d", r, (3-want)*100_000)
		}
	default:
		t.Errorf("%v: want remaining %d (or -1)", r, want)
	}
}

func TestBurstThenRefusedGRPC(t *testing.T) {
	s := newTestServer(t)
	c := tokenmeshv1.NewRateLimitServiceClient(grpcClient(t, s))
	ctx := ctxT(t)
	for i := range 3 {
		resp, err := c.Check(ctx, req(item("api", "tenant-1", 1)))
		if err != nil {
			t.Fatal(err)
		}
		r := resp.GetResults()
		if len(r) != 1 || !r[0].Allowed || r[0].Error != "" || r[0].Burst != 3 || r[0].LimitPerS != 0.01 {
			t.Fatalf("request %d: %v, want allowed", i, r)
		}
	}
	resp, err := c.Check(ctx, req(item("api", "tenant-1", 1), item("loc", "tenant-1", 5), item("loc", "tenant-1", 1)))
	if err != nil {
		t.Fatal(err)
	}
	r := resp.GetResults()
	if len(r) != 3 {
		t.Fatalf("%d results, want 3", len(r))
	}
	if r[0].Allowed || r[0].RetryAfterMs <= 0 || r[0].Error != "" {
		t.Errorf("after the burst: %v, want refused with retry_after_ms > 0", r[0])
	}
	// Rules are separate buckets: "loc" has its own burst of 5 for the key.
	if !r[1].Allowed || r[1].Burst != 5 {
		t.Errorf("rule loc: %v, want allowed with burst 5", r[1])
	}
	if r[2].Allowed {
		t.Errorf("rule loc after its burst: %v, want refused", r[2])
	}
}

func TestBatchSameKeyInOrder(t *testing.T) {
	s := newTestServer(t)
	c := tokenmeshv1.NewRateLimitServiceClient(grpcClient(t, s))
	resp, err := c.Check(ctxT(t), req(item("api", "k", 2), item("api", "k", 2), item("api", "k", 1), item("api", "other", 3)))
	if err != nil {
		t.Fatal(err)
	}
	r := resp.GetResults()
	want := []bool{true, false, true, true}
	if len(r) != len(want) {
		t.Fatalf("%d results, want %d", len(r), len(want))
	}
	for i, w := range want {
		if r[i].Allowed != w || r[i].Error != "" {
			t.Errorf("checks[%d]: %v, want allowed=%v without error", i, r[i], w)
		}
	}
	// The same over HTTP, on a fresh key.
	res := httpCheck(t, s, `{"checks":[{"rule":"api","key":"h","hits":2},{"rule":"api","key":"h","hits":2}]}`)
	if len(res) != 2 || !res[0].Allowed || res[1].Allowed {
		t.Fatalf("HTTP batch of 2+2 on burst 3: %v, want allowed then refused", res)
	}
}

func TestHitsAboveBurst(t *testing.T) {
	s := newTestServer(t)
	res := httpCheck(t, s, `{"checks":[{"rule":"api","key":"a","hits":1},{"rule":"api","key":"a","hits":4},{"rule":"api","key":"a","hits":2}]}`)
	if len(res) != 3 {
		t.Fatalf("%d results", len(res))
	}
	r := res[1]
	if r.Allowed || r.RetryAfterMs != -1 || !strings.Contains(r.Error, "checks[1].hits: 4 exceeds the burst 3") {
		t.Errorf("hits above burst: %v, want refused, retry_after_ms -1, an error naming the burst", r)
	}
	// The refusal took nothing: 1 + 2 fit in the burst of 3.
	if !res[0].Allowed || !res[2].Allowed || res[0].Error != "" || res[2].Error != "" {
		t.Errorf("the items around it: %v %v, want allowed", res[0], res[2])
	}
	c := tokenmeshv1.NewRateLimitServiceClient(grpcClient(t, s))
	resp, err := c.Check(ctxT(t), req(item("api", "b", MaxHits)))
	if err != nil {
		t.Fatal(err)
	}
	if r := resp.GetResults()[0]; r.Allowed || r.RetryAfterMs != -1 || !strings.Contains(r.Error, "exceeds the burst 3") {
		t.Errorf("gRPC hits %d: %v", MaxHits, r)
	}
}

// invalidCases are batches that must fail as a whole with
// INVALID_ARGUMENT. Every one starts with a valid item on key (which must
// not be charged) where it has items at all.
func invalidCases(key string) []struct {
	name string
	req  *tokenmeshv1.CheckRequest
	want string
} {
	valid := item("api", key, 1)
	many := make([]*tokenmeshv1.CheckItem, MaxChecks+1)
	for i := range many {
		many[i] = item("api", key, 1)
	}
	return []struct {
		name string
		req  *tokenmeshv1.CheckRequest
		want string
	}{
		{"no checks", req(), "checks: is empty"},
		{"too many", req(many...), "checks: 1001 items; at most 1000"},
		{"empty rule", req(valid, item("", key, 1)), "checks[1].rule: is required"},
		{"unknown rule", req(valid, item("nope", key, 1)), `checks[1].rule: "nope" is not a rule`},
		{"empty key", req(valid, item("api", "", 1)), "checks[1].key: is required"},
		{"long key", req(valid, item("api", strings.Repeat("k", cluster.MaxKeyBytes+1), 1)), "checks[1].key: 4097 bytes; at most 4096"},
		{"hits 0", req(valid, item("api", key, 0)), "checks[1].hits: 0 must be between 1 and 1000000000"},
		{"hits -1", req(valid, valid, item("api", key, -1)), "checks[2].hits: -1 must be between 1 and 1000000000"},
		{"hits 1e9+1", req(valid, item("api", key, MaxHits+1)), "checks[1].hits: 1000000001 must be between 1 and 1000000000"},
		{"max_wait_ms -1", req(valid, &tokenmeshv1.CheckItem{Rule: "api", Key: key, Hits: 1, MaxWaitMs: -1}), "checks[1].max_wait_ms: -1 must be between 0 and 3600000"},
		{"max_wait_ms 3600001", req(valid, &tokenmeshv1.CheckItem{Rule: "api", Key: key, Hits: 1, MaxWaitMs: 3600001}), "checks[1].max_wait_ms: 3600001 must be between 0 and 3600000"},
		{"created_at_unix_ns -1", req(valid, &tokenmeshv1.CheckItem{Rule: "api", Key: key, Hits: 1, CreatedAtUnixNs: -1}), "checks[1].created_at_unix_ns: -1 is negative"},
		{"created_at_unix_ns -1 alone", req(&tokenmeshv1.CheckItem{Rule: "api", Key: key, Hits: 1, CreatedAtUnixNs: -1}), "checks[0].created_at_unix_ns: -1 is negative"},
	}
}

// assertFull checks that key's bucket of rule "api" still holds its whole
// burst of 3.
func assertFull(t *testing.T, s *Server, key, after string) {
	t.Helper()
	resp, err := s.Check(ctxT(t), req(item("api", key, 3)))
	if err != nil {
		t.Fatal(err)
	}
	if r := resp.GetResults()[0]; !r.Allowed {
		t.Errorf("after %s: the key's bucket was charged (%v); an invalid batch must change nothing", after, r)
	}
}

func TestInvalidArgumentGRPC(t *testing.T) {
	s := newTestServer(t)
	c := tokenmeshv1.NewRateLimitServiceClient(grpcClient(t, s))
	for i := range invalidCases("") {
		key := fmt.Sprintf("grpc-%d", i)
		tc := invalidCases(key)[i]
		_, err := c.Check(ctxT(t), tc.req)
		st, _ := status.FromError(err)
		if st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), tc.want) {
			t.Errorf("%s: %v, want InvalidArgument containing %q", tc.name, err, tc.want)
		}
		assertFull(t, s, key, tc.name)
	}
}

func TestInvalidArgumentHTTP(t *testing.T) {
	s := newTestServer(t)
	for i := range invalidCases("") {
		key := fmt.Sprintf("http-%d", i)
		tc := invalidCases(key)[i]
		body := mustJSON(t, tc.req)
		rec := do(s, "POST", "/v1/check", body)
		e := decodeError(t, rec)
		if rec.Code != http.StatusBadRequest || e.Code != int(codes.InvalidArgument) || !strings.Contains(e.Message, tc.want) {
			t.Errorf("%s: %d %s, want 400 {code 3} containing %q", tc.name, rec.Code, rec.Body, tc.want)
		}
		assertFull(t, s, key, tc.name)
	}
}

func TestBadBodies(t *testing.T) {
	s := newTestServer(t)
	huge := `{"checks":[{"rule":"api","key":"` + strings.Repeat("x", MaxBodyBytes) + `","hits":1}]}`
	for _, tc := range []struct{ name, body, want string }{
		{"malformed", `{"checks":[{"rule":`, "EOF"},
		{"syntax", `{"checks":[}`, ""},
		{"not an object", `[1]`, ""},
		{"wrong type", `{"checks":[{"rule":"api","key":"a","hits":"x"}]}`, "hits"},
		{"fraction", `{"checks":[{"rule":"api","key":"a","hits":1.5}]}`, "hits"},
		{"unknown field", `{"checks":[{"rule":"api","key":"a","hits":1}],"brust":1}`, "brust"},
		{"unknown item field", `{"checks":[{"rule":"api","key":"a","hits":1,"hit":2}]}`, "hit"},
		{"empty object", `{}`, "checks: is empty"},
		{"empty body", "", "checks: is empty"},
	} {
		rec := do(s, "POST", "/v1/check", tc.body)
		e := decodeError(t, rec)
		if rec.Code != http.StatusBadRequest || e.Code != int(codes.InvalidArgument) || e.Message == "" || !strings.Contains(e.Message, tc.want) {
			t.Errorf("%s: %d %.300s, want 400 {code 3} with a message containing %q", tc.name, rec.Code, rec.Body, tc.want)
		}
	}
	// A body above MaxBodyBytes: 413, whether its Content-Length says so
	// or it is streamed without one.
	for _, known := range []bool{true, false} {
		rec := httptest.NewRecorder()
		r := httptest.NewRequest("POST", "/v1/check", strings.NewReader(huge))
		r.Header.Set("Content-Type", "application/json")
		if !known {
			r.ContentLength = -1
		}
		s.Handler().ServeHTTP(rec, r)
		e := decodeError(t, rec)
		if rec.Code != http.StatusRequestEntityTooLarge || e.Code != int(codes.InvalidArgument) || !strings.Contains(e.Message, "request body above") {
			t.Errorf("oversized (Content-Length known: %v): %d %.300s, want 413 {code 3, request body above ...}", known, rec.Code, rec.Body)
		}
	}
	// None of them was decided: key "a" is whole.
	assertFull(t, s, "a", "bad bodies")
}

func TestListRules(t *testing.T) {
	rules := testRules()
	node := startTestNode(t, rules)
	// A rule the node lacks and a repeated name are left out.
	s := New(node, append(rules, rule.Rule{Name: "ghost", Rate: slow, Burst: 1, Strategy: "local"}, rules[0]))

	rec := do(s, "GET", "/v1/rules", "")
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /v1/rules: %d %s", rec.Code, rec.Body)
	}
	var raw struct {
		Rules []map[string]any `json:"rules"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &raw); err != nil {
		t.Fatalf("%s: %v", rec.Body, err)
	}
	if len(raw.Rules) != 2 {
		t.Fatalf("GET /v1/rules: %s, want the 2 rules of the node", rec.Body)
	}
	r := raw.Rules[0]
	if r["name"] != "api" || r["limit_per_s"] != 0.01 || r["burst"] != "3" || r["strategy"] != "owner" {
		t.Errorf("rule api as JSON: %v, want name api, limit_per_s 0.01, burst \"3\", strategy owner", r)
	}
	if p, ok := r["params"].([]any); !ok || len(p) != 1 || p[0] != "hold=0s" {
		t.Errorf("rule api params: %v", r["params"])
	}
	if raw.Rules[1]["name"] != "loc" || raw.Rules[1]["burst"] != "5" {
		t.Errorf("rule loc: %v", raw.Rules[1])
	}

	c := tokenmeshv1.NewRateLimitServiceClient(grpcClient(t, s))
	resp, err := c.ListRules(ctxT(t), &tokenmeshv1.ListRulesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if g := resp.GetRules(); len(g) != 2 || g[0].Name != "api" || g[0].Burst != 3 || g[0].LimitPerS != 0.01 || g[1].Strategy != "local" {
		t.Errorf("gRPC ListRules: %v", g)
	}
	// The ghost rule is not checkable.
	if _, err := s.Check(ctxT(t), req(item("ghost", "k", 1))); status.Code(err) != codes.InvalidArgument {
		t.Errorf("check of a rule left out: %v, want InvalidArgument", err)
	}
}

func TestHealthAndReadiness(t *testing.T) {
	s := newTestServer(t)
	if rec := do(s, "GET", "/healthz", ""); rec.Code != 200 || strings.TrimSpace(rec.Body.String()) != "ok" {
		t.Errorf("/healthz: %d %q", rec.Code, rec.Body)
	}
	if rec := do(s, "GET", "/readyz", ""); rec.Code != 200 || !s.Ready() {
		t.Errorf("/readyz: %d %q, Ready %v", rec.Code, rec.Body, s.Ready())
	}
	hc := healthpb.NewHealthClient(grpcClient(t, s))
	ctx := ctxT(t)
	for _, svc := range []string{"", tokenmeshv1.RateLimitService_ServiceDesc.ServiceName} {
		resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health %q while ready: %v %v, want SERVING", svc, resp, err)
		}
	}

	s.SetReady(false)
	if rec := do(s, "GET", "/readyz", ""); rec.Code != http.StatusServiceUnavailable || s.Ready() {
		t.Errorf("/readyz after SetReady(false): %d, Ready %v", rec.Code, s.Ready())
	}
	if rec := do(s, "GET", "/healthz", ""); rec.Code != 200 {
		t.Errorf("/healthz after SetReady(false): %d", rec.Code)
	}
	for _, svc := range []string{"", tokenmeshv1.RateLimitService_ServiceDesc.ServiceName} {
		resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
			t.Errorf("health %q after SetReady(false): %v %v, want NOT_SERVING", svc, resp, err)
		}
	}
	if _, err := s.Check(ctx, req(item("api", "k", 1))); status.Code(err) != codes.Unavailable {
		t.Errorf("Check while not ready: %v, want Unavailable", err)
	}
	s.SetReady(true)
	if rec := do(s, "GET", "/readyz", ""); rec.Code != 200 {
		t.Errorf("/readyz after SetReady(true): %d", rec.Code)
	}
	// draining: readiness off, checks still answered
	s.SetDraining(true)
	if rec := do(s, "GET", "/readyz", ""); rec.Code != http.StatusServiceUnavailable || strings.TrimSpace(rec.Body.String()) != "draining" {
		t.Errorf("/readyz while draining: %d %q, want 503 draining", rec.Code, rec.Body)
	}
	if resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("health while draining: %v %v, want NOT_SERVING", resp, err)
	}
	if _, err := s.Check(ctx, req(item("api", "k", 1))); err != nil {
		t.Errorf("Check while draining: %v, want answered", err)
	}
	s.SetDraining(false)
	if resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health after draining: %v %v, want SERVING", resp, err)
	}
	if rec := do(s, "GET", "/nope", ""); rec.Code != http.StatusNotFound {
		t.Errorf("/nope: %d", rec.Code)
	}
	// grpc-gateway answers a wrong method with UNIMPLEMENTED (501).
	if rec := do(s, "GET", "/v1/check", ""); rec.Code/100 == 2 {
		t.Errorf("GET /v1/check: %d, want an error", rec.Code)
	}
}

func TestNoNode(t *testing.T) {
	s := New(nil, nil)
	_, err := s.Check(context.Background(), req(item("api", "k", 1)))
	if status.Code(err) != codes.Unavailable {
		t.Errorf("Check without a node: %v, want Unavailable", err)
	}
	rec := do(s, "POST", "/v1/check", `{"checks":[{"rule":"api","key":"k","hits":1}]}`)
	if e := decodeError(t, rec); rec.Code != http.StatusServiceUnavailable || e.Code != int(codes.Unavailable) {
		t.Errorf("POST /v1/check without a node: %d %s, want 503", rec.Code, rec.Body)
	}
	if rec := do(s, "GET", "/readyz", ""); rec.Code != http.StatusServiceUnavailable {
		t.Errorf("/readyz without a node: %d", rec.Code)
	}
	s.SetReady(true) // never ready without a node
	if rec := do(s, "GET", "/readyz", ""); rec.Code != http.StatusServiceUnavailable {
		t.Errorf("/readyz without a node after SetReady(true): %d", rec.Code)
	}
	resp, err := s.ListRules(context.Background(), &tokenmeshv1.ListRulesRequest{})
	if err != nil || len(resp.GetRules()) != 0 {
		t.Errorf("ListRules without a node: %v %v", resp, err)
	}
}

// An item the cluster cannot decide before the call's ctx ends gets
// allowed=false and its error; the other items are still decided.
func TestUndecidedItem(t *testing.T) {
	net := cluster.NewMemNetwork()
	rules := []rule.Rule{{Name: "api", Rate: slow, Burst: 3, Strategy: "owner", Params: []string{"hold=0s", "timeout=10s"}}}
	members := []string{"n1", "n2"} // n2 never starts: forwards to it are lost
	node, err := limiter.Start(context.Background(), limiter.Config{Name: "n1", Rules: rules,
		InProcess: &limiter.InProcess{Network: net, Members: members}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = node.Close() })
	s := New(node, rules)
	ids := []strategy.NodeID{"n1", "n2"}
	var local, remote string
	for i := 0; local == "" || remote == ""; i++ {
		k := fmt.Sprintf("k%d", i)
		if rendezvous.Owner(k, ids) == "n1" {
			local = k
		} else {
			remote = k
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	resp, err := s.Check(ctx, req(item("api", local, 1), item("api", remote, 1)))
	if err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Fatalf("Check took %v with a 50ms context", el)
	}
	r := resp.GetResults()
	if !r[0].Allowed || r[0].Error != "" {
		t.Errorf("key owned here: %v, want allowed", r[0])
	}
	if r[1].Allowed || r[1].RetryAfterMs != -1 || !strings.Contains(r[1].Error, "checks[1]: not decided") ||
		!strings.Contains(r[1].Error, context.DeadlineExceeded.Error()) {
		t.Errorf("key owned by the absent n2: %v, want not decided (deadline exceeded)", r[1])
	}
	// The same for a call of one item (Check's unbatched path, through
	// cluster.Node.Check rather than CheckBatch).
	ctx1, cancel1 := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel1()
	resp, err = s.Check(ctx1, req(item("api", remote, 1)))
	if err != nil {
		t.Fatalf("one undecided item: %v, want its item error", err)
	}
	if r := resp.GetResults()[0]; r.Allowed || r.RetryAfterMs != -1 || r.Remaining != -1 ||
		!strings.Contains(r.Error, "checks[0]: not decided") || !strings.Contains(r.Error, context.DeadlineExceeded.Error()) {
		t.Errorf("one key owned by the absent n2: %v, want not decided (deadline exceeded)", r)
	}
	// A ctx already ended fails the call itself.
	_, err = s.Check(ctx, req(item("api", local, 1)))
	if status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("Check with an ended ctx: %v, want DeadlineExceeded", err)
	}
	// A closed node answers Unavailable, or (when the batch reached the
	// node's queue before it stopped) each item's error names the close.
	_ = node.Close()
	resp, err = s.Check(context.Background(), req(item("api", local, 1)))
	switch st, _ := status.FromError(err); {
	case err == nil:
		if r := resp.GetResults()[0]; r.Allowed || !strings.Contains(r.Error, cluster.ErrClosed.Error()) {
			t.Errorf("Check on a closed node: %v, want an item error naming the close", r)
		}
	case st.Code() != codes.Unavailable || !strings.Contains(st.Message(), "closed"):
		t.Errorf("Check on a closed node: %v, want Unavailable naming the closed node", err)
	}
}

// A check with max_wait_ms (waiting mode, 000 §5.2) on an owner rule is
// allowed with wait_ms when the owner's bucket holds the tokens within
// max_wait_ms, reserved in order; otherwise refused.
func TestCheckMaxWait(t *testing.T) {
	s := newTestServer(t)
	res := httpCheck(t, s, `{"checks":[{"rule":"api","key":"w","hits":3}]}`)
	if !res[0].GetAllowed() || res[0].GetWaitMs() != 0 {
		t.Fatalf("the burst: %v, want allowed at once", res[0])
	}
	// One token per 100 s: the next token is there in about 100 s.
	res = httpCheck(t, s, `{"checks":[{"rule":"api","key":"w","hits":1,"max_wait_ms":200000},{"rule":"api","key":"w","hits":1,"max_wait_ms":150000},{"rule":"api","key":"w","hits":1}]}`)
	if w := res[0].GetWaitMs(); !res[0].GetAllowed() || w < 99000 || w > 100000 {
		t.Fatalf("check with max_wait_ms 200000: %v, want allowed with wait_ms about 100000", res[0])
	}
	if res[1].GetAllowed() || res[1].GetWaitMs() != 0 {
		t.Fatalf("second check (needs about 200 s, accepts 150 s): %v, want refused", res[1])
	}
	if res[2].GetAllowed() {
		t.Fatalf("check without max_wait_ms on an empty bucket: %v, want refused", res[2])
	}
	// One check alone (the unbatched call) waits the same way, also with an
	// edge time (created_at_unix_ns, a JSON string as int64s are).
	res = httpCheck(t, s, `{"checks":[{"rule":"api","key":"w1","hits":3}]}`)
	if !res[0].GetAllowed() {
		t.Fatalf("the burst of w1: %v, want allowed", res[0])
	}
	created := strconv.FormatInt(time.Now().UnixNano(), 10)
	res = httpCheck(t, s, `{"checks":[{"rule":"api","key":"w1","hits":1,"max_wait_ms":200000,"created_at_unix_ns":"`+created+`"}]}`)
	if w := res[0].GetWaitMs(); !res[0].GetAllowed() || w < 99000 || w > 100000 {
		t.Fatalf("one check with max_wait_ms 200000 and an edge time: %v, want allowed with wait_ms about 100000", res[0])
	}
}

// AddHealthService reports a further service with the server's readiness,
// from the moment it is added.
func TestAddHealthService(t *testing.T) {
	s := newTestServer(t)
	hc := healthpb.NewHealthClient(grpcClient(t, s))
	status := func() healthpb.HealthCheckResponse_ServingStatus {
		resp, err := hc.Check(ctxT(t), &healthpb.HealthCheckRequest{Service: "test.Other"})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetStatus()
	}
	s.SetReady(false)
	s.AddHealthService("test.Other")
	if st := status(); st != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("added while not ready: %v, want NOT_SERVING", st)
	}
	s.SetReady(true)
	if st := status(); st != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("after SetReady(true): %v, want SERVING", st)
	}
}
