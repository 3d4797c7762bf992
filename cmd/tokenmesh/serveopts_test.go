package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"

	"github.com/tokenmesh/tokenmesh/config"
	"github.com/tokenmesh/tokenmesh/daemon"
	"github.com/tokenmesh/tokenmesh/internal/lockedbuf"
)

// TestNodeFlagsPrecedence: flag > environment > YAML > default, per setting;
// a bad value names the flag or the variable and leaves f unchanged.
// --latency-hint and TOKENMESH_LATENCY_HINT set node.latency_hint, the
// flag over the variable over the YAML.
func TestLatencyHintFlag(t *testing.T) {
	f, err := config.Parse([]byte("node:\n  name: n\n  latency_hint: 3ms\nrules:\n  - name: r\n    rate: 1/s\n"), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var o nodeFlags
	cmd := &cobra.Command{Use: "serve"}
	o.add(cmd)
	t.Setenv(envLatency, "auto")
	if _, _, err := o.apply(cmd, f); err != nil || f.Node.LatencyHint != (config.LatencyHint{Auto: true}) {
		t.Fatalf("%s=auto over latency_hint: 3ms: %+v, %v; want auto", envLatency, f.Node.LatencyHint, err)
	}
	if err := cmd.ParseFlags([]string{"--latency-hint", "7ms"}); err != nil {
		t.Fatal(err)
	}
	applied, peer, err := o.apply(cmd, f)
	if err != nil || f.Node.LatencyHint != (config.LatencyHint{Value: 7 * time.Millisecond}) || peer ||
		!slices.Contains(applied, "node.latency_hint from --latency-hint") {
		t.Fatalf("--latency-hint 7ms: %+v, applied %q, peer %v, %v", f.Node.LatencyHint, applied, peer, err)
	}
}

// --envoy-shadow-mode and TOKENMESH_ENVOY_SHADOW_MODE set
// node.envoy_shadow_mode, the flag over the variable over the YAML; a
// value that is not a bool names the variable and changes nothing.
func TestEnvoyShadowModeFlag(t *testing.T) {
	f, err := config.Parse([]byte("node:\n  name: n\n  envoy_shadow_mode: true\nrules:\n  - name: r\n    rate: 1/s\n"), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var o nodeFlags
	cmd := &cobra.Command{Use: "serve"}
	o.add(cmd)
	t.Setenv(envShadow, "maybe")
	if _, _, err := o.apply(cmd, f); err == nil || !strings.Contains(err.Error(), envShadow+` "maybe": node.envoy_shadow_mode: want true or false`) ||
		!f.Node.EnvoyShadowMode {
		t.Fatalf("%s=maybe: %v (mode %v); want an error naming the variable, the YAML's true kept", envShadow, err, f.Node.EnvoyShadowMode)
	}
	t.Setenv(envShadow, "false")
	if applied, _, err := o.apply(cmd, f); err != nil || f.Node.EnvoyShadowMode ||
		!slices.Contains(applied, "node.envoy_shadow_mode from "+envShadow) {
		t.Fatalf("%s=false over the YAML's true: %v, applied %q, %v", envShadow, f.Node.EnvoyShadowMode, applied, err)
	}
	if err := cmd.ParseFlags([]string{"--envoy-shadow-mode"}); err != nil {
		t.Fatal(err)
	}
	if applied, peer, err := o.apply(cmd, f); err != nil || !f.Node.EnvoyShadowMode || peer ||
		!slices.Contains(applied, "node.envoy_shadow_mode from --envoy-shadow-mode") {
		t.Fatalf("--envoy-shadow-mode over %s=false: %v, applied %q, peer %v, %v", envShadow, f.Node.EnvoyShadowMode, applied, peer, err)
	}
}

// --envoy-strategy and TOKENMESH_ENVOY_STRATEGY set node.envoy_strategy,
// the flag over the variable over the YAML.
func TestEnvoyStrategyFlag(t *testing.T) {
	f, err := config.Parse([]byte("node:\n  name: n\n  envoy_strategy: lease\nrules:\n  - name: r\n    rate: 1/s\n"), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var o nodeFlags
	cmd := &cobra.Command{Use: "serve"}
	o.add(cmd)
	t.Setenv(envEnvoyStrat, "owner")
	if applied, _, err := o.apply(cmd, f); err != nil || f.Node.EnvoyStrategy != "owner" ||
		!slices.Contains(applied, "node.envoy_strategy from "+envEnvoyStrat) {
		t.Fatalf("%s=owner over the YAML's lease: %q, applied %q, %v", envEnvoyStrat, f.Node.EnvoyStrategy, applied, err)
	}
	if err := cmd.ParseFlags([]string{"--envoy-strategy", "quota"}); err != nil {
		t.Fatal(err)
	}
	if applied, _, err := o.apply(cmd, f); err != nil || f.Node.EnvoyStrategy != "quota" ||
		!slices.Contains(applied, "node.envoy_strategy from --envoy-strategy") {
		t.Fatalf("--envoy-strategy quota over %s=owner: %q, applied %q, %v", envEnvoyStrat, f.Node.EnvoyStrategy, applied, err)
	}
}

func TestNodeFlagsPrecedence(t *testing.T) {
	f, err := config.Parse([]byte("node:\n  name: yaml-name\n  api_addr: 127.0.0.1:1001\n  grpc_addr: 127.0.0.1:1002\nrules:\n  - name: r\n    rate: 1/s\n"), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var o nodeFlags
	cmd := &cobra.Command{Use: "serve"}
	o.add(cmd)
	if err := cmd.ParseFlags([]string{"--name", "flag-name", "--join", "10.0.0.1:7946", "--join", "10.0.0.2:7946,10.0.0.3:7946"}); err != nil {
		t.Fatal(err)
	}
	t.Setenv(envName, "env-name")             // loses to --name
	t.Setenv(envAPIAddr, "127.0.0.1:2001")    // wins over the YAML
	t.Setenv(envGRPCAddr, "")                 // empty: unset, the YAML stands
	t.Setenv(envJoin, "10.9.9.9:7946")        // loses to --join
	t.Setenv(envGossipAddr, "127.0.0.1:7000") // wins over the default
	applied, peer, err := o.apply(cmd, f)
	if err != nil {
		t.Fatal(err)
	}
	n := f.Node
	if n.Name != "flag-name" || n.APIAddr != "127.0.0.1:2001" || n.GRPCAddr != "127.0.0.1:1002" ||
		n.GossipAddr != "127.0.0.1:7000" || n.PeerAddr != config.DefaultPeerAddr ||
		strings.Join(n.Join, " ") != "10.0.0.1:7946 10.0.0.2:7946 10.0.0.3:7946" {
		t.Errorf("node after overrides: %+v", n)
	}
	if !peer {
		t.Error("--join given: want peerSet")
	}
	if want := "node.name from --name|node.api_addr from TOKENMESH_API_ADDR|node.gossip_addr from TOKENMESH_GOSSIP_ADDR|node.join from --join"; strings.Join(applied, "|") != want {
		t.Errorf("applied %q, want %q", applied, want)
	}

	for _, c := range []struct {
		args []string
		env  [2]string
		want string
	}{
		{[]string{"--api-addr", "8080"}, [2]string{}, `--api-addr "8080": node.api_addr: "8080" is not host:port`},
		{nil, [2]string{envPeerAddr, "h:99999"}, `TOKENMESH_PEER_ADDR "h:99999": node.peer_addr:`},
		{[]string{"--join", "abc"}, [2]string{}, `--join "abc": node.join[0]: "abc" is not host:port`},
		{[]string{"--name", "bad name!"}, [2]string{}, `--name "bad name!": node.name:`},
		{[]string{"--latency-hint", "soon"}, [2]string{}, `--latency-hint "soon": node.latency_hint: "soon" is neither auto nor a duration`},
		{nil, [2]string{envLatency, "1h"}, `TOKENMESH_LATENCY_HINT "1h": node.latency_hint: 1h0m0s is outside [0, 500ms]`},
	} {
		t.Run(strings.Join(c.args, " ")+c.env[0], func(t *testing.T) {
			for _, e := range []string{envName, envAPIAddr, envGRPCAddr, envJoin, envGossipAddr, envPeerAddr, envLatency} {
				t.Setenv(e, "")
			}
			if c.env[0] != "" {
				t.Setenv(c.env[0], c.env[1])
			}
			f := config.Default()
			before := f.Node
			var o nodeFlags
			cmd := &cobra.Command{Use: "serve"}
			o.add(cmd)
			if err := cmd.ParseFlags(c.args); err != nil {
				t.Fatal(err)
			}
			_, _, err := o.apply(cmd, f)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one containing %q", err, c.want)
			}
			if fmt.Sprint(f.Node) != fmt.Sprint(before) {
				t.Errorf("a refused value changed the node: %+v", f.Node)
			}
		})
	}
}

// TestServeFlagsEnvJSONLogs runs serve with no YAML, its settings from
// flags and environment variables, JSON logs: the node takes the name of
// the flag over the variable and the API address of the variable; every
// stdout line is a JSON log record and the life cycle is logged; /metrics
// has build_info; gRPC reflection lists the API. Bad values exit 2 naming
// the flag or variable.
func TestServeFlagsEnvJSONLogs(t *testing.T) {
	api := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	dir := t.TempDir()
	addrFile := filepath.Join(dir, "addrs.json")
	cmd := exec.Command(binary, "serve", "--name", "from-flag", "--grpc-addr", "127.0.0.1:0",
		"--log-format", "json", "--addr-file", addrFile)
	cmd.Env = append(os.Environ(), envName+"=from-env", envAPIAddr+"="+api, envLogLevel+"=debug")
	var stdout, stderr lockedbuf.Buffer // read while the process writes
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	done := startCmd(t, cmd, "serve")
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf(format+"\nstdout:\n%s\nstderr:\n%s", append(args, stdout.String(), stderr.String())...)
	}
	var addrs daemon.Addrs
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if b, err := os.ReadFile(addrFile); err == nil && json.Unmarshal(b, &addrs) == nil {
			break
		}
		if time.Now().After(deadline) {
			fail("no --addr-file after 15 s")
		}
	}
	if addrs.Name != "from-flag" || addrs.API != api {
		fail("addresses %+v: want name from-flag (--name over TOKENMESH_NAME), api %s (TOKENMESH_API_ADDR)", addrs, api)
	}

	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get("http://" + api + "/metrics")
	if err != nil {
		fail("GET /metrics: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !bytes.Contains(body, []byte(`tokenmesh_build_info{goversion="go`)) || !bytes.Contains(body, []byte(`version="`)) {
		fail("/metrics has no tokenmesh_build_info:\n%s", body)
	}

	conn, err := grpc.NewClient(addrs.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		fail("reflection: %v", err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		fail("reflection send: %v", err)
	}
	rr, err := stream.Recv()
	if err != nil {
		fail("reflection recv: %v", err)
	}
	var services []string
	for _, s := range rr.GetListServicesResponse().GetService() {
		services = append(services, s.GetName())
	}
	if got := strings.Join(services, " "); !strings.Contains(got, "tokenmesh.v1.RateLimitService") || !strings.Contains(got, "grpc.health.v1.Health") {
		fail("reflection lists %v: want tokenmesh.v1.RateLimitService and grpc.health.v1.Health", services)
	}
	_ = stream.CloseSend()

	// SIGHUP with no config file to reload: a warning, the node stays.
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(stdout.String(), "SIGHUP: no config file"); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			fail("no warning for SIGHUP without a config file after 10 s")
		}
	}

	terminate(t, cmd, done, 10*time.Second, fail)
	var msgs []string
	sc := bufio.NewScanner(strings.NewReader(stdout.String()))
	for sc.Scan() {
		var rec struct{ Level, Msg string }
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil || rec.Level == "" || rec.Msg == "" {
			fail("stdout line %q is not a JSON log record (%v)", sc.Text(), err)
		}
		msgs = append(msgs, rec.Msg)
	}
	got := strings.Join(msgs, "|")
	for _, want := range []string{"starting tokenmesh", "config loaded", "serving", "shutting down", "stopped"} {
		if !strings.Contains(got, want) {
			t.Errorf("no %q record in the log: %s", want, got)
		}
	}
	if !slices.Contains(msgs, "rule") { // one record a rule: JSON logs have no banner
		t.Errorf("no rule record in the log: %s", got)
	}

	for _, c := range []struct {
		args []string
		env  string
		want string
	}{
		{[]string{"serve", "--api-addr", "8080"}, "", `--api-addr "8080"`},
		{[]string{"serve", "--join", "abc"}, "", `--join "abc"`},
		{[]string{"serve"}, envLogFormat + "=xml", `TOKENMESH_LOG_FORMAT "xml": want text or json`},
		{[]string{"serve", "--log-level", "loud"}, "", `--log-level "loud"`},
	} {
		cmd := exec.Command(binary, c.args...)
		cmd.Env = os.Environ()
		if c.env != "" {
			cmd.Env = append(cmd.Env, c.env)
		}
		var errb bytes.Buffer
		cmd.Stderr = &errb
		err := cmd.Run()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(errb.String(), c.want) {
			t.Errorf("%v %s: %v, stderr %q; want exit 2 naming %s", c.args, c.env, err, errb.String(), c.want)
		}
	}
}

// TestPlainNumber: rates print without exponents .
func TestPlainNumber(t *testing.T) {
	for _, c := range []struct {
		v    float64
		want string
	}{{1e9, "1000000000"}, {0.5, "0.5"}, {100.0 / 6, "16.666667"}, {10, "10"}, {1.0 / 3600, "0.000278"}} {
		if got := plainNumber(c.v); got != c.want {
			t.Errorf("plainNumber(%v) = %q, want %q", c.v, got, c.want)
		}
	}
}

// TestExperimentListsWithoutName: `tokenmesh experiment` with no name
// lists the experiments and exits 0 .
func TestExperimentListsWithoutName(t *testing.T) {
	stdout, stderr, code := tokenmesh(t, "experiment")
	if code != 0 || !strings.Contains(stdout, "Experiments") || !strings.Contains(stdout, "gdrl-ring") {
		t.Errorf("experiment with no name: exit %d, stdout %q, stderr %q; want the list", code, stdout, stderr)
	}
}

// TestLineProgress: without a terminal, replay's progress is a line at
// most every interval of wall time, plus one when all requests are sent.
func TestLineProgress(t *testing.T) {
	var out bytes.Buffer
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	p := lineProgress(&out, "owner", 5*time.Second, func() time.Time { return clock })
	for i := 1; i <= 100; i++ {
		clock = clock.Add(200 * time.Millisecond) // 20 s in all
		p(i, 100)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 4 || lines[0] != "replay owner: 25/100 requests sent (25%), 5s wall time" ||
		lines[3] != "replay owner: 100/100 requests sent (100%), 20s wall time" {
		t.Errorf("progress lines:\n%s\nwant one every 5 s, the last at 100%%", out.String())
	}
}

// --gc-percent: the flag wins, then GOGC from the environment (left as the
// runtime applied it), then the default; out-of-range values are refused
// naming the flag.
func TestResolveGCPercent(t *testing.T) {
	for _, tc := range []struct {
		given bool
		pct   int
		env   string
		want  int
		set   bool
		bad   bool
	}{
		{given: false, pct: defaultGCPercent, env: "", want: defaultGCPercent, set: true},
		{given: false, pct: defaultGCPercent, env: "100", set: false},
		{given: true, pct: 200, env: "100", want: 200, set: true},
		{given: true, pct: 200, env: "", want: 200, set: true},
		{given: true, pct: 5, bad: true},
		{given: true, pct: -1, bad: true},
		{given: true, pct: 20000, bad: true},
	} {
		v, set, err := resolveGCPercent(tc.given, tc.pct, tc.env)
		switch {
		case tc.bad:
			if err == nil || !strings.Contains(err.Error(), "--gc-percent") {
				t.Errorf("%+v: err %v, want one naming --gc-percent", tc, err)
			}
		case err != nil || v != tc.want || set != tc.set:
			t.Errorf("%+v: got %d %v %v", tc, v, set, err)
		}
	}
}
