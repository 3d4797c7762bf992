package main

// End-to-end tests of Envoy's rate limit service (RLS v3) on real serve
// processes, through go-control-plane's generated client, with configs
// written from envoyproxy/ratelimit's documented behaviour (README,
// "Configuration" and its examples; rewritten, not copied).

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/tokenmesh/tokenmesh/daemon"
	"github.com/tokenmesh/tokenmesh/internal/lockedbuf"
	"github.com/tokenmesh/tokenmesh/localcluster"
	"github.com/tokenmesh/tokenmesh/rule"
)

// rlsConfigs: per-day limits, so that no token refills while a test runs.
var rlsConfigs = map[string]string{
	// README example "per IP": a default for every address, one address
	// unlimited, a wildcard with share_threshold.
	"edge.yaml": `domain: edge_proxy_per_ip
descriptors:
  - key: remote_address
    rate_limit:
      unit: day
      requests_per_unit: 5
  - key: remote_address
    value: 50.0.0.5
    rate_limit:
      unlimited: true
  - key: path
    value: /files/*
    share_threshold: true
    rate_limit: {unit: day, requests_per_unit: 3}
`,
	// README example "messaging": a nested limit and a top-level one.
	"messaging.yaml": `domain: messaging
descriptors:
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit:
          unit: day
          requests_per_unit: 4
  - key: to_number
    rate_limit:
      unit: day
      requests_per_unit: 100
`,
	// shadow_mode: decided and counted, never refused.
	"shadow.yaml": `domain: shadow
descriptors:
  - key: remote_address
    shadow_mode: true
    rate_limit: {unit: day, requests_per_unit: 2}
`,
	// algorithm fixed_window: envoyproxy/ratelimit's own counting.
	"fixed.yaml": `domain: fixed
tokenmesh: {algorithm: fixed_window}
descriptors:
  - key: remote_address
    rate_limit: {unit: day, requests_per_unit: 5}
`,
	// replaces: a gold tenant's limit replaces the per-user one.
	"replaces.yaml": `domain: replaces
descriptors:
  - key: tenant
    value: gold
    rate_limit:
      unit: day
      requests_per_unit: 6
      name: gold
      replaces:
        - name: per_user
  - key: user
    rate_limit:
      unit: day
      requests_per_unit: 2
      name: per_user
`,
}

func writeRLSConfigs(t *testing.T, dir string) { writeEnvoyFiles(t, dir, rlsConfigs) }

// writeEnvoyFiles writes the envoy config files (name -> YAML) into dir.
func writeEnvoyFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// startRLSCluster starts n serve processes with --envoy-config of the
// given files (name -> YAML) and returns them with an RLS client of each.
func startRLSCluster(t *testing.T, n int, files map[string]string) (*localcluster.Cluster, []rlsv3.RateLimitServiceClient) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "ratelimit")
	writeEnvoyFiles(t, dir, files)
	c := startCluster(t, localcluster.Config{Nodes: n, ServeArgs: []string{"--envoy-config", dir},
		Rules: []rule.Rule{{Name: "api", Rate: rule.MustRate("1/m"), Burst: 5}}})
	var cls []rlsv3.RateLimitServiceClient
	for _, node := range c.Nodes {
		cl, _ := dialRLS(t, node.GRPC)
		cls = append(cls, cl)
	}
	return c, cls
}

func rlsDesc(kv ...string) *ratelimitv3.RateLimitDescriptor {
	d := &ratelimitv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

type rlsWant struct {
	code      rlsv3.RateLimitResponse_Code
	limit     uint32 // current_limit.requests_per_unit; 0: none
	remaining uint32
}

const (
	rlsOK   = rlsv3.RateLimitResponse_OK
	rlsOver = rlsv3.RateLimitResponse_OVER_LIMIT
)

func rlsCheck(t *testing.T, cl rlsv3.RateLimitServiceClient, domain string, hits uint32, overall rlsv3.RateLimitResponse_Code,
	ds []*ratelimitv3.RateLimitDescriptor, ws ...rlsWant) *rlsv3.RateLimitResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := cl.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: domain, Descriptors: ds, HitsAddend: hits})
	if err != nil {
		t.Fatalf("ShouldRateLimit(%s, %v): %v", domain, ds, err)
	}
	if resp.GetOverallCode() != overall {
		t.Errorf("%s %v: overall_code %v, want %v", domain, ds, resp.GetOverallCode(), overall)
	}
	if len(resp.GetStatuses()) != len(ws) {
		t.Fatalf("%s: %d statuses, want %d", domain, len(resp.GetStatuses()), len(ws))
	}
	for i, w := range ws {
		st := resp.GetStatuses()[i]
		lim := st.GetCurrentLimit().GetRequestsPerUnit()
		if st.GetCode() != w.code || lim != w.limit || st.GetLimitRemaining() != w.remaining {
			t.Errorf("%s %v: statuses[%d] = %v limit %d remaining %d; want %v limit %d remaining %d",
				domain, ds[i], i, st.GetCode(), lim, st.GetLimitRemaining(), w.code, w.limit, w.remaining)
		}
	}
	return resp
}

func dialRLS(t *testing.T, addr string) (rlsv3.RateLimitServiceClient, *grpc.ClientConn) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return rlsv3.NewRateLimitServiceClient(conn), conn
}

// TestRLSServeE2E: one serve process with node.envoy_config.
func TestRLSServeE2E(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real process")
	}
	dir := t.TempDir()
	writeRLSConfigs(t, filepath.Join(dir, "ratelimit"))
	cfg := filepath.Join(dir, "tokenmesh.yaml")
	// envoy_config is relative: resolved against the config's directory.
	if err := os.WriteFile(cfg, []byte(`node:
  name: rls
  api_addr: 127.0.0.1:0
  grpc_addr: 127.0.0.1:0
  peer_addr: 127.0.0.1:0
  gossip_addr: 127.0.0.1:0
  envoy_config: ratelimit
rules:
  - name: api
    rate: 1/s
`), 0o644); err != nil {
		t.Fatal(err)
	}
	addrs, out := startServeProc(t, dir, cfg)
	cl, conn := dialRLS(t, addrs.GRPC)
	hctx, hcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer hcancel()
	hr, err := healthpb.NewHealthClient(conn).Check(hctx, &healthpb.HealthCheckRequest{Service: "envoy.service.ratelimit.v3.RateLimitService"}, grpc.WaitForReady(true))
	if err != nil || hr.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health of the RLS service: %v %v", hr, err)
	}

	d := func(kv ...string) []*ratelimitv3.RateLimitDescriptor {
		return []*ratelimitv3.RateLimitDescriptor{rlsDesc(kv...)}
	}
	// A default key: 5 a day per address; hits_addend 0 counts as 1.
	for i := range 5 {
		rlsCheck(t, cl, "edge_proxy_per_ip", 0, rlsOK, d("remote_address", "10.1.1.1"), rlsWant{rlsOK, 5, uint32(4 - i)})
	}
	resp := rlsCheck(t, cl, "edge_proxy_per_ip", 0, rlsOver, d("remote_address", "10.1.1.1"), rlsWant{rlsOver, 5, 0})
	hdr := map[string]string{}
	for _, h := range resp.GetResponseHeadersToAdd() {
		hdr[h.GetKey()] = h.GetValue()
	}
	if hdr["x-ratelimit-limit"] != "5" || hdr["x-ratelimit-remaining"] != "0" || hdr["x-ratelimit-reset"] == "" {
		t.Errorf("response headers %v", hdr)
	}
	// hits_addend > 1 on another address: its own bucket.
	rlsCheck(t, cl, "edge_proxy_per_ip", 3, rlsOK, d("remote_address", "10.1.1.2"), rlsWant{rlsOK, 5, 2})
	rlsCheck(t, cl, "edge_proxy_per_ip", 3, rlsOver, d("remote_address", "10.1.1.2"), rlsWant{rlsOver, 5, 0})
	rlsCheck(t, cl, "edge_proxy_per_ip", 2, rlsOK, d("remote_address", "10.1.1.2"), rlsWant{rlsOK, 5, 0})
	// unlimited
	for range 7 {
		rlsCheck(t, cl, "edge_proxy_per_ip", 1, rlsOK, d("remote_address", "50.0.0.5"), rlsWant{rlsOK, 0, 1<<32 - 1})
	}
	// wildcard with share_threshold: every /files/ path shares 3
	for i, p := range []string{"/files/a", "/files/b", "/files/c"} {
		rlsCheck(t, cl, "edge_proxy_per_ip", 1, rlsOK, d("path", p), rlsWant{rlsOK, 3, uint32(2 - i)})
	}
	rlsCheck(t, cl, "edge_proxy_per_ip", 1, rlsOver, d("path", "/files/z"), rlsWant{rlsOver, 3, 0})
	// unknown domain, unmatched descriptor: OK, no limit
	rlsCheck(t, cl, "no_such_domain", 1, rlsOK, d("remote_address", "10.1.1.1"), rlsWant{rlsOK, 0, 0})
	rlsCheck(t, cl, "edge_proxy_per_ip", 1, rlsOK, d("user_agent", "curl"), rlsWant{rlsOK, 0, 0})
	rlsCheck(t, cl, "edge_proxy_per_ip", 1, rlsOK, d("path", "/other"), rlsWant{rlsOK, 0, 0})
	// nested: only the full descriptor has the limit
	rlsCheck(t, cl, "messaging", 1, rlsOK, d("message_type", "marketing"), rlsWant{rlsOK, 0, 0})
	for i := range 4 {
		rlsCheck(t, cl, "messaging", 1, rlsOK, d("message_type", "marketing", "to_number", "2061234567"), rlsWant{rlsOK, 4, uint32(3 - i)})
	}
	rlsCheck(t, cl, "messaging", 1, rlsOver, d("message_type", "marketing", "to_number", "2061234567"), rlsWant{rlsOver, 4, 0})
	// two descriptors in one request: one over makes the whole request over
	both := []*ratelimitv3.RateLimitDescriptor{rlsDesc("to_number", "2061234567"), rlsDesc("message_type", "marketing", "to_number", "2061234567")}
	rlsCheck(t, cl, "messaging", 1, rlsOver, both, rlsWant{rlsOK, 100, 99}, rlsWant{rlsOver, 4, 0})
	// shadow_mode: counted (remaining goes down) but never refused
	rlsCheck(t, cl, "shadow", 1, rlsOK, d("remote_address", "a"), rlsWant{rlsOK, 2, 1})
	rlsCheck(t, cl, "shadow", 1, rlsOK, d("remote_address", "a"), rlsWant{rlsOK, 2, 0})
	rlsCheck(t, cl, "shadow", 1, rlsOK, d("remote_address", "a"), rlsWant{rlsOK, 2, 0})
	// replaces: with the gold tenant's descriptor, per_user is not checked
	gold := []*ratelimitv3.RateLimitDescriptor{rlsDesc("tenant", "gold"), rlsDesc("user", "u1")}
	for i := range 6 {
		rlsCheck(t, cl, "replaces", 1, rlsOK, gold, rlsWant{rlsOK, 6, uint32(5 - i)}, rlsWant{rlsOK, 0, 0})
	}
	rlsCheck(t, cl, "replaces", 1, rlsOver, gold, rlsWant{rlsOver, 6, 0}, rlsWant{rlsOK, 0, 0})
	rlsCheck(t, cl, "replaces", 1, rlsOK, d("user", "u1"), rlsWant{rlsOK, 2, 1})

	// fixed_window: the remaining counts of envoyproxy/ratelimit's fixed
	// window for the same hits (its INCRBY counts refused hits too, so the
	// third call is over where a token bucket would still admit 1), and its
	// duration_until_reset (whole seconds to the end of the UTC day).
	for i, x := range []struct {
		hits      uint32
		code      rlsv3.RateLimitResponse_Code
		remaining uint32
	}{{3, rlsOK, 2}, {3, rlsOver, 0}, {1, rlsOver, 0}} {
		before := time.Now().Unix()
		resp := rlsCheck(t, cl, "fixed", x.hits, x.code, d("remote_address", "198.51.100.1"), rlsWant{x.code, 5, x.remaining})
		after := time.Now().Unix()
		reset := resp.GetStatuses()[0].GetDurationUntilReset().AsDuration()
		if hi, lo := 86400-before%86400, 86400-after%86400; reset < time.Duration(min(lo, hi))*time.Second || reset > time.Duration(max(lo, hi))*time.Second {
			t.Errorf("fixed_window hit %d: duration_until_reset %v, want the seconds to the end of the UTC day (%d..%d)", i, reset, lo, hi)
		}
	}
	for _, x := range []struct {
		hits      uint32
		code      rlsv3.RateLimitResponse_Code
		remaining uint32
	}{{0, rlsOK, 4}, {4, rlsOK, 0}, {1, rlsOver, 0}} {
		rlsCheck(t, cl, "fixed", x.hits, x.code, d("remote_address", "198.51.100.2"), rlsWant{x.code, 5, x.remaining})
	}

	// The derived rules are the node's: tokenmesh.v1 ListRules shows them.
	if !strings.Contains(out.String(), "rule rls.messaging.message_type_marketing.to_number: rate ") {
		t.Errorf("serve does not list the derived rules")
	}
}

// TestRLSServeBadConfig: a bad envoy config stops the start, naming the
// file and the field.
func TestRLSServeBadConfig(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "bad.yaml"), []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, stderr, code := tokenmesh(t, "serve", "--envoy-config", dir)
	want := filepath.Join(dir, "bad.yaml") + `:4: descriptors[0].rate_limit.unit: invalid rate limit unit "fortnight"`
	if code != 1 || !strings.Contains(stderr, want) {
		t.Errorf("exit %d, stderr %q; want 1 and %q", code, stderr, want)
	}
}

// TestRLSClusterE2E: one descriptor's limit holds across 3 processes
// (owner: exact), checked round-robin at every node.
func TestRLSClusterE2E(t *testing.T) {
	_, cls := startRLSCluster(t, 3, rlsConfigs)
	// token bucket (owner) and fixed_window (fixedwindow, at the owner too)
	for _, domain := range []string{"edge_proxy_per_ip", "fixed"} {
		ok := 0
		for i := range 15 {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			resp, err := cls[i%3].ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: domain,
				Descriptors: []*ratelimitv3.RateLimitDescriptor{rlsDesc("remote_address", "192.0.2.7")}})
			cancel()
			if err != nil {
				t.Fatalf("%s: check %d at n%d: %v", domain, i, i%3, err)
			}
			if resp.GetOverallCode() == rlsOK {
				ok++
			}
			if st := resp.GetStatuses()[0]; st.GetCurrentLimit().GetRequestsPerUnit() != 5 {
				t.Errorf("%s: check %d at n%d: current_limit %v", domain, i, i%3, st.GetCurrentLimit())
			}
		}
		if ok != 5 {
			t.Errorf("%s: 15 checks of one address over 3 nodes: %d OK, want exactly 5 (5 per day, at the key's owner)", domain, ok)
		}
	}
}

// TestServeHTTPMode: serve's HTTP mode answers curl-like requests with 429,
// Retry-After and the RateLimit headers, the key taken by the rule's key
// template (here a header); a gateway's X-Request-Start is the edge time
// (one that does not parse is logged and the request still decided); its
// decisions are in the API's metrics.
func TestServeHTTPMode(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real process")
	}
	addrs, out := startEdgeProc(t, "", `
  - name: api
    key: "{header:x-api-key}"
    rate: 1/m
    burst: 2
  - name: tenants
    key: "{tenant}"
    rate: 1/m
    burst: 1
`)
	client := &http.Client{Timeout: 5 * time.Second}
	var start string // X-Request-Start of the next requests
	get := func(path, apiKey string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, "http://"+addrs.API+path, nil)
		if apiKey != "" {
			req.Header.Set("X-Api-Key", apiKey)
		}
		if start != "" {
			req.Header.Set("X-Request-Start", start)
		}
		return doRetry(t, client, req)
	}
	for i, want := range []int{200, 200, 429} {
		resp := get("/v1/limit/api", "k1")
		if resp.StatusCode != want {
			t.Fatalf("request %d: %d, want %d", i, resp.StatusCode, want)
		}
		if resp.Header.Get("RateLimit-Policy") != `"api";q=2;w=120` || !strings.HasPrefix(resp.Header.Get("RateLimit"), `"api";r=`) {
			t.Errorf("request %d: headers %v", i, resp.Header)
		}
		if want == 429 && resp.Header.Get("Retry-After") != "60" {
			t.Errorf("429 without Retry-After 60: %v", resp.Header)
		}
	}
	if resp := get("/v1/limit/api", ""); resp.StatusCode != 400 {
		t.Errorf("no key: %d, want 400", resp.StatusCode)
	}
	if resp := get("/v1/limit/nosuch", "k1"); resp.StatusCode != 404 {
		t.Errorf("unknown rule: %d, want 404", resp.StatusCode)
	}
	if a, b := get("/v1/limit/tenants?tenant=acme", "").StatusCode, get("/v1/limit/tenants?tenant=acme", "").StatusCode; a != 200 || b != 429 {
		t.Errorf("{tenant} from the query: %d %d, want 200 429", a, b)
	}
	// A gateway's edge time (nginx's "t=${msec}", 20 ms ago), then one that
	// does not parse: both decided; the second logged.
	start = fmt.Sprintf("t=%.3f", float64(time.Now().Add(-20*time.Millisecond).UnixMilli())/1000)
	if resp := get("/v1/limit/api", "k2"); resp.StatusCode != 200 {
		t.Errorf("with X-Request-Start %s: %d, want 200", start, resp.StatusCode)
	}
	start = "yesterday"
	if resp := get("/v1/limit/api", "k3"); resp.StatusCode != 200 {
		t.Errorf("with a malformed X-Request-Start: %d, want 200", resp.StatusCode)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(out.String(), "edge time header ignored") && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.Contains(out.String(), "edge time header ignored") {
		t.Errorf("no log line for the malformed X-Request-Start:\n%s", out.String())
	}
	// Counted as the API's checks: api 2 allowed + 1 refused for k1, k2 and
	// k3 allowed; tenants 1 + 1; the edge time of k2 (and of k3: the time of
	// receipt) in the lateness histogram.
	resp, err := client.Get("http://" + addrs.API + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`tokenmesh_decisions_total{result="allowed",rule="api",strategy="owner"} 4`,
		`tokenmesh_decisions_total{result="refused",rule="api",strategy="owner"} 1`,
		`tokenmesh_decisions_total{result="refused",rule="tenants",strategy="owner"} 1`,
		`tokenmesh_edge_lateness_seconds_count{rule="api"} 5`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// TestServeHTTPModeRefusal403: with node.http_refusal_status 403 (nginx's
// auth_request takes 429 from its subrequest as an error), the HTTP mode
// refuses with 403, its Retry-After and RateLimit headers kept.
func TestServeHTTPModeRefusal403(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real process")
	}
	addrs, _ := startEdgeProc(t, "  http_refusal_status: 403\n", `
  - name: api
    rate: 1/m
    burst: 1
`)
	client := &http.Client{Timeout: 5 * time.Second}
	var codes []int
	for len(codes) < 2 {
		req, _ := http.NewRequest(http.MethodGet, "http://"+addrs.API+"/v1/limit/api?key=k", nil)
		resp := doRetry(t, client, req)
		codes = append(codes, resp.StatusCode)
		if resp.StatusCode == 403 && (resp.Header.Get("Retry-After") != "60" || !strings.HasPrefix(resp.Header.Get("RateLimit"), `"api";r=0`)) {
			t.Errorf("403 without its headers: %v", resp.Header)
		}
	}
	if codes[0] != 200 || codes[1] != 403 {
		t.Errorf("statuses %v, want [200 403]", codes)
	}
}

// startEdgeProc starts `tokenmesh serve` as node "edge" on loopback ports
// picked by the kernel, with nodeExtra (node settings, YAML lines indented
// two spaces; may be empty) and rules (the YAML list under rules:).
func startEdgeProc(t *testing.T, nodeExtra, rules string) (daemon.Addrs, *lockedbuf.Buffer) {
	t.Helper()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "tokenmesh.yaml")
	conf := "node:\n  name: edge\n  api_addr: 127.0.0.1:0\n  grpc_addr: 127.0.0.1:0\n" +
		"  peer_addr: 127.0.0.1:0\n  gossip_addr: 127.0.0.1:0\n" + nodeExtra + "rules:" + rules
	if err := os.WriteFile(cfg, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	return startServeProc(t, dir, cfg)
}

// doRetry sends req until the API answers (it may still be starting right
// after the address file): at most 50 tries, 100 ms apart. The response's
// body is closed.
func doRetry(t *testing.T, client *http.Client, req *http.Request) *http.Response {
	t.Helper()
	for range 50 {
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			return resp
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s %s: no answer", req.Method, req.URL)
	return nil
}
