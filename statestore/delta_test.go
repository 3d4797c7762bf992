package statestore

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"pgregory.net/rapid"

	"github.com/tokenmesh/tokenmesh/strategy"
)

// sorted is snap with each rule's states sorted by key (as Load returns
// them), nil states as empty.
func sorted(snap Snapshot) Snapshot {
	out := Snapshot{Node: snap.Node, Taken: snap.Taken, Rules: map[string]RuleState{}}
	for name, r := range snap.Rules {
		states := slices.Clone(r.States)
		slices.SortFunc(states, func(a, b strategy.KeyState) int { return strings.Compare(a.Key, b.Key) })
		out.Rules[name] = RuleState{Strategy: r.Strategy, States: states}
	}
	return out
}

func sameSnapshot(t interface{ Fatalf(string, ...any) }, got, want Snapshot) {
	got, want = sorted(got), sorted(want)
	if got.Node != want.Node || !got.Taken.Equal(want.Taken) || len(got.Rules) != len(want.Rules) {
		t.Fatalf("loaded node %q taken %v %d rules, want %q %v %d", got.Node, got.Taken, len(got.Rules), want.Node, want.Taken, len(want.Rules))
	}
	for name, w := range want.Rules {
		g, ok := got.Rules[name]
		if !ok || g.Strategy != w.Strategy || len(g.States) != len(w.States) {
			t.Fatalf("rule %q loaded as %q with %d states (present %v), want %q with %d", name, g.Strategy, len(g.States), ok, w.Strategy, len(w.States))
		}
		for i := range w.States {
			if g.States[i] != w.States[i] {
				t.Fatalf("rule %q state %d loaded as %+v, want %+v", name, i, g.States[i], w.States[i])
			}
		}
	}
}

// TestSaveWritesOnlyChanged: a Save after a first one writes a record per
// changed, added or removed key and nothing for the others; Load gives
// the last snapshot; past a quarter of the base the Save compacts.
func TestSaveWritesOnlyChanged(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.Close() }()
	snap := sample(10_000)
	if err := s.Save(snap); err != nil {
		t.Fatal(err)
	}
	if got := s.LastSave(); !got.Compacted || got.Records != 10_000 {
		t.Fatalf("first Save: %+v, want a compaction of 10,000 states", got)
	}
	api := snap.Rules["api"]
	api.States[7].Level-- // changed
	api.States[8].At++    // changed (the same level at another time)
	api.States = slices.Delete(api.States, 9, 11)
	api.States = append(api.States, strategy.KeyState{Key: "new", Level: -5, Capacity: 10, TicksPerToken: 1, At: 3})
	snap.Rules["api"] = api
	snap.Taken = snap.Taken.Add(time.Second)
	if err := s.Save(snap); err != nil {
		t.Fatal(err)
	}
	if got := s.LastSave(); got.Compacted || got.Records != 5 {
		t.Fatalf("second Save: %+v, want 5 delta records (2 changed, 2 removed, 1 added)", got)
	}
	if err := s.Save(snap); err != nil {
		t.Fatal(err)
	}
	if got := s.LastSave(); got.Compacted || got.Records != 0 {
		t.Fatalf("a Save of the same snapshot: %+v, want no record", got)
	}
	got, _, err := s.Load()
	if err != nil {
		t.Fatal(err)
	}
	sameSnapshot(t, got, snap)
	// Reopened: the same snapshot, and the first Save compacts.
	s.Close()
	if s, err = Open(dir); err != nil {
		t.Fatal(err)
	}
	if got, _, err = s.Load(); err != nil {
		t.Fatal(err)
	}
	sameSnapshot(t, got, snap)
	if err := s.Save(snap); err != nil {
		t.Fatal(err)
	}
	if got := s.LastSave(); !got.Compacted {
		t.Fatalf("first Save after Open: %+v, want a compaction", got)
	}
	// 1% a Save: 24 Saves of 100 records, then the 25th would take the
	// log past a quarter of the 9,999 states: it compacts.
	for i := range 26 {
		for j := range 100 {
			api.States[(i*100+j*37)%len(api.States)].At += time.Second
		}
		if err := s.Save(snap); err != nil {
			t.Fatal(err)
		}
		if got := s.LastSave(); got.Compacted != (i == 24) {
			t.Fatalf("Save %d of 1%% changed: %+v, want a compaction at the 25th only", i, got)
		}
	}
	if got, _, err = s.Load(); err != nil {
		t.Fatal(err)
	}
	sameSnapshot(t, got, snap)
	// A rule added: a compaction.
	snap.Rules["other"] = RuleState{Strategy: "local", States: []strategy.KeyState{{Key: "k", Level: 1, Capacity: 2, TicksPerToken: 1}}}
	if err := s.Save(snap); err != nil {
		t.Fatal(err)
	}
	if got := s.LastSave(); !got.Compacted {
		t.Fatalf("a Save with a new rule: %+v, want a compaction", got)
	}
}

// TestSaveErrorKeepsSnapshot: a Save refused (a key twice, an invalid
// state) after deltas leaves the file as it was, and the next Save is
// right (it compacts: the store's memory of the file was dropped).
func TestSaveErrorKeepsSnapshot(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	snap := sample(100)
	if err := s.Save(snap); err != nil {
		t.Fatal(err)
	}
	snap.Rules["api"].States[3].Level = 5
	if err := s.Save(snap); err != nil {
		t.Fatal(err)
	}
	want := sorted(snap)
	bad := sorted(snap)
	api := bad.Rules["api"]
	api.States[50].At++
	api.States = append(api.States, api.States[10])
	bad.Rules["api"] = api
	if err := s.Save(bad); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Fatalf("save of a key twice: %v", err)
	}
	api.States = api.States[:len(api.States)-1]
	bad.Rules["api"] = api
	api.States[60].Level = api.States[60].Capacity + 1
	if err := s.Save(bad); err == nil || !strings.Contains(err.Error(), "above its capacity") {
		t.Fatalf("save of a level above capacity: %v", err)
	}
	got, _, err := s.Load()
	if err != nil {
		t.Fatal(err)
	}
	sameSnapshot(t, got, want)
	api.States[60].Level = 0
	if err := s.Save(bad); err != nil {
		t.Fatal(err)
	}
	if got, _, err = s.Load(); err != nil {
		t.Fatal(err)
	}
	sameSnapshot(t, got, bad)
}

// TestDeltaProperty: any sequence of snapshots (keys added, changed and
// removed, rules added and removed, the store sometimes closed and
// reopened) loads as the last one saved.
func TestDeltaProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		dir, err := os.MkdirTemp("", "statestore-delta-")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(dir)
		s, err := Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { s.Close() }()
		ruleNames := []string{"a", "b", "c"}
		cur := map[string]map[string]strategy.KeyState{"a": {}}
		strategies := map[string]string{"a": "owner", "b": "local", "c": "static"}
		for step, n := 0, rapid.IntRange(1, 30).Draw(t, "saves"); step < n; step++ {
			for i, m := 0, rapid.IntRange(0, 40).Draw(t, "edits"); i < m; i++ {
				rule := rapid.SampledFrom(ruleNames).Draw(t, "rule")
				switch rapid.IntRange(0, 9).Draw(t, "edit") {
				case 0: // the rule goes (or comes)
					if cur[rule] != nil {
						delete(cur, rule)
					} else {
						cur[rule] = map[string]strategy.KeyState{}
					}
				case 1, 2: // a key goes
					if cur[rule] != nil {
						delete(cur[rule], fmt.Sprint(rapid.IntRange(0, 60).Draw(t, "key")))
					}
				default: // a key is set
					if cur[rule] != nil {
						k := fmt.Sprint(rapid.IntRange(0, 60).Draw(t, "key"))
						c := rapid.Int64Range(1, 100).Draw(t, "capacity")
						cur[rule][k] = strategy.KeyState{Key: k, Capacity: c, Level: rapid.Int64Range(-c, c).Draw(t, "level"),
							TicksPerToken: rapid.Int64Range(1, 10).Draw(t, "per"), At: time.Duration(rapid.Int64Range(-5, 5).Draw(t, "at"))}
					}
				}
			}
			snap := Snapshot{Node: "n", Taken: time.Unix(0, int64(step)), Rules: map[string]RuleState{}}
			for name, keys := range cur {
				r := RuleState{Strategy: strategies[name]}
				for _, st := range keys {
					r.States = append(r.States, st)
				}
				snap.Rules[name] = r
			}
			if err := s.Save(snap); err != nil {
				t.Fatalf("save %d: %v", step, err)
			}
			if rapid.IntRange(0, 4).Draw(t, "reopen") == 0 {
				s.Close()
				if s, err = Open(dir); err != nil {
					t.Fatalf("reopen: %v", err)
				}
			}
			got, found, err := s.Load()
			if err != nil || !found {
				t.Fatalf("load after save %d: found %v, %v", step, found, err)
			}
			sameSnapshot(t, got, snap)
		}
	})
}

// TestFileBounded: 250 Saves of 1% of 20,000 keys changed each keep the
// file within what it reached after the first 75 (compactions reuse the
// pages the previous base and log held).
func TestFileBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("250 Saves")
	}
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const keys = 20_000
	snap := sample(keys)
	states := snap.Rules["api"].States
	var after75 int64
	compactions := 0
	for i := range 250 {
		for j := range keys / 100 {
			states[(i*7919+j*104729)%keys].At += time.Second
		}
		if err := s.Save(snap); err != nil {
			t.Fatal(err)
		}
		if s.LastSave().Compacted {
			compactions++
		}
		fi, err := os.Stat(s.Path())
		if err != nil {
			t.Fatal(err)
		}
		if i == 74 {
			after75 = fi.Size()
		}
		if i > 74 && fi.Size() > after75 {
			t.Fatalf("Save %d: file %d bytes, above the %d it had after 75 Saves", i, fi.Size(), after75)
		}
	}
	if compactions < 8 {
		t.Fatalf("%d compactions in 250 Saves of 1%%, want one about every 25", compactions)
	}
	got, _, err := s.Load()
	if err != nil {
		t.Fatal(err)
	}
	sameSnapshot(t, got, snap)
}

// FuzzDecodeDelta: whatever a delta record holds, the decoder refuses it
// or returns a key that passes the store's checks and, for a put, a state
// that passes validation; what it accepts re-encodes to the same bytes.
func FuzzDecodeDelta(f *testing.F) {
	f.Add(appendDelta(nil, "api", strategy.KeyState{Key: "k", Level: -3, Capacity: 5, TicksPerToken: 1, At: 7}, false))
	f.Add(appendDelta(nil, "api", strategy.KeyState{Key: "k"}, true))
	f.Add([]byte{deltaPut, 0x80})
	f.Add([]byte{deltaDelete, 1, 'r', 0})
	f.Fuzz(func(t *testing.T, v []byte) {
		rule, st, tomb, err := decodeDelta(v)
		if err != nil {
			return
		}
		if rule == "" || st.Key == "" || len(st.Key) > strategy.MaxKeyStateBytes {
			t.Fatalf("decodeDelta accepted rule %q key %q", rule, st.Key)
		}
		if !tomb {
			if verr := st.Validate(); verr != nil {
				t.Fatalf("decodeDelta accepted an invalid state %+v: %v", st, verr)
			}
		}
		if again := appendDelta(nil, rule, st, tomb); string(again) != string(v) {
			// varints have one shortest form; a longer one decodes too
			if _, st2, tomb2, err := decodeDelta(again); err != nil || st2 != st || tomb2 != tomb {
				t.Fatalf("re-encoded record does not decode the same: %v", err)
			}
		}
	})
}

// TestCorruptDeltaRefused: each kind of damage to the delta log is
// refused by Load with ErrCorrupt naming the record.
func TestCorruptDeltaRefused(t *testing.T) {
	seqKey := func(n uint64) []byte { return binary64(n) }
	for _, c := range []struct {
		name       string
		key, value []byte
		want       string
	}{
		{"kind", seqKey(90), []byte{7, 1, 'a'}, "deltas/90: kind 7"},
		{"unknown rule", seqKey(90), appendDelta(nil, "nope", strategy.KeyState{Key: "k"}, true), `deltas/90: rule "nope" is not in the snapshot`},
		{"level above capacity", seqKey(90), appendDelta(nil, "api", strategy.KeyState{Key: "k", Level: 6, Capacity: 5, TicksPerToken: 1}, false), "above its capacity"},
		{"truncated", seqKey(90), appendDelta(nil, "api", strategy.KeyState{Key: "k", Level: 1, Capacity: 5, TicksPerToken: 1}, false)[:8], "deltas/90: key \"k\""},
		{"key length", seqKey(90), []byte{deltaDelete, 3, 'a', 'p', 'i', 9, 'k'}, "deltas/90: key's length"},
		{"empty key", seqKey(90), []byte{deltaDelete, 3, 'a', 'p', 'i', 0}, "deltas/90: key of 0 bytes"},
		{"left over", seqKey(90), append(appendDelta(nil, "api", strategy.KeyState{Key: "k"}, true), 1), "left over after a delete"},
		{"short sequence key", []byte("zz"), appendDelta(nil, "api", strategy.KeyState{Key: "k"}, true), "a key of 2 bytes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			s, err := Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			snap := sample(3)
			if err := s.Save(snap); err != nil {
				t.Fatal(err)
			}
			snap.Rules["api"].States[1].At++
			if err := s.Save(snap); err != nil { // one record: sequence 1
				t.Fatal(err)
			}
			s.Close()
			db, err := bolt.Open(filepath.Join(dir, FileName), 0o600, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketDeltas).Put(c.key, c.value) }); err != nil {
				t.Fatal(err)
			}
			db.Close()
			s, err = Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if _, _, err := s.Load(); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("load: %v, want ErrCorrupt containing %q", err, c.want)
			}
		})
	}
	// A version 3 file without its log, a version 2 file with one.
	for _, c := range []struct {
		name    string
		version uint64
		drop    bool
		want    string
	}{{"no log", Version, true, "deltas: missing"}, {"log in version 2", VersionSignedLevel, false, "deltas: in a version 2 file"}} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			s, err := Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Save(sample(3)); err != nil {
				t.Fatal(err)
			}
			s.Close()
			db, err := bolt.Open(filepath.Join(dir, FileName), 0o600, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := db.Update(func(tx *bolt.Tx) error {
				if c.drop {
					return tx.DeleteBucket(bucketDeltas)
				}
				return tx.Bucket(bucketMeta).Put(keyVersion, []byte{byte(c.version)})
			}); err != nil {
				t.Fatal(err)
			}
			db.Close()
			if s, err = Open(dir); err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if _, _, err := s.Load(); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("load: %v, want ErrCorrupt containing %q", err, c.want)
			}
		})
	}
}

func binary64(n uint64) []byte {
	b := make([]byte, 8)
	for i := 7; i >= 0; i-- {
		b[i] = byte(n)
		n >>= 8
	}
	return b
}

// crashSnapshot is the snapshot the crash test's child saves at step i:
// 2,000 keys, 1% of them changed at each step, and a key set that shifts
// by one key every 10 steps (adds and deletes).
func crashSnapshot(i int) Snapshot {
	const keys = 2000
	var states []strategy.KeyState
	first := i / 10
	for k := first; k < first+keys; k++ {
		// key k changes at the steps i with i%100 == k%100
		v := int64(i-k%100) / 100
		states = append(states, strategy.KeyState{Key: fmt.Sprintf("k%06d", k), Level: v % 50, Capacity: 50, TicksPerToken: 1, At: time.Duration(v)})
	}
	return Snapshot{Node: "n", Taken: time.Unix(0, int64(i)), Rules: map[string]RuleState{"api": {Strategy: "owner", States: states}}}
}

// TestCrashMidSave: a process killed (SIGKILL) while it saves snapshots
// in a loop, deltas and compactions, leaves a file that loads as the last
// snapshot it finished saving or the one in flight. Run in a child
// process (this test binary, -test.run, STATESTORE_CRASH_DIR set).
func TestCrashMidSave(t *testing.T) {
	if dir := os.Getenv("STATESTORE_CRASH_DIR"); dir != "" {
		s, err := Open(dir)
		if err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		start, _ := strconv.Atoi(os.Getenv("STATESTORE_CRASH_START"))
		for i := start; ; i++ {
			if err := s.Save(crashSnapshot(i)); err != nil {
				fmt.Println("error", err)
				os.Exit(1)
			}
			fmt.Println(i)
		}
	}
	if testing.Short() {
		t.Skip("runs child processes")
	}
	dir := t.TempDir()
	next := 0
	for round := range 12 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestCrashMidSave$")
		cmd.Env = append(os.Environ(), "STATESTORE_CRASH_DIR="+dir, fmt.Sprintf("STATESTORE_CRASH_START=%d", next))
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := -1
		sc := bufio.NewScanner(out)
		lines := 0
		kill := 5 + 7*round // Saves before the kill: past a compaction (every ~25) in later rounds
		for sc.Scan() {
			n, err := strconv.Atoi(sc.Text())
			if err != nil {
				t.Fatalf("child: %s", sc.Text())
			}
			done = n
			if lines++; lines == kill {
				time.Sleep(time.Duration(round%4) * time.Millisecond)
				_ = cmd.Process.Kill()
				break
			}
		}
		_ = cmd.Wait()
		s, err := Open(dir)
		if err != nil {
			t.Fatalf("round %d: open after the kill: %v", round, err)
		}
		got, _, err := s.Load()
		s.Close()
		if err != nil {
			t.Fatalf("round %d: load after the kill: %v", round, err)
		}
		step := int(got.Taken.UnixNano())
		if step < done {
			t.Fatalf("round %d: loaded step %d, but step %d had been saved", round, step, done)
		}
		sameSnapshot(t, got, crashSnapshot(step))
		next = step + 1
	}
}
