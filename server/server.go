// Package server is tokenmesh's public client API over a running
// limiter.Node: the gRPC service tokenmesh.v1.RateLimitService
// (api/tokenmesh/v1/ratelimit.proto) and, through grpc-gateway, the same
// calls over HTTP/JSON, plus health and readiness.
//
//	gRPC  tokenmesh.v1.RateLimitService/Check      CheckRequest -> CheckResponse
//	gRPC  tokenmesh.v1.RateLimitService/ListRules  -> ListRulesResponse
//	gRPC  grpc.health.v1.Health (serving while ready)
//	POST /v1/check  {"checks":[{"rule":"api","key":"tenant-1","hits":1}, ...]}
//	             -> {"results":[{"allowed":true,"limit_per_s":10,"burst":"20","remaining":"19",
//	                             "reset_after_ms":"100","retry_after_ms":"0","error":""}, ...]}
//	GET  /v1/rules  -> {"rules":[{"name":"api","limit_per_s":10,"burst":"20","strategy":"owner","params":[]}]}
//	GET  /healthz   -> 200 "ok" while the process serves
//	GET  /readyz    -> 200 "ready" while the node is started, 503 otherwise
//	GET  /metrics   -> Prometheus metrics (text exposition), on the server's own registry
//
// JSON follows the proto3 JSON mapping with the .proto field names: 64-bit
// integers are strings in answers (numbers are accepted in requests).
//
// A check batch holds 1 to MaxChecks items and is validated as a whole
// before any is decided: an unknown rule, an empty or oversized key,
// hits outside 1..MaxHits or max_wait_ms outside 0..cluster.MaxWait fails
// the call with INVALID_ARGUMENT (HTTP 400) whose message names the field,
// e.g. "checks[3].hits: -1 must be between 1 and 1000000000", and no
// bucket changes. Valid items are decided in order (two items of one key
// see each other) in one hand-over to the node (cluster.Node.CheckBatch;
// a call of one item without max_wait_ms goes through cluster.Node.Check,
// with the same answers). An item the cluster could not decide
// gets allowed=false and its error set; the others are still decided. A
// body that is not a CheckRequest is refused with 400 naming what is
// wrong, a body above MaxBodyBytes with 413.
//
// # Metrics
//
// GET /metrics serves these (metrics.go has the details; the names are
// fixed), besides the go_* and process_* collectors:
//
//	tokenmesh_decisions_total{rule,strategy,result}   checks decided; result allowed|refused|error
//	tokenmesh_decision_seconds{rule}                  histogram of the node's decision time
//	tokenmesh_invalid_requests_total                  calls refused as INVALID_ARGUMENT
//	tokenmesh_peer_messages_total{rule,direction}     peer messages; direction sent|received
//	tokenmesh_peer_bytes_total{rule,direction}        peer payload bytes
//	tokenmesh_peer_send_errors_total{rule}            frames the transport refused
//	tokenmesh_peer_receive_errors_total{rule}         payloads the strategy refused
//	tokenmesh_pending_checks{rule}                    checks waiting for the network
//	tokenmesh_deferred_checks_total{rule}             checks not decided at once on the node
//	tokenmesh_refusal_window_checks_total{rule}       checks refused on the fast path in a refusal window
//	tokenmesh_inbox_dropped_total                     peer frames dropped, inbox full
//	tokenmesh_peer_unknown_rule_frames_total          peer frames for a rule this node lacks
//	tokenmesh_peer_bad_sender_frames_total            peer frames from an empty or non-UTF-8 sender
//	tokenmesh_members                                 live members, this node included
//	tokenmesh_state_bytes{rule}                       heap the strategy state takes, bytes (estimate)
//	tokenmesh_keys{rule}                              keys holding a capacity share (gdrl...)
//	tokenmesh_capacity_share_ratio{rule}              this node's mean share of a key's rate
package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	tokenmeshv1 "github.com/tokenmesh/tokenmesh/api/tokenmesh/v1"
	"github.com/tokenmesh/tokenmesh/cluster"
	"github.com/tokenmesh/tokenmesh/limiter"
	"github.com/tokenmesh/tokenmesh/rule"
)

// Limits of one request.
const (
	// MaxBodyBytes bounds an HTTP request body, in bytes (1 MiB).
	MaxBodyBytes = 1 << 20
	// MaxChecks bounds the items of one check batch.
	MaxChecks = 1000
	// MaxHits bounds one item's hits, in tokens.
	MaxHits = 1_000_000_000
)

// ruleInfo is what the API reports of a rule.
type ruleInfo struct {
	rule     rule.Rule
	perSec   float64 // tokens/s
	rateZero bool
	m        *ruleMetrics
}

// Server serves the API of one node. Its methods are safe for concurrent use.
type Server struct {
	tokenmeshv1.UnimplementedRateLimitServiceServer

	node    *limiter.Node
	tbl     atomic.Pointer[ruleTable] // replaced by SetRules
	rulesMu sync.Mutex                // serializes SetRules (the metric series it creates and deletes)
	ready   atomic.Bool
	// draining: readiness off (/readyz 503, health NOT_SERVING) while the
	// API still answers (SetDraining)
	draining atomic.Bool
	health   *health.Server
	handler  http.Handler
	metrics  *metrics
	// healthNames are further gRPC services reported in the health
	// service (AddHealthService, RegisterRLS), under healthMu.
	healthMu    sync.Mutex
	healthNames []string
	// derived are the metric series of derived rules (Envoy's limit
	// overrides), made on their first decision, by rule name, under
	// rulesMu; SetRules drops those of rules the node no longer has.
	derived map[string]derivedSeries
}

// derivedSeries is a derived rule's series and the strategy they are labelled with.
type derivedSeries struct {
	strategy string
	m        *ruleMetrics
}

// New returns the API of node, which must be started, for rules (the
// node's rules, as given to limiter.Start; a rule the node lacks, or a
// repeated name, is left out). The server reports ready until
// SetReady(false); with a nil node it serves no rules and is never ready
// (Check answers UNAVAILABLE, HTTP 503).
func New(node *limiter.Node, rules []rule.Rule) *Server {
	s := &Server{node: node, health: health.NewServer()}
	var view nodeView // nil without a node
	if node != nil {
		view = limiterView{node}
	}
	s.metrics = newMetrics(view)
	s.SetRules(rules)
	s.SetReady(true)

	gw := runtime.NewServeMux(
		runtime.WithMarshalerOption(runtime.MIMEWildcard, jsonMarshaler{&runtime.JSONPb{
			MarshalOptions:   protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true},
			UnmarshalOptions: protojson.UnmarshalOptions{},
		}}),
		runtime.WithErrorHandler(writeStatus),
		runtime.WithRoutingErrorHandler(routingError),
	)
	// Registering the generated handlers on a fresh mux cannot fail.
	_ = tokenmeshv1.RegisterRateLimitServiceHandlerServer(context.Background(), gw, s)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { writeText(w, http.StatusOK, "ok") })
	mux.HandleFunc("GET /readyz", s.readyz)
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
	mux.Handle("/", limitBody(gw, MaxBodyBytes))
	s.handler = mux
	return s
}

// Handler is the HTTP/JSON API's http.Handler.
func (s *Server) Handler() http.Handler { return s.handler }

// Registry is the server's Prometheus registry (served at GET /metrics);
// callers may register more collectors on it.
func (s *Server) Registry() *prometheus.Registry { return s.metrics.reg }

// RegisterGRPC registers the API (tokenmesh.v1.RateLimitService) and the
// standard health service (grpc.health.v1.Health, SERVING while ready) on g.
func (s *Server) RegisterGRPC(g grpc.ServiceRegistrar) {
	tokenmeshv1.RegisterRateLimitServiceServer(g, s)
	healthpb.RegisterHealthServer(g, s.health)
}

// SetReady sets what /readyz and the gRPC health service report (false
// while shutting down); a server without a node is never ready.
func (s *Server) SetReady(ready bool) {
	ready = ready && s.node != nil
	s.healthMu.Lock()
	defer s.healthMu.Unlock()
	s.ready.Store(ready)
	s.setHealth(ready && !s.draining.Load())
}

// SetDraining turns what /readyz ("draining", 503) and the gRPC health
// service (NOT_SERVING) report off while draining is true, without
// refusing requests: a node that is about to stop tells its load
// balancer first (package daemon's drain delay).
func (s *Server) SetDraining(draining bool) {
	s.healthMu.Lock()
	defer s.healthMu.Unlock()
	s.draining.Store(draining)
	s.setHealth(s.ready.Load() && !draining)
}

// setHealth sets every name's status in the health service (healthMu held).
func (s *Server) setHealth(serving bool) {
	st := servingStatus(serving)
	s.health.SetServingStatus("", st)
	s.health.SetServingStatus(tokenmeshv1.RateLimitService_ServiceDesc.ServiceName, st)
	for _, n := range s.healthNames {
		s.health.SetServingStatus(n, st)
	}
}

// AddHealthService reports the gRPC service name (its full name,
// "envoy.service.ratelimit.v3.RateLimitService") in the health service
// (RegisterGRPC) from now on: SERVING while the server is ready, as the
// API. For a service served beside the API on the same gRPC server whose
// answers need the node (package daemon's Service).
func (s *Server) AddHealthService(name string) {
	s.healthMu.Lock()
	defer s.healthMu.Unlock()
	s.healthNames = append(s.healthNames, name)
	s.health.SetServingStatus(name, servingStatus(s.ready.Load() && !s.draining.Load()))
}

// servingStatus is the health service's status for ready.
func servingStatus(ready bool) healthpb.HealthCheckResponse_ServingStatus {
	if ready {
		return healthpb.HealthCheckResponse_SERVING
	}
	return healthpb.HealthCheckResponse_NOT_SERVING
}

// Ready reports what /readyz and the gRPC health service report: true
// from New until SetReady(false), and after SetReady(true) again.
func (s *Server) Ready() bool { return s.ready.Load() }

// Check implements tokenmesh.v1.RateLimitService/Check (see the package
// documentation and ratelimit.proto).
func (s *Server) Check(ctx context.Context, req *tokenmeshv1.CheckRequest) (*tokenmeshv1.CheckResponse, error) {
	if !s.ready.Load() {
		return nil, status.Error(codes.Unavailable, "node is not ready")
	}
	t := s.tbl.Load() // one rule table for the whole call
	checks := req.GetChecks()
	if len(checks) == 1 {
		return s.checkOne(ctx, t, checks[0])
	}
	items, err := t.validate(checks)
	if err != nil {
		s.metrics.invalid.Inc()
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	results, err := s.decideBatch(ctx, t, items)
	if err != nil {
		// Input was validated above: what is left is the node or ctx ending.
		if ctx.Err() != nil {
			return nil, status.FromContextError(ctx.Err()).Err()
		}
		return nil, status.Errorf(codes.Unavailable, "node: %v", err)
	}
	resp, outs := newCheckResponse(len(results))
	for i, r := range results {
		result(&outs[i], i, t.byName[items[i].Rule], items[i], r)
	}
	return resp, nil
}

// decideBatch decides items (all of rules in t) through the node's
// CheckBatch, each item counted in t's metrics (edge lateness before,
// the decision after). Errors: the node's (nothing decided, nothing
// counted but the lateness).
func (s *Server) decideBatch(ctx context.Context, t *ruleTable, items []cluster.BatchItem) ([]cluster.BatchResult, error) {
	start := time.Now()
	for _, it := range items {
		t.byName[it.Rule].m.edgeLateness(it.CreatedAtUnixNs, start)
	}
	results, err := s.node.Cluster().CheckBatch(ctx, items)
	if err != nil {
		return nil, err
	}
	waited := time.Since(start)
	for i, r := range results {
		t.byName[items[i].Rule].m.count(r, r.Err == nil && r.Allowed, waited)
	}
	return results, nil
}

// decideItem decides it (of a rule in t) through the node's CheckItem,
// counted in t's metrics as decideBatch counts an item. A ctx that ends
// while the node decides, or the rule removed meanwhile, is the result's
// Err (not decided, as CheckBatch reports it); the error is the node's
// other ones (it closed, or refused the input: nothing counted).
func (s *Server) decideItem(ctx context.Context, t *ruleTable, it cluster.BatchItem) (cluster.BatchResult, error) {
	ri := t.byName[it.Rule]
	start := time.Now()
	ri.m.edgeLateness(it.CreatedAtUnixNs, start)
	d, err := s.node.Cluster().CheckItem(ctx, it)
	waited := time.Since(start)
	r := cluster.BatchResult{CheckResult: d}
	if err != nil {
		switch cerr := ctx.Err(); {
		case cerr != nil && errors.Is(err, cerr), errors.Is(err, cluster.ErrRuleRemoved):
			r = cluster.BatchResult{CheckResult: cluster.CheckResult{Remaining: -1}, Err: err}
		default:
			return cluster.BatchResult{}, err
		}
	}
	ri.m.count(r, r.Err == nil && r.Allowed, waited)
	return r, nil
}

// checkOne is Check of a batch of one item, the common unbatched call:
// it asks cluster.Node.CheckItem (whose local fast path decides in this
// goroutine) instead of CheckBatch, saving the
// batch's allocations (the items, results and bookkeeping slices and its
// done channel), and answers as CheckBatch would: a ctx that ended before
// the call or a closed node fails the call; a ctx that ends while the
// node decides, or a rule removed meanwhile, is the item's error.
func (s *Server) checkOne(ctx context.Context, t *ruleTable, c *tokenmeshv1.CheckItem) (*tokenmeshv1.CheckResponse, error) {
	it, err := t.validateItem(0, c)
	if err != nil {
		s.metrics.invalid.Inc()
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if err := ctx.Err(); err != nil {
		return nil, status.FromContextError(err).Err()
	}
	r, err := s.decideItem(ctx, t, it)
	if err != nil { // the node closed, or refused the input
		return nil, status.Errorf(codes.Unavailable, "node: %v", err)
	}
	resp, outs := newCheckResponse(1)
	result(&outs[0], 0, t.byName[it.Rule], it, r)
	return resp, nil
}

// checkResponse1 is the response to one check in one allocation (the
// unbatched call, the common one): the message, its one-element Results
// and the result itself.
type checkResponse1 struct {
	resp tokenmeshv1.CheckResponse
	ptrs [1]*tokenmeshv1.CheckResult
	res  [1]tokenmeshv1.CheckResult
}

// newCheckResponse returns a CheckResponse whose Results point at the n
// zero results of outs: one allocation for n == 1, three for any n
// (instead of n + 2, one per result).
func newCheckResponse(n int) (*tokenmeshv1.CheckResponse, []tokenmeshv1.CheckResult) {
	if n == 1 {
		b := &checkResponse1{}
		b.ptrs[0] = &b.res[0]
		b.resp.Results = b.ptrs[:]
		return &b.resp, b.res[:]
	}
	outs := make([]tokenmeshv1.CheckResult, n)
	resp := &tokenmeshv1.CheckResponse{Results: make([]*tokenmeshv1.CheckResult, n)}
	for i := range outs {
		resp.Results[i] = &outs[i]
	}
	return resp, outs
}

// validate checks a batch and converts it to the cluster's items; the
// error names the first bad field.
func (t *ruleTable) validate(checks []*tokenmeshv1.CheckItem) ([]cluster.BatchItem, error) {
	switch {
	case len(checks) == 0:
		return nil, fmt.Errorf(`checks: is empty; want 1 to %d checks ({"checks":[{"rule":"...","key":"...","hits":1}]})`, MaxChecks)
	case len(checks) > MaxChecks:
		return nil, fmt.Errorf("checks: %d items; at most %d per request", len(checks), MaxChecks)
	}
	items := make([]cluster.BatchItem, len(checks))
	for i, c := range checks {
		it, err := t.validateItem(i, c)
		if err != nil {
			return nil, err
		}
		items[i] = it
	}
	return items, nil
}

// validateItem checks item i of a batch and converts it to the cluster's
// item; the error names the first bad field.
func (t *ruleTable) validateItem(i int, c *tokenmeshv1.CheckItem) (cluster.BatchItem, error) {
	rule, key, hits := c.GetRule(), c.GetKey(), c.GetHits()
	_, known := t.byName[rule]
	switch {
	case rule == "":
		return cluster.BatchItem{}, fmt.Errorf("checks[%d].rule: is required", i)
	case !known:
		return cluster.BatchItem{}, fmt.Errorf("checks[%d].rule: %q is not a rule of this node (ListRules, GET /v1/rules lists them)", i, rule)
	case key == "":
		return cluster.BatchItem{}, fmt.Errorf("checks[%d].key: is required", i)
	case len(key) > cluster.MaxKeyBytes:
		return cluster.BatchItem{}, fmt.Errorf("checks[%d].key: %d bytes; at most %d", i, len(key), cluster.MaxKeyBytes)
	case hits < 1 || hits > MaxHits:
		return cluster.BatchItem{}, fmt.Errorf("checks[%d].hits: %d must be between 1 and %d", i, hits, MaxHits)
	case c.GetMaxWaitMs() < 0 || c.GetMaxWaitMs() > cluster.MaxWait.Milliseconds():
		return cluster.BatchItem{}, fmt.Errorf("checks[%d].max_wait_ms: %d must be between 0 and %d", i, c.GetMaxWaitMs(), cluster.MaxWait.Milliseconds())
	case c.GetCreatedAtUnixNs() < 0:
		return cluster.BatchItem{}, fmt.Errorf("checks[%d].created_at_unix_ns: %d is negative; want ns since the Unix epoch, or 0 for none", i, c.GetCreatedAtUnixNs())
	}
	return cluster.BatchItem{Rule: rule, Key: key, Tokens: hits, MaxWait: time.Duration(c.GetMaxWaitMs()) * time.Millisecond,
		CreatedAtUnixNs: c.GetCreatedAtUnixNs()}, nil
}

// result turns item i's cluster result into the API's, written into out
// (a zero CheckResult; ri: its rule).
func result(out *tokenmeshv1.CheckResult, i int, ri ruleInfo, it cluster.BatchItem, r cluster.BatchResult) {
	burst := ri.rule.Burst
	out.LimitPerS, out.Burst, out.Remaining, out.ResetAfterMs = ri.perSec, burst, -1, -1
	if r.Err != nil {
		out.RetryAfterMs = -1
		out.Error = fmt.Sprintf("checks[%d]: not decided: %v", i, r.Err)
		return
	}
	out.Allowed = r.Allowed
	if r.Allowed && r.Delay > 0 {
		out.WaitMs = ceilMS(r.Delay.Seconds()) // waiting mode: proceed after this
	}
	if r.Remaining >= 0 {
		out.Remaining = min(r.Remaining, burst)
		if !ri.rateZero {
			out.ResetAfterMs = ceilMS(float64(burst-out.Remaining) / ri.perSec)
		}
	}
	switch {
	case out.Allowed:
	case it.Tokens > burst:
		out.RetryAfterMs = -1
		out.Error = fmt.Sprintf("checks[%d].hits: %d exceeds the burst %d of rule %q; it can never be allowed", i, it.Tokens, burst, it.Rule)
	case ri.rateZero:
		out.RetryAfterMs = -1
	default:
		// Time for the missing tokens to refill at the rule's rate (all of
		// hits when the node cannot tell what is left).
		need := it.Tokens
		if out.Remaining >= 0 {
			need = max(it.Tokens-out.Remaining, 1)
		}
		out.RetryAfterMs = max(ceilMS(float64(need)/ri.perSec), 1)
	}
}

// ceilMS is sec seconds in whole milliseconds, rounded up (saturating).
func ceilMS(sec float64) int64 {
	ms := math.Ceil(sec * 1000)
	if ms >= math.MaxInt64 || math.IsNaN(ms) {
		return math.MaxInt64
	}
	return int64(ms)
}

// ListRules implements tokenmesh.v1.RateLimitService/ListRules.
func (s *Server) ListRules(context.Context, *tokenmeshv1.ListRulesRequest) (*tokenmeshv1.ListRulesResponse, error) {
	t := s.tbl.Load()
	resp := &tokenmeshv1.ListRulesResponse{Rules: make([]*tokenmeshv1.RuleInfo, 0, len(t.rules))}
	for _, r := range t.rules {
		resp.Rules = append(resp.Rules, &tokenmeshv1.RuleInfo{Name: r.Name, LimitPerS: t.byName[r.Name].perSec,
			Burst: r.Burst, Strategy: r.Strategy, Params: slices.Clone(r.Params)})
	}
	return resp, nil
}

// writeStatus answers an HTTP request whose call failed: the gRPC status
// as JSON ({"code": 3, "message": "...", "details": []}) with its HTTP
// status code (runtime.HTTPStatusFromCode: INVALID_ARGUMENT is 400).
func writeStatus(_ context.Context, _ *runtime.ServeMux, m runtime.Marshaler, w http.ResponseWriter, r *http.Request, err error) {
	if tooLarge(r) {
		writeTooLarge(w)
		return
	}
	st := status.Convert(err)
	b, merr := m.Marshal(st.Proto())
	if merr != nil {
		b = []byte(`{"code": 13, "message": "encoding the error failed"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(runtime.HTTPStatusFromCode(st.Code()))
	_, _ = w.Write(append(b, '\n'))
}

// endpoints lists the HTTP API for routing errors.
const endpoints = "POST /v1/check, GET /v1/rules, POST /v1/acquire, POST /v1/release, GET /healthz, GET /readyz, GET /metrics"

// routingError answers a request no route matches: 404 for an unknown
// path, 405 for a known path with the wrong method, each naming the
// endpoints (grpc-gateway's default would answer 501 to a wrong method).
func routingError(_ context.Context, _ *runtime.ServeMux, m runtime.Marshaler, w http.ResponseWriter, r *http.Request, httpStatus int) {
	code, msg := codes.NotFound, fmt.Sprintf("no such endpoint: %s %s (endpoints: %s)", r.Method, r.URL.Path, endpoints)
	switch httpStatus {
	case http.StatusMethodNotAllowed:
		code, msg = codes.Unimplemented, fmt.Sprintf("%s %s: wrong method (endpoints: %s)", r.Method, r.URL.Path, endpoints)
	case http.StatusNotFound:
	default:
		code, msg = codes.InvalidArgument, http.StatusText(httpStatus)
	}
	b, err := m.Marshal(status.New(code, msg).Proto())
	if err != nil {
		b = []byte(`{"code": 13, "message": "encoding the error failed"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(httpStatus)
	_, _ = w.Write(append(b, '\n'))
}

func (s *Server) readyz(w http.ResponseWriter, _ *http.Request) {
	if !s.ready.Load() {
		writeText(w, http.StatusServiceUnavailable, "not ready")
		return
	}
	if s.draining.Load() {
		writeText(w, http.StatusServiceUnavailable, "draining")
		return
	}
	writeText(w, http.StatusOK, "ready")
}

func writeText(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(status)
	_, _ = fmt.Fprintln(w, msg)
}

// bodyTooLargeKey is the request context key of the flag limitBody sets
// when a body went past the limit.
type bodyTooLargeKey struct{}

// limitBody serves h with request bodies bounded to n bytes, as
// http.MaxBytesHandler does, and answers a body past the bound with 413
// (writeStatus reads the flag: grpc-gateway reports the read error as
// INVALID_ARGUMENT, 400): at once when Content-Length says so, else when
// the read goes past it.
func limitBody(h http.Handler, n int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > n {
			writeTooLarge(w)
			return
		}
		flag := new(atomic.Bool)
		r = r.WithContext(context.WithValue(r.Context(), bodyTooLargeKey{}, flag))
		r.Body = &flaggedBody{ReadCloser: http.MaxBytesReader(w, r.Body, n), tooLarge: flag}
		h.ServeHTTP(w, r)
	})
}

// flaggedBody sets tooLarge when its read goes past http.MaxBytesReader's
// limit.
type flaggedBody struct {
	io.ReadCloser
	tooLarge *atomic.Bool
}

func (b *flaggedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		b.tooLarge.Store(true)
	}
	return n, err
}

// tooLarge reports whether r's body went past limitBody's bound.
func tooLarge(r *http.Request) bool {
	f, ok := r.Context().Value(bodyTooLargeKey{}).(*atomic.Bool)
	return ok && f.Load()
}

// writeTooLarge answers 413 with the API's JSON error (code
// INVALID_ARGUMENT, the bound named).
func writeTooLarge(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusRequestEntityTooLarge)
	_, _ = fmt.Fprintf(w, "{\"code\": %d, \"message\": \"request body above %d bytes\"}\n", codes.InvalidArgument, MaxBodyBytes)
}
