package cluster

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/rule"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// TestSnapshotRestoreAcrossEpochs: a key drained on one node is still
// drained on a new node restored from its snapshot, although the new
// node's epoch (its own start, 50 ms later) differs; a gdrl rule (not a
// Snapshotter) is not persisted.
func TestSnapshotRestoreAcrossEpochs(t *testing.T) {
	perMin := bucket.Rate{Tokens: 1, Per: time.Minute}
	rules := []rule.Rule{{Name: "local", Rate: perMin, Burst: 5, Strategy: "local"},
		{Name: "owner", Rate: perMin, Burst: 5, Strategy: "owner", Params: []string{"hold=0"}},
		{Name: "gdrl", Rate: perMin, Burst: 5, Strategy: "gdrl"}}
	start := func(restore map[string][]strategy.KeyState) *Node {
		return mustSoloNode(t, Config{Rules: rules, Restore: restore})
	}
	ctx := context.Background()
	a := start(nil)
	for _, r := range []string{"local", "owner"} {
		for i := range 5 {
			if d, err := a.Check(ctx, r, "k", 1); err != nil || !d.Allowed {
				t.Fatalf("%s: check %d: %+v %v", r, i, d, err)
			}
		}
	}
	snap, err := a.Snapshot(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	a.Close()
	if _, ok := snap["gdrl"]; ok || len(snap["local"].States) != 1 || len(snap["owner"].States) != 1 {
		t.Fatalf("snapshot = %+v, want one state for local and owner, none for gdrl", snap)
	}
	if snap["local"].Strategy != "local" || snap["owner"].Strategy != "owner" {
		t.Fatalf("snapshot = %+v, want each rule's strategy named", snap)
	}
	if at := time.Unix(0, int64(snap["local"].States[0].At)); time.Since(at) < 0 || time.Since(at) > time.Minute {
		t.Fatalf("snapshot At %v is not wall-clock time just before now", at)
	}
	time.Sleep(50 * time.Millisecond)
	b := start(restoreOf(snap))
	if got := b.Restored(); got["local"] != 1 || got["owner"] != 1 {
		t.Fatalf("Restored = %v", got)
	}
	for _, r := range []string{"local", "owner"} {
		if d, err := b.Check(ctx, r, "k", 1); err != nil || d.Allowed {
			t.Fatalf("%s after restore: %+v %v, want refused (drained, no fresh burst)", r, d, err)
		}
	}
	if d, _ := b.Check(ctx, "gdrl", "k", 1); !d.Allowed {
		t.Fatal("gdrl after restart: refused, but it is not persisted")
	}
}

// restoreOf is snap's states as Config.Restore takes them.
func restoreOf(snap map[string]RuleSnapshot) map[string][]strategy.KeyState {
	out := map[string][]strategy.KeyState{}
	for name, rs := range snap {
		out[name] = rs.States
	}
	return out
}

// TestRestoreRefillsForWallTime: a drained key restored from a snapshot
// taken 2 minutes (and a little) ago at 1 token/min holds the 2 tokens
// refilled since (the envelope b + r*T, capped at b): 2 checks are
// admitted, the third refused. A snapshot from long ago (At 0, 1970)
// restores a full burst, not an overflow.
func TestRestoreRefillsForWallTime(t *testing.T) {
	perMin := bucket.Rate{Tokens: 1, Per: time.Minute}
	rules := []rule.Rule{{Name: "local", Rate: perMin, Burst: 5, Strategy: "local"}}
	start := func(restore map[string][]strategy.KeyState) *Node {
		return mustSoloNode(t, Config{Rules: rules, Restore: restore})
	}
	ctx := context.Background()
	a := start(nil)
	for i := range 5 {
		if d, err := a.Check(ctx, "local", "k", 1); err != nil || !d.Allowed {
			t.Fatalf("check %d: %+v %v", i, d, err)
		}
	}
	snap, err := a.Snapshot(ctx, nil)
	if err != nil || len(snap["local"].States) != 1 {
		t.Fatalf("snapshot = %+v, %v; want one state", snap, err)
	}
	a.Close()
	admitted := func(n *Node) int {
		got := 0
		for range 6 {
			if d, err := n.Check(ctx, "local", "k", 1); err != nil {
				t.Fatal(err)
			} else if d.Allowed {
				got++
			}
		}
		return got
	}
	st := snap["local"].States[0]
	st.At -= 2*time.Minute + time.Second
	if got := admitted(start(map[string][]strategy.KeyState{"local": {st}})); got != 2 {
		t.Errorf("restored 2 min after draining at 1/min: %d admitted, want 2", got)
	}
	st.At = 0
	if got := admitted(start(map[string][]strategy.KeyState{"local": {st}})); got != 5 {
		t.Errorf("restored from 1970: %d admitted, want the burst of 5", got)
	}
}

// TestRestoreRefusesInvalid: a state above its capacity fails New with an
// error naming the rule and the key.
func TestRestoreRefusesInvalid(t *testing.T) {
	bad := map[string][]strategy.KeyState{"r": {{Key: "k", Level: 7, Capacity: 5, TicksPerToken: 1, At: time.Duration(time.Now().UnixNano())}}}
	_, err := soloNode(t, Config{Rules: []rule.Rule{{Name: "r", Rate: slow, Burst: 5, Strategy: "local"}}, Restore: bad})
	if err == nil {
		t.Fatal("New accepted a level above capacity")
	}
	if !strings.Contains(err.Error(), `rule "r"`) || !strings.Contains(err.Error(), `"k"`) {
		t.Fatalf("error %q does not name the rule and key", err)
	}
}

// BenchmarkSnapshot measures how long a snapshot keeps the node's loop
// busy (copying the states of a local rule holding keys drained buckets,
// into the previous snapshot's slices, as limiter does).
func BenchmarkSnapshot(b *testing.B) {
	for _, keys := range []int{10_000, 100_000, 1_000_000} {
		b.Run(fmt.Sprint(keys), func(b *testing.B) {
			states := make([]strategy.KeyState, keys)
			at := time.Duration(time.Now().UnixNano())
			for i := range states {
				states[i] = strategy.KeyState{Key: fmt.Sprintf("tenant-%07d", i), Capacity: 5 * int64(time.Minute), TicksPerToken: int64(time.Minute), At: at}
			}
			n := mustSoloNode(b, Config{Restore: map[string][]strategy.KeyState{"r": states},
				Rules: []rule.Rule{{Name: "r", Rate: bucket.Rate{Tokens: 1, Per: time.Minute}, Burst: 5, Strategy: "local"}}})
			var snap map[string]RuleSnapshot
			var err error
			b.ResetTimer()
			for range b.N {
				snap, err = n.Snapshot(context.Background(), snap)
				if err != nil || len(snap["r"].States) != keys {
					b.Fatalf("snapshot of %d keys: %d, %v", keys, len(snap["r"].States), err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(keys), "ns/key")
		})
	}
}

// TestSnapshotChangesTakesTheChanges: Node.SnapshotChanges takes each
// rule whole the first time (its strategy cannot tell changes before a
// full snapshot), then the keys checked since alone (Changes), and whole
// again when asked (full) or when a reload gave the rule a fresh
// strategy; a rule whose strategy is not a ChangeSnapshotter (gdrl: not a
// Snapshotter at all) is left out as in Snapshot.
func TestSnapshotChangesTakesTheChanges(t *testing.T) {
	perMin := bucket.Rate{Tokens: 1, Per: time.Minute}
	rules := []rule.Rule{{Name: "local", Rate: perMin, Burst: 5, Strategy: "local"},
		{Name: "owner", Rate: perMin, Burst: 5, Strategy: "owner", Params: []string{"hold=0"}},
		{Name: "gdrl", Rate: perMin, Burst: 5, Strategy: "gdrl"}}
	n := mustSoloNode(t, Config{Rules: rules})
	ctx := context.Background()
	check := func(r, key string) {
		if _, err := n.Check(ctx, r, key, 1); err != nil {
			t.Fatal(err)
		}
	}
	take := func(full bool, want map[string]int, changes bool) map[string]RuleSnapshot {
		t.Helper()
		snap, err := n.SnapshotChanges(ctx, full, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := snap["gdrl"]; ok || len(snap) != len(want) {
			t.Fatalf("snapshot of rules %v, want %v", snap, want)
		}
		for r, keys := range want {
			if rs := snap[r]; rs.Changes != changes || len(rs.States) != keys || len(rs.Gone) != 0 || rs.Strategy != r {
				t.Fatalf("rule %s: %+v, want %d states, changes %v", r, rs, keys, changes)
			}
		}
		return snap
	}
	for _, k := range []string{"a", "b", "c"} {
		check("local", k)
		check("owner", k)
	}
	take(false, map[string]int{"local": 3, "owner": 3}, false) // the first: whole
	check("local", "b")
	snap := take(false, map[string]int{"local": 1, "owner": 0}, true)
	if st := snap["local"].States[0]; st.Key != "b" || time.Since(time.Unix(0, int64(st.At))) > time.Minute {
		t.Fatalf("changes of local: %+v, want key b at wall-clock time", st)
	}
	take(false, map[string]int{"local": 0, "owner": 0}, true)
	take(true, map[string]int{"local": 3, "owner": 3}, false)
	changed := append([]rule.Rule{}, rules...)
	changed[0].Burst = 6 // a fresh strategy: full buckets, whole
	if _, err := n.SetRules(ctx, changed); err != nil {
		t.Fatal(err)
	}
	check("owner", "d")
	snap, err := n.SnapshotChanges(ctx, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rs := snap["local"]; rs.Changes || len(rs.States) != 0 {
		t.Fatalf("local after a reload changed it: %+v, want whole and empty (a fresh strategy)", rs)
	}
	if rs := snap["owner"]; !rs.Changes || len(rs.States) != 1 || rs.States[0].Key != "d" {
		t.Fatalf("owner after a reload that kept it: %+v, want the change of d alone", rs)
	}
}
