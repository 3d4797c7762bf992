// Package statestore keeps a node's token-bucket states in one bbolt file
// (node.state_dir), so that limits survive a restart of the whole cluster:
// the node saves a snapshot periodically and at graceful shutdown, and
// restores it at start, refilled for the wall time that passed.
//
// Ours, not a source document's: the CRDT thesis and the throttling article keep limiter state in
// memory only; envoy's ratelimit service keeps its counters in Redis,
// which is what users expect to survive a limiter restart.
//
// Layout (format version 3): a base, the whole snapshot as of the last
// compaction, and a delta log of the changes since, all integers varints
// unless said:
//
//	meta/version        = 3
//	meta/node           = the node's name at the last Save
//	meta/taken_unix_ns  = wall-clock time of the last Save's snapshot, ns since 1970 (signed)
//	meta/strategies/<rule> = the rule's strategy name
//	rules/<rule>/<key>  = the base: level (signed: below 0 a debt, or tokens
//	                      reserved ahead), capacity, ticks_per_token
//	                      (unsigned), at_unix_ns (signed): strategy.KeyState,
//	                      At as wall-clock time
//	deltas/<seq>        = the log: seq a uint64, 8 bytes big-endian, from 1
//	                      after each compaction; the record a kind byte (1
//	                      put, 2 delete), the rule and the key (each a
//	                      uvarint length and its bytes) and, for a put, the
//	                      state as the base holds it (delta.go)
//
// Load reads the base and applies the log over it in sequence order (a
// put sets the key's state, a delete removes it). Save diffs the snapshot
// it is given against what the file holds (kept in memory since this
// Store's first Save: a 64-bit hash of each key's stored value, about 56
// bytes a key at 1M keys) and appends, in one transaction, a record per
// key whose value changed or that is new, and a delete per key that is
// gone; appended in sequence they fill new pages, so a Save writes about
// the bytes of its records, not the pages that hold the changed keys in
// the base (bbolt copies a page on write: 1% of 1M keys changed at random
// touch about half the base's leaf pages). Save compacts instead (the
// base rewritten from the snapshot, the log emptied, in one transaction)
// on its first call after Open, when the rules or their strategies
// changed, and when the log would hold more records than a quarter of the
// base's states (CompactFraction): the file stays within about twice the
// base plus the log (bbolt reuses the pages a compaction frees), and a
// Save that changed 1% of the keys compacts about every 25th time.
// Snapshotter strategies emit a bucket's state at its last update (not
// refilled to the snapshot's time), so an untouched key's value does not
// change between Saves. A Save may also be given a rule as changes
// (RuleState.Changes: the states of the keys changed since the previous
// Save and the keys gone, as strategy.ChangeSnapshotter.SnapshotChanges
// takes them): it then costs those keys alone, not a lookup of every key
// in the index; the changes are written as the same delta records (the
// format is unchanged), and a snapshot that must compact is asked for
// whole (ErrNeedFull, WantFull).
//
// Version 2 (signed levels) is the base alone, rewritten by every Save;
// version 1 (the builds before debts were kept) wrote the level unsigned,
// never below 0. Load reads all three; Save writes 3 (its first Save on a
// version 1 or 2 file compacts it into version 3). A build that knows
// only versions 1 and 2 refuses a version 3 file (ErrCorrupt: it starts
// without the snapshot, or with --discard-bad-state), so a rolling
// downgrade forgets the limits' levels once.
//
// Each Save is one bbolt transaction: a process killed in the middle of
// one leaves the file as the previous Save left it (TestCrashMidSave). A
// file that does not decode, holds a state that fails
// strategy.KeyState.Validate, or a delta record out of order or for a
// rule the snapshot does not have, is refused by Load with an error
// naming the rule and key, or the record, at fault.
package statestore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"maps"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/tokenmesh/tokenmesh/strategy"
)

// FileName is the store's file inside node.state_dir.
const FileName = "tokenmesh-state.db"

// Version is the format version Save writes (a base and a delta log);
// Load accepts it, VersionSignedLevel and VersionUnsignedLevel.
const Version = 3

// VersionSignedLevel is the format before the delta log: the base alone,
// rewritten whole by every Save, levels signed.
const VersionSignedLevel = 2

// VersionUnsignedLevel is the earliest format, whose levels are unsigned
// varints (never below 0).
const VersionUnsignedLevel = 1

// CompactFraction: Save compacts (rewrites the base, empties the delta
// log) when the log would hold more records than 1/CompactFraction of the
// base's states (of minCompactBase, for a smaller base). A Save of 1% of
// the keys changed then compacts about every 25th time: the bytes
// written average about 1% + 4% of the base's, the file holds at most the
// base, a quarter of it in deltas (whose records are about 1.6 times a
// base state's bytes) and the pages freed by the last compaction.
const CompactFraction = 4

// minCompactBase is the base size below which the log is allowed
// minCompactBase/CompactFraction records all the same (a small base is
// cheap to rewrite, but not every Save).
const minCompactBase = 1024

var (
	bucketMeta       = []byte("meta")
	bucketRules      = []byte("rules")
	bucketDeltas     = []byte("deltas")
	keyVersion       = []byte("version")
	keyNode          = []byte("node")
	keyTaken         = []byte("taken_unix_ns")
	bucketStrategies = []byte("strategies")
)

// ErrCorrupt is wrapped by Open and Load when the file is not a valid
// store (not bbolt, wrong version, a value that does not decode, a state
// that fails validation).
var ErrCorrupt = errors.New("statestore: corrupt state file")

// RuleState is one rule's saved state: every key's (the zero Changes),
// or, for Save, the changes since the previous Save (Changes).
type RuleState struct {
	Strategy string
	// States' At is wall-clock time, nanoseconds since the Unix epoch.
	// With Changes, the keys whose state changed since the previous Save
	// (strategy.ChangeSnapshotter.SnapshotChanges); else every key.
	States []strategy.KeyState
	// Changes: States and Gone are the changes since the previous Save
	// (a key in neither keeps its stored state), not the whole rule.
	// Load never sets it.
	Changes bool
	// Gone is, with Changes, the keys to delete (the file may not hold
	// them: those are ignored). A key is in States or Gone at most once.
	Gone []string
}

// Snapshot is a node's saved state.
type Snapshot struct {
	Node  string
	Taken time.Time // wall clock
	Rules map[string]RuleState
}

// Partial reports whether a rule of s is given as changes
// (RuleState.Changes).
func (s Snapshot) Partial() bool {
	for _, r := range s.Rules {
		if r.Changes {
			return true
		}
	}
	return false
}

// ErrNeedFull is Save's error for a snapshot with a rule given as changes
// (RuleState.Changes) when the store has no base those changes apply to:
// no Save since Open, the last Save failed, or the rules or their
// strategies differ from the last Save's. Nothing is written; save every
// rule whole (and see WantFull).
var ErrNeedFull = errors.New("statestore: the store needs a whole snapshot, not changes")

// Keys is the number of key states in s.
func (s Snapshot) Keys() int {
	n := 0
	for _, r := range s.Rules {
		n += len(r.States)
	}
	return n
}

// Store is an open state file. Save and Load may be called from any
// goroutine (bbolt serializes them).
type Store struct {
	db   *bolt.DB
	path string
	seed maphash.Seed

	mu   sync.Mutex // Save's diff and index
	idx  *index     // what the file holds since this Store's first Save; nil before
	last SaveStats
}

// Open opens (creating it and dir if missing) the store in dir. Errors: the
// directory cannot be created, the file is locked by another process (1 s
// timeout: two nodes must not share a state_dir), or it is not a bbolt
// file (wrapping ErrCorrupt).
func Open(dir string) (*Store, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("statestore: %w", err)
	}
	path := filepath.Join(dir, FileName)
	if err := checkFreelist(path); err != nil {
		return nil, err
	}
	prev := debug.SetPanicOnFault(true)
	db, err := openBolt(path)
	debug.SetPanicOnFault(prev)
	if err != nil {
		if errors.Is(err, bolt.ErrTimeout) {
			return nil, fmt.Errorf("statestore: %s is locked by another process (does another node use this state_dir?)", path)
		}
		return nil, fmt.Errorf("%w %s: %v", ErrCorrupt, path, err)
	}
	return &Store{db: db, path: path, seed: maphash.MakeSeed()}, nil
}

// openBolt opens path, turning a panic of bbolt on a damaged file into an
// error. The freelist is kept in the file (bbolt's default): with
// NoFreelistSync, Open would rebuild it by walking every page in a
// goroutine of its own, where a damaged page panics beyond recovery
// (found by TestDamagedPages).
func openBolt(path string) (db *bolt.DB, err error) {
	defer recoverDamage(&err)
	return bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
}

// recoverDamage turns a panic of bbolt reading a damaged file (a bad
// page: an index out of range, or, with SetPanicOnFault, a fault on the
// memory-mapped file) into *err. Deferred by the readers, which set
// debug.SetPanicOnFault for their goroutine.
func recoverDamage(err *error) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("damaged file: %v", r)
	}
}

// Path is the store's file.
func (s *Store) Path() string { return s.path }

// Close closes the file.
func (s *Store) Close() error { return s.db.Close() }

// Save stores snap in one transaction (synced to disk when it returns):
// the keys whose state changed since the last Save, and tombstones for
// the keys that are gone, appended to the delta log; or, when there is no
// base to append to (the first Save after Open), the rules or their
// strategies changed, or the log would exceed a quarter of the base
// (CompactFraction), the whole snapshot rewritten as the new base with
// the log emptied (a compaction).
//
// A rule given as changes (RuleState.Changes: what changed since the
// previous Save, e.g. strategy.ChangeSnapshotter.SnapshotChanges) costs
// the changes alone, not a diff of every key: its states whose value the
// file does not hold are put, its gone keys the file holds deleted, the
// others kept. Such a snapshot cannot be a compaction: without a base
// (see ErrNeedFull) it writes nothing and returns ErrNeedFull; with a
// log past a quarter of the base it appends all the same, and WantFull
// reports true until a whole snapshot compacts.
//
// Errors: a rule with an empty name, a state that fails validation, a
// key twice in a rule, ErrNeedFull, a write error; the previous snapshot
// is then kept, and the next Save of a whole snapshot compacts (a rule
// given as changes then gets ErrNeedFull: the changes of the failed Save
// are not in the file).
func (s *Store) Save(snap Snapshot) (err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer recoverDamage(&err) // bbolt rolls the transaction back
	for name := range snap.Rules {
		if name == "" {
			return errors.New("statestore: save: a rule has an empty name")
		}
	}
	partial := snap.Partial()
	if s.idx == nil || !s.idx.sameRules(snap) {
		if partial {
			s.idx = nil // the file does not hold these changes' base: the next whole Save compacts
			return ErrNeedFull
		}
		return s.compact(snap)
	}
	changes, err := s.idx.diff(snap)
	if err != nil {
		s.idx = nil // its marks are mixed: the next Save compacts
		return err
	}
	if !partial && s.idx.records+len(changes) > s.idx.logLimit() {
		return s.compact(snap)
	}
	seq := s.idx.seq
	err = s.db.Update(func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		deltas := tx.Bucket(bucketDeltas)
		if meta == nil || deltas == nil {
			return errors.New("statestore: save: meta or deltas bucket missing (the file changed under the store)")
		}
		if err := putMeta(meta, snap); err != nil {
			return err
		}
		deltas.FillPercent = 1 // sequence keys are appended: pack pages full
		var k [8]byte
		var rec []byte
		for _, c := range changes {
			seq++
			binary.BigEndian.PutUint64(k[:], seq)
			rec = appendDelta(rec[:0], c.rule, c.st, c.tomb)
			if err := deltas.Put(bytes.Clone(k[:]), bytes.Clone(rec)); err != nil {
				return fmt.Errorf("statestore: save rule %q key %q: %w", c.rule, c.st.Key, err)
			}
		}
		return nil
	})
	if err != nil {
		s.idx = nil // the file is as before: the next Save compacts
		return err
	}
	s.idx.apply(changes)
	s.idx.seq = seq
	s.last = SaveStats{Records: len(changes), Keys: s.idx.keys()}
	return nil
}

// logLimit is the most records the delta log holds before a Save of a
// whole snapshot compacts (CompactFraction).
func (x *index) logLimit() int { return max(x.baseKeys, minCompactBase) / CompactFraction }

// WantFull reports whether the next Save should be of a whole snapshot
// (no rule given as changes): there is no base to apply changes to (no
// successful Save since Open, or the last Save failed), or the delta log
// is past its limit and a whole snapshot would compact it.
func (s *Store) WantFull() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.idx == nil || s.idx.records > s.idx.logLimit()
}

// compact rewrites the whole snapshot as the base and empties the delta
// log, in one transaction; on success the index is rebuilt from snap.
func (s *Store) compact(snap Snapshot) error {
	idx := newIndex(s.seed)
	err := s.db.Update(func(tx *bolt.Tx) error {
		meta, err := tx.CreateBucketIfNotExists(bucketMeta)
		if err != nil {
			return err
		}
		if err := putMeta(meta, snap); err != nil {
			return err
		}
		rules, strategies, err := emptyBase(tx, meta)
		if err != nil {
			return err
		}
		var buf []byte
		for _, name := range slices.Sorted(maps.Keys(snap.Rules)) {
			if buf, err = putRule(rules, strategies, idx, name, snap.Rules[name], buf); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		s.idx = nil // the file is as before, not as the index says
		return err
	}
	s.idx = idx
	s.last = SaveStats{Compacted: true, Records: idx.baseKeys, Keys: idx.baseKeys}
	return nil
}

// emptyBase replaces the rules, deltas and meta/strategies buckets with
// empty ones and returns the new rules and strategies buckets.
func emptyBase(tx *bolt.Tx, meta *bolt.Bucket) (rules, strategies *bolt.Bucket, err error) {
	for _, b := range [][]byte{bucketRules, bucketDeltas} {
		if tx.Bucket(b) != nil {
			if err := tx.DeleteBucket(b); err != nil {
				return nil, nil, err
			}
		}
	}
	if meta.Bucket(bucketStrategies) != nil {
		if err := meta.DeleteBucket(bucketStrategies); err != nil {
			return nil, nil, err
		}
	}
	strategies, err = meta.CreateBucket(bucketStrategies)
	if err != nil {
		return nil, nil, err
	}
	if _, err := tx.CreateBucket(bucketDeltas); err != nil {
		return nil, nil, err
	}
	rules, err = tx.CreateBucket(bucketRules)
	if err != nil {
		return nil, nil, err
	}
	return rules, strategies, nil
}

// putRule writes rule name (r) into the base: its strategy into
// strategies, its states sorted by key into a bucket of its own under
// rules, and their hashes into idx. buf is scratch space, returned for
// reuse. Errors: a state that fails Validate, a key twice, bbolt's.
func putRule(rules, strategies *bolt.Bucket, idx *index, name string, r RuleState, buf []byte) ([]byte, error) {
	rb, err := rules.CreateBucket([]byte(name))
	if err != nil {
		return buf, fmt.Errorf("statestore: save rule %q: %w", name, err)
	}
	rb.FillPercent = 1 // keys are put in order: pack pages full
	if err := strategies.Put([]byte(name), []byte(r.Strategy)); err != nil {
		return buf, err
	}
	ri := idx.rule(name, r.Strategy, len(r.States))
	states := slices.Clone(r.States)
	slices.SortFunc(states, func(a, b strategy.KeyState) int { return strings.Compare(a.Key, b.Key) })
	for i, st := range states {
		if err := st.Validate(); err != nil {
			return buf, fmt.Errorf("statestore: save rule %q: %w", name, err)
		}
		if i > 0 && states[i-1].Key == st.Key {
			return buf, fmt.Errorf("statestore: save rule %q: key %q twice", name, st.Key)
		}
		buf = appendState(buf[:0], st)
		if err := rb.Put([]byte(st.Key), bytes.Clone(buf)); err != nil {
			return buf, fmt.Errorf("statestore: save rule %q key %q: %w", name, st.Key, err)
		}
		ri.keys[st.Key] = idx.hash(buf) | ri.mark
	}
	idx.baseKeys += len(states)
	return buf, nil
}

// putMeta writes the version, node and time of snap into meta.
func putMeta(meta *bolt.Bucket, snap Snapshot) error {
	if err := meta.Put(keyVersion, binary.AppendUvarint(nil, Version)); err != nil {
		return err
	}
	if err := meta.Put(keyNode, []byte(snap.Node)); err != nil {
		return err
	}
	return meta.Put(keyTaken, binary.AppendVarint(nil, snap.Taken.UnixNano()))
}

// SaveStats says what the last successful Save wrote.
type SaveStats struct {
	Compacted bool // the whole snapshot was rewritten as the base
	Records   int  // states written: the base's when Compacted, else delta records
	Keys      int  // key states the file holds after the Save
}

// LastSave is what the last successful Save of this Store wrote (zero
// before the first).
func (s *Store) LastSave() SaveStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last
}

// Load reads the stored snapshot: the base, with the delta log applied
// over it in order (version 3). found is false for a store never saved
// to (a new file). Errors wrap ErrCorrupt and name what was wrong (the
// field, rule and key, or the delta record): a wrong version, a value
// that does not decode or has bytes left over, a state that fails
// strategy.KeyState.Validate, a delta record out of order or for a rule
// the snapshot does not have.
func (s *Store) Load() (snap Snapshot, found bool, err error) {
	// bbolt reads the file through mmap and trusts its page structure: a
	// damaged page can send it out of the mapping. Fault as a panic, not
	// a crash, and recover it as an error.
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	err = s.load(&snap, &found)
	if err != nil {
		return Snapshot{}, false, fmt.Errorf("%w %s: %v", ErrCorrupt, s.path, err)
	}
	return snap, found, nil
}

// load is Load inside a read transaction, a damaged page's fault
// recovered as an error (recoverDamage): meta, the base, then the delta
// log. *snapp and *foundp are set even on an error.
func (s *Store) load(snapp *Snapshot, foundp *bool) (err error) {
	defer recoverDamage(&err)
	var snap Snapshot
	var found bool
	defer func() { *snapp, *foundp = snap, found }()
	return s.db.View(func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		if meta == nil {
			return nil
		}
		found = true
		v, err := readVersion(meta)
		if err != nil {
			return err
		}
		taken, err := varint(meta.Get(keyTaken))
		if err != nil {
			return fmt.Errorf("meta/taken_unix_ns: %w", err)
		}
		snap = Snapshot{Node: string(meta.Get(keyNode)), Taken: time.Unix(0, taken), Rules: map[string]RuleState{}}
		if err := readBase(tx, meta, v != VersionUnsignedLevel, snap.Rules); err != nil {
			return err
		}
		return readDeltaLog(tx, v, snap.Rules)
	})
}

// readVersion reads meta/version: Version, VersionSignedLevel or
// VersionUnsignedLevel.
func readVersion(meta *bolt.Bucket) (uint64, error) {
	v, err := uvarint(meta.Get(keyVersion))
	if err != nil {
		return 0, fmt.Errorf("meta/version: %w", err)
	}
	if v != Version && v != VersionSignedLevel && v != VersionUnsignedLevel {
		return 0, fmt.Errorf("meta/version: %d, want %d, %d or %d", v, Version, VersionSignedLevel, VersionUnsignedLevel)
	}
	return v, nil
}

// readBase reads the base's rules (their strategies from meta) into out,
// each rule's states in key order; signedLevel is the levels' encoding
// (decodeState).
func readBase(tx *bolt.Tx, meta *bolt.Bucket, signedLevel bool, out map[string]RuleState) error {
	rules, strategies := tx.Bucket(bucketRules), meta.Bucket(bucketStrategies)
	if rules == nil || strategies == nil {
		return errors.New("rules or meta/strategies: missing")
	}
	return rules.ForEach(func(name, v []byte) error {
		rb := rules.Bucket(name)
		if rb == nil {
			return fmt.Errorf("rules/%q: not a bucket", name)
		}
		r := RuleState{Strategy: string(strategies.Get(name))}
		err := rb.ForEach(func(k, v []byte) error {
			st, err := decodeState(k, v, signedLevel)
			if err != nil {
				return fmt.Errorf("rules/%q: %w", name, err)
			}
			r.States = append(r.States, st)
			return nil
		})
		out[string(name)] = r
		return err
	})
}

// readDeltaLog applies the delta log over rules (applyDeltas): required
// in a version Version file, refused in older ones.
func readDeltaLog(tx *bolt.Tx, v uint64, rules map[string]RuleState) error {
	deltas := tx.Bucket(bucketDeltas)
	switch {
	case v != Version && deltas != nil:
		return fmt.Errorf("deltas: in a version %d file, which has none", v)
	case v == Version && deltas == nil:
		return errors.New("deltas: missing")
	case deltas == nil:
		return nil
	}
	return applyDeltas(deltas, rules)
}

// decodeState decodes key k's value v: the level a signed varint
// (version 2) or an unsigned one (version 1), then capacity and ticks per
// token unsigned, then At signed.
func decodeState(k, v []byte, signedLevel bool) (strategy.KeyState, error) {
	st := strategy.KeyState{Key: string(k)}
	fields := []*int64{&st.Level, &st.Capacity, &st.TicksPerToken}
	names := []string{"level", "capacity", "ticks_per_token"}
	if signedLevel {
		level, n := binary.Varint(v)
		if n <= 0 {
			return st, fmt.Errorf("key %q: level does not decode", k)
		}
		st.Level, v = level, v[n:]
		fields, names = fields[1:], names[1:]
	}
	for i, f := range fields {
		u, n := binary.Uvarint(v)
		if n <= 0 || u > 1<<63-1 {
			return st, fmt.Errorf("key %q: %s does not decode", k, names[i])
		}
		*f, v = int64(u), v[n:]
	}
	at, n := binary.Varint(v)
	if n <= 0 {
		return st, fmt.Errorf("key %q: at_unix_ns does not decode", k)
	}
	if n != len(v) {
		return st, fmt.Errorf("key %q: %d bytes left over", k, len(v)-n)
	}
	st.At = time.Duration(at)
	return st, st.Validate()
}

func uvarint(b []byte) (uint64, error) {
	v, n := binary.Uvarint(b)
	if n <= 0 || n != len(b) {
		return 0, errors.New("does not decode")
	}
	return v, nil
}

func varint(b []byte) (int64, error) {
	v, n := binary.Varint(b)
	if n <= 0 || n != len(b) {
		return 0, errors.New("does not decode")
	}
	return v, nil
}
