package main

// End-to-end test of a rolling upgrade : a cluster of the
// previous build, built from git, replaced node by node with this build
// under load.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/chaos"
	"github.com/tokenmesh/tokenmesh/internal/lockedbuf"
	"github.com/tokenmesh/tokenmesh/localcluster"
	"github.com/tokenmesh/tokenmesh/rule"
)

// upgradeFrom is the commit the rolling-upgrade test starts the cluster
// from: main before wire versions (the last build that speaks version 1
// only). TOKENMESH_UPGRADE_FROM overrides it (a commit or tag).
const upgradeFrom = "e1fe229721b5ca3dbc6f38b1ee71da78c35ef875"

// buildPrevious builds the tokenmesh binary of commit rev from this
// repository's git history and returns its path. It skips the test when
// git or the commit is not at hand (a shallow clone, a source tarball).
//
// The build runs in this work tree with go build -overlay: every Go file
// that differs from rev (committed or not, untracked included) is replaced
// by rev's content or removed, so every package the two builds share comes
// from the build cache of TestMain's build (a build of a copy elsewhere
// compiles everything again: 1-6 min on the 2-core CI machine). When go.mod
// or go.sum differ, it builds a git archive of rev in a temp dir instead.
func buildPrevious(t *testing.T, rev string) string {
	t.Helper()
	root, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Skipf("not in a git work tree (%v): cannot build the previous release", err)
	}
	repo := strings.TrimSpace(string(root))
	if err := exec.Command("git", "-C", repo, "cat-file", "-e", rev+"^{commit}").Run(); err != nil {
		t.Skipf("commit %s is not in this clone (shallow?): cannot build the previous release", rev)
	}
	git := func(args ...string) string {
		out, err := exec.Command("git", append([]string{"-C", repo}, args...)...).Output()
		if err != nil {
			t.Fatalf("git %s: %v", strings.Join(args, " "), err)
		}
		return string(out)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "tokenmesh-previous")
	changed := strings.Fields(git("diff", "--name-only", "--no-renames", rev, "--"))
	changed = append(changed, strings.Fields(git("ls-files", "--others", "--exclude-standard"))...)
	overlay := map[string]string{}
	modChanged := false
	for i, f := range changed {
		switch {
		case f == "go.mod" || f == "go.sum":
			modChanged = true
		case strings.HasSuffix(f, ".go"):
			to := "" // not in rev: removed
			if _, err := os.Stat(filepath.Join(repo, filepath.Dir(f))); err != nil {
				// A package directory of rev that this tree no longer has
				// (a renamed package): an overlay cannot add a package, so
				// rev is built from an archive instead.
				modChanged = true
			}
			if exec.Command("git", "-C", repo, "cat-file", "-e", rev+":"+f).Run() == nil {
				to = filepath.Join(dir, fmt.Sprintf("%d.go", i))
				if err := os.WriteFile(to, []byte(git("show", rev+":"+f)), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			overlay[filepath.Join(repo, f)] = to
		}
	}
	start := time.Now()
	var cmd *exec.Cmd
	if !modChanged {
		b, err := json.Marshal(map[string]any{"Replace": overlay})
		if err != nil {
			t.Fatal(err)
		}
		ov := filepath.Join(dir, "overlay.json")
		if err := os.WriteFile(ov, b, 0o600); err != nil {
			t.Fatal(err)
		}
		cmd = exec.Command("go", "build", "-overlay", ov, "-buildvcs=false", "-o", bin, "./cmd/tokenmesh")
		cmd.Dir = repo
	} else {
		src := filepath.Join(dir, "src")
		if err := os.Mkdir(src, 0o755); err != nil {
			t.Fatal(err)
		}
		tarball := filepath.Join(dir, "src.tar")
		git("archive", "-o", tarball, rev)
		if out, err := exec.Command("tar", "-xf", tarball, "-C", src).CombinedOutput(); err != nil {
			t.Fatalf("tar: %v\n%s", err, out)
		}
		// No -trimpath: the third-party packages' compiled forms are then
		// the build cache's (same module paths and flags), and only
		// tokenmesh's own packages are compiled.
		cmd = exec.Command("go", "build", "-o", bin, "./cmd/tokenmesh")
		cmd.Dir = src
	}
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build of %s: %v\n%s", rev, err, out)
	}
	t.Logf("built the previous release (%s; %d Go files differ, from an archive: %v) in %v",
		rev[:min(12, len(rev))], len(overlay), modChanged, time.Since(start).Round(time.Millisecond))
	return bin
}

// upgradeCheck is one check of the upgrade test's load.
type upgradeCheck struct {
	at      time.Duration
	node    int
	rule    string
	key     string
	allowed bool
	err     string
	latency time.Duration
}

// TestClusterE2EUpgradeRolling: a 3-node cluster of the previous build
// (upgradeFrom, with a secret key: frame MACs) carries one rule per
// strategy (owner, lease, gdrl, local; 1/s burst 5, local 0.2/s per
// node), 20 keys each offered
// 3 checks/s spread over the nodes not being replaced. Each node in turn
// is stopped with SIGTERM and started again from this build (same name,
// addresses and config). Per rule and key, the admitted tokens in every
// window stay within b + r*T + 1 (lease: + b + 1, its bound for owner
// changes; local: per node, and apart from the
// replaced node's restart, which starts it with a full bucket: no
// state_dir); no check fails except those sent to the node being
// replaced; no peer frame is refused at the end (bad_mac, old_version,
// unknown_version, stale_incarnation on any node); the first node
// replaced spoke version 1 to the others, and every node dials version 2
// links once all are replaced.
func TestClusterE2EUpgradeRolling(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the previous release and starts a cluster of real processes")
	}
	rev := upgradeFrom
	if r := os.Getenv("TOKENMESH_UPGRADE_FROM"); r != "" {
		rev = r
	}
	previous := buildPrevious(t, rev)
	// TOKENMESH_UPGRADE_CONTROL=previous (or =this) restarts every node
	// into the same build instead: a rolling restart without an upgrade,
	// to tell the upgrade's effects from the strategies' own under
	// restarts.
	next := binary
	control := os.Getenv("TOKENMESH_UPGRADE_CONTROL")
	switch control {
	case "previous":
		next = previous
	case "this":
		previous = binary
	}

	const (
		nodes   = 3
		nKeys   = 20
		perKey  = 3 // checks per second per key: 3x the rate
		rate    = 1.0
		burst   = 5
		workers = 32
	)
	strategies := []string{"owner", "lease", "gdrl", "local"}
	var rules []rule.Rule
	// local's rate is per node, and each node sees a third of a key's
	// checks: at a fifth of the rate, a node's bucket is offered about
	// four times what it refills.
	rateOf := map[string]float64{"local": rate / 5}
	for _, s := range strategies {
		r := rateOf[s]
		if r == 0 {
			r = rate
		}
		rules = append(rules, rule.Rule{Name: s, Rate: rule.MustRate(fmt.Sprint(r)), Burst: burst, Strategy: s})
	}
	logs := &lockedbuf.Buffer{}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := localcluster.Start(ctx, localcluster.Config{Binary: previous, Nodes: nodes, Rules: rules, Log: logs,
		SecretKey: []byte("upgrade-test-secret-key-32-bytes")})
	if err != nil {
		t.Fatalf("starting %d nodes of the previous build: %v", nodes, err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Errorf("stopping the cluster: %v", err)
		}
		if t.Failed() {
			t.Logf("node output:\n%s", logs.String())
		}
	})

	var alive [nodes]atomic.Bool
	for i := range alive {
		alive[i].Store(true)
	}
	start := time.Now()
	jobs := make(chan upgradeCheck, workers)
	var mu sync.Mutex
	var done []upgradeCheck
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for j := range jobs {
				t0 := time.Now()
				j.at = t0.Sub(start)
				r, err := checkAt(c, j.node, 2*time.Second, j.rule, j.key, 1)
				j.latency = time.Since(t0)
				switch {
				case err != nil:
					j.err = err.Error()
				case r.GetError() != "":
					j.err = r.GetError()
				default:
					j.allowed = r.GetAllowed()
				}
				mu.Lock()
				done = append(done, j)
				mu.Unlock()
			}
		})
	}
	stopLoad := make(chan struct{})
	loadDone := make(chan struct{})
	var dropped atomic.Int64
	go func() {
		defer close(loadDone)
		defer close(jobs)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		limit := time.After(90 * time.Second) // bound, whatever happens
		k, n := 0, 0
		total := nKeys * len(strategies)
		for {
			select {
			case <-stopLoad:
				return
			case <-limit:
				return
			case <-tick.C:
			}
			for range total * perKey / 100 {
				node := -1
				for range nodes {
					n = (n + 1) % nodes
					if alive[n].Load() {
						node = n
						break
					}
				}
				if node >= 0 {
					select {
					case jobs <- upgradeCheck{node: node, rule: strategies[k%len(strategies)], key: fmt.Sprintf("tenant-%d", k/len(strategies))}:
					default:
						dropped.Add(1)
					}
				}
				k = (k + 1) % total
			}
		}
	}()
	finish := func() {
		close(stopLoad)
		<-loadDone
		wg.Wait()
	}
	defer func() {
		select {
		case <-stopLoad:
		default:
			finish()
		}
	}()

	time.Sleep(3 * time.Second)
	// phases[i] is when node i was out: from the SIGTERM to 1 s after the
	// new build serves (checks sent to it then, and the answers to checks
	// in flight at the SIGTERM, are its own).
	type phase struct{ from, to time.Duration }
	var phases [nodes]phase
	for i := range nodes {
		phases[i].from = time.Since(start)
		alive[i].Store(false)
		if err := c.Terminate(i); err != nil {
			t.Fatal(err)
		}
		c.SetBinary(next)
		t0 := time.Now()
		if err := c.Restart(ctx, i); err != nil {
			t.Fatal(err)
		}
		t.Logf("n%d: replaced by this build (restart and rejoin %v)", i, time.Since(t0).Round(time.Millisecond))
		alive[i].Store(true)
		time.Sleep(2 * time.Second)
		// The version the cluster speaks, as the replaced node sees it: 1
		// while a node of the previous build is live.
		mctx, mcancel := context.WithTimeout(ctx, 5*time.Second)
		m, err := c.Metrics(mctx, i)
		mcancel()
		if err != nil {
			t.Fatalf("metrics of n%d: %v", i, err)
		}
		wv, _ := metricValue(m, "tokenmesh_peer_wire_version")
		wantV := 1.0
		if i == nodes-1 || control == "this" {
			wantV = 2
		}
		if control == "previous" {
			wantV = 0 // the previous build has no such metric
		}
		t.Logf("n%d: tokenmesh_peer_wire_version %v", i, wv)
		if wv != wantV {
			t.Errorf("n%d, replaced: tokenmesh_peer_wire_version %v, want %v", i, wv, wantV)
		}
		phases[i].to = time.Since(start) - time.Second
	}
	time.Sleep(2 * time.Second)
	end := time.Since(start)
	finish()

	slices.SortFunc(done, func(a, b upgradeCheck) int { return int(a.at - b.at) })
	own := func(j upgradeCheck) bool {
		p := phases[j.node]
		return j.at+j.latency >= p.from && j.at <= p.to
	}
	// Tokens over b + r*T allowed per key: 1 (owner's bound for rolling
	// restarts, TestClusterE2EOwnerCrashAndRollingRestart); lease states
	// b + r*(max_wait + sync + latency) per owner change (docs/OPERATIONS.md,
	// "Choosing a strategy"), and a rolling restart of the previous build
	// alone (TOKENMESH_UPGRADE_CONTROL=previous) goes 3-4 tokens over on
	// some keys: its bound here is b + 1.
	boundOf := map[string]float64{"lease": burst + 1}
	var errs []string
	for _, s := range strategies {
		bound := 1.0
		if b, ok := boundOf[s]; ok {
			bound = b
		}
		env := chaos.Envelope{RatePerSec: rate, Burst: burst}
		if r := rateOf[s]; r > 0 {
			env.RatePerSec = r
		}
		var hs [nodes + 1]chaos.History // [nodes]: the whole cluster
		checks, admitted, ownErrs, otherErrs := 0, 0, 0, 0
		for _, j := range done {
			if j.rule != s {
				continue
			}
			checks++
			d := chaos.Decision{At: j.at, Key: j.key, Tokens: 1, Allowed: j.allowed, Latency: j.latency, Node: j.node}
			if j.err != "" {
				d.Err = errors.New(j.err)
				if own(j) {
					ownErrs++
				} else {
					otherErrs++
					if len(errs) < 10 {
						errs = append(errs, fmt.Sprintf("%s at n%d, sent at %v: %s", s, j.node, j.at.Round(time.Millisecond), j.err))
					}
				}
			}
			if j.allowed {
				admitted++
			}
			hs[nodes].Add(d)
			hs[j.node].Add(d)
		}
		var worst float64
		var over int
		var where string
		if s == "local" {
			// Each node its own bucket: per node, before its restart
			// and after it.
			for i := range nodes {
				for _, w := range [][2]time.Duration{{0, phases[i].from}, {phases[i].to, end}} {
					r, err := hs[i].Check(env, w[0], w[1], bound)
					if err != nil {
						t.Fatal(err)
					}
					if r.MaxViolation > worst {
						worst = r.MaxViolation
					}
					if r.Over > 0 {
						over += r.Over
						where = fmt.Sprintf("n%d %s: %.3f over", i, r.Keys[0].Key, r.Keys[0].Violation)
					}
				}
			}
		} else {
			r, err := hs[nodes].Check(env, 0, end, bound)
			if err != nil {
				t.Fatal(err)
			}
			worst, over = r.MaxViolation, r.Over
			if over > 0 {
				k := r.Keys[0]
				where = fmt.Sprintf("%s: %.3f over b + r*T for the checks sent in [%v, %v]", k.Key, k.Violation, k.WorstFrom.Round(time.Millisecond), k.WorstTo.Round(time.Millisecond))
			}
		}
		t.Logf("%-6s %5d checks, %4d admitted, envelope violation %.3f tokens (bound %.0f), %d keys over; errors: %d at the node being replaced, %d elsewhere",
			s, checks, admitted, worst, bound, over, ownErrs, otherErrs)
		if over > 0 {
			t.Errorf("%s: %d keys beyond b + r*T + %.0f; worst %s", s, over, bound, where)
		}
		if otherErrs > 0 {
			t.Errorf("%s: %d checks failed at nodes not being replaced", s, otherErrs)
		}
	}
	for _, e := range errs {
		t.Log(e)
	}
	var out []string
	for i, p := range phases {
		out = append(out, fmt.Sprintf("n%d %v-%v", i, p.from.Round(time.Millisecond), (p.to+time.Second).Round(time.Millisecond)))
	}
	t.Logf("%d checks over %v (%d dropped by the bounded load); replaced (SIGTERM to serving + 1 s): %s",
		len(done), end.Round(time.Millisecond), dropped.Load(), strings.Join(out, ", "))
	if len(done) < 1000 {
		t.Fatalf("only %d checks completed: the load did not run", len(done))
	}
	for i := range nodes {
		mctx, mcancel := context.WithTimeout(context.Background(), 5*time.Second)
		m, err := c.Metrics(mctx, i)
		mcancel()
		if err != nil {
			t.Fatalf("metrics of n%d: %v", i, err)
		}
		for _, reason := range []string{"bad_mac", "replay", "old_version", "unknown_version", "stale_incarnation", "unknown_sender", "not_member"} {
			v, _ := metricValue(m, fmt.Sprintf("tokenmesh_peer_refused_frames_total{reason=%q}", reason))
			if v > 0 {
				t.Logf("n%d refused %s: %.0f", i, reason, v)
			}
			if v > 0 && reason != "not_member" {
				t.Errorf("n%d refused %.0f peer frames as %s after the upgrade", i, v, reason)
			}
		}
		if wv, _ := metricValue(m, "tokenmesh_peer_wire_version"); wv != 2 && control != "previous" {
			t.Errorf("n%d: tokenmesh_peer_wire_version %v after the upgrade, want 2", i, wv)
		}
		v1, _ := metricValue(m, `tokenmesh_peer_links_total{version="1"}`)
		v2, ok := metricValue(m, `tokenmesh_peer_links_total{version="2"}`)
		t.Logf("n%d: peer links dialled at wire version 1: %.0f, at 2: %.0f", i, v1, v2)
		if (!ok || v2 < 1) && control != "previous" {
			t.Errorf("n%d dialled no version 2 link", i)
		}
		if i == 0 && v1 < 1 && control == "" {
			t.Errorf("n0, replaced first, dialled no version 1 link to the previous build")
		}
	}
}
