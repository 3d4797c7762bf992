package limiter

import (
	"context"
	"errors"
	"fmt"
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

// TestSnapshotWritesChangedKeys: after the first snapshot (whole, a
// compaction of 200 drained keys), a snapshot after 3 of them were charged
// again takes those 3 states alone in the loop (cluster.Node.SnapshotChanges)
// and writes them alone: an untouched bucket's state does not change
// between snapshots (the strategies emit it at its last update).
func TestSnapshotWritesChangedKeys(t *testing.T) {
	rules := []rule.Rule{{Name: "tenant", Rate: perSec(1.0 / 60), Burst: 5, Strategy: "local"}}
	n, err := Start(context.Background(), Config{Name: "solo", Rules: rules, StateDir: t.TempDir(), SnapshotInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	l := limiterFor(t, n, "tenant")
	for i := range 200 {
		if !l.Allow(fmt.Sprint("k", i)) {
			t.Fatalf("key %d refused", i)
		}
	}
	if err := n.persist.save(n.node); err != nil {
		t.Fatal(err)
	}
	if st := n.SnapshotStats(); st.Keys != 200 || st.Written != 200 || st.Compactions != 1 || st.Full != 1 {
		t.Fatalf("first snapshot: %+v, want a whole one, a compaction of 200 keys", st)
	}
	time.Sleep(5 * time.Millisecond) // the untouched buckets' refill moves on
	for i := range 3 {
		l.Allow(fmt.Sprint("k", i*50))
	}
	if err := n.persist.save(n.node); err != nil {
		t.Fatal(err)
	}
	if st := n.SnapshotStats(); st.Keys != 200 || st.Written != 3 || st.Compactions != 1 || st.Full != 1 {
		t.Fatalf("second snapshot: %+v, want the 3 keys charged again taken and written alone (changes, not a whole one)", st)
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

// TestStateDirKeepsDebt: a key charged into debt (overdraft: Reserve then
// Settle above what was left) is still in debt after Close and a new
// Start on the same StateDir, for owner and local alike: the restart does
// not forgive it (a snapshot used to store a negative level as 0, handing
// the key a refill's worth of tokens at once).
func TestStateDirKeepsDebt(t *testing.T) {
	dir := t.TempDir()
	params := []string{"overdraft=true", "max_debt=5000"}
	rules := []rule.Rule{{Name: "llm", Rate: rule.MustRate("1000/m"), Burst: 1000, Strategy: "owner", Params: append([]string{"hold=0"}, params...)},
		{Name: "llm-local", Rate: rule.MustRate("1000/m"), Burst: 1000, Strategy: "local", Params: params}}
	start := func() *Node {
		n, err := Start(context.Background(), Config{Name: "solo", Rules: rules, StateDir: dir, SnapshotInterval: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close() })
		return n
	}
	ctx := context.Background()
	a := start()
	for _, name := range []string{"llm", "llm-local"} {
		r, err := limiterFor(t, a, name).Reserve(ctx, "tenant", 1000)
		if err != nil || !r.Allowed() {
			t.Fatalf("%s: the burst reserved: %v %v", name, r.Allowed(), err)
		}
		if err := r.Settle(ctx, 4000); err != nil { // 3,000 beyond the burst: 3 min of refill
			t.Fatal(err)
		}
	}
	if err := a.Close(); err != nil { // a graceful close saves a snapshot
		t.Fatal(err)
	}
	b := start()
	for _, name := range []string{"llm", "llm-local"} {
		// Were the debt forgiven, the level would be 0 plus the refill
		// since the close (16.7 tokens a second): 1 token within 60 ms.
		time.Sleep(100 * time.Millisecond)
		if ok, err := limiterFor(t, b, name).AllowN(ctx, "tenant", 1); ok || err != nil {
			t.Fatalf("%s: admitted %v (%v) after the restart: the debt of 3,000 tokens was forgiven", name, ok, err)
		}
	}
}
