package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestServeReload runs serve on a config file and changes the file under
// it: the watcher applies the new rules without a restart (an added rule
// answers, a changed one starts afresh at its new burst, the unchanged
// one keeps its drained bucket); a bad file is refused, logged, and the
// old rules keep answering; SIGHUP reloads too. About 3 s.
func TestServeReload(t *testing.T) {
	api := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	dir := t.TempDir()
	cfg := filepath.Join(dir, "tokenmesh.yaml")
	node := "node:\n  name: r1\n  api_addr: " + api + "\n  grpc_addr: 127.0.0.1:0\n  peer_addr: 127.0.0.1:0\n  gossip_addr: 127.0.0.1:0\n"
	write := func(rules string) {
		t.Helper()
		writeRenamed(t, cfg, node+"rules:\n"+rules)
	}
	write("  - {name: a, rate: 1/h, burst: 2, strategy: owner}\n  - {name: b, rate: 1/h, burst: 1, strategy: local}\n")
	cmd := exec.Command(binary, "serve", "--config", cfg, "--log-format", "json")
	out, done := startProc(t, cmd, "serve")
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf(format+"\nserve output:\n%s", append(args, out.String())...)
	}
	client := &http.Client{Timeout: 5 * time.Second}
	base := "http://" + api
	allowed := func(rule string) bool {
		t.Helper()
		resp, err := client.Post(base+"/v1/check", "application/json",
			strings.NewReader(`{"checks":[{"rule":"`+rule+`","key":"k","hits":1}]}`))
		if err != nil {
			fail("check %s: %v", rule, err)
		}
		defer resp.Body.Close()
		var got struct {
			Results []struct {
				Allowed bool `json:"allowed"`
			} `json:"results"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&got); err != nil || resp.StatusCode != http.StatusOK || len(got.Results) != 1 {
			fail("check %s: HTTP %d, %v", rule, resp.StatusCode, err)
		}
		return got.Results[0].Allowed
	}
	rules := func() string {
		t.Helper()
		resp, err := client.Get(base + "/v1/rules")
		if err != nil {
			return ""
		}
		defer resp.Body.Close()
		var got struct {
			Rules []struct {
				Name  string          `json:"name"`
				Burst json.RawMessage `json:"burst"`
			} `json:"rules"`
		}
		if json.NewDecoder(resp.Body).Decode(&got) != nil {
			return ""
		}
		var s []string
		for _, r := range got.Rules {
			s = append(s, r.Name+"/"+strings.Trim(string(r.Burst), `"`))
		}
		return strings.Join(s, " ")
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(15 * time.Second); !ok(); time.Sleep(50 * time.Millisecond) {
			select {
			case err := <-done:
				done <- err
				fail("serve exited (%v) waiting for %s", err, what)
			default:
			}
			if time.Now().After(deadline) {
				fail("no %s after 15 s (rules: %q)", what, rules())
			}
		}
	}
	waitFor("start", func() bool { return rules() == "a/2 b/1" })

	if !allowed("a") || !allowed("a") || allowed("a") {
		fail("rule a: want 2 allowed, then refused")
	}
	if !allowed("b") || allowed("b") {
		fail("rule b: want 1 allowed, then refused")
	}

	// a unchanged, b's burst 1 -> 3, c added.
	write("  - {name: a, rate: 1/h, burst: 2, strategy: owner}\n  - {name: b, rate: 1/h, burst: 3, strategy: local}\n  - {name: c, rate: 1/h, burst: 1}\n")
	waitFor("reload of the changed file", func() bool { return rules() == "a/2 b/3 c/1" })
	if allowed("a") {
		fail("rule a allowed after the reload: its drained bucket was reset")
	}
	for i := range 3 {
		if !allowed("b") {
			fail("rule b: check %d refused after the reload; want a fresh bucket of 3", i)
		}
	}
	if !allowed("c") || allowed("c") {
		fail("rule c: want 1 allowed, then refused")
	}
	if !strings.Contains(out.String(), `"msg":"rules reloaded","trigger":"file changed"`) {
		fail("the reload was not logged")
	}

	// A bad file: refused, logged, the old rules keep answering.
	write("  - {name: a, rate: fast, burst: 2}\n")
	waitFor("the refusal logged", func() bool {
		return strings.Contains(out.String(), `"msg":"reload refused: the old rules stay"`) &&
			strings.Contains(out.String(), "rules[0].rate")
	})
	if got := rules(); got != "a/2 b/3 c/1" {
		fail("rules after a refused file: %q, want the old ones", got)
	}
	if allowed("a") || allowed("c") {
		fail("a or c allowed after a refused reload: state was lost")
	}

	// SIGHUP reloads (the bad file again: refused again, the node stays).
	before := strings.Count(out.String(), `"trigger":"SIGHUP"`)
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor("the SIGHUP reload logged", func() bool { return strings.Count(out.String(), `"trigger":"SIGHUP"`) > before })
	write("  - {name: a, rate: 1/h, burst: 2, strategy: owner}\n")
	waitFor("rule b and c removed", func() bool { return rules() == "a/2" })
	if allowed("a") {
		fail("rule a allowed after removing the others: its state was lost")
	}

	terminate(t, cmd, done, 10*time.Second, fail)
}
