// Package buckets keeps one token bucket per key with the same (r, b), for
// the strategies that enforce a bucket locally (central, local, static,
// owner). Idle keys cost nothing: a bucket that has refilled to its burst is
// indistinguishable from a new one, so Sweep drops it; memory is bounded by
// the keys active within one burst-refill time.
package buckets

import (
	"math"
	"time"
	"unsafe"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/internal/keyorder"
)

// bucketStateBytes is the encoded size of one bucket's state besides its
// key: level and last-update time as two varints of up to 9 bytes each, plus
// their field tags and the key's length prefix (the layout a full-state sync
// would use).
const bucketStateBytes = 2*(1+9) + 2

// Table maps keys to buckets of one rate and burst. Not safe for concurrent use.
type Table struct {
	seed     strategy.KeySeeder // SetSeed
	rate     bucket.Rate
	burst    int64
	m        map[string]*entry
	keyBytes int // sum of the keys' lengths
	keyAlloc int // sum of the keys' heap allocations (allocBytes)
	peak     int // the most keys m has held: a Go map never shrinks
	// order holds every key of m once: a sweep walks it (sweep.go), so
	// that a pass can stop after a number of keys and go on at the next
	// call (a Go map's iteration cannot be resumed).
	order keyorder.Order
	// ch is the keys changed since the last snapshot (changes.go).
	ch changes
}

// entry is a key's bucket, the position of its key in Table.order, and
// whether the key is in the list of changed keys (changes.go; the flag
// fits in the entry's 64-byte size class).
type entry struct {
	b     bucket.Bucket
	pos   int
	dirty bool
}

// New returns an empty table. Errors as bucket.New.
func New(rate bucket.Rate, burst int64) (*Table, error) {
	if _, err := bucket.New(rate, burst, 0); err != nil {
		return nil, err
	}
	return &Table{rate: rate, burst: burst, m: map[string]*entry{}}, nil
}

// Get returns key's bucket, creating one at now if there is none: full,
// or at the level the table's KeySeeder gives (SetSeed), rescaled to the
// table's ticks and capped at its burst.
func (t *Table) Get(key string, now time.Duration) *bucket.Bucket {
	if e, ok := t.m[key]; ok {
		t.mark(e)
		return &e.b
	}
	e := &entry{b: bucket.MustNew(t.rate, t.burst, now)} // parameters validated in New
	if t.seed != nil {
		if st, ok := t.seed(now, key); ok && st.Validate() == nil {
			_ = e.b.SetLevel(now, st.Level, st.TicksPerToken) // validated: level >= 0, ticks per token > 0
		}
	}
	t.add(key, e)
	t.mark(e)
	return &e.b
}

// SetSeed sets where Get takes the level of the buckets it creates (nil:
// full; strategy.Config.Seed).
func (t *Table) SetSeed(s strategy.KeySeeder) { t.seed = s }

// Shape is the rate and burst (tokens) of the table's buckets: New's, or
// the last SetRate's that succeeded.
func (t *Table) Shape() (bucket.Rate, int64) { return t.rate, t.burst }

// SetRate changes every bucket's rate and burst at now (a new membership
// split); each keeps its tokens up to the new burst. Errors as bucket.New;
// on error the table is unchanged.
func (t *Table) SetRate(now time.Duration, rate bucket.Rate, burst int64) error {
	if _, err := bucket.New(rate, burst, now); err != nil {
		return err
	}
	t.rate, t.burst = rate, burst
	t.ch.invalidate() // every bucket changes
	for _, e := range t.m {
		_ = e.b.SetRate(now, rate, burst) // cannot fail: validated above
	}
	return nil
}

// add puts key's new entry e in the table and accounts for it.
func (t *Table) add(key string, e *entry) {
	e.pos = t.order.Add(key)
	t.m[key] = e
	t.keyBytes += len(key)
	t.keyAlloc += allocBytes(len(key))
	t.peak = max(t.peak, len(t.m))
}

// shrink rebuilds the map when it holds under a quarter of its peak: a Go
// map keeps the slots of its largest size after deletes, so without it
// a million expired keys would keep ~50 MB of empty slots for the
// process's life (docs/PERFORMANCE.md).
func (t *Table) shrink() {
	if t.peak < 1024 || len(t.m) >= t.peak/4 {
		return
	}
	m := make(map[string]*entry, len(t.m))
	for k, e := range t.m {
		m[k] = e
	}
	t.m, t.peak = m, len(m)
}

// Len is the number of keys held.
func (t *Table) Len() int { return len(t.m) }

// StateBytes is the encoded size of the table's state in bytes (the
// evaluator's memory metric, comparable across strategies; see
// MemoryBytes for what the table takes in this process).
func (t *Table) StateBytes() int { return t.keyBytes + len(t.m)*bucketStateBytes }

// Go heap costs of one entry (Go 1.24+ maps; measured in
// TestMemoryBytesMatchesHeap, docs/PERFORMANCE.md).
const (
	// mapSlotBytes is one map slot: the key's string header (16 B), the
	// *bucket.Bucket (8 B) and its control byte.
	mapSlotBytes = 16 + 8 + 1
	// mapMaxLoad is the share of a map's slots in use before it grows
	// (7/8); it then doubles, so slots are a power of two.
	mapMaxLoadNum, mapMaxLoadDen = 7, 8
)

// bucketAllocBytes is an entry, a bucket.Bucket (48 B) and its key's
// place in the order (8 B), in Go's 64-byte size class (the bucket alone
// took the 48-byte one before the sweep's order).
var bucketAllocBytes = allocBytes(int(unsafe.Sizeof(entry{})))

// MemoryBytes estimates the Go heap the table takes, in bytes: the map's
// slots (sized by the most keys it has held since it last shrank: Go maps
// do not shrink on delete), one bucket allocation per key, the sweep's
// order of the keys (its array's capacity), the keys' strings rounded
// up to Go's allocation size classes, and the list of keys changed since
// the last snapshot (its array's capacity, and the strings of the dropped
// keys it keeps alive; changes.go). Measured within 15%
// of the heap growth at 100k and 1M keys (TestMemoryBytesMatchesHeap).
// Ours; StateBytes is the wire size.
func (t *Table) MemoryBytes() int {
	slots := 0
	if t.peak > 0 {
		need := (t.peak*mapMaxLoadDen + mapMaxLoadNum - 1) / mapMaxLoadNum
		slots = 8
		for slots < need {
			slots *= 2
		}
	}
	return slots*mapSlotBytes + len(t.m)*bucketAllocBytes + t.order.Bytes() + t.keyAlloc + t.ch.bytes()
}

// allocBytes approximates the heap allocation of an n-byte string: Go's
// small size classes (8, 16, 24, 32, 48, 64, then steps of 16 to 256,
// then 32, then 128 up to 4 KiB).
func allocBytes(n int) int {
	switch {
	case n == 0:
		return 0
	case n <= 32:
		return (n + 7) &^ 7
	case n <= 48:
		return 48
	case n <= 256:
		return (n + 15) &^ 15
	case n <= 1024:
		return (n + 31) &^ 31
	default:
		return (n + 127) &^ 127
	}
}

// SweepInterval is how often a strategy should Sweep: the time a bucket
// takes to refill from empty, clamped to [1 s, 1 min], so a key idle for one
// interval is dropped at the next.
func SweepInterval(rate bucket.Rate, burst int64) time.Duration {
	if rate.Tokens == 0 {
		return time.Minute
	}
	return min(max(FillTime(rate, burst), time.Second), time.Minute)
}

// FillTime is the time rate takes to refill burst tokens from empty
// (b/r, a duration; computed in float64, rounding toward zero to the
// nanosecond). rate.Tokens must be above 0. Ours.
func FillTime(rate bucket.Rate, burst int64) time.Duration {
	return time.Duration(float64(burst) / rate.PerSec() * float64(time.Second))
}

// Whole is the whole tokens b holds at now (rounded down, clamped to
// [0, burst]), without changing b: it works on a copy, so a driver may
// call it (strategy.Remainer) between decisions and they stay the same.
// Exact: the float estimate of Bucket.Tokens is corrected with DelayN,
// which compares in ticks.
func Whole(b bucket.Bucket, now time.Duration) int64 {
	// b is the caller's bucket copied: advancing it here changes nothing
	// there.
	burst := b.Burst()
	k := int64(math.Floor(b.Tokens(now)))
	k = min(max(k, 0), burst)
	has := func(n int64) bool {
		d, ok := b.DelayN(now, n)
		return ok && d == 0
	}
	for k > 0 && !has(k) {
		k--
	}
	for k < burst && has(k+1) {
		k++
	}
	return k
}

// Remaining is the whole tokens key's bucket holds at now (Whole), or the
// burst when the table holds no bucket for key (a new one is full). It
// changes nothing: no bucket is created.
func (t *Table) Remaining(key string, now time.Duration) int64 {
	if e, ok := t.m[key]; ok {
		return Whole(e.b, now)
	}
	return t.burst
}
