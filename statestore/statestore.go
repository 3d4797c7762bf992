// Package statestore keeps a node's token-bucket states in one bbolt file
// (node.state_dir), so that limits survive a restart of the whole cluster:
// the node saves a snapshot periodically and at graceful shutdown, and
// restores it at start, refilled for the wall time that passed.
//
// Ours, not a source document's: seeds 002 and 003 keep limiter state in
// memory only; envoy's ratelimit service keeps its counters in Redis,
// which is what users expect to survive a limiter restart.
//
// Layout (format version 2), all integers varints:
//
//	meta/version        = 2
//	meta/node           = the node's name when saved
//	meta/taken_unix_ns  = wall-clock time of the snapshot, ns since 1970 (signed)
//	meta/strategies/<rule> = the rule's strategy name
//	rules/<rule>/<key>  = level (signed: below 0 a debt, or tokens reserved
//	                      ahead), capacity, ticks_per_token (unsigned),
//	                      at_unix_ns (signed): strategy.KeyState, At as
//	                      wall-clock time
//
// Version 1 (the builds before debts were kept) wrote the level unsigned,
// never below 0; Load reads both, Save writes 2. A build that knows only
// version 1 refuses a version 2 file (ErrCorrupt: it starts without the
// snapshot), so a rolling downgrade forgets the limits' levels once.
//
// Each Save replaces the whole snapshot in one transaction. A file that
// does not decode, or holds a state that fails strategy.KeyState.Validate,
// is refused by Load with an error naming the rule and key at fault.
package statestore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/tokenmesh/tokenmesh/strategy"
)

// FileName is the store's file inside node.state_dir.
const FileName = "tokenmesh-state.db"

// Version is the format version Save writes; Load accepts it and
// VersionUnsignedLevel.
const Version = 2

// VersionUnsignedLevel is the earlier format, whose levels are unsigned
// varints (never below 0).
const VersionUnsignedLevel = 1

var (
	bucketMeta       = []byte("meta")
	bucketRules      = []byte("rules")
	keyVersion       = []byte("version")
	keyNode          = []byte("node")
	keyTaken         = []byte("taken_unix_ns")
	bucketStrategies = []byte("strategies")
)

// ErrCorrupt is wrapped by Open and Load when the file is not a valid
// store (not bbolt, wrong version, a value that does not decode, a state
// that fails validation).
var ErrCorrupt = errors.New("statestore: corrupt state file")

// Rule is one rule's saved state.
type Rule struct {
	Strategy string
	// States' At is wall-clock time, nanoseconds since the Unix epoch.
	States []strategy.KeyState
}

// Snapshot is a node's saved state.
type Snapshot struct {
	Node  string
	Taken time.Time // wall clock
	Rules map[string]Rule
}

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
	return &Store{db: db, path: path}, nil
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

// Save replaces the stored snapshot with snap in one transaction (synced
// to disk when it returns). Errors: a rule with an empty name, a state
// that fails validation, a key twice in a rule, a write error; the
// previous snapshot is then kept.
func (s *Store) Save(snap Snapshot) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer recoverDamage(&err) // bbolt rolls the transaction back
	return s.db.Update(func(tx *bolt.Tx) error {
		meta, err := tx.CreateBucketIfNotExists(bucketMeta)
		if err != nil {
			return err
		}
		if err := meta.Put(keyVersion, binary.AppendUvarint(nil, Version)); err != nil {
			return err
		}
		if err := meta.Put(keyNode, []byte(snap.Node)); err != nil {
			return err
		}
		if err := meta.Put(keyTaken, binary.AppendVarint(nil, snap.Taken.UnixNano())); err != nil {
			return err
		}
		if tx.Bucket(bucketRules) != nil {
			if err := tx.DeleteBucket(bucketRules); err != nil {
				return err
			}
		}
		if meta.Bucket(bucketStrategies) != nil {
			if err := meta.DeleteBucket(bucketStrategies); err != nil {
				return err
			}
		}
		strategies, err := meta.CreateBucket(bucketStrategies)
		if err != nil {
			return err
		}
		rules, err := tx.CreateBucket(bucketRules)
		if err != nil {
			return err
		}
		var buf []byte
		for _, name := range slices.Sorted(maps.Keys(snap.Rules)) {
			r := snap.Rules[name]
			if name == "" {
				return errors.New("statestore: save: a rule has an empty name")
			}
			rb, err := rules.CreateBucket([]byte(name))
			if err != nil {
				return fmt.Errorf("statestore: save rule %q: %w", name, err)
			}
			rb.FillPercent = 1 // keys are put in order: pack pages full
			if err := strategies.Put([]byte(name), []byte(r.Strategy)); err != nil {
				return err
			}
			states := slices.Clone(r.States)
			slices.SortFunc(states, func(a, b strategy.KeyState) int { return strings.Compare(a.Key, b.Key) })
			for i, st := range states {
				if err := st.Validate(); err != nil {
					return fmt.Errorf("statestore: save rule %q: %w", name, err)
				}
				if i > 0 && states[i-1].Key == st.Key {
					return fmt.Errorf("statestore: save rule %q: key %q twice", name, st.Key)
				}
				buf = binary.AppendVarint(buf[:0], st.Level)
				buf = binary.AppendUvarint(buf, uint64(st.Capacity))
				buf = binary.AppendUvarint(buf, uint64(st.TicksPerToken))
				buf = binary.AppendVarint(buf, int64(st.At))
				if err := rb.Put([]byte(st.Key), bytes.Clone(buf)); err != nil {
					return fmt.Errorf("statestore: save rule %q key %q: %w", name, st.Key, err)
				}
			}
		}
		return nil
	})
}

// Load reads the stored snapshot. found is false for a store never saved
// to (a new file). Errors wrap ErrCorrupt and name what was wrong (the
// field, rule and key): a wrong version, a value that does not decode or
// has bytes left over, a state that fails strategy.KeyState.Validate.
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
		v, err := uvarint(meta.Get(keyVersion))
		if err != nil {
			return fmt.Errorf("meta/version: %w", err)
		}
		if v != Version && v != VersionUnsignedLevel {
			return fmt.Errorf("meta/version: %d, want %d or %d", v, Version, VersionUnsignedLevel)
		}
		signedLevel := v == Version
		taken, err := varint(meta.Get(keyTaken))
		if err != nil {
			return fmt.Errorf("meta/taken_unix_ns: %w", err)
		}
		snap = Snapshot{Node: string(meta.Get(keyNode)), Taken: time.Unix(0, taken), Rules: map[string]Rule{}}
		rules, strategies := tx.Bucket(bucketRules), meta.Bucket(bucketStrategies)
		if rules == nil || strategies == nil {
			return errors.New("rules or meta/strategies: missing")
		}
		return rules.ForEach(func(name, v []byte) error {
			rb := rules.Bucket(name)
			if rb == nil {
				return fmt.Errorf("rules/%q: not a bucket", name)
			}
			r := Rule{Strategy: string(strategies.Get(name))}
			err := rb.ForEach(func(k, v []byte) error {
				st, err := decodeState(k, v, signedLevel)
				if err != nil {
					return fmt.Errorf("rules/%q: %w", name, err)
				}
				r.States = append(r.States, st)
				return nil
			})
			snap.Rules[string(name)] = r
			return err
		})
	})
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
