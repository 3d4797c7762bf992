package main

// End-to-end tests of a cluster of real `tokenmesh serve` processes
// (package localcluster), with the binary TestMain built.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	tokenmeshv1 "github.com/tokenmesh/tokenmesh/api/tokenmesh/v1"
	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/cluster"
	"github.com/tokenmesh/tokenmesh/cluster/grpcpeer"
	"github.com/tokenmesh/tokenmesh/config"
	"github.com/tokenmesh/tokenmesh/daemon"
	"github.com/tokenmesh/tokenmesh/internal/e2e"
	"github.com/tokenmesh/tokenmesh/internal/lockedbuf"
	"github.com/tokenmesh/tokenmesh/localcluster"
	"github.com/tokenmesh/tokenmesh/rendezvous"
	"github.com/tokenmesh/tokenmesh/rule"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// startCluster starts a local cluster of the test binary, stopped at the
// end of the test; the nodes' output is logged when the test fails.
func startCluster(t *testing.T, cfg localcluster.Config) *localcluster.Cluster {
	t.Helper()
	return e2e.StartCluster(t, binary, cfg)
}

// checkAt asks node i for hits of (rule, key) over gRPC.
func checkAt(c *localcluster.Cluster, i int, timeout time.Duration, rule, key string, hits int64) (*tokenmeshv1.CheckResult, error) {
	return e2e.CheckAt(c, i, timeout, rule, key, hits)
}

// keysOwnedBy returns n keys whose rendezvous owner among members is
// owner (owner's key placement).
func keysOwnedBy(owner string, n int, members ...[]string) []string {
	var keys []string
	for k := 0; len(keys) < n; k++ {
		key := fmt.Sprintf("key-%d", k)
		ok := true
		for _, ms := range members {
			ids := make([]strategy.NodeID, len(ms))
			for i, m := range ms {
				ids[i] = strategy.NodeID(m)
			}
			ok = ok && rendezvous.Owner(key, ids) == strategy.NodeID(owner)
		}
		if ok {
			keys = append(keys, key)
		}
	}
	return keys
}

// Decisions flow between processes: owner's exact limit holds for one key
// checked at all three nodes; a malformed request is refused naming the
// field; /debug/faults does not exist without --fault-injection.
func TestClusterE2EDecisions(t *testing.T) {
	// 1/m: no token refills while the test runs, however slow the machine.
	c := startCluster(t, localcluster.Config{Nodes: 3,
		Rules: []rule.Rule{{Name: "api", Rate: rule.MustRate("1/m"), Burst: 5, Strategy: "owner"}}})

	allowed := 0
	for k := range 10 {
		r, err := checkAt(c, k%3, 5*time.Second, "api", "tenant-1", 1)
		if err != nil {
			t.Fatalf("check %d at n%d: %v", k, k%3, err)
		}
		if r.GetError() != "" {
			t.Fatalf("check %d at n%d: %s", k, k%3, r.GetError())
		}
		if r.GetAllowed() {
			allowed++
		}
	}
	if allowed != 5 {
		t.Errorf("10 checks of one key over 3 nodes: %d allowed, want exactly the burst 5", allowed)
	}

	_, err := checkAt(c, 1, 5*time.Second, "api", "tenant-1", -1)
	if st := status.Convert(err); st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), "checks[0].hits") {
		t.Errorf("hits -1: %v; want InvalidArgument naming checks[0].hits", err)
	}

	resp, err := http.Post("http://"+c.Nodes[0].API+"/debug/faults", "application/json", strings.NewReader(`{"blocked":["n1"]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("POST /debug/faults without --fault-injection: %d, want 404", resp.StatusCode)
	}
}

// A crashed owner (SIGKILL): the survivors keep answering the keys it
// owned (owner fails open while the forward times out), and once gossip
// declares it dead they decide those keys without forwarding to it.
func TestClusterE2ENodeCrash(t *testing.T) {
	// A long forward timeout tells a forward to the dead node (1 s) from a
	// decision by a live owner (milliseconds).
	c := startCluster(t, localcluster.Config{Nodes: 3,
		Rules: []rule.Rule{{Name: "api", Rate: rule.MustRate("100/s"), Burst: 100, Strategy: "owner",
			Params: []string{"timeout=1s"}}}})
	keys := keysOwnedBy("n2", 4, []string{"n0", "n1", "n2"})

	for _, key := range keys { // warm up: forwarded to n2, decided there
		for _, i := range []int{0, 1} {
			if r, err := checkAt(c, i, 5*time.Second, "api", key, 1); err != nil || !r.GetAllowed() || r.GetError() != "" {
				t.Fatalf("before the crash, %s at n%d: %v %v", key, i, r, err)
			}
		}
	}
	if err := c.Kill(2); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()

	// Every round checks every key at both survivors; a round is fast once
	// no check waits for the dead node.
	var converged time.Duration
	deadline := killed.Add(15 * time.Second)
	fastRounds := 0
	for round := 0; ; round++ {
		start := time.Now()
		slow := false
		for _, key := range keys {
			for _, i := range []int{0, 1} {
				t0 := time.Now()
				r, err := checkAt(c, i, 3*time.Second, "api", key, 1)
				if err != nil {
					t.Fatalf("%v after the crash: %s at n%d: %v", time.Since(killed).Round(time.Millisecond), key, i, err)
				}
				if r.GetError() != "" {
					slow = true
					t.Logf("%v after the crash: %s at n%d: %s", time.Since(killed).Round(time.Millisecond), key, i, r.GetError())
				}
				if time.Since(t0) > 500*time.Millisecond {
					slow = true
				}
			}
		}
		if slow {
			fastRounds = 0
		} else if fastRounds++; fastRounds == 1 {
			converged = start.Sub(killed)
		}
		if fastRounds == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("15 s after the crash the survivors still forward to the dead node (or fail to decide)")
		}
	}
	t.Logf("survivors stopped forwarding to the dead owner %v after SIGKILL", converged.Round(time.Millisecond))
	for _, i := range []int{0, 1} {
		if !c.Alive(i) {
			t.Errorf("n%d died", i)
		}
	}
}

// metricShare sums the values of tokenmesh_capacity_share_ratio{rule=...}
// in a /metrics text; ok is false when the metric is absent.
func metricShare(text, rule string) (sum float64, ok bool) {
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, "tokenmesh_capacity_share_ratio{") || !strings.Contains(line, `rule="`+rule+`"`) {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			continue
		}
		sum, ok = sum+v, true
	}
	return sum, ok
}

// gdrl: the capacity share of a crashed node comes back to the survivors.
func TestClusterE2EGDRLShareReturns(t *testing.T) {
	const ruleName = "g"
	c := startCluster(t, localcluster.Config{Nodes: 3,
		Rules: []rule.Rule{{Name: ruleName, Rate: tenPerSec, Burst: 10, Strategy: "gdrl"}}})
	const key = "hot"

	// Demand at every node, so that each holds about a third of the share.
	var admitted [3]atomic.Int64
	var stop atomic.Bool
	var failures atomic.Int64
	hammer := func(i int) {
		for !stop.Load() && c.Alive(i) {
			r, err := checkAt(c, i, 2*time.Second, ruleName, key, 1)
			if err == nil && r.GetAllowed() {
				admitted[i].Add(1)
			}
			if err != nil && i != 2 { // n2 is killed: its checks may fail
				if failures.Add(1) == 1 {
					t.Logf("check at n%d: %v", i, err)
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Add(1)
		go func() { defer wg.Done(); hammer(i) }()
	}
	defer func() { stop.Store(true); wg.Wait() }()
	// Every node admits some of the key's tokens: n0 founded the cluster
	// alone and the others joined it with no share, so this checks that
	// gdrl hands the joiners capacity and burst (a joiner once admitted
	// nothing here for good).
	time.Sleep(2 * time.Second)
	var mid [3]int64
	for i := range mid {
		mid[i] = admitted[i].Load()
	}
	time.Sleep(3 * time.Second)
	for i := range mid {
		if got := admitted[i].Load() - mid[i]; got == 0 {
			t.Errorf("n%d admitted nothing of %q in 3 s (from 2 s to 5 s after the start): its share never arrived", i, key)
		}
	}
	if err := c.Kill(2); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()

	ctx := context.Background()
	if m, err := c.Metrics(ctx, 0); err == nil {
		if _, ok := metricShare(m, ruleName); ok {
			var sum float64
			var shares []float64 // n0, n1
			for time.Since(killed) < 20*time.Second {
				sum, shares = 0, shares[:0]
				for _, i := range []int{0, 1} {
					m, err := c.Metrics(ctx, i)
					if err != nil {
						t.Fatalf("n%d /metrics: %v", i, err)
					}
					v, _ := metricShare(m, ruleName)
					sum += v
					shares = append(shares, v)
				}
				if sum >= 0.95 {
					break
				}
				time.Sleep(200 * time.Millisecond)
			}
			// Only the lower bound is checked: the two nodes are read one
			// after the other, so a transfer between them in flight may be
			// counted at both.
			if sum < 0.95 {
				t.Errorf("20 s after the crash the survivors' capacity shares %v sum to %.3f, want about 1", shares, sum)
			} else {
				t.Logf("survivors' capacity shares %v sum to %.3f %v after the crash", shares, sum, time.Since(killed).Round(time.Millisecond))
			}
		} else {
			t.Logf("n0 serves /metrics without tokenmesh_capacity_share_ratio{rule=%q}: rate check only", ruleName)
		}
	} else {
		t.Logf("no /metrics (%v): rate check only", err)
	}

	// The survivors admit at about the full rate again: in some 3 s window
	// (the bucket long drained by the demand) they admit >= 25 tokens; with
	// the dead node's share lost they would admit about 20 or less.
	var windows []int64
	var perSec [][2]int64 // for the log: admissions per second at n0, n1
	last := [2]int64{admitted[0].Load(), admitted[1].Load()}
	for time.Since(killed) < 20*time.Second {
		before := last[0] + last[1]
		for range 3 {
			time.Sleep(time.Second)
			cur := [2]int64{admitted[0].Load(), admitted[1].Load()}
			perSec = append(perSec, [2]int64{cur[0] - last[0], cur[1] - last[1]})
			last = cur
		}
		windows = append(windows, last[0]+last[1]-before)
		if windows[len(windows)-1] >= 25 && perSec[len(perSec)-1][0] > 0 && perSec[len(perSec)-1][1] > 0 {
			break
		}
	}
	if end := perSec[len(perSec)-1]; end[0] == 0 || end[1] == 0 {
		t.Errorf("a survivor admitted nothing in the last second observed; per second [n0 n1]: %v", perSec)
	}
	if got := windows[len(windows)-1]; got < 25 {
		t.Errorf("survivors admitted %v tokens per 3 s window after the crash, want a window >= 25 (rate 10/s); per second [n0 n1]: %v",
			windows, perSec)
	} else {
		t.Logf("survivors' admissions per 3 s window after the crash: %v; per second [n0 n1]: %v", windows, perSec)
	}
	if n := failures.Load(); n > 0 {
		t.Errorf("%d checks at live nodes failed", n)
	}
}

// A process without the gossip key cannot join, and frames from a peer
// that is not a member change nothing.
func TestClusterE2ENonMemberRefused(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	rules := []rule.Rule{{Name: "api", Rate: rule.MustRate("1/m"), Burst: 5, Strategy: "owner"}}
	c := startCluster(t, localcluster.Config{Nodes: 3, SecretKey: key, Rules: rules})

	// A 4th process joining n0 without the key.
	dir := t.TempDir()
	yml, err := localcluster.NodeConfigYAML("intruder", []string{c.Nodes[0].Gossip}, rules, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "intruder.yaml")
	if err := os.WriteFile(cfg, yml, 0o600); err != nil {
		t.Fatal(err)
	}
	// It cannot join: no member answers it (gossip it cannot decrypt), so
	// it founds a cluster of its own and keeps retrying the join, never
	// becoming a member of the real one.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out lockedbuf.Buffer
	addrFile := filepath.Join(dir, "addr.json")
	cmd := exec.CommandContext(ctx, binary, "serve", "--config", cfg, "--addr-file", addrFile)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	var intruder daemon.Addrs
	for {
		if b, err := os.ReadFile(addrFile); err == nil && json.Unmarshal(b, &intruder) == nil && intruder.API != "" {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the intruder never started:\n%s", out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(config.DefaultReconnectInterval + 2*time.Second) // a join retry
	if !strings.Contains(out.String(), "answered: founding a cluster") {
		t.Errorf("the intruder did not report that nobody answered its join:\n%s", out.String())
	}
	for i := range 3 {
		m, err := c.Metrics(ctx, i)
		if err != nil {
			t.Fatal(err)
		}
		if v, ok := metricValue(m, "tokenmesh_members"); !ok || v != 3 {
			t.Errorf("n%d: tokenmesh_members %v (found %v) after the intruder tried to join, want 3", i, v, ok)
		}
	}
	resp, err := http.Get("http://" + intruder.API + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if v, ok := metricValue(string(body), "tokenmesh_members"); !ok || v != 1 {
		t.Errorf("the intruder sees %v members (found %v), want only itself", v, ok)
	}

	// A raw peer named "intruder" that forwards real owner requests for a
	// key n0 owns: n0 must refuse the stream (not in its peer book), so
	// the key's bucket stays full.
	members := []string{"n0", "n1", "n2"}
	target := keysOwnedBy("n0", 1, members, append([]string{"intruder"}, members...))[0]
	tr, err := grpcpeer.New(grpcpeer.Config{Self: "intruder", ListenAddr: "127.0.0.1:0",
		Peers: map[strategy.NodeID]string{"n0": c.Nodes[0].Peer}})
	if err != nil {
		t.Fatal(err)
	}
	node, err := cluster.New(cluster.Config{Self: "intruder", Members: []strategy.NodeID{"intruder", "n0", "n1", "n2"},
		Rules:     []rule.Rule{{Name: "api", Rate: bucket.Rate{Tokens: 1, Per: time.Minute}, Burst: 5, Strategy: "owner", Params: []string{"timeout=200ms", "suspect=0s"}}}, // suspect=0s: every check is forwarded (no local answers after the first timeout)
		Transport: tr, Epoch: daemon.ClusterEpoch})
	if err != nil {
		t.Fatal(err)
	}
	defer node.Close()
	for k := range 10 {
		d, err := node.Check(context.Background(), "api", target, 1)
		if err != nil {
			t.Fatal(err)
		}
		if !d.Async {
			t.Fatalf("intruder check %d of %s was not forwarded", k, target)
		}
	}
	st := tr.Stats()
	t.Logf("intruder transport: %+v", st)
	if st.Dials == 0 {
		t.Errorf("the intruder never reached n0 (%+v): the test proves nothing", st)
	}
	allowed := 0
	for k := range 7 {
		r, err := checkAt(c, k%3, 5*time.Second, "api", target, 1)
		if err != nil || r.GetError() != "" {
			t.Fatalf("member check %d: %v %v", k, r, err)
		}
		if r.GetAllowed() {
			allowed++
		}
	}
	if allowed != 5 {
		t.Errorf("after 10 forged requests, members allowed %d of 7 checks of %s, want the untouched burst 5", allowed, target)
	}
}

// --addr-file is documented; --fault-injection is hidden from --help.
func TestServeFlagsHelp(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster end-to-end file")
	}
	out, _, code := tokenmesh(t, "serve", "--help")
	if code != 0 || !strings.Contains(out, "--addr-file") || strings.Contains(out, "fault-injection") {
		t.Errorf("serve --help (exit %d): want --addr-file listed and --fault-injection hidden:\n%s", code, out)
	}
	if _, errOut, code := tokenmesh(t, "serve", "--fault-injection"); code == 0 || !strings.Contains(errOut, "--config") {
		t.Errorf("serve --fault-injection without --config: exit %d, stderr %q", code, errOut)
	}
}

// gdrl, graceful: a node stopped with SIGTERM hands its capacity shares to
// its buddy before it leaves, so the survivors hold the whole rate again
// at once, without waiting for failure detection (5-8 s here, see
// TestClusterE2ENodeCrash).
func TestClusterE2EGDRLGracefulLeave(t *testing.T) {
	const ruleName, key = "g", "hot"
	c := startCluster(t, localcluster.Config{Nodes: 3,
		Rules: []rule.Rule{{Name: ruleName, Rate: tenPerSec, Burst: 10, Strategy: "gdrl"}}})
	// Demand everywhere for 3 s, so that every node holds a share of key.
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		for i := range 3 {
			if _, err := checkAt(c, i, 2*time.Second, ruleName, key, 1); err != nil {
				t.Fatalf("check at n%d: %v", i, err)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	ctx := context.Background()
	shares := func() (sum float64, each []float64) {
		for _, i := range []int{0, 1} {
			m, err := c.Metrics(ctx, i)
			if err != nil {
				t.Fatalf("n%d /metrics: %v", i, err)
			}
			v, ok := metricShare(m, ruleName)
			if !ok {
				t.Fatalf("n%d serves no tokenmesh_capacity_share_ratio{rule=%q}", i, ruleName)
			}
			sum += v
			each = append(each, v)
		}
		return sum, each
	}
	if sum, each := shares(); sum > 0.9 {
		t.Fatalf("before the leave n0 and n1 already hold %v (sum %.3f) of the share: n2 holds nothing to hand over", each, sum)
	}
	start := time.Now()
	if err := c.Terminate(2); err != nil {
		t.Fatalf("SIGTERM n2: %v", err)
	}
	exited := time.Since(start)
	sum, each := shares()
	// Read one after the other, a transfer in flight between n0 and n1 can
	// count twice: only the lower bound is checked.
	if sum < 0.95 {
		t.Errorf("right after n2 exited (SIGTERM took %v) the survivors hold %v of the share (sum %.3f), want about 1",
			exited.Round(time.Millisecond), each, sum)
	} else {
		t.Logf("n2 left in %v; the survivors hold %v of the share (sum %.3f) at once", exited.Round(time.Millisecond), each, sum)
	}
}

// metricValue is the value of an unlabelled metric in Prometheus text.
func metricValue(text, name string) (float64, bool) { return e2e.MetricValue(text, name) }

// tenPerSec is the gdrl tests' rate (their rule variable hides package rule).
var tenPerSec = rule.MustRate("10/s")
