package main

import (
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/tokenmesh/tokenmesh/cluster"
	"github.com/tokenmesh/tokenmesh/config"
	"github.com/tokenmesh/tokenmesh/httplimit"
	"github.com/tokenmesh/tokenmesh/internal/logthrottle"
	"github.com/tokenmesh/tokenmesh/server"
)

// edgeHeaderLogEvery spaces the log lines about X-Request-Start headers
// that do not parse (one per interval, with the count held back).
const edgeHeaderLogEvery = time.Minute

// withEdge adds serve's HTTP mode: one token of a rule per request, the key
// taken from the request by the rule's key template (config rules[].key,
// package httplimit), answered like an HTTP edge would:
//
//	ANY /v1/limit/{rule}[/...]  -> 200 "allowed", or 429 (node.http_refusal_status:
//	                               403 for nginx) with Retry-After,
//	                               and RateLimit / RateLimit-Policy headers either way;
//	                               400 naming a missing key part, 404 for an unknown rule
//
// Templates: {header:NAME}, {client_addr}, {path:N} (segments after
// /v1/limit/{rule}), {jwt:CLAIM} (unverified), {method}, and {NAME} or
// {query:NAME} for the query parameter NAME: the default {key} is ?key=.
// For an auth subrequest (nginx auth_request, Envoy ext_authz over HTTP,
// Traefik forwardAuth) pointed at this path. config validates templates
// with the same grammar (httplimit/keytemplate), so a loaded rule's
// template parses; one that does not (rules built without config) answers
// 500 naming it. Every other request goes to next.
//
// Edge times: the gateway's X-Request-Start (nginx `proxy_set_header
// X-Request-Start "t=${msec}";`, forms of httplimit.ParseRequestStart) is
// the check's edge time (docs/API.md, "Edge times"); without one, the time
// this node received the subrequest. A value that does not parse is
// ignored and logged (at most once a minute, with the count held back).
func withEdge(next http.Handler, api *server.Server, rules []config.Rule, crules []cluster.Rule, refusalStatus int, logger *slog.Logger) http.Handler {
	checker := httplimit.Local(api, crules) // counted in the API's metrics
	throttle := &logthrottle.Throttle{Every: edgeHeaderLogEvery}
	badEdge := func(rule string) func(*http.Request, error) {
		return func(_ *http.Request, err error) {
			if held, ok := throttle.Allow(httplimit.RequestStartHeader); ok {
				logger.Warn("HTTP mode: edge time header ignored (the time of receipt counts instead)",
					"rule", rule, "error", err, "ignored_since_last_line", held)
			}
		}
	}
	handlers := map[string]http.Handler{}
	allowed := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = fmt.Fprintln(w, "allowed")
	})
	for _, r := range rules {
		key := r.Key
		if key == "" {
			key = config.DefaultKey
		}
		mw, err := httplimit.New(httplimit.Options{Rule: r.Name, Key: key, Checker: checker, FailClosed: true, RefusalStatus: refusalStatus,
			EdgeHeader: httplimit.RequestStartHeader, OnEdgeHeaderError: badEdge(r.Name)})
		if err != nil {
			msg := fmt.Sprintf("rule %q: key %v", r.Name, err)
			handlers[r.Name] = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				http.Error(w, msg, http.StatusInternalServerError)
			})
			continue
		}
		handlers[r.Name] = http.StripPrefix("/v1/limit/"+r.Name, mw.Wrap(allowed))
	}
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		rest, ok := strings.CutPrefix(req.URL.Path, "/v1/limit/")
		if !ok {
			next.ServeHTTP(w, req)
			return
		}
		name, _, _ := strings.Cut(rest, "/")
		h, ok := handlers[name]
		if !ok {
			http.Error(w, fmt.Sprintf("/v1/limit/%s: no such rule (GET /v1/rules lists them)", name), http.StatusNotFound)
			return
		}
		h.ServeHTTP(w, req)
	})
}
