package limiter

import (
	"context"
	"errors"
	"github.com/tokenmesh/tokenmesh/rule"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/statestore"
)

// TestStateDirSurvivesRestart: a key drained on a node (1/min, burst 5)
// is still drained after Close and a new Start on the same StateDir; the
// periodic snapshot also runs (and is what a crash would leave).
func TestStateDirSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	rules := []rule.Rule{{Name: "api", Rate: perSec(1.0 / 60), Burst: 5, Strategy: "owner", Params: []string{"hold=0"}},
		{Name: "tenant", Rate: perSec(1.0 / 60), Burst: 5, Strategy: "local"}}
	start := func() *Node {
		n, err := Start(context.Background(), Config{Name: "solo", Rules: rules, StateDir: dir, SnapshotInterval: 20 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close() })
		return n
	}
	a := start()
	if info := a.RestoreInfo(); info.Found || info.File != filepath.Join(dir, statestore.FileName) {
		t.Fatalf("first start: %+v, want no snapshot found", info)
	}
	for _, rule := range []string{"api", "tenant"} {
		l := limiterFor(t, a, rule)
		for i := range 5 {
			if !l.Allow("k") {
				t.Fatalf("%s: request %d refused", rule, i)
			}
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for a.SnapshotStats().Keys != 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if st := a.SnapshotStats(); st.Keys != 2 || st.Errors != 0 {
		t.Fatalf("periodic snapshots: %+v, want the 2 drained keys", st)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	b := start()
	if info := b.RestoreInfo(); !info.Found || info.Keys["api"] != 1 || info.Keys["tenant"] != 1 || info.Age < 0 || info.Age > time.Minute {
		t.Fatalf("restart: %+v, want one key restored per rule", info)
	}
	for _, rule := range []string{"api", "tenant"} {
		if limiterFor(t, b, rule).Allow("k") {
			t.Fatalf("%s: a drained key was admitted after the restart (a fresh burst)", rule)
		}
		if !limiterFor(t, b, rule).Allow("other") {
			t.Fatalf("%s: a new key was refused", rule)
		}
	}
}

// TestStateDirCorrupt: a corrupt state file fails Start, naming the file;
// with DiscardBadState it is moved aside and the node starts empty.
func TestStateDirCorrupt(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, statestore.FileName)
	if err := os.WriteFile(file, []byte(strings.Repeat("not a bbolt file", 512)), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Name: "solo", Rules: []rule.Rule{{Name: "api", Rate: perSec(1), Burst: 5}}, StateDir: dir}
	_, err := Start(context.Background(), cfg)
	if !errors.Is(err, statestore.ErrCorrupt) || !strings.Contains(err.Error(), file) || !strings.Contains(err.Error(), "--discard-bad-state") {
		t.Fatalf("Start on a corrupt file: %v, want ErrCorrupt naming %s and the flag", err, file)
	}
	cfg.DiscardBadState = true
	n, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	info := n.RestoreInfo()
	if info.Found || info.Discarded == "" {
		t.Fatalf("RestoreInfo %+v, want nothing found and the file discarded", info)
	}
	if b, err := os.ReadFile(info.Discarded); err != nil || !strings.HasPrefix(string(b), "not a bbolt file") {
		t.Fatalf("the corrupt file was not kept at %s: %v", info.Discarded, err)
	}
}
