package localcluster

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/tokenmesh/tokenmesh/internal/lockedbuf"
	"github.com/tokenmesh/tokenmesh/rule"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	tokenmeshv1 "github.com/tokenmesh/tokenmesh/api/tokenmesh/v1"
	"github.com/tokenmesh/tokenmesh/rendezvous"
	"github.com/tokenmesh/tokenmesh/strategy"
)

var binary string

// TestMain builds the tokenmesh binary once (as cmd/tokenmesh's TestMain
// does) unless the run is -short, where every test here skips.
func TestMain(m *testing.M) {
	testingShort := false
	for _, a := range os.Args[1:] {
		if a == "-test.short" || a == "-test.short=true" {
			testingShort = true
		}
	}
	if testingShort {
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "localcluster-test")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "tokenmesh")
	if out, err := exec.Command("go", "build", "-o", binary, "../cmd/tokenmesh").CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		panic("go build: " + err.Error() + "\n" + string(out))
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func TestCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	var log lockedbuf.Buffer
	ctx := context.Background()
	c, err := Start(ctx, Config{
		Binary: binary, Nodes: 3, FaultInjection: true, Log: &log,
		Rules: []rule.Rule{{Name: "api", Rate: rule.MustRate("1/s"), Burst: 5, Strategy: "owner"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	dir := c.Dir()
	t.Cleanup(func() { _ = c.Stop() })

	if len(c.Nodes) != 3 {
		t.Fatalf("%d nodes", len(c.Nodes))
	}
	seen := map[string]bool{}
	for i, n := range c.Nodes {
		if n.Name != "n"+string(rune('0'+i)) || n.API == "" || n.GRPC == "" || n.Peer == "" || n.Gossip == "" {
			t.Errorf("node %d: %+v", i, n)
		}
		for _, a := range []string{n.API, n.GRPC, n.Peer, n.Gossip} {
			if seen[a] || !strings.HasPrefix(a, "127.0.0.1:") {
				t.Errorf("node %d: address %q repeated or not on loopback", i, a)
			}
			seen[a] = true
		}
		if !c.Alive(i) {
			t.Errorf("node %d is not alive", i)
		}
	}

	check := func(i int, key string) (*tokenmeshv1.CheckResponse, error) {
		cl, err := c.Client(i)
		if err != nil {
			return nil, err
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		return cl.Check(cctx, &tokenmeshv1.CheckRequest{Checks: []*tokenmeshv1.CheckItem{{Rule: "api", Key: key, Hits: 1}}})
	}
	// Nine checks of one key spread over the nodes: one bucket, so the
	// burst (5) is admitted, plus what refilled meanwhile (1/s).
	burstAcross := func() (allowed int, elapsed time.Duration) {
		start := time.Now()
		for k := range 9 {
			resp, err := check(k%3, "shared")
			if err != nil {
				t.Fatalf("check at n%d: %v", k%3, err)
			}
			r := resp.GetResults()[0]
			if r.GetError() != "" {
				t.Fatalf("check at n%d: %s", k%3, r.GetError())
			}
			if r.GetAllowed() {
				allowed++
			}
		}
		return allowed, time.Since(start)
	}
	allowed, elapsed := burstAcross()
	if allowed == 0 {
		// The key's owner started its bucket empty: owner's conservative
		// takeover of a key that moved while the members joined (seen
		// once, 0 of 9, on a machine at a load average of 9-10, where
		// the joins took longer than the checks). After the burst's
		// refill (5 s) the same key must admit its burst.
		t.Logf("0 of 9 admitted at first (a conservative start); again after the bucket's refill. The nodes' output:\n%s", log.String())
		time.Sleep(5500 * time.Millisecond)
		allowed, elapsed = burstAcross()
	}
	if most := 5 + int(elapsed/time.Second); allowed < 5 || allowed > most {
		t.Errorf("%d of 9 checks of one key allowed across 3 nodes in %v, want the burst 5 (at most %d with the refill); the nodes' output:\n%s", allowed, elapsed, most, log.String())
	}

	// Partition cuts n2 off: a key n2 owns, checked at n0, is forwarded
	// into the block (owner then fails open after its timeout).
	if err := c.Partition([]int{0, 1}, []int{2}); err != nil {
		t.Fatal(err)
	}
	var key string
	for k := 0; key == ""; k++ {
		if rendezvous.Owner(fmt.Sprint("k", k), []strategy.NodeID{"n0", "n1", "n2"}) == "n2" {
			key = fmt.Sprint("k", k)
		}
	}
	if _, err := check(0, key); err != nil {
		t.Fatal(err)
	}
	if st := faultStats(t, c.Nodes[0].API); st.Blocked == 0 || len(st.Faults) != 1 || st.Faults[0] != "n2" {
		t.Errorf("n0 after Partition and a check of n2's key: %+v, want frames to n2 blocked", st)
	}
	if st := faultStats(t, c.Nodes[2].API); len(st.Faults) != 2 {
		t.Errorf("n2 after Partition: blocks %v, want n0 and n1", st.Faults)
	}
	if err := c.Heal(); err != nil {
		t.Fatal(err)
	}
	if st := faultStats(t, c.Nodes[0].API); len(st.Faults) != 0 {
		t.Errorf("n0 after Heal still blocks %v", st.Faults)
	}
	if err := c.SetFaults(ctx, 0, NodeFaults{Drop: 2}); err == nil || !strings.Contains(err.Error(), "drop") {
		t.Errorf("SetFaults drop 2: %v, want a 400 naming drop", err)
	}
	if _, err := c.Metrics(ctx, 0); err != nil {
		t.Logf("no /metrics yet: %v", err)
	}

	if err := c.Kill(1); err != nil {
		t.Fatal(err)
	}
	if c.Alive(1) {
		t.Error("n1 alive after Kill")
	}
	if err := c.Kill(1); err != nil {
		t.Errorf("second Kill: %v", err)
	}
	for _, i := range []int{0, 2} {
		if _, err := check(i, "after-kill"); err != nil {
			t.Errorf("n%d after n1 was killed: %v", i, err)
		}
	}
	if err := c.Terminate(2); err != nil {
		t.Errorf("Terminate(2): %v", err)
	}
	if err := c.Stop(); err != nil {
		t.Errorf("Stop: %v", err)
	}
	if err := c.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}
	for i := range 3 {
		if c.Alive(i) {
			t.Errorf("n%d alive after Stop", i)
		}
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("temp dir %s not removed: %v", dir, err)
	}
	if out := log.String(); !strings.Contains(out, "[n0] node n0: API http://") || !strings.Contains(out, "[n2] ") {
		t.Errorf("Config.Log lacks the prefixed node lines:\n%s", out)
	}
}

func TestStartErrors(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	ctx := context.Background()
	if _, err := Start(ctx, Config{Binary: binary, Nodes: 0, Rules: []rule.Rule{{Name: "a", Rate: rule.MustRate("1/s")}}}); err == nil {
		t.Error("Nodes 0: no error")
	}
	if _, err := Start(ctx, Config{Binary: binary, Nodes: 1}); err == nil {
		t.Error("no rules: no error")
	}
	// A config serve rejects: the error carries the node's log tail.
	dir := t.TempDir()
	_, err := Start(ctx, Config{Binary: binary, Nodes: 2, Dir: dir, Rules: []rule.Rule{{Name: "a", Rate: rule.MustRate("1/s"), Strategy: "nope"}}})
	if err == nil || !strings.Contains(err.Error(), "node n0") || !strings.Contains(err.Error(), "rules[0].strategy") {
		t.Errorf("unknown strategy: %v", err)
	}
	// Without fault injection there is no Partition.
	c, err := Start(ctx, Config{Binary: binary, Nodes: 1, Settle: -1, Rules: []rule.Rule{{Name: "a", Rate: rule.MustRate("1/s")}}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	if err := c.Partition([]int{0}); err == nil {
		t.Error("Partition without FaultInjection: no error")
	}
}

type faultState struct {
	Faults  []string // blocked
	Blocked int64    // frames lost to a blocked peer
}

// faultStats reads GET /debug/faults of the node at api.
func faultStats(t *testing.T, api string) faultState {
	t.Helper()
	resp, err := http.Get("http://" + api + "/debug/faults")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got struct {
		Blocked []string `json:"blocked"`
		Stats   struct{ Blocked int64 }
	}
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /debug/faults: %d %v", resp.StatusCode, err)
	}
	return faultState{Faults: got.Blocked, Blocked: got.Stats.Blocked}
}

// TestStartRelativeDir: a relative Config.Dir (as `make chaos-soak`'s
// SOAK_CHAOS_OUT gives chaos --out) starts the nodes; before, each node
// ran in Dir and was handed its config as Dir/n0.yaml, a path relative to
// where it did not run, and exited ("open .../n0.yaml: no such file").
func TestStartRelativeDir(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	t.Chdir(t.TempDir())
	c, err := Start(context.Background(), Config{
		Binary: binary, Nodes: 1, Dir: filepath.Join("out", "cluster"),
		Rules: []rule.Rule{{Name: "api", Rate: rule.MustRate("1/s"), Burst: 5, Strategy: "owner"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	if !filepath.IsAbs(c.Dir()) {
		t.Errorf("Dir() = %q, want an absolute path", c.Dir())
	}
	if !c.Alive(0) {
		t.Error("node 0 is not alive")
	}
}
