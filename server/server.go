// Package server is tokenmesh's client API: HTTP/JSON over a running
// limiter.Node.
//
//	POST /v1/check  {"checks":[{"rule":"api","key":"tenant-1","hits":1}, ...]}
//	             -> {"results":[{"allowed":true,"limit_per_s":10,"burst":20,"retry_after_ms":0,"error":""}, ...]}
//	GET  /v1/rules  -> {"rules":[{"name":"api","limit_per_s":10,"burst":20,"strategy":"owner","params":[]}]}
//	GET  /healthz   -> 200 "ok" while the process serves
//	GET  /readyz    -> 200 "ready" while the node is started, 503 otherwise
//
// A check batch holds 1 to MaxChecks items, decided in order (so two items
// of one key see each other). An item that is invalid (unknown rule, empty
// or oversized key, hits outside 1..MaxHits) or that the cluster could not
// decide gets allowed=false and an error naming the field, e.g.
// "checks[3].hits: -1 must be between 1 and 1000000000"; the other items
// are still decided. A body that is not a valid request is refused as a
// whole: 400 (413 above MaxBodyBytes) with {"error": "..."}.
package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/tokenmesh/tokenmesh/cluster"
	"github.com/tokenmesh/tokenmesh/limiter"
)

// Limits of one request.
const (
	// MaxBodyBytes bounds a POST /v1/check body, in bytes (1 MiB); a larger
	// body is refused with 413.
	MaxBodyBytes = 1 << 20
	// MaxChecks bounds the items of one check batch; more is a 400.
	MaxChecks = 1000
	// MaxHits bounds one item's hits, in tokens; more is a per-item error.
	MaxHits = 1_000_000_000
)

// Server serves the API of one node. Its methods are safe for concurrent use.
type Server struct {
	node     *limiter.Node
	rules    []cluster.Rule
	limiters map[string]*limiter.Limiter
	ready    atomic.Bool
	handler  http.Handler
}

// New returns the API of node, which must be started, for rules (the
// node's rules, as given to limiter.Start; a rule the node lacks, or a
// repeated name, is left out). The server reports ready until
// SetReady(false); with a nil node it serves no rules and is never ready
// (check answers 503).
func New(node *limiter.Node, rules []cluster.Rule) *Server {
	s := &Server{node: node, limiters: map[string]*limiter.Limiter{}}
	if node != nil {
		for _, r := range rules {
			if _, dup := s.limiters[r.Name]; dup {
				continue
			}
			l, err := node.Limiter(r.Name)
			if err != nil {
				continue
			}
			s.limiters[r.Name] = l
			s.rules = append(s.rules, r)
		}
	}
	s.ready.Store(node != nil)
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/check", s.check)
	mux.HandleFunc("/v1/rules", s.listRules)
	mux.HandleFunc("/healthz", s.healthz)
	mux.HandleFunc("/readyz", s.readyz)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no such endpoint: %s %s (endpoints: POST /v1/check, GET /v1/rules, GET /healthz, GET /readyz)", r.Method, r.URL.Path))
	})
	s.handler = recoverer(mux)
	return s
}

// Handler is the API's http.Handler.
func (s *Server) Handler() http.Handler { return s.handler }

// SetReady sets what /readyz reports (false while shutting down).
func (s *Server) SetReady(ready bool) { s.ready.Store(ready && s.node != nil) }

// CheckRequest is the body of POST /v1/check.
type CheckRequest struct {
	Checks []Check `json:"checks"`
}

// Check asks for Hits tokens (1..MaxHits) of Key (1..cluster.MaxKeyBytes
// bytes) under the rule named Rule.
type Check struct {
	Rule string `json:"rule"`
	Key  string `json:"key"`
	Hits int64  `json:"hits"`
}

// CheckResponse is the answer to POST /v1/check: one result per check, in order.
type CheckResponse struct {
	Results []Result `json:"results"`
}

// Result is one check's decision. LimitPerS (tokens/s) and Burst (tokens)
// are the rule's (0 for an unknown rule). RetryAfterMS, for a refusal, estimates when to ask
// again (see limiter.Reservation.Delay); -1 when the hits can never be
// admitted (above the burst, or a rate of 0). Error is "" unless the check
// was invalid or could not be decided; then Allowed is false.
type Result struct {
	Allowed      bool    `json:"allowed"`
	LimitPerS    float64 `json:"limit_per_s"`
	Burst        int64   `json:"burst"`
	RetryAfterMS int64   `json:"retry_after_ms"`
	Error        string  `json:"error"`
}

// RulesResponse is the answer to GET /v1/rules.
type RulesResponse struct {
	Rules []RuleInfo `json:"rules"`
}

// RuleInfo describes one rule: its rate in tokens/s, its burst in
// tokens, its strategy and the strategy's "name=value" parameters ([] when
// none, never null).
type RuleInfo struct {
	Name      string   `json:"name"`
	LimitPerS float64  `json:"limit_per_s"`
	Burst     int64    `json:"burst"`
	Strategy  string   `json:"strategy"`
	Params    []string `json:"params"`
}

// ErrorResponse is the body of every non-2xx answer.
type ErrorResponse struct {
	Error string `json:"error"`
}

func (s *Server) check(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeError(w, http.StatusMethodNotAllowed, fmt.Sprintf("%s /v1/check: use POST", r.Method))
		return
	}
	if !s.ready.Load() {
		writeError(w, http.StatusServiceUnavailable, "node is not ready")
		return
	}
	var req CheckRequest
	if status, err := decode(w, r, &req); err != nil {
		writeError(w, status, err.Error())
		return
	}
	switch {
	case req.Checks == nil:
		writeError(w, http.StatusBadRequest, `checks: is required (body: {"checks":[{"rule":"...","key":"...","hits":1}]})`)
		return
	case len(req.Checks) > MaxChecks:
		writeError(w, http.StatusBadRequest, fmt.Sprintf("checks: %d items; at most %d per request", len(req.Checks), MaxChecks))
		return
	}
	resp := CheckResponse{Results: make([]Result, len(req.Checks))}
	for i, c := range req.Checks {
		resp.Results[i] = s.decide(r, i, c)
	}
	writeJSON(w, http.StatusOK, resp)
}

func (s *Server) decide(r *http.Request, i int, c Check) Result {
	var res Result
	l, ok := s.limiters[c.Rule]
	if ok {
		res.LimitPerS, res.Burst = l.Limit(), l.Burst()
	}
	field := func(name string) string { return fmt.Sprintf("checks[%d].%s", i, name) }
	switch {
	case c.Rule == "":
		res.Error = field("rule") + ": is required"
	case !ok:
		res.Error = fmt.Sprintf("%s: %q is not a rule of this node (GET /v1/rules lists them)", field("rule"), c.Rule)
	case c.Key == "":
		res.Error = field("key") + ": is required"
	case len(c.Key) > cluster.MaxKeyBytes:
		res.Error = fmt.Sprintf("%s: %d bytes; at most %d", field("key"), len(c.Key), cluster.MaxKeyBytes)
	case c.Hits < 1 || c.Hits > MaxHits:
		res.Error = fmt.Sprintf("%s: %d must be between 1 and %d", field("hits"), c.Hits, MaxHits)
	}
	if res.Error != "" {
		return res
	}
	rv, err := l.Reserve(r.Context(), c.Key, c.Hits)
	if err != nil {
		res.Error = fmt.Sprintf("checks[%d]: not decided: %v", i, err)
		return res
	}
	res.Allowed = rv.Allowed()
	switch {
	case res.Allowed:
	case !rv.OK():
		res.RetryAfterMS = -1
		if c.Hits > l.Burst() {
			res.Error = fmt.Sprintf("%s: %d exceeds the burst %d of rule %q; it can never be allowed", field("hits"), c.Hits, l.Burst(), c.Rule)
		}
	default:
		res.RetryAfterMS = max(int64(math.Ceil(float64(rv.Delay())/float64(time.Millisecond))), 1)
	}
	return res
}

func (s *Server) listRules(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		writeError(w, http.StatusMethodNotAllowed, fmt.Sprintf("%s /v1/rules: use GET", r.Method))
		return
	}
	resp := RulesResponse{Rules: make([]RuleInfo, 0, len(s.rules))}
	for _, rule := range s.rules {
		params := slices.Clone(rule.Params)
		if params == nil {
			params = []string{}
		}
		resp.Rules = append(resp.Rules, RuleInfo{Name: rule.Name, LimitPerS: s.limiters[rule.Name].Limit(),
			Burst: rule.Burst, Strategy: rule.Strategy, Params: params})
	}
	writeJSON(w, http.StatusOK, resp)
}

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	writeText(w, http.StatusOK, "ok")
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	if !s.ready.Load() {
		writeText(w, http.StatusServiceUnavailable, "not ready")
		return
	}
	writeText(w, http.StatusOK, "ready")
}

// decode reads one JSON value of the body into v (at most MaxBodyBytes,
// no unknown fields, nothing after it); on failure it returns the status
// and an error that says what is wrong.
func decode(w http.ResponseWriter, r *http.Request, v any) (int, error) {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil {
		if _, extra := dec.Token(); !errors.Is(extra, io.EOF) {
			err = errors.New("data after the JSON object")
		}
	}
	if err == nil {
		return 0, nil
	}
	var (
		tooBig *http.MaxBytesError
		syntax *json.SyntaxError
		typ    *json.UnmarshalTypeError
	)
	switch {
	case errors.As(err, &tooBig):
		return http.StatusRequestEntityTooLarge, fmt.Errorf("body: larger than %d bytes", MaxBodyBytes)
	case errors.Is(err, io.EOF):
		return http.StatusBadRequest, errors.New(`body: empty; want {"checks":[...]}`)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return http.StatusBadRequest, errors.New("body: malformed JSON: unexpected end")
	case errors.As(err, &syntax):
		return http.StatusBadRequest, fmt.Errorf("body: malformed JSON at byte %d: %v", syntax.Offset, err)
	case errors.As(err, &typ):
		f := typ.Field
		if f == "" {
			f = "body"
		}
		return http.StatusBadRequest, fmt.Errorf("%s: JSON %s where %s is expected", f, typ.Value, jsonType(typ.Type.Kind().String()))
	}
	msg := strings.TrimPrefix(err.Error(), "json: ")
	return http.StatusBadRequest, fmt.Errorf("body: %s", msg)
}

func jsonType(kind string) string {
	switch {
	case strings.HasPrefix(kind, "int"), strings.HasPrefix(kind, "uint"):
		return "an integer"
	case kind == "string":
		return "a string"
	case kind == "slice":
		return "an array"
	case kind == "struct":
		return "an object"
	}
	return kind
}

// recoverer turns a panic in h into a 500 (after which the connection is
// dropped if the response had started). http.ErrAbortHandler is passed on.
func recoverer(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler { //nolint:errorlint // sentinel panic value
					panic(v)
				}
				writeError(w, http.StatusInternalServerError, "internal error")
			}
		}()
		h.ServeHTTP(w, r)
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":"encoding the response failed"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, ErrorResponse{Error: msg})
}

func writeText(w http.ResponseWriter, status int, s string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, s+"\n")
}
