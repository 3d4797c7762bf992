package statestore

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"slices"
	"strings"
	"unicode/utf8"

	bolt "go.etcd.io/bbolt"

	"github.com/tokenmesh/tokenmesh/strategy"
)

// The delta log (format version 3): bucket deltas holds one record per
// changed key, keyed by its sequence number (8 bytes, big-endian, from 1
// after each compaction, so records are appended in order and fill new
// pages sequentially). A record is
//
//	kind (1 byte: deltaPut or deltaDelete)
//	uvarint length, rule name
//	uvarint length, key
//	for deltaPut: the state as the base stores it (appendState)
//
// Load applies the records in sequence order over the base: a put
// replaces (or adds) the key's state, a delete removes it (the key's
// bucket is full, or gone). Ours.
const (
	deltaPut    = 1
	deltaDelete = 2
)

// appendState appends st's value as the base (and a put record) stores
// it: the level signed, capacity and ticks per token unsigned, At signed,
// all varints.
func appendState(b []byte, st strategy.KeyState) []byte {
	b = binary.AppendVarint(b, st.Level)
	b = binary.AppendUvarint(b, uint64(st.Capacity))
	b = binary.AppendUvarint(b, uint64(st.TicksPerToken))
	return binary.AppendVarint(b, int64(st.At))
}

// appendDelta appends the record of rule's key st.Key: a put of st, or
// (tomb) a delete.
func appendDelta(b []byte, rule string, st strategy.KeyState, tomb bool) []byte {
	kind := byte(deltaPut)
	if tomb {
		kind = deltaDelete
	}
	b = append(b, kind)
	b = binary.AppendUvarint(b, uint64(len(rule)))
	b = append(b, rule...)
	b = binary.AppendUvarint(b, uint64(len(st.Key)))
	b = append(b, st.Key...)
	if !tomb {
		b = appendState(b, st)
	}
	return b
}

// decodeDelta decodes a record: its rule, and the key's state (put) or
// the key alone (tomb). Errors name the field; a put's state is
// validated (decodeState).
func decodeDelta(v []byte) (rule string, st strategy.KeyState, tomb bool, err error) {
	if len(v) == 0 {
		return "", st, false, errors.New("empty record")
	}
	kind := v[0]
	if kind != deltaPut && kind != deltaDelete {
		return "", st, false, fmt.Errorf("kind %d, want %d (put) or %d (delete)", kind, deltaPut, deltaDelete)
	}
	v = v[1:]
	field := func(name string, maxLen int) ([]byte, error) {
		n, k := binary.Uvarint(v)
		if k <= 0 || n > uint64(len(v)-k) {
			return nil, fmt.Errorf("%s's length does not decode or is beyond the record", name)
		}
		if n == 0 || n > uint64(maxLen) {
			return nil, fmt.Errorf("%s of %d bytes, want 1 to %d", name, n, maxLen)
		}
		f := v[k : k+int(n)]
		v = v[k+int(n):]
		return f, nil
	}
	r, err := field("rule", bolt.MaxKeySize)
	if err != nil {
		return "", st, false, err
	}
	key, err := field("key", strategy.MaxKeyStateBytes)
	if err != nil {
		return string(r), st, false, err
	}
	if kind == deltaDelete {
		if !utf8.Valid(key) {
			return string(r), st, false, fmt.Errorf("key %q is not valid UTF-8", key)
		}
		if len(v) != 0 {
			return string(r), st, false, fmt.Errorf("key %q: %d bytes left over after a delete", key, len(v))
		}
		return string(r), strategy.KeyState{Key: string(key)}, true, nil
	}
	st, err = decodeState(key, v, true)
	return string(r), st, false, err
}

// deltaRec is one record of the delta log: a put of st, or a delete
// (tomb), for rule, at sequence seq.
type deltaRec struct {
	rule string
	st   strategy.KeyState
	tomb bool
	seq  uint64
}

// applyDeltas applies the records of deltas, in sequence order, over the
// base states in rules (sorted by key, as bbolt gives them): the records
// are sorted by rule, key and sequence (the last of a key wins) and merged
// with each rule's base in one pass. Each rule's states stay sorted by
// key. Errors name the record, or the rule whose base is out of order (a
// damaged page).
func applyDeltas(deltas *bolt.Bucket, rules map[string]RuleState) error {
	recs, err := readDeltas(deltas, rules)
	if err != nil || len(recs) == 0 {
		return err
	}
	slices.SortFunc(recs, func(a, b deltaRec) int {
		if c := strings.Compare(a.rule, b.rule); c != 0 {
			return c
		}
		if c := strings.Compare(a.st.Key, b.st.Key); c != 0 {
			return c
		}
		return cmp.Compare(a.seq, b.seq)
	})
	for len(recs) > 0 {
		name := recs[0].rule
		n := 1
		for n < len(recs) && recs[n].rule == name {
			n++
		}
		rs := recs[:n]
		recs = recs[n:]
		out, err := mergeDeltas(name, rules[name].States, rs)
		if err != nil {
			return err
		}
		r := rules[name]
		r.States = out
		rules[name] = r
	}
	return nil
}

// readDeltas decodes the records of deltas in sequence order. Errors: a
// key that is not a sequence number or out of order, a bucket, a record
// that does not decode, or one for a rule not in rules.
func readDeltas(deltas *bolt.Bucket, rules map[string]RuleState) ([]deltaRec, error) {
	var recs []deltaRec
	var prev uint64
	err := deltas.ForEach(func(k, v []byte) error {
		if len(k) != 8 {
			return fmt.Errorf("deltas: a key of %d bytes, want 8 (a sequence number)", len(k))
		}
		seq := binary.BigEndian.Uint64(k)
		if seq <= prev {
			return fmt.Errorf("deltas/%d: after %d, out of order", seq, prev)
		}
		prev = seq
		if v == nil {
			return fmt.Errorf("deltas/%d: a bucket, want a record", seq)
		}
		rule, st, tomb, err := decodeDelta(v)
		if err != nil {
			return fmt.Errorf("deltas/%d: %w", seq, err)
		}
		if _, ok := rules[rule]; !ok {
			return fmt.Errorf("deltas/%d: rule %q is not in the snapshot", seq, rule)
		}
		recs = append(recs, deltaRec{rule, st, tomb, seq})
		return nil
	})
	return recs, err
}

// mergeDeltas merges rule name's records rs (sorted by key and sequence:
// the last of a key wins) with its base states (sorted by key) into new
// states sorted by key. Errors: the base is out of order.
func mergeDeltas(name string, base []strategy.KeyState, rs []deltaRec) ([]strategy.KeyState, error) {
	out := make([]strategy.KeyState, 0, len(base)+len(rs))
	i := 0
	var err error
	for j := 0; j < len(rs); j++ {
		if j+1 < len(rs) && rs[j+1].st.Key == rs[j].st.Key {
			continue // a later record of the same key wins
		}
		key := rs[j].st.Key
		if out, i, err = copyBase(out, base, i, name, key, false); err != nil {
			return nil, err
		}
		if i < len(base) && base[i].Key == key {
			i++ // replaced or deleted
		}
		if !rs[j].tomb {
			out = append(out, rs[j].st)
		}
	}
	out, _, err = copyBase(out, base, i, name, "", true)
	return out, err
}

// copyBase appends to out the base states from i on that are below key
// (all of them when all), checking that they are in order, and returns
// out and the index of the first state not copied. Errors name rule name
// and the keys out of order.
func copyBase(out, base []strategy.KeyState, i int, name, key string, all bool) ([]strategy.KeyState, int, error) {
	for ; i < len(base) && (all || base[i].Key < key); i++ {
		if i > 0 && base[i-1].Key >= base[i].Key {
			return out, i, fmt.Errorf("rules/%q: key %q after %q, out of order", name, base[i].Key, base[i-1].Key)
		}
		out = append(out, base[i])
	}
	return out, i, nil
}

// index is what the file holds, as Save keeps it in memory to diff the
// next snapshot against: per rule, its strategy and a hash of each key's
// stored value. The keys are the snapshot's own strings (shared with the
// strategies' tables, not copied), so the index costs the map alone:
// about 55 bytes a key (BenchmarkSaveChanged's index-B/key).
type index struct {
	seed     maphash.Seed
	rules    map[string]*ruleIndex
	baseKeys int    // states in the base
	records  int    // records in the delta log
	seq      uint64 // the log's last sequence number
}

// ruleIndex's keys map each key to the maphash of its stored value
// (appendState) with bit 0 replaced by mark: the mark of the last diff of
// the whole rule (every key of the rule holds it between two Saves).
type ruleIndex struct {
	strategy string
	keys     map[string]uint64
	mark     uint64 // 0 or 1
}

// change is one key's record: a put of st, or a delete (tomb); h is the
// hash of a put's value (bit 0 clear).
type change struct {
	rule string
	st   strategy.KeyState
	tomb bool
	h    uint64
}

func newIndex(seed maphash.Seed) *index {
	return &index{seed: seed, rules: map[string]*ruleIndex{}}
}

// hash is v's hash with bit 0 clear (the mark's).
func (x *index) hash(v []byte) uint64 { return maphash.Bytes(x.seed, v) &^ 1 }

func (x *index) rule(name, strat string, n int) *ruleIndex {
	ri := &ruleIndex{strategy: strat, keys: make(map[string]uint64, n)}
	x.rules[name] = ri
	return ri
}

// keys is the number of keys the file holds.
func (x *index) keys() int {
	n := 0
	for _, ri := range x.rules {
		n += len(ri.keys)
	}
	return n
}

// sameRules: snap has the rules of the index, each with the same
// strategy (otherwise Save compacts: the base's rule buckets and
// meta/strategies change).
func (x *index) sameRules(snap Snapshot) bool {
	if len(snap.Rules) != len(x.rules) {
		return false
	}
	for name, r := range snap.Rules {
		ri, ok := x.rules[name]
		if !ok || ri.strategy != r.Strategy {
			return false
		}
	}
	return true
}

// diff is the records that bring the stored snapshot to snap: for a rule
// given whole, a put for every key whose value differs from (or is not
// in) the file and a delete for every key in the file that snap does not
// have; for a rule given as changes (RuleState.Changes), a put for every
// state whose value differs from the file's and a delete for every gone
// key the file holds. Errors: a state that fails validation, a key twice
// in a rule (in a rule of changes, among its states and gone keys). For a
// rule given whole it flips the rule's mark and marks every key of snap
// the index holds; the caller drops the index when the Save does not
// complete (the marks are then mixed).
func (x *index) diff(snap Snapshot) ([]change, error) {
	var changes []change
	var buf []byte
	for _, name := range sortedRules(snap) {
		ri := x.rules[name]
		r := snap.Rules[name]
		if r.Changes {
			var err error
			if changes, buf, err = x.diffChanges(changes, buf, name, ri, r); err != nil {
				return nil, err
			}
			continue
		}
		ri.mark ^= 1
		mark := ri.mark
		var added map[string]struct{}
		for _, st := range r.States {
			if err := st.Validate(); err != nil {
				return nil, fmt.Errorf("statestore: save rule %q: %w", name, err)
			}
			buf = appendState(buf[:0], st)
			h := x.hash(buf)
			e, ok := ri.keys[st.Key]
			if ok {
				if e&1 == mark {
					return nil, fmt.Errorf("statestore: save rule %q: key %q twice", name, st.Key)
				}
				ri.keys[st.Key] = e ^ 1
				if e&^1 != h {
					changes = append(changes, change{rule: name, st: st, h: h})
				}
				continue
			}
			if added == nil {
				added = map[string]struct{}{}
			}
			if _, dup := added[st.Key]; dup {
				return nil, fmt.Errorf("statestore: save rule %q: key %q twice", name, st.Key)
			}
			added[st.Key] = struct{}{}
			changes = append(changes, change{rule: name, st: st, h: h})
		}
		for k, e := range ri.keys {
			if e&1 != mark {
				changes = append(changes, change{rule: name, st: strategy.KeyState{Key: k}, tomb: true})
			}
		}
	}
	return changes, nil
}

// diffChanges appends to changes the records of rule name's changes r
// (ri its index): a put per state whose value the file does not hold, a
// delete per gone key the file holds. It changes no mark. buf is scratch
// space, returned for reuse.
func (x *index) diffChanges(changes []change, buf []byte, name string, ri *ruleIndex, r RuleState) ([]change, []byte, error) {
	seen := make(map[string]struct{}, len(r.States)+len(r.Gone))
	once := func(key string) error {
		if _, dup := seen[key]; dup {
			return fmt.Errorf("statestore: save rule %q: key %q twice in its changes", name, key)
		}
		seen[key] = struct{}{}
		return nil
	}
	for _, st := range r.States {
		if err := st.Validate(); err != nil {
			return nil, buf, fmt.Errorf("statestore: save rule %q: %w", name, err)
		}
		if err := once(st.Key); err != nil {
			return nil, buf, err
		}
		buf = appendState(buf[:0], st)
		h := x.hash(buf)
		if e, ok := ri.keys[st.Key]; !ok || e&^1 != h {
			changes = append(changes, change{rule: name, st: st, h: h})
		}
	}
	for _, k := range r.Gone {
		if err := once(k); err != nil {
			return nil, buf, err
		}
		if _, ok := ri.keys[k]; ok {
			changes = append(changes, change{rule: name, st: strategy.KeyState{Key: k}, tomb: true})
		}
	}
	return changes, buf, nil
}

// apply records changes, written to the file, in the index.
func (x *index) apply(changes []change) {
	for _, c := range changes {
		ri := x.rules[c.rule]
		if c.tomb {
			delete(ri.keys, c.st.Key)
		} else {
			ri.keys[c.st.Key] = c.h | ri.mark
		}
	}
	x.records += len(changes)
}

func sortedRules(snap Snapshot) []string {
	names := make([]string, 0, len(snap.Rules))
	for name := range snap.Rules {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}
