package main

// A differential test against the real envoyproxy/ratelimit: the same
// config and the same random requests to it (with redis-server) and to
// tokenmesh with algorithm fixed_window must get the same answers. It runs
// when TOKENMESH_ENVOY_RATELIMIT_BIN names envoyproxy/ratelimit's binary
// (go install github.com/envoyproxy/ratelimit/src/service_cmd@VERSION) and
// redis-server is on PATH; otherwise it is skipped.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// diffConfig exercises every semantic at once: a default key, explicit
// values, unlimited, nested descriptors, shadow_mode, quota_mode, replaces, wildcards
// with and without share_threshold. Per-day limits: no window ends during
// the test (unless it runs across midnight UTC: then it is retried).
const diffConfig = `domain: diff
descriptors:
  - key: ip
    rate_limit: {unit: day, requests_per_unit: 6}
  - key: ip
    value: 10.0.0.1
    rate_limit: {unlimited: true}
  - key: msg
    value: marketing
    descriptors:
      - key: to
        rate_limit: {unit: day, requests_per_unit: 4}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: day, requests_per_unit: 3}
  - key: quota
    quota_mode: true
    rate_limit: {unit: day, requests_per_unit: 2}
  - key: tenant
    value: gold
    rate_limit: {unit: day, requests_per_unit: 8, name: gold, replaces: [{name: per_user}]}
  - key: user
    rate_limit: {unit: day, requests_per_unit: 3, name: per_user}
  - key: path
    value: /a/*
    rate_limit: {unit: day, requests_per_unit: 2}
  - key: path
    value: /s/*
    share_threshold: true
    rate_limit: {unit: day, requests_per_unit: 5}
`

func freeAddr(t *testing.T) (string, int) {
	t.Helper()
	p := freePort(t)
	return fmt.Sprintf("127.0.0.1:%d", p), p
}

func TestRLSFixedWindowMatchesEnvoyRatelimit(t *testing.T) {
	bin := os.Getenv("TOKENMESH_ENVOY_RATELIMIT_BIN")
	redis, err := exec.LookPath("redis-server")
	if bin == "" || err != nil {
		t.Skip("needs TOKENMESH_ENVOY_RATELIMIT_BIN (envoyproxy/ratelimit's service_cmd) and redis-server on PATH")
	}
	dir := t.TempDir()
	redisAddr, redisPort := freeAddr(t)
	startProc(t, exec.Command(redis, "--port", strconv.Itoa(redisPort), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"), "redis-server")

	rlDir := filepath.Join(dir, "rt", "ratelimit", "config")
	tmDir := filepath.Join(dir, "tm")
	for _, d := range []string{rlDir, tmDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(rlDir, "diff.yaml"), []byte(diffConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tmDir, "diff.yaml"), []byte("tokenmesh: {algorithm: fixed_window}\n"+diffConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	rlGRPC, rlGRPCPort := freeAddr(t)
	_, rlHTTPPort := freeAddr(t)
	_, rlDebugPort := freeAddr(t)
	rl := exec.Command(bin)
	rl.Env = append(os.Environ(), "USE_STATSD=false", "LOG_LEVEL=warn", "REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+redisAddr,
		"RUNTIME_ROOT="+filepath.Join(dir, "rt"), "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false",
		"HOST=127.0.0.1", "DEBUG_HOST=127.0.0.1", "GRPC_HOST=127.0.0.1", "GRPC_PORT="+strconv.Itoa(rlGRPCPort),
		"PORT="+strconv.Itoa(rlHTTPPort), "DEBUG_PORT="+strconv.Itoa(rlDebugPort),
		"LIMIT_RESPONSE_HEADERS_ENABLED=true", "LIMIT_LIMIT_HEADER=x-ratelimit-limit",
		"LIMIT_REMAINING_HEADER=x-ratelimit-remaining", "LIMIT_RESET_HEADER=x-ratelimit-reset")
	startProc(t, rl, "envoyproxy/ratelimit")

	cfg := filepath.Join(dir, "tokenmesh.yaml")
	if err := os.WriteFile(cfg, []byte("node:\n  name: diff\n  api_addr: 127.0.0.1:0\n  grpc_addr: 127.0.0.1:0\n  peer_addr: 127.0.0.1:0\n  gossip_addr: 127.0.0.1:0\n  envoy_config: tm\nrules:\n  - name: api\n    rate: 1/s\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	addrs, _ := startServeProc(t, dir, cfg)
	tm, _ := dialRLS(t, addrs.GRPC)
	envoy, _ := dialRLS(t, rlGRPC)
	// wait until envoyproxy/ratelimit answers (it loads its config first)
	probe := &rlsv3.RateLimitRequest{Domain: "probe", Descriptors: []*ratelimitv3.RateLimitDescriptor{rlsDesc("x", "y")}}
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := envoy.ShouldRateLimit(ctx, probe)
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("envoyproxy/ratelimit does not answer: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}

	day := time.Now().UTC().YearDay()
	rng := rand.New(rand.NewPCG(15, 2026))
	pick := func(xs ...string) string { return xs[rng.IntN(len(xs))] }
	descriptor := func() *ratelimitv3.RateLimitDescriptor {
		switch rng.IntN(8) {
		case 7:
			return rlsDesc("quota", pick("a", "b"))
		case 0:
			return rlsDesc("ip", pick("10.0.0.1", "10.0.0.2", "10.0.0.3"))
		case 1:
			return rlsDesc("msg", pick("marketing", "alerts"), "to", pick("1", "2"))
		case 2:
			return rlsDesc("msg", "marketing")
		case 3:
			return rlsDesc("shadow", pick("a", "b"))
		case 4:
			return rlsDesc("tenant", pick("gold", "silver"))
		case 5:
			return rlsDesc("user", pick("u1", "u2"))
		default:
			return rlsDesc("path", pick("/a/1", "/a/2", "/s/1", "/s/2", "/z"))
		}
	}
	compared, headers := 0, 0
	for i := range 300 {
		req := &rlsv3.RateLimitRequest{Domain: "diff", HitsAddend: uint32(rng.IntN(4))}
		if rng.IntN(10) == 0 {
			req.Domain = "nosuch"
		}
		for range 1 + rng.IntN(3) {
			req.Descriptors = append(req.Descriptors, descriptor())
		}
		call := func(c rlsv3.RateLimitServiceClient) *rlsv3.RateLimitResponse {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			resp, err := c.ShouldRateLimit(ctx, req)
			if err != nil {
				t.Fatalf("request %d %v: %v", i, req, err)
			}
			return resp
		}
		want, got := call(envoy), call(tm)
		if time.Now().UTC().YearDay() != day {
			t.Skip("ran across midnight UTC: the day windows reset between the two systems")
		}
		if got.GetOverallCode() != want.GetOverallCode() || len(got.GetStatuses()) != len(want.GetStatuses()) {
			t.Fatalf("request %d %v:\n tokenmesh %v\n envoy     %v", i, req, got, want)
		}
		for j, w := range want.GetStatuses() {
			g := got.GetStatuses()[j]
			dr := g.GetDurationUntilReset().AsDuration() - w.GetDurationUntilReset().AsDuration()
			if g.GetCode() != w.GetCode() || g.GetLimitRemaining() != w.GetLimitRemaining() ||
				g.GetCurrentLimit().GetRequestsPerUnit() != w.GetCurrentLimit().GetRequestsPerUnit() ||
				g.GetCurrentLimit().GetUnit() != w.GetCurrentLimit().GetUnit() || dr < -time.Second || dr > time.Second {
				t.Fatalf("request %d %v, status %d:\n tokenmesh %v\n envoy     %v", i, req, j, g, w)
			}
			compared++
		}
		// the headers Envoy forwards: same names, limit and remaining; reset
		// within a second
		hdr := func(r *rlsv3.RateLimitResponse) []string {
			var out []string
			for _, h := range r.GetResponseHeadersToAdd() {
				out = append(out, h.GetKey()+"="+h.GetValue())
			}
			return out
		}
		gh, wh := hdr(got), hdr(want)
		same := len(gh) == len(wh)
		for k := 0; same && k < len(gh); k++ {
			if gh[k] != wh[k] {
				g, _ := strconv.Atoi(strings.TrimPrefix(gh[k], "x-ratelimit-reset="))
				w, _ := strconv.Atoi(strings.TrimPrefix(wh[k], "x-ratelimit-reset="))
				same = strings.HasPrefix(gh[k], "x-ratelimit-reset=") && strings.HasPrefix(wh[k], "x-ratelimit-reset=") && g-w <= 1 && w-g <= 1
			}
		}
		if !same {
			t.Fatalf("request %d %v: headers\n tokenmesh %v\n envoy     %v", i, req, gh, wh)
		}
		headers += len(gh)
	}
	t.Logf("%d descriptor statuses and %d response headers identical", compared, headers)
}
