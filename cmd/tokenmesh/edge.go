package main

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/tokenmesh/tokenmesh/cluster"
	"github.com/tokenmesh/tokenmesh/config"
	"github.com/tokenmesh/tokenmesh/httplimit"
)

// withEdge adds serve's HTTP mode: one token of a rule per request, the key
// taken from the request by the rule's key template (config rules[].key,
// package httplimit), answered like an HTTP edge would:
//
//	ANY /v1/limit/{rule}[/...]  -> 200 "allowed", or 429 with Retry-After,
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
func withEdge(next http.Handler, node *cluster.Node, rules []config.Rule, crules []cluster.Rule) http.Handler {
	checker := httplimit.Local(node, crules)
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
		mw, err := httplimit.New(httplimit.Options{Rule: r.Name, Key: key, Checker: checker, FailClosed: true})
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
