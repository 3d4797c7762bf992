package main

// End-to-end tests of the Envoy config's reload and of the global shadow
// mode on real serve processes .

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// writeRenamed writes text to path as editors and configuration tools do:
// a new file renamed over the old one.
func writeRenamed(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path+".tmp", []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
}

// waitRLSServing waits (10 s at most) for the RLS service's health.
func waitRLSServing(t *testing.T, conn *grpc.ClientConn) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	hr, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: "envoy.service.ratelimit.v3.RateLimitService"}, grpc.WaitForReady(true))
	if err != nil || hr.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health of the RLS service: %v %v", hr, err)
	}
}

// rlsOne asks for one hit of domain's descriptor (key, value): the overall
// code, and the status's code and current_limit.requests_per_unit.
func rlsOne(t *testing.T, cl rlsv3.RateLimitServiceClient, domain, key, value string) (overall, code rlsv3.RateLimitResponse_Code, limit uint32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := cl.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: domain,
		Descriptors: []*ratelimitv3.RateLimitDescriptor{rlsDesc(key, value)}})
	if err != nil {
		t.Fatalf("ShouldRateLimit(%s, %s=%s): %v", domain, key, value, err)
	}
	st := resp.GetStatuses()[0]
	return resp.GetOverallCode(), st.GetCode(), st.GetCurrentLimit().GetRequestsPerUnit()
}

// TestRLSReloadE2E: serve --envoy-config DIR (no --config) and the file
// edited under it: the changed limit answers within 2 s, without a
// restart (the Done-when), the derived rule starting afresh and
// an unchanged limit keeping its drained bucket; a bad file is refused,
// logged naming the file and the field, and the old limits stay; SIGHUP
// reloads the directory too (the bad file: refused again).
func TestRLSReloadE2E(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real process")
	}
	dir := t.TempDir()
	envoyDir := filepath.Join(dir, "ratelimit")
	if err := os.Mkdir(envoyDir, 0o755); err != nil {
		t.Fatal(err)
	}
	edge := filepath.Join(envoyDir, "edge.yaml")
	edgeYAML := func(ipLimit string) string {
		return "domain: edge\ndescriptors:\n  - key: ip\n    rate_limit: {unit: day, requests_per_unit: " + ipLimit + "}\n" +
			"  - key: user\n    rate_limit: {unit: day, requests_per_unit: 1}\n"
	}
	writeRenamed(t, edge, edgeYAML("2"))
	addrs, out, cmd, done := startServe(t, dir, nil, "--envoy-config", envoyDir,
		"--api-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0", "--log-format", "json")
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf(format+"\nserve output:\n%s", append(args, out.String())...)
	}
	cl, conn := dialRLS(t, addrs.GRPC)
	waitRLSServing(t, conn)
	for i, want := range []rlsv3.RateLimitResponse_Code{rlsOK, rlsOK, rlsOver} {
		if _, code, limit := rlsOne(t, cl, "edge", "ip", "192.0.2.1"); code != want || limit != 2 {
			fail("ip check %d: %v limit %d; want %v limit 2", i, code, limit, want)
		}
	}
	if _, code, _ := rlsOne(t, cl, "edge", "user", "u1"); code != rlsOK {
		fail("user: %v, want OK", code)
	}
	waitLog := func(what string, ok func(string) bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !ok(out.String()); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				fail("no %s after 10 s", what)
			}
		}
	}

	// The edit: ip 2 -> 5 a day; seen within 2 s.
	start := time.Now()
	writeRenamed(t, edge, edgeYAML("5"))
	for {
		if _, _, limit := rlsOne(t, cl, "edge", "ip", "192.0.2.9"); limit == 5 {
			break
		}
		if time.Since(start) > 2*time.Second {
			fail("the edited limit (5) not answered 2 s after the write")
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("the edited limit answered %v after the write, without a restart", time.Since(start).Round(time.Millisecond))
	if _, code, limit := rlsOne(t, cl, "edge", "ip", "192.0.2.1"); code != rlsOK || limit != 5 {
		fail("ip after the reload: %v limit %d; want OK limit 5 (its rule changed: a fresh bucket)", code, limit)
	}
	if _, code, _ := rlsOne(t, cl, "edge", "user", "u1"); code != rlsOver {
		fail("user after the reload: %v; want OVER_LIMIT (an unchanged limit keeps its bucket)", code)
	}
	waitLog("reload logged", func(s string) bool {
		return strings.Contains(s, `"msg":"rules reloaded","trigger":"file changed","envoy_config":"`+envoyDir+`"`)
	})

	// A bad file: refused, logged naming the file and the field.
	writeRenamed(t, edge, strings.Replace(edgeYAML("7"), "unit: day", "unit: fortnight", 1))
	waitLog("the refusal logged", func(s string) bool {
		return strings.Contains(s, `"msg":"reload refused: the old rules stay"`) &&
			strings.Contains(s, edge+`:4: descriptors[0].rate_limit.unit: invalid rate limit unit \"fortnight\"`)
	})
	if _, code, limit := rlsOne(t, cl, "edge", "ip", "192.0.2.1"); code != rlsOK || limit != 5 {
		fail("after the refused file: %v limit %d; want the old limit 5", code, limit)
	}
	// SIGHUP reloads the directory (no --config): the bad file refused again.
	before := strings.Count(out.String(), `"trigger":"SIGHUP"`)
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitLog("the SIGHUP reload logged", func(s string) bool { return strings.Count(s, `"trigger":"SIGHUP"`) > before })
	if strings.Contains(out.String(), "SIGHUP: no config file") {
		fail("SIGHUP did not reload the envoy config")
	}
	if _, code, limit := rlsOne(t, cl, "edge", "user", "u1"); code != rlsOver || limit != 1 {
		fail("user after the refusals: %v limit %d; want OVER_LIMIT limit 1 (state kept)", code, limit)
	}
	terminate(t, cmd, done, 10*time.Second, fail)
}

// TestRLSShadowModeE2E: TOKENMESH_ENVOY_SHADOW_MODE=true (envoyproxy/
// ratelimit's SHADOW_MODE): serve says so at start, and a descriptor over
// its limit is answered OK overall, its status OVER_LIMIT.
func TestRLSShadowModeE2E(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real process")
	}
	dir := t.TempDir()
	writeRenamed(t, filepath.Join(dir, "edge.yaml"), "domain: edge\ndescriptors:\n  - key: ip\n    rate_limit: {unit: day, requests_per_unit: 1}\n")
	addrs, out, cmd, done := startServe(t, dir, []string{envShadow + "=true"}, "--envoy-config", dir,
		"--api-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0")
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf(format+"\nserve output:\n%s", append(args, out.String())...)
	}
	cl, conn := dialRLS(t, addrs.GRPC)
	waitRLSServing(t, conn)
	for _, want := range []string{"node.envoy_shadow_mode from " + envShadow, "global shadow mode on (node.envoy_shadow_mode)",
		"global shadow mode (node.envoy_shadow_mode): decided and counted, none refused"} {
		if !strings.Contains(out.String(), want) {
			fail("serve does not say %q at start", want)
		}
	}
	for i, want := range []rlsv3.RateLimitResponse_Code{rlsOK, rlsOver, rlsOver} {
		if overall, code, limit := rlsOne(t, cl, "edge", "ip", "a"); overall != rlsOK || code != want || limit != 1 {
			fail("check %d: overall %v, status %v limit %d; want overall OK, status %v limit 1", i, overall, code, limit, want)
		}
	}
	terminate(t, cmd, done, 10*time.Second, fail)
}
