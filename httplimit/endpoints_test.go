package httplimit

import (
	"net/http"
	"strings"
	"testing"
)

// Endpoints routes each rule's path to its middleware, 404s an unknown
// rule, 500s a template that does not parse and hands the rest to next.
func TestEndpoints(t *testing.T) {
	node, rules := startNode(t)
	var badRule string
	h := Endpoints(ok, []Endpoint{{Rule: "api", Key: "{path:1}"}, {Rule: "broken", Key: "{nope:x}"}}, EndpointOptions{
		Checker: Local(node.Cluster(), rules), FailClosed: true, RefusalStatus: http.StatusForbidden,
		EdgeHeader: RequestStartHeader, UnknownRuleHint: "GET /v1/rules lists them",
		OnEdgeHeaderError: func(rule string, _ *http.Request, _ error) { badRule = rule },
	})
	for i := range 3 {
		w := get(t, h, "/v1/limit/api/k1", nil)
		if w.Code != http.StatusOK || w.Body.String() != "allowed\n" || w.Header().Get("RateLimit") == "" {
			t.Fatalf("check %d: %d %q %v; want 200 allowed with RateLimit", i, w.Code, w.Body, w.Header())
		}
	}
	if w := get(t, h, "/v1/limit/api/k1", nil); w.Code != http.StatusForbidden || w.Header().Get("Retry-After") == "" {
		t.Errorf("over the burst: %d %v; want 403 (RefusalStatus) with Retry-After", w.Code, w.Header())
	}
	if w := get(t, h, "/v1/limit/api/k2", map[string]string{RequestStartHeader: "soon"}); w.Code != http.StatusOK || badRule != "api" {
		t.Errorf("a bad edge header: %d, reported for rule %q; want 200, reported for api", w.Code, badRule)
	}
	if w := get(t, h, "/v1/limit/api", nil); w.Code != http.StatusBadRequest {
		t.Errorf("no key: %d; want 400", w.Code)
	}
	if w := get(t, h, "/v1/limit/nope/k", nil); w.Code != http.StatusNotFound ||
		w.Body.String() != "/v1/limit/nope: no such rule (GET /v1/rules lists them)\n" {
		t.Errorf("unknown rule: %d %q; want 404 naming the path, with the hint", w.Code, w.Body)
	}
	if w := get(t, h, "/v1/limit/broken/k", nil); w.Code != http.StatusInternalServerError || !strings.Contains(w.Body.String(), `rule "broken"`) {
		t.Errorf("bad template: %d %q; want 500 naming the rule", w.Code, w.Body)
	}
	if w := get(t, h, "/v1/check", nil); w.Code != http.StatusOK || w.Body.String() != "hello" {
		t.Errorf("another path: %d %q; want next's 200 hello", w.Code, w.Body)
	}
	custom := Endpoints(ok, []Endpoint{{Rule: "api", Key: "{path:1}"}}, EndpointOptions{Prefix: "/limit/", Checker: Local(node.Cluster(), rules)})
	if w := get(t, custom, "/limit/api/k3", nil); w.Code != http.StatusOK || w.Body.String() != "allowed\n" {
		t.Errorf("Prefix /limit/: %d %q; want 200 allowed", w.Code, w.Body)
	}
}
