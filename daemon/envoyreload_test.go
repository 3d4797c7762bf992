package daemon

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/tokenmesh/tokenmesh/config"
	"github.com/tokenmesh/tokenmesh/internal/lockedbuf"
)

// rlsClient dials d's gRPC address for Envoy's RLS.
func rlsClient(t *testing.T, d *Daemon) rlsv3.RateLimitServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(d.Addrs().GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return rlsv3.NewRateLimitServiceClient(conn)
}

// rlsLimit asks for one hit of domain's descriptor (key, value) and
// returns the answer's code and current_limit.requests_per_unit (0: none).
func rlsLimit(t *testing.T, cl rlsv3.RateLimitServiceClient, domain, key, value string) (rlsv3.RateLimitResponse_Code, uint32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := cl.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*ratelimitv3.RateLimitDescriptor{
		{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: key, Value: value}}}}})
	if err != nil {
		t.Fatalf("ShouldRateLimit(%s, %s=%s): %v", domain, key, value, err)
	}
	return resp.GetOverallCode(), resp.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit()
}

// within polls ok every 20 ms for at most d and returns how long it took;
// the test fails when ok never holds.
func within(t *testing.T, d time.Duration, what string, ok func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !ok() {
		if time.Since(start) > d {
			t.Fatalf("no %s within %v", what, d)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return time.Since(start)
}

const (
	rlsOK   = rlsv3.RateLimitResponse_OK
	rlsOver = rlsv3.RateLimitResponse_OVER_LIMIT
)

// An edited Envoy config file is reloaded without a restart (the
// directory is watched): the changed limit answers within 2 s, a new
// domain too, an unchanged limit keeps its drained bucket, and the
// services are told the new Envoy config. A bad file is refused, logged
// naming the file and the field, and the old limits stay; so is a rule
// name the node config also has (Reload, as SIGHUP). Then a good file
// applies again.
func TestDaemonEnvoyReload(t *testing.T) {
	dir := t.TempDir()
	envoyDir := filepath.Join(dir, "ratelimit")
	if err := os.Mkdir(envoyDir, 0o755); err != nil {
		t.Fatal(err)
	}
	edge := filepath.Join(envoyDir, "edge.yaml")
	edgeYAML := func(ipLimit string) string {
		return "domain: edge\ndescriptors:\n  - key: ip\n    rate_limit: {unit: hour, requests_per_unit: " + ipLimit + "}\n" +
			"  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 1}\n"
	}
	writeConfig(t, edge, edgeYAML("2"))
	path := filepath.Join(dir, "tokenmesh.yaml")
	node := strings.Replace(loopbackNode, "%s", "e1", 1)
	writeConfig(t, path, node+"rules:\n  - {name: api, rate: 1/h, burst: 2}\n")
	logs := &lockedbuf.Buffer{}
	echo := &echoService{}
	d := startFrom(t, path, Config{EnvoyDir: envoyDir, WatchConfig: true, Logger: slog.New(slog.NewTextHandler(logs, nil)),
		Services: []Service{echo.service()}})
	waitReady(t, d)
	cl := rlsClient(t, d)

	for i, want := range []rlsv3.RateLimitResponse_Code{rlsOK, rlsOK, rlsOver} {
		if code, limit := rlsLimit(t, cl, "edge", "ip", "a"); code != want || limit != 2 {
			t.Fatalf("ip check %d: %v limit %d; want %v limit 2", i, code, limit, want)
		}
	}
	if code, _ := rlsLimit(t, cl, "edge", "user", "u"); code != rlsOK {
		t.Fatalf("user: %v, want OK", code)
	}
	if code, limit := rlsLimit(t, cl, "new", "k", "v"); code != rlsOK || limit != 0 {
		t.Fatalf("unknown domain: %v limit %d, want OK without a limit", code, limit)
	}

	// ip 2 -> 5 (the rule changes: a fresh bucket), user unchanged, a new
	// domain in a new file.
	writeConfig(t, filepath.Join(envoyDir, "new.yaml"), "domain: new\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 7}\n")
	writeConfig(t, edge, edgeYAML("5"))
	took := within(t, 2*time.Second, "new ip limit", func() bool {
		_, limit := rlsLimit(t, cl, "edge", "ip", "probe")
		return limit == 5
	})
	t.Logf("the edited limit answered %v after the write", took.Round(time.Millisecond))
	within(t, 2*time.Second, "new domain's limit", func() bool { _, limit := rlsLimit(t, cl, "new", "k", "v"); return limit == 7 })
	if code, limit := rlsLimit(t, cl, "edge", "ip", "a"); code != rlsOK || limit != 5 {
		t.Errorf("ip a after the reload: %v limit %d; want OK limit 5 (a changed rule starts afresh)", code, limit)
	}
	if code, _ := rlsLimit(t, cl, "edge", "user", "u"); code != rlsOver {
		t.Errorf("user after the reload: %v; want OVER_LIMIT (an unchanged limit keeps its bucket)", code)
	}
	if rs := d.Rules(); rs.Envoy == nil || rs.Envoy.Domains["new"] == nil || rs.EnvoyDir != envoyDir {
		t.Errorf("Rules() after the reload: Envoy %v, dir %q; want the new domain", rs.Envoy, rs.EnvoyDir)
	}
	within(t, 2*time.Second, "the service told", func() bool {
		echo.mu.Lock()
		defer echo.mu.Unlock()
		n := len(echo.reloads)
		return n > 0 && echo.reloads[n-1].Envoy != nil && echo.reloads[n-1].Envoy.Domains["new"] != nil
	})
	if !strings.Contains(logs.String(), "msg=\"rules reloaded\" trigger=\"file changed\"") || !strings.Contains(logs.String(), "envoy_config="+envoyDir) {
		t.Errorf("the reload was not logged with the envoy directory:\n%s", logs)
	}

	// A bad file: refused, logged naming the file and the field; the old
	// limits stay.
	writeConfig(t, edge, strings.Replace(edgeYAML("5"), "unit: hour", "unit: fortnight", 1))
	within(t, 2*time.Second, "the refusal logged", func() bool {
		return strings.Contains(logs.String(), "reload refused: the old rules stay") &&
			strings.Contains(logs.String(), edge+":4: descriptors[0].rate_limit.unit: invalid rate limit unit \\\"fortnight\\\"")
	})
	if code, limit := rlsLimit(t, cl, "edge", "ip", "a"); code != rlsOK || limit != 5 {
		t.Errorf("after the refused file: %v limit %d; want the old limit 5 (and ip a's bucket)", code, limit)
	}
	if code, _ := rlsLimit(t, cl, "edge", "user", "u"); code != rlsOver {
		t.Errorf("user after the refused file: %v; want OVER_LIMIT (state kept)", code)
	}

	// A rule of the node config named as a derived rule: refused as at
	// start (Reload, what SIGHUP does).
	writeConfig(t, edge, edgeYAML("5"))
	writeConfig(t, path, node+"rules:\n  - {name: api, rate: 1/h, burst: 2}\n  - {name: rls.edge.user, rate: 1/h}\n")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := d.Reload(ctx, "SIGHUP"); err == nil || !strings.Contains(err.Error(), `rule "rls.edge.user" is also a rule of the node config`) {
		t.Errorf("Reload with a rule name both configs have: %v; want it refused, naming the rule", err)
	}
	if code, _ := rlsLimit(t, cl, "edge", "user", "u"); code != rlsOver {
		t.Errorf("user after the refused collision: %v; want OVER_LIMIT (state kept)", code)
	}
	writeConfig(t, path, node+"rules:\n  - {name: api, rate: 1/h, burst: 2}\n")
	writeConfig(t, edge, edgeYAML("6"))
	if err := d.Reload(ctx, "SIGHUP"); err != nil {
		t.Fatalf("Reload of good files: %v", err)
	}
	if code, limit := rlsLimit(t, cl, "edge", "ip", "a"); code != rlsOK || limit != 6 {
		t.Errorf("after SIGHUP: %v limit %d; want OK limit 6", code, limit)
	}
}

// Without a config file, a daemon with an Envoy config still reloads it
// (Reload, what SIGHUP does); on a single node started without a
// fixed_window limit (no wall-clock time base), one added by a reload is
// refused, naming the file and the limit.
func TestDaemonEnvoyReloadNoConfigFile(t *testing.T) {
	envoyDir := t.TempDir()
	edge := filepath.Join(envoyDir, "edge.yaml")
	writeConfig(t, edge, "domain: edge\ndescriptors:\n  - key: ip\n    rate_limit: {unit: hour, requests_per_unit: 2}\n")
	f := config.Default()
	f.Node.APIAddr, f.Node.GRPCAddr = "127.0.0.1:0", "127.0.0.1:0"
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d, err := Start(ctx, Config{File: f, EnvoyDir: envoyDir})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Shutdown(ctx)
	waitReady(t, d)
	cl := rlsClient(t, d)
	writeConfig(t, edge, "domain: edge\ndescriptors:\n  - key: ip\n    rate_limit: {unit: hour, requests_per_unit: 3}\n")
	if err := d.Reload(ctx, "SIGHUP"); err != nil {
		t.Fatalf("Reload of the Envoy config without a config file: %v", err)
	}
	if _, limit := rlsLimit(t, cl, "edge", "ip", "a"); limit != 3 {
		t.Errorf("limit %d after the reload, want 3", limit)
	}
	writeConfig(t, edge, "domain: edge\ntokenmesh: {algorithm: fixed_window}\ndescriptors:\n  - key: ip\n    rate_limit: {unit: hour, requests_per_unit: 4}\n")
	if err := d.Reload(ctx, "SIGHUP"); err == nil || !strings.Contains(err.Error(), edge+": limit edge.ip: algorithm fixed_window needs a wall-clock time base") {
		t.Errorf("Reload adding a fixed_window limit to a node without a wall-clock time base: %v", err)
	}
	if _, limit := rlsLimit(t, cl, "edge", "ip", "a"); limit != 3 {
		t.Errorf("limit %d after the refused reload, want the old 3", limit)
	}
}

// node.envoy_shadow_mode: Envoy's RLS decides and counts every check and
// answers OK (the status says OVER_LIMIT), logged at start and counted in
// tokenmesh_rls_global_shadow_mode_total; it stays on across a reload.
func TestDaemonEnvoyShadowMode(t *testing.T) {
	envoyDir := t.TempDir()
	writeConfig(t, filepath.Join(envoyDir, "edge.yaml"), "domain: edge\ndescriptors:\n  - key: ip\n    rate_limit: {unit: hour, requests_per_unit: 1}\n")
	f := config.Default()
	f.Node.APIAddr, f.Node.GRPCAddr = "127.0.0.1:0", "127.0.0.1:0"
	f.Node.EnvoyShadowMode = true
	logs := &lockedbuf.Buffer{}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d, err := Start(ctx, Config{File: f, EnvoyDir: envoyDir, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Shutdown(ctx)
	waitReady(t, d)
	if !strings.Contains(logs.String(), "global shadow mode on (node.envoy_shadow_mode)") {
		t.Errorf("the shadow mode was not logged at start:\n%s", logs)
	}
	cl := rlsClient(t, d)
	for i := range 3 {
		if code, limit := rlsLimit(t, cl, "edge", "ip", "a"); code != rlsOK || limit != 1 {
			t.Errorf("check %d in the shadow mode: %v limit %d; want OK limit 1", i, code, limit)
		}
		if i == 0 {
			if err := d.Reload(ctx, "SIGHUP"); err != nil {
				t.Fatal(err)
			}
		}
	}
	resp, err := http.Get(d.APIURL() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, want := range []string{"tokenmesh_rls_global_shadow_mode_total 2",
		`tokenmesh_decisions_total{result="allowed",rule="rls.edge.ip",strategy="owner"} 3`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

// A reload keeps the limit overrides' rules whose descriptor is still in
// the files (with their buckets), derives them from the new files (the
// node's Deriver follows the reload), and drops those whose descriptor
// is gone; the bounds come from the node settings.
func TestDaemonEnvoyReloadOverrides(t *testing.T) {
	dir := t.TempDir()
	envoyDir := filepath.Join(dir, "ratelimit")
	if err := os.Mkdir(envoyDir, 0o755); err != nil {
		t.Fatal(err)
	}
	edge := filepath.Join(envoyDir, "edge.yaml")
	both := "domain: edge\ndescriptors:\n  - key: ip\n    rate_limit: {unit: hour, requests_per_unit: 100}\n" +
		"  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 100}\n"
	writeConfig(t, edge, both)
	path := filepath.Join(dir, "tokenmesh.yaml")
	node := strings.Replace(loopbackNode, "%s", "o1", 1) + "  envoy_max_overrides_per_descriptor: 2\n"
	writeConfig(t, path, node+"rules:\n  - {name: api, rate: 1/h, burst: 2}\n")
	d := startFrom(t, path, Config{EnvoyDir: envoyDir})
	waitReady(t, d)
	cl := rlsClient(t, d)
	ask := func(key string, rpu uint32) (rlsv3.RateLimitResponse_Code, uint32, error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := cl.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{
			{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: key, Value: "v"}},
				Limit: &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: rpu, Unit: typev3.RateLimitUnit_HOUR}}}})
		if err != nil {
			return 0, 0, err
		}
		return resp.GetOverallCode(), resp.GetStatuses()[0].GetLimitRemaining(), nil
	}
	for _, x := range []struct {
		key       string
		rpu       uint32
		remaining uint32
	}{{"ip", 3, 2}, {"ip", 3, 1}, {"user", 3, 2}, {"ip", 4, 0}} { // ip 4/h: from 3/h's 1 left
		if code, rem, err := ask(x.key, x.rpu); err != nil || code != rlsOK || rem != x.remaining {
			t.Fatalf("%s %d/h: %v remaining %d, %v; want OK remaining %d", x.key, x.rpu, code, rem, err, x.remaining)
		}
	}
	// node.envoy_max_overrides_per_descriptor: 2.
	if _, _, err := ask("ip", 5); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a third override of ip: %v; want RESOURCE_EXHAUSTED", err)
	}
	// user's descriptor goes; ip's stays as it was.
	writeConfig(t, edge, "domain: edge\ndescriptors:\n  - key: ip\n    rate_limit: {unit: hour, requests_per_unit: 100}\n")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := d.Reload(ctx, "SIGHUP"); err != nil {
		t.Fatal(err)
	}
	if code, rem, err := ask("ip", 3); err != nil || code != rlsOK || rem != 0 {
		t.Errorf("ip 3/h after the reload: %v remaining %d, %v; want its last token (kept)", code, rem, err)
	}
	if code, rem, err := ask("user", 3); err != nil || code != rlsOK || rem != 2 {
		t.Errorf("user 3/h after the reload: %v remaining %d, %v; want a fresh bucket (the domain's unmatched entries)", code, rem, err)
	}
	for _, name := range []string{"rls.edge.ip--3-per-hour", "rls.edge.ip--4-per-hour", "rls.edge--any--3-per-hour"} {
		if _, ok := d.node.Cluster().Rule(name); !ok {
			t.Errorf("after the reload the node lacks %s", name)
		}
	}
	if _, ok := d.node.Cluster().Rule("rls.edge.user--3-per-hour"); ok {
		t.Error("after the reload the node still has user's override rule")
	}
}
