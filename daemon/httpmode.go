package daemon

import (
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/tokenmesh/tokenmesh/config"
	"github.com/tokenmesh/tokenmesh/httplimit"
	"github.com/tokenmesh/tokenmesh/internal/logthrottle"
	"github.com/tokenmesh/tokenmesh/rule"
	"github.com/tokenmesh/tokenmesh/server"
)

// edgeHeaderLogEvery spaces the log lines about X-Request-Start headers
// that do not parse (one per interval, with the count held back).
const edgeHeaderLogEvery = time.Minute

// httpMode is the HTTP API's handler: the API (package server) with the
// HTTP mode in front, ANY /v1/limit/{rule} (httplimit.Endpoints: one token
// of the rule for the key its template takes from the request, answered
// 200 "allowed" or 429, node.http_refusal_status 403 for nginx). A reload
// swaps the rules it serves (set).
//
// Edge times: the gateway's X-Request-Start (nginx `proxy_set_header
// X-Request-Start "t=${msec}";`, forms of httplimit.ParseRequestStart) is
// the check's edge time (docs/API.md, "Edge times"); without one, the time
// this node received the subrequest. A value that does not parse is
// ignored and logged (at most once a minute, with the count held back).
type httpMode struct {
	h        atomic.Pointer[http.Handler]
	api      *server.Server
	refusal  int // node.http_refusal_status (0: 429)
	log      *slog.Logger
	throttle *logthrottle.Throttle
}

func newHTTPMode(api *server.Server, refusal int, log *slog.Logger) *httpMode {
	return &httpMode{api: api, refusal: refusal, log: log, throttle: &logthrottle.Throttle{Every: edgeHeaderLogEvery}}
}

// set serves the HTTP mode for the rules of f (their key templates;
// rules: the node's rules, f's among them), checked through the API
// server so that they count in its metrics.
func (m *httpMode) set(f *config.File, rules []rule.Rule) {
	eps := make([]httplimit.Endpoint, len(f.Rules))
	for i, r := range f.Rules {
		key := r.Key
		if key == "" {
			key = config.DefaultKey
		}
		eps[i] = httplimit.Endpoint{Rule: r.Name, Key: key}
	}
	var h http.Handler = httplimit.Endpoints(m.api.Handler(), eps, httplimit.EndpointOptions{
		Checker: httplimit.Local(m.api, rules), FailClosed: true, RefusalStatus: m.refusal,
		EdgeHeader: httplimit.RequestStartHeader, OnEdgeHeaderError: m.badEdge,
		UnknownRuleHint: "GET /v1/rules lists them",
	})
	m.h.Store(&h)
}

func (m *httpMode) badEdge(rule string, _ *http.Request, err error) {
	if held, ok := m.throttle.Allow(httplimit.RequestStartHeader); ok {
		m.log.Warn("HTTP mode: edge time header ignored (the time of receipt counts instead)",
			"rule", rule, "error", err, "ignored_since_last_line", held)
	}
}

func (m *httpMode) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	(*m.h.Load()).ServeHTTP(w, r)
}
