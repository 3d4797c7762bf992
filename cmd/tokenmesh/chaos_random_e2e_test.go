package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/chaos"
	"github.com/tokenmesh/tokenmesh/internal/lockedbuf"
	"github.com/tokenmesh/tokenmesh/internal/netns"
)

// runChaosArgs parses args as `tokenmesh chaos` would and runs it with
// this package's binary, the output into t's log.
func runChaosArgs(t *testing.T, args ...string) (*chaosPlan, []chaos.RandomResult, error) {
	t.Helper()
	f := &chaosFlags{}
	cmd := newChaosCmdWith(f)
	if err := cmd.ParseFlags(append(args, "--binary", binary)); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr lockedbuf.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), f.duration+3*time.Minute)
	defer cancel()
	start := time.Now()
	p, res, err := runChaosRandom(ctx, f, &stdout, &stderr)
	t.Logf("tokenmesh chaos %s: %v\n%s\n%s", strings.Join(args, " "), time.Since(start).Round(time.Second), filterNodeLines(stderr.String()), stdout.String())
	return p, res, err
}

// filterNodeLines drops the nodes' own log lines ("[n0] ...").
func filterNodeLines(s string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if !strings.HasPrefix(l, "[n") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestChaosRandomE2E is the randomized fault run in `make test`:
// `tokenmesh chaos --random` at seed 1 for 2 minutes (faults of 2-8 s),
// owner, lease and gdrl in parallel (three clusters of 3 nodes, 300
// checks/s each, under one schedule: a partition, a one-way cut, flapping,
// kill -9 + restart and a SIGSTOP pause, each of one node, one at a
// time: the test checks every kind was drawn), in network namespaces when
// the machine allows them (CI runs as root: cuts then stop gossip too),
// else on 127.0.0.1 with the peer data plane cut. It fails when a key
// goes beyond b + r*T + 1 in a quiet window (each repair plus 10 s to the
// next fault), or a fault cannot be applied. Alongside it (parallel,
// 40 s), `local` (every node enforces the whole bucket alone: N times the
// limit) under the same checker must be caught: the checker can fail. (20
// keys on 3 nodes: the count that once kept every key on one node, where
// local passed.)
// About 2 min 20 s of wall time.
func TestChaosRandomE2E(t *testing.T) {
	if testing.Short() {
		t.Skip("starts clusters of real processes")
	}
	ns := []string{}
	if netns.Available() == nil {
		ns = []string{"--netns"}
	}
	t.Run("owner,lease,gdrl", func(t *testing.T) {
		t.Parallel()
		out := t.TempDir()
		args := append([]string{"--random", "--seed", "1", "--duration", "2m", "--max-fault", "8s", "--strategy", "owner,lease,gdrl", "--idle", "5s", "--out", out}, ns...)
		p, res, err := runChaosArgs(t, args...)
		if err != nil {
			t.Fatal(err)
		}
		kinds := map[chaos.FaultKind]bool{}
		for _, f := range p.schedule.Faults {
			kinds[f.Kind] = true
		}
		if len(kinds) != len(chaos.FaultKinds) {
			t.Fatalf("seed 1 drew %d faults of the kinds %v in 2 minutes, want every kind of %v", len(p.schedule.Faults), kinds, chaos.FaultKinds)
		}
		for i, s := range p.strategies {
			r := res[i]
			if r.Quiet.Checks < 10000 {
				t.Errorf("%s: only %d checks in the quiet windows", s, r.Quiet.Checks)
			}
		}
		for _, name := range []string{"report.md", "schedule.txt", "history-owner.csv"} {
			if st, err := os.Stat(filepath.Join(out, name)); err != nil || st.Size() == 0 {
				t.Errorf("--out: %s missing or empty (%v)", name, err)
			}
		}
	})
	t.Run("local is caught", func(t *testing.T) {
		t.Parallel()
		args := append([]string{"--random", "--seed", "1", "--duration", "40s", "--strategy", "local", "--keys", "20", "--idle", "1s"}, ns...)
		_, res, err := runChaosArgs(t, args...)
		if !errors.Is(err, errChaosFailed) {
			t.Fatalf("local (N times the limit) passed the checker: err %v", err)
		}
		if res[0].Quiet.Over == 0 || res[0].Quiet.MaxViolation < 5 {
			t.Fatalf("local: %d keys over, max excess %.2f in the quiet windows; want most keys well over", res[0].Quiet.Over, res[0].Quiet.MaxViolation)
		}
	})
}
