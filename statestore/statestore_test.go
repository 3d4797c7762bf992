package statestore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"pgregory.net/rapid"

	"github.com/tokenmesh/tokenmesh/strategy"
)

func sample(keys int) Snapshot {
	taken := time.Date(2026, 11, 24, 23, 0, 0, 123, time.UTC)
	var states []strategy.KeyState
	for i := range keys {
		states = append(states, strategy.KeyState{Key: fmt.Sprintf("tenant-%07d", i), Level: int64(i) % 300e9,
			Capacity: 300e9, TicksPerToken: 60e9, At: time.Duration(taken.UnixNano()) - time.Duration(i)})
	}
	return Snapshot{Node: "n1", Taken: taken, Rules: map[string]RuleState{
		"api":   {Strategy: "owner", States: states},
		"empty": {Strategy: "static"},
	}}
}

func TestRoundTrip(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, found, err := s.Load(); err != nil || found {
		t.Fatalf("new store: found=%v err=%v, want nothing", found, err)
	}
	want := sample(1000)
	if err := s.Save(sample(5)); err != nil { // replaced by the next Save
		t.Fatal(err)
	}
	if err := s.Save(want); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, found, err := s.Load()
	if err != nil || !found {
		t.Fatalf("load: found=%v err=%v", found, err)
	}
	if !got.Taken.Equal(want.Taken) || got.Node != want.Node || got.Keys() != 1000 {
		t.Fatalf("loaded node %q taken %v keys %d, want %q %v 1000", got.Node, got.Taken, got.Keys(), want.Node, want.Taken)
	}
	got.Taken = want.Taken
	if !reflect.DeepEqual(got, want) { // states were saved in key order, which sample uses
		t.Fatalf("round trip differs:\n got %+v\nwant %+v", got.Rules["api"].States[:2], want.Rules["api"].States[:2])
	}
}

// TestSaveRefusesInvalid: a state that would restore above its burst is
// not written, and the previous snapshot stays.
func TestSaveRefusesInvalid(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Save(sample(3)); err != nil {
		t.Fatal(err)
	}
	bad := sample(3)
	bad.Rules["api"].States[1].Level = bad.Rules["api"].States[1].Capacity + 1
	if err := s.Save(bad); err == nil || !strings.Contains(err.Error(), "above its capacity") {
		t.Fatalf("save of a level above capacity: %v", err)
	}
	if got, _, err := s.Load(); err != nil || got.Keys() != 3 || got.Rules["api"].States[1].Level != 1 {
		t.Fatalf("previous snapshot not kept: %+v, %v", got, err)
	}
}

// TestCorruptRefused: each kind of damage is refused by Open or Load
// with ErrCorrupt and an error naming what was wrong.
func TestCorruptRefused(t *testing.T) {
	put := func(t *testing.T, dir string, bucketPath []string, key string, val []byte) {
		db, err := bolt.Open(filepath.Join(dir, FileName), 0o600, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if err := db.Update(func(tx *bolt.Tx) error {
			b := tx.Bucket([]byte(bucketPath[0]))
			for _, p := range bucketPath[1:] {
				b = b.Bucket([]byte(p))
			}
			return b.Put([]byte(key), val)
		}); err != nil {
			t.Fatal(err)
		}
	}
	enc := func(level int64, capacity, per uint64, at int64) []byte {
		return fmtVarints(level, capacity, per, at)
	}
	for _, c := range []struct {
		name   string
		damage func(t *testing.T, dir string)
		want   string
	}{
		{"not bbolt", func(t *testing.T, dir string) {
			if err := os.WriteFile(filepath.Join(dir, FileName), []byte(strings.Repeat("garbage!", 1024)), 0o600); err != nil {
				t.Fatal(err)
			}
		}, "corrupt"},
		{"version", func(t *testing.T, dir string) { put(t, dir, []string{"meta"}, "version", []byte{9}) }, "meta/version: 9"},
		{"level above capacity", func(t *testing.T, dir string) {
			put(t, dir, []string{"rules", "api"}, "tenant-0000001", enc(301e9, 300e9, 60e9, 0))
		}, `"tenant-0000001": level 301000000000 ticks is above its capacity`},
		{"truncated value", func(t *testing.T, dir string) {
			put(t, dir, []string{"rules", "api"}, "tenant-0000001", []byte{0x80})
		}, "level does not decode"},
		{"trailing bytes", func(t *testing.T, dir string) {
			put(t, dir, []string{"rules", "api"}, "tenant-0000001", append(enc(1, 2, 3, 4), 7))
		}, "1 bytes left over"},
		{"zero ticks per token", func(t *testing.T, dir string) {
			put(t, dir, []string{"rules", "api"}, "tenant-0000001", enc(0, 5, 0, 4))
		}, "ticks per token 0"},
		{"bad key", func(t *testing.T, dir string) { put(t, dir, []string{"rules", "api"}, "\xff", enc(0, 5, 1, 4)) }, "UTF-8"},
	} {
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
			c.damage(t, dir)
			s, err = Open(dir)
			if err == nil {
				defer s.Close()
				_, _, err = s.Load()
			}
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want ErrCorrupt containing %q", err, c.want)
			}
		})
	}
}

func TestLockedByAnotherNode(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for bbolt's 1 s lock timeout")
	}
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// flock is per open file description: a second Open in this process
	// contends like another process would.
	if s2, err := Open(dir); err == nil || !strings.Contains(err.Error(), "locked") {
		if s2 != nil {
			s2.Close()
		}
		t.Fatalf("second open: %v, want a lock error", err)
	}
}

func fmtVarints(level int64, capacity, per uint64, at int64) []byte {
	b := binary.AppendVarint(nil, level)
	b = binary.AppendUvarint(b, capacity)
	b = binary.AppendUvarint(b, per)
	return binary.AppendVarint(b, at)
}

// BenchmarkSave measures one compaction (the whole snapshot rewritten as
// the base, fsynced: what every Save did before the delta log, and what
// the first Save after Open does) at 10k, 100k and 1M keys.
func BenchmarkSave(b *testing.B) {
	for _, keys := range []int{10_000, 100_000, 1_000_000} {
		b.Run(fmt.Sprint(keys), func(b *testing.B) {
			s, err := Open(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			snap := sample(keys)
			for range 2 { // the file grown to its steady size: the pages of the base before the last one are free
				s.idx = nil
				if err := s.Save(snap); err != nil {
					b.Fatal(err)
				}
			}
			c0 := cpuTime()
			b.ResetTimer()
			for range b.N {
				s.idx = nil // as after Open: the Save compacts
				if err := s.Save(snap); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64((cpuTime()-c0).Milliseconds())/float64(b.N), "cpu-ms/op")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(keys), "ns/key")
			if fi, err := os.Stat(s.Path()); err == nil {
				b.ReportMetric(float64(fi.Size())/float64(keys), "file-B/key")
			}
		})
	}
}

// FuzzDecodeState: whatever a stored key and value hold, the decoder (of
// either format version) either refuses them or returns a state that
// passes validation (so never a level above the burst or below
// strategy.MinKeyStateLevel).
func FuzzDecodeState(f *testing.F) {
	f.Add([]byte("tenant"), fmtVarints(1, 2, 3, 4))
	f.Add([]byte("x"), []byte{0x80, 0x80})
	f.Fuzz(func(t *testing.T, key, val []byte) {
		if len(key) == 0 || len(key) > bolt.MaxKeySize {
			return
		}
		for _, signed := range []bool{false, true} {
			st, err := decodeState(key, val, signed)
			if err != nil {
				continue
			}
			if verr := st.Validate(); verr != nil {
				t.Fatalf("decodeState(signed level %v) accepted an invalid state %+v: %v", signed, st, verr)
			}
		}
	})
}

// TestDamagedPages: bytes flipped anywhere in a saved file never crash
// Open or Load and never yield an invalid state: the file is refused
// with ErrCorrupt, or what loads passes validation.
func TestDamagedPages(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		dir, err := os.MkdirTemp("", "statestore-damage-")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(dir)
		s, err := Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		snap := sample(rapid.IntRange(1, 300).Draw(t, "keys"))
		if err := s.Save(snap); err != nil {
			t.Fatal(err)
		}
		// Then deltas (changed keys and deletes) over the base: the
		// damage may fall in the log's pages and records too.
		for i, n := 0, rapid.IntRange(0, 3).Draw(t, "delta saves"); i < n; i++ {
			api := snap.Rules["api"]
			for j, m := 0, rapid.IntRange(0, 20).Draw(t, "changes"); j < m && len(api.States) > 0; j++ {
				k := rapid.IntRange(0, len(api.States)-1).Draw(t, "key")
				if rapid.Bool().Draw(t, "delete") {
					api.States = slices.Delete(slices.Clone(api.States), k, k+1)
				} else {
					api.States[k].Level = -api.States[k].Level
				}
			}
			snap.Rules["api"] = api
			if err := s.Save(snap); err != nil {
				t.Fatal(err)
			}
		}
		s.Close()
		path := filepath.Join(dir, FileName)
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for i, n := 0, rapid.IntRange(1, 8).Draw(t, "flips"); i < n; i++ {
			off := rapid.IntRange(0, len(b)-1).Draw(t, "offset")
			b[off] ^= byte(rapid.IntRange(1, 255).Draw(t, "xor"))
		}
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		s, err = Open(dir)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("open: %v, want ErrCorrupt", err)
			}
			return
		}
		defer s.Close()
		loaded, _, err := s.Load()
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("load: %v, want ErrCorrupt", err)
			}
			return
		}
		for _, r := range loaded.Rules {
			for _, st := range r.States {
				if err := st.Validate(); err != nil {
					t.Fatalf("loaded an invalid state: %v", err)
				}
			}
		}
	})
}

// A freelist page whose count says more free pages than it holds (a
// flipped count: 0xFFFF and then a huge 64-bit count) is refused before
// bbolt reads it; bbolt would allocate a slice of that count (gigabytes:
// TestDamagedPages got the node killed for memory this way).
func TestHugeFreelistCountRefused(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Save(sample(50)); err != nil {
		t.Fatal(err)
	}
	s.Close()
	path := filepath.Join(dir, FileName)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	m0, ok0 := readMeta(f, 0)
	f.Close()
	if !ok0 || m0.freelist == noFreelist {
		t.Fatalf("meta page 0: %+v %v; want a valid one with a freelist", m0, ok0)
	}
	for _, page := range []int64{int64(m0.freelist)} {
		off := page * int64(m0.pageSize)
		binary.LittleEndian.PutUint16(b[off+10:], 0xFFFF)
		binary.LittleEndian.PutUint64(b[off+pageHeaderSize:], 1<<40)
	}
	// the other meta page may name another freelist page: damage it too
	f2, _ := os.Open(path)
	if m1, ok := readMeta(f2, int64(m0.pageSize)); ok && m1.freelist != noFreelist {
		off := int64(m1.freelist) * int64(m0.pageSize)
		binary.LittleEndian.PutUint16(b[off+10:], 0xFFFF)
		binary.LittleEndian.PutUint64(b[off+pageHeaderSize:], 1<<40)
	}
	f2.Close()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "free pages") {
		t.Fatalf("open: %v; want ErrCorrupt naming the freelist's count", err)
	}
}

// A branch page whose child points back at the page itself (a damaged
// page id) is refused at Open: bbolt's cursor would descend into it
// forever, growing its stack until the node is killed for memory
// (TestDamagedPages, -rapid.seed=3 -rapid.checks=1000, before checkTree).
// The undamaged file is read back whole, so the walk accepts what bbolt
// writes.
func TestBranchCycleRefused(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Save(sample(3000)); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if s, err = Open(dir); err != nil {
		t.Fatalf("open of an undamaged file: %v", err)
	}
	if snap, _, err := s.Load(); err != nil || len(snap.Rules["api"].States) != 3000 {
		t.Fatalf("load of an undamaged file: %d states, %v", len(snap.Rules["api"].States), err)
	}
	s.Close()
	path := filepath.Join(dir, FileName)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	m0, _ := readMeta(f, 0)
	f.Close()
	ps := int(m0.pageSize)
	damaged := 0
	for off := 2 * ps; off+ps <= len(b); off += ps {
		if binary.LittleEndian.Uint16(b[off+8:]) == branchPageFlag && binary.LittleEndian.Uint16(b[off+10:]) > 0 {
			id := binary.LittleEndian.Uint64(b[off:])
			binary.LittleEndian.PutUint64(b[off+pageHeaderSize+8:], id) // element 0's child: the page itself
			damaged++
		}
	}
	if damaged == 0 {
		t.Fatal("no branch page in a file of 3,000 keys: the test does not test anything")
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "reached twice") {
		t.Fatalf("open: %v; want ErrCorrupt naming the page reached twice", err)
	}
}

// A key in debt (a negative level: overdraft charges, or tokens reserved
// ahead) is saved and loaded as it is: a restart keeps the debt.
func TestDebtKept(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	snap := sample(3)
	states := snap.Rules["api"].States
	states[1].Level = -250e9 // 250 s of a 60 s per token bucket: a debt of 4 1/6 tokens
	if err := s.Save(snap); err != nil {
		t.Fatal(err)
	}
	got, _, err := s.Load()
	s.Close()
	if err != nil {
		t.Fatal(err)
	}
	if l := got.Rules["api"].States[1].Level; l != -250e9 {
		t.Fatalf("loaded level %d ticks, want the debt -250e9 kept", l)
	}
}

// A version 1 file (levels unsigned, the builds before debts were kept)
// is read as it was written.
func TestLoadsVersion1(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Save(sample(2)); err != nil {
		t.Fatal(err)
	}
	s.Close()
	db, err := bolt.Open(filepath.Join(dir, FileName), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	v1 := binary.AppendUvarint(nil, 7e9)
	v1 = binary.AppendUvarint(v1, 300e9)
	v1 = binary.AppendUvarint(v1, 60e9)
	v1 = binary.AppendVarint(v1, 42)
	if err := db.Update(func(tx *bolt.Tx) error {
		if err := tx.Bucket(bucketMeta).Put(keyVersion, binary.AppendUvarint(nil, VersionUnsignedLevel)); err != nil {
			return err
		}
		if err := tx.DeleteBucket(bucketDeltas); err != nil { // version 1 had no delta log
			return err
		}
		return tx.Bucket(bucketRules).Bucket([]byte("api")).Put([]byte("tenant-0000001"), v1)
	}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if s, err = Open(dir); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, _, err := s.Load()
	if err != nil {
		t.Fatalf("version 1 file: %v", err)
	}
	if st := got.Rules["api"].States[1]; st.Level != 7e9 || st.Capacity != 300e9 || st.TicksPerToken != 60e9 || st.At != 42 {
		t.Fatalf("version 1 state read as %+v", st)
	}
}

// wchar is the bytes this process has passed to write system calls so
// far (/proc/self/io; -1 where it cannot be read). bbolt writes every
// dirty page with pwrite, so the difference over a Save is the bytes the
// Save wrote (pages, the freelist and the meta page), page cache or not.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func wchar() int64 {
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "wchar: "); ok {
			var n int64
			fmt.Sscan(v, &n)
			return n
		}
	}
	return -1
}

// BenchmarkSaveChanged measures a Save of 100k or 1M keys of which 1%
// (spread at random) changed since the previous Save, after a first
// Save: the time, the bytes written (from /proc/self/io), the file's size
// after the last Save and its largest over the run, and the bytes written
// as a share of the file. Means over all b.N Saves (written-B/op,
// written-%file: the compactions that fall within them included), and
// over the Saves that appended deltas (delta-*) and those that compacted
// (compact-*) apart. index-B/key is the heap the store keeps to diff
// against (measured after the first Save).
func BenchmarkSaveChanged(b *testing.B) {
	for _, keys := range []int{100_000, 1_000_000} {
		b.Run(fmt.Sprint(keys), func(b *testing.B) {
			b.Run("whole", func(b *testing.B) { benchSaveChanged(b, keys, false) })
			b.Run("changes", func(b *testing.B) { benchSaveChanged(b, keys, true) })
		})
	}
}

// benchSaveChanged is BenchmarkSaveChanged at keys: every Save given the
// whole snapshot, or (changes) the changed states alone as a rule of
// changes (RuleState.Changes, as limiter's persister gives what
// strategy.ChangeSnapshotter.SnapshotChanges took), whole when the store
// wants it (WantFull: a compaction).
func benchSaveChanged(b *testing.B, keys int, changes bool) {
	s, err := Open(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	snap := sample(keys)
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	if err := s.Save(snap); err != nil {
		b.Fatal(err)
	}
	runtime.GC()
	runtime.GC() // and bbolt's pool of page buffers
	runtime.ReadMemStats(&m1)
	states := snap.Rules["api"].States
	rng := rand.New(rand.NewPCG(1, 2))
	var written, maxFile, maxWrite int64
	var n, d [2]int64           // Saves and bytes written: [0] deltas, [1] compactions
	var t, cpu [2]time.Duration // wall time, CPU time (the process's: GC included)
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		changed := map[int]bool{}
		for range keys / 100 {
			j := rng.IntN(keys)
			st := &states[j]
			st.Level = max(st.Level-1e9, -st.Capacity)
			st.At += time.Duration(i+1) * time.Second
			changed[j] = true
		}
		save := snap
		if changes && !s.WantFull() {
			var put []strategy.KeyState
			for _, j := range slices.Sorted(maps.Keys(changed)) {
				put = append(put, states[j])
			}
			save = Snapshot{Node: snap.Node, Taken: snap.Taken, Rules: map[string]RuleState{
				"api":   {Strategy: "owner", States: put, Changes: true},
				"empty": {Strategy: "static", Changes: true},
			}}
		}
		w0 := wchar()
		t0 := time.Now()
		c0 := cpuTime()
		b.StartTimer()
		if err := s.Save(save); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		dt := time.Since(t0)
		dc := cpuTime() - c0
		wr := wchar() - w0
		written += wr
		maxWrite = max(maxWrite, wr)
		kind := 0
		if s.LastSave().Compacted {
			kind = 1
		}
		n[kind]++
		d[kind] += wr
		t[kind] += dt
		cpu[kind] += dc
		if fi, err := os.Stat(s.Path()); err == nil {
			maxFile = max(maxFile, fi.Size())
		}
		b.StartTimer()
	}
	b.StopTimer()
	fi, err := os.Stat(s.Path())
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(written)/float64(b.N), "written-B/op")
	b.ReportMetric(float64(maxWrite), "max-written-B")
	b.ReportMetric(float64(fi.Size()), "file-B")
	b.ReportMetric(float64(maxFile), "max-file-B")
	b.ReportMetric(100*float64(written)/float64(b.N)/float64(fi.Size()), "written-%file")
	b.ReportMetric(float64(int64(m1.HeapAlloc)-int64(m0.HeapAlloc))/float64(keys), "index-B/key")
	for kind, name := range []string{"delta", "compact"} {
		if n[kind] > 0 {
			b.ReportMetric(float64(n[kind]), name+"-saves")
			b.ReportMetric(float64(d[kind])/float64(n[kind]), name+"-written-B")
			b.ReportMetric(100*float64(d[kind])/float64(n[kind])/float64(fi.Size()), name+"-written-%file")
			b.ReportMetric(float64(t[kind].Milliseconds())/float64(n[kind]), name+"-ms")
			b.ReportMetric(float64(cpu[kind].Milliseconds())/float64(n[kind]), name+"-cpu-ms")
		}
	}
}

// BenchmarkLoad measures a Load of 1M keys from a file written by a
// first Save and 20 Saves of 1% of the keys changed each (a base and
// 200,000 delta records: near the most a log holds before it is
// compacted, 250,000).
func BenchmarkLoad(b *testing.B) {
	const keys = 1_000_000
	s, err := Open(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	snap := sample(keys)
	states := snap.Rules["api"].States
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 21 {
		for range keys / 100 {
			st := &states[rng.IntN(keys)]
			st.Level = max(st.Level-1e9, -st.Capacity)
			st.At += time.Duration(i+1) * time.Second
		}
		if err := s.Save(snap); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for range b.N {
		got, _, err := s.Load()
		if err != nil || got.Keys() != keys {
			b.Fatalf("load: %d keys, %v", got.Keys(), err)
		}
	}
}
