package httplimit

import (
	"fmt"
	"net/http"
	"strings"
)

// DefaultPrefix is where Endpoints serves its rules by default: the HTTP
// mode of `tokenmesh serve`, /v1/limit/{rule}.
const DefaultPrefix = "/v1/limit/"

// Endpoint is one rule Endpoints serves.
type Endpoint struct {
	// Rule is the tokenmesh rule (required).
	Rule string
	// Key is its key template (Options.Key; "" is Options.Key's default,
	// {client_addr}).
	Key string
}

// EndpointOptions are what every endpoint of Endpoints shares: the
// Options of one Middleware but Rule and Key.
type EndpointOptions struct {
	// Prefix is the path the rules are served under, starting and ending
	// with "/" (default DefaultPrefix).
	Prefix string
	// Checker decides (required).
	Checker Checker
	// FailClosed, RefusalStatus and EdgeHeader are Options'.
	FailClosed    bool
	RefusalStatus int
	EdgeHeader    string
	// OnEdgeHeaderError is Options.OnEdgeHeaderError, told the rule too.
	OnEdgeHeaderError func(rule string, r *http.Request, err error)
	// UnknownRuleHint, when set, is added in parentheses to the 404 of a
	// rule Endpoints does not serve ("GET /v1/rules lists them").
	UnknownRuleHint string
}

// Endpoints answers requests for the endpoints' rules like an HTTP edge,
// one token of the rule per request, and hands every other request to
// next:
//
//	ANY {Prefix}{rule}[/...]  -> 200 "allowed" (text/plain), or the refusal of
//	                             Middleware.Wrap: Options.RefusalStatus (429) with
//	                             Retry-After; RateLimit / RateLimit-Policy either way;
//	                             400 naming a missing key part (Wrap's)
//	ANY {Prefix}{other}[/...] -> 404 naming the path
//
// For an auth subrequest (nginx auth_request, Envoy ext_authz over HTTP,
// Traefik forwardAuth) pointed at the rule's path. A template's {path:N}
// counts the segments after {Prefix}{rule}. An endpoint that New refuses
// (a key template that does not parse, an empty rule) answers 500 naming
// the rule and the error; the other endpoints are served. Of two
// endpoints of one rule, the last counts.
func Endpoints(next http.Handler, endpoints []Endpoint, opts EndpointOptions) http.Handler {
	prefix := opts.Prefix
	if prefix == "" {
		prefix = DefaultPrefix
	}
	hint := ""
	if opts.UnknownRuleHint != "" {
		hint = " (" + opts.UnknownRuleHint + ")"
	}
	allowed := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = fmt.Fprintln(w, "allowed")
	})
	handlers := make(map[string]http.Handler, len(endpoints))
	for _, e := range endpoints {
		o := Options{Rule: e.Rule, Key: e.Key, Checker: opts.Checker, FailClosed: opts.FailClosed,
			RefusalStatus: opts.RefusalStatus, EdgeHeader: opts.EdgeHeader}
		if f := opts.OnEdgeHeaderError; f != nil {
			rule := e.Rule
			o.OnEdgeHeaderError = func(r *http.Request, err error) { f(rule, r, err) }
		}
		mw, err := New(o)
		if err != nil {
			msg := fmt.Sprintf("rule %q: %v", e.Rule, err)
			handlers[e.Rule] = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				http.Error(w, msg, http.StatusInternalServerError)
			})
			continue
		}
		handlers[e.Rule] = http.StripPrefix(prefix+e.Rule, mw.Wrap(allowed))
	}
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		rest, ok := strings.CutPrefix(req.URL.Path, prefix)
		if !ok {
			next.ServeHTTP(w, req)
			return
		}
		name, _, _ := strings.Cut(rest, "/")
		h, ok := handlers[name]
		if !ok {
			http.Error(w, fmt.Sprintf("%s%s: no such rule%s", prefix, name, hint), http.StatusNotFound)
			return
		}
		h.ServeHTTP(w, req)
	})
}
