package server

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/cluster"
	"github.com/tokenmesh/tokenmesh/limiter"
)

// newTestServer serves a single-node limiter with rule "api": 1/s, burst 3.
func newTestServer(t *testing.T) *httptest.Server {
	t.Helper()
	rate, err := bucket.PerSecond(1)
	if err != nil {
		t.Fatal(err)
	}
	rules := []cluster.Rule{{Name: "api", Rate: rate, Burst: 3, Strategy: "owner"}}
	node, err := limiter.Start(context.Background(), limiter.Config{Name: "n1", ClusterRules: rules})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = node.Close() })
	ts := httptest.NewServer(New(node, rules).Handler())
	t.Cleanup(ts.Close)
	return ts
}

func post(t *testing.T, ts *httptest.Server, path, body string) (int, []byte) {
	t.Helper()
	resp, err := http.Post(ts.URL+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

func check(t *testing.T, ts *httptest.Server, body string) []Result {
	t.Helper()
	code, b := post(t, ts, "/v1/check", body)
	if code != http.StatusOK {
		t.Fatalf("POST /v1/check %s: %d %s", body, code, b)
	}
	var resp CheckResponse
	if err := json.Unmarshal(b, &resp); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	return resp.Results
}

func TestBurstThenRefused(t *testing.T) {
	ts := newTestServer(t)
	for i := range 3 {
		res := check(t, ts, `{"checks":[{"rule":"api","key":"tenant-1","hits":1}]}`)
		if len(res) != 1 || !res[0].Allowed || res[0].Error != "" || res[0].RetryAfterMS != 0 {
			t.Fatalf("request %d: %+v, want allowed", i, res)
		}
		if res[0].LimitPerS != 1 || res[0].Burst != 3 {
			t.Errorf("limit %v burst %d, want 1 and 3", res[0].LimitPerS, res[0].Burst)
		}
	}
	res := check(t, ts, `{"checks":[{"rule":"api","key":"tenant-1","hits":1},{"rule":"api","key":"tenant-2","hits":3},{"rule":"api","key":"tenant-2","hits":4}]}`)
	if res[0].Allowed || res[0].RetryAfterMS <= 0 || res[0].Error != "" {
		t.Errorf("after the burst: %+v, want refused with retry_after_ms > 0", res[0])
	}
	if !res[1].Allowed {
		t.Errorf("another key: %+v, want allowed", res[1])
	}
	if res[2].Allowed || res[2].RetryAfterMS != -1 || !strings.Contains(res[2].Error, "checks[2].hits: 4 exceeds the burst 3") {
		t.Errorf("hits above burst: %+v", res[2])
	}
}

func TestBatchWithBadItems(t *testing.T) {
	ts := newTestServer(t)
	res := check(t, ts, `{"checks":[
		{"rule":"api","key":"a","hits":1},
		{"rule":"nope","key":"a","hits":1},
		{"rule":"api","key":"","hits":1},
		{"rule":"api","key":"a","hits":-1},
		{"rule":"api","key":"a","hits":1000000001},
		{"rule":"api","key":"a"},
		{"rule":"api","key":"a","hits":2}]}`)
	if len(res) != 7 {
		t.Fatalf("%d results, want 7", len(res))
	}
	wantErr := []string{"", `checks[1].rule: "nope" is not a rule`, "checks[2].key: is required",
		"checks[3].hits: -1 must be between 1 and 1000000000", "checks[4].hits: 1000000001 must be between",
		"checks[5].hits: 0 must be between", ""}
	for i, want := range wantErr {
		if want == "" {
			if !res[i].Allowed || res[i].Error != "" {
				t.Errorf("checks[%d]: %+v, want allowed", i, res[i])
			}
			continue
		}
		if res[i].Allowed || !strings.Contains(res[i].Error, want) {
			t.Errorf("checks[%d]: %+v, want error containing %q", i, res[i], want)
		}
	}
}

func TestBadRequests(t *testing.T) {
	ts := newTestServer(t)
	big := `{"checks":[` + strings.Repeat(`{"rule":"api","key":"a","hits":1},`, 1001) + `{"rule":"api","key":"a","hits":1}]}`
	for _, tc := range []struct {
		name, body string
		code       int
		want       string
	}{
		{"malformed", `{"checks":[{"rule":`, 400, "malformed JSON"},
		{"syntax", `{"checks":[}`, 400, "malformed JSON at byte"},
		{"empty", ``, 400, "body: empty"},
		{"not an object", `[1]`, 400, "body: JSON array"},
		{"wrong type", `{"checks":[{"rule":"api","key":"a","hits":"1"}]}`, 400, "checks.hits: JSON string where an integer"},
		{"fraction", `{"checks":[{"rule":"api","key":"a","hits":1.5}]}`, 400, "checks.hits"},
		{"unknown field", `{"checks":[],"brust":1}`, 400, `unknown field "brust"`},
		{"trailing", `{"checks":[]} {}`, 400, "data after the JSON object"},
		{"no checks", `{}`, 400, "checks: is required"},
		{"too many", big, 400, "checks: 1002 items; at most 1000"},
		{"oversized", `{"checks":[{"rule":"api","key":"` + strings.Repeat("x", MaxBodyBytes) + `","hits":1}]}`, 413, "larger than"},
	} {
		code, b := post(t, ts, "/v1/check", tc.body)
		var e ErrorResponse
		if err := json.Unmarshal(b, &e); err != nil {
			t.Errorf("%s: body %q is not a JSON error: %v", tc.name, b, err)
		}
		if code != tc.code || !strings.Contains(e.Error, tc.want) {
			t.Errorf("%s: %d %q, want %d containing %q", tc.name, code, e.Error, tc.code, tc.want)
		}
	}
}

func TestEndpoints(t *testing.T) {
	ts := newTestServer(t)
	get := func(path string) (int, string) {
		resp, err := http.Get(ts.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/healthz"); code != 200 || strings.TrimSpace(body) != "ok" {
		t.Errorf("/healthz: %d %q", code, body)
	}
	if code, _ := get("/readyz"); code != 200 {
		t.Errorf("/readyz: %d", code)
	}
	if code, body := get("/nope"); code != 404 || !strings.Contains(body, "no such endpoint") {
		t.Errorf("/nope: %d %q", code, body)
	}
	if code, _ := get("/v1/check"); code != http.StatusMethodNotAllowed {
		t.Errorf("GET /v1/check: %d, want 405", code)
	}
	code, body := get("/v1/rules")
	var rules RulesResponse
	if err := json.Unmarshal([]byte(body), &rules); err != nil || code != 200 {
		t.Fatalf("/v1/rules: %d %q %v", code, body, err)
	}
	if len(rules.Rules) != 1 || (rules.Rules[0].Name != "api" || rules.Rules[0].LimitPerS != 1 || rules.Rules[0].Burst != 3 || rules.Rules[0].Strategy != "owner") {
		t.Errorf("/v1/rules: %+v", rules)
	}
}

func TestNotReady(t *testing.T) {
	s := New(nil, nil)
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
	if rec.Code != http.StatusServiceUnavailable {
		t.Errorf("/readyz without a node: %d", rec.Code)
	}
	rec = httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest("POST", "/v1/check", bytes.NewBufferString(`{"checks":[]}`)))
	if rec.Code != http.StatusServiceUnavailable {
		t.Errorf("/v1/check without a node: %d", rec.Code)
	}
}

// FuzzCheck: no body makes the handler panic or answer 5xx.
func FuzzCheck(f *testing.F) {
	f.Add(`{"checks":[{"rule":"api","key":"a","hits":1}]}`)
	f.Add(`{"checks":[{"rule":"api","key":"","hits":-9223372036854775808}]}`)
	f.Add(`{"checks":null}`)
	rate, _ := bucket.PerSecond(1)
	rules := []cluster.Rule{{Name: "api", Rate: rate, Burst: 3, Strategy: "owner"}}
	node, err := limiter.Start(context.Background(), limiter.Config{ClusterRules: rules})
	if err != nil {
		f.Fatal(err)
	}
	defer node.Close()
	h := New(node, rules).Handler()
	f.Fuzz(func(t *testing.T, body string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("POST", "/v1/check", strings.NewReader(body)))
		if rec.Code >= 500 {
			t.Fatalf("%q: %d %s", body, rec.Code, rec.Body)
		}
	})
}
