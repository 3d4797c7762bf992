package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/daemon"
	"github.com/tokenmesh/tokenmesh/internal/lockedbuf"
)

// startCmd starts cmd (its outputs set by the caller) and kills it when
// the test ends; exited receives cmd.Wait's result once (a reader that
// only looks puts it back).
func startCmd(t *testing.T, cmd *exec.Cmd, name string) (exited chan error) {
	t.Helper()
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	exited = make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		exited <- <-exited // wait for the exit, leave the result
	})
	return exited
}

// startProc is startCmd with stdout and stderr into out, logged when the
// test failed (after the kill).
func startProc(t *testing.T, cmd *exec.Cmd, name string) (out *lockedbuf.Buffer, exited chan error) {
	t.Helper()
	out = &lockedbuf.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s output:\n%s", name, out.String())
		}
	})
	return out, startCmd(t, cmd, name)
}

// startServeProc runs serve --config cfg in dir until the test ends and
// returns its bound addresses once written, and its output.
func startServeProc(t *testing.T, dir, cfg string) (daemon.Addrs, *lockedbuf.Buffer) {
	t.Helper()
	addrs, out, _, _ := startServe(t, dir, nil, "--config", cfg)
	return addrs, out
}

// startServe runs serve with args and --addr-file in dir, env added to
// its environment, until the test ends; it returns the bound addresses
// once written, the output, the process and its exit (startProc's).
func startServe(t *testing.T, dir string, env []string, args ...string) (daemon.Addrs, *lockedbuf.Buffer, *exec.Cmd, chan error) {
	t.Helper()
	addrFile := filepath.Join(dir, "addrs.json")
	cmd := exec.Command(binary, append(append([]string{"serve"}, args...), "--addr-file", addrFile)...)
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	out, done := startProc(t, cmd, "serve")
	var addrs daemon.Addrs
	deadline := time.Now().Add(20 * time.Second)
	for {
		if b, err := os.ReadFile(addrFile); err == nil && json.Unmarshal(b, &addrs) == nil && addrs.GRPC != "" {
			break
		}
		select {
		case err := <-done:
			done <- err
			t.Fatalf("serve exited: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("no --addr-file after 20s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	return addrs, out, cmd, done
}

// terminate sends cmd SIGTERM and waits up to within for its exit (put
// back on exited); an exit other than 0, or none in time, fails the test
// through fail (which adds the process's output).
func terminate(t *testing.T, cmd *exec.Cmd, exited chan error, within time.Duration, fail func(format string, args ...any)) {
	t.Helper()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		exited <- err
		if err != nil {
			fail("exit after SIGTERM: %v, want 0", err)
		}
	case <-time.After(within):
		fail("still running %v after SIGTERM", within)
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestServe runs `tokenmesh serve --config` as a real process: it becomes
// ready, decides checks over HTTP, and exits 0 on SIGTERM.
func TestServe(t *testing.T) {
	api := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	cfg := filepath.Join(t.TempDir(), "tokenmesh.yaml")
	yaml := `node:
  name: e2e
  api_addr: ` + api + `
  grpc_addr: 127.0.0.1:0
  peer_addr: 127.0.0.1:0
  gossip_addr: 127.0.0.1:0
rules:
  - name: api
    rate: 1/s
    burst: 2
`
	if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	addrFile := filepath.Join(filepath.Dir(cfg), "addrs.json")
	cmd := exec.Command(binary, "serve", "--config", cfg, "--addr-file", addrFile)
	var stdout, stderr lockedbuf.Buffer // read while the process writes
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	done := startCmd(t, cmd, "serve")
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf(format+"\nstdout:\n%s\nstderr:\n%s", append(args, stdout.String(), stderr.String())...)
	}

	base := "http://" + api
	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := client.Get(base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		select {
		case err := <-done:
			done <- err
			fail("serve exited before it was ready: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			fail("not ready after 10s (last: %v)", err)
		}
		time.Sleep(50 * time.Millisecond)
	}

	// --addr-file holds the bound addresses once serving (written before
	// /readyz can answer, as the HTTP server starts after the node).
	var addrs daemon.Addrs
	if b, err := os.ReadFile(addrFile); err != nil || json.Unmarshal(b, &addrs) != nil {
		fail("--addr-file: %v %q", err, b)
	}
	if addrs.Name != "e2e" || addrs.API != api || addrs.GRPC == "" || strings.HasSuffix(addrs.GRPC, ":0") ||
		addrs.Peer == "" || strings.HasSuffix(addrs.Peer, ":0") || addrs.Gossip == "" || strings.HasSuffix(addrs.Gossip, ":0") {
		fail("--addr-file: %+v", addrs)
	}

	body := `{"checks":[{"rule":"api","key":"k","hits":1},{"rule":"api","key":"k","hits":1},{"rule":"api","key":"k","hits":1}]}`
	resp, err := client.Post(base+"/v1/check", "application/json", strings.NewReader(body))
	if err != nil {
		fail("POST /v1/check: %v", err)
	}
	var got struct {
		Results []struct {
			Allowed      bool    `json:"allowed"`
			LimitPerS    float64 `json:"limit_per_s"`
			Burst        int64   `json:"burst,string"` // proto3 JSON: int64 as a string
			RetryAfterMS int64   `json:"retry_after_ms,string"`
			Error        string  `json:"error"`
		} `json:"results"`
	}
	err = json.NewDecoder(resp.Body).Decode(&got)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || len(got.Results) != 3 {
		fail("POST /v1/check: %d %+v %v", resp.StatusCode, got, err)
	}
	r := got.Results
	if !r[0].Allowed || !r[1].Allowed || r[2].Allowed || r[2].RetryAfterMS <= 0 || r[0].LimitPerS != 1 || r[0].Burst != 2 {
		fail("decisions %+v: want allow, allow, refuse with retry_after_ms > 0", r)
	}
	// A bad item fails the whole batch with 400 naming the field.
	bad := `{"checks":[{"rule":"api","key":"k","hits":1},{"rule":"api","key":"k","hits":0}]}`
	resp, err = client.Post(base+"/v1/check", "application/json", strings.NewReader(bad))
	if err != nil {
		fail("POST /v1/check: %v", err)
	}
	msg, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(msg), "checks[1].hits: 0 must be between 1 and 1000000000") {
		fail("hits 0: %d %s", resp.StatusCode, msg)
	}

	terminate(t, cmd, done, 5*time.Second, fail)
	if !strings.Contains(stdout.String(), "node e2e: API http://"+api) {
		fail("stdout does not say what it serves")
	}
}

// TestServeBadConfig: a config error names the file and field and exits 1,
// as does --fault-injection without --config.
func TestServeBadConfig(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(cfg, []byte("node:\n  api_addr: nope\nrules:\n  - name: api\n    rate: 1/s\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, stderr, code := tokenmesh(t, "serve", "--config", cfg)
	if code != 1 || !strings.Contains(stderr, "node.api_addr") {
		t.Errorf("exit %d, stderr %q; want 1 naming node.api_addr", code, stderr)
	}
	if _, stderr, code := tokenmesh(t, "serve", "extra"); code == 0 {
		t.Errorf("serve extra: exit 0, stderr %q", stderr)
	}
	if _, stderr, code := tokenmesh(t, "serve", "--fault-injection"); code != 1 || !strings.Contains(stderr, "--fault-injection needs --config") {
		t.Errorf("serve --fault-injection without --config: exit %d, stderr %q; want 1 naming --config", code, stderr)
	}
}

// serve refuses to start a node that joins others with neither a secret
// key nor peer TLS, naming the fields to set; with node.insecure it starts
// and warns. node.memory_limit is applied and reported.
func TestServePeerSecurityRequired(t *testing.T) {
	dir := t.TempDir()
	write := func(name, extra string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		yaml := `node:
  name: lonely
  api_addr: 127.0.0.1:0
  grpc_addr: 127.0.0.1:0
  peer_addr: 127.0.0.1:0
  gossip_addr: 127.0.0.1:0
  join: [127.0.0.1:1]
` + extra + `rules:
  - name: api
    rate: 1/s
`
		if err := os.WriteFile(p, []byte(yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	_, stderr, code := tokenmesh(t, "serve", "--config", write("open.yaml", ""))
	if code == 0 || !strings.Contains(stderr, "node.secret_key") || !strings.Contains(stderr, "node.tls") || !strings.Contains(stderr, "node.insecure") {
		t.Fatalf("serve without peer security: exit %d, stderr %q; want a refusal naming node.secret_key, node.tls and node.insecure", code, stderr)
	}

	cfg := write("insecure.yaml", "  insecure: true\n  memory_limit: 256MiB\n")
	_, out := startServeProc(t, dir, cfg)
	for _, want := range []string{"level=WARN", "peer security is OFF", "memory limit: 268435456 bytes"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("serve with insecure: true and memory_limit did not print %q:\n%s", want, out.String())
		}
	}
}
