package buckets

import (
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/strategy"
)

func export(t *Table, now time.Duration) []strategy.KeyState {
	var out []strategy.KeyState
	t.Export(now, nil, func(s strategy.KeyState) { out = append(out, s) })
	return out
}

// levelAt is key's exact level in ticks at now (a full bucket for a key
// t does not hold).
func levelAt(t *Table, key string, now time.Duration) int64 {
	b, ok := t.Lookup(key)
	if !ok {
		_, burst := t.Shape()
		nb := bucket.MustNew(t.rate, burst, now)
		return nb.CapacityTicks()
	}
	level, _, _ := b.LevelAt(now)
	return level
}

// TestImportRefillsForElapsedTime: a key drained to 0 of 5 at 1/min,
// restored 30 s later holds 0 (half a token), 72 s later 1, and an hour
// later 5 (capped at the burst, so it is not even kept).
func TestImportRefillsForElapsedTime(t *testing.T) {
	r := bucket.Rate{Tokens: 1, Per: time.Minute}
	src, _ := New(r, 5)
	if !src.Get("k", 0).AllowN(0, 5) {
		t.Fatal("a new bucket refused its burst")
	}
	states := export(src, 10*time.Second)
	if len(states) != 1 || states[0].Level != 0 || states[0].At != 0 {
		t.Fatalf("export = %+v, want one state of 0 tokens at 0 (the last update, not the export's time)", states)
	}
	if again := export(src, 20*time.Second); len(again) != 1 || again[0] != states[0] {
		t.Fatalf("export of an untouched bucket 10 s later = %+v, want the same state %+v", again, states[0])
	}
	for _, c := range []struct {
		at   time.Duration
		want int64
		kept bool
	}{{10 * time.Second, 0, true}, {40 * time.Second, 0, true}, {72 * time.Second, 1, true}, {time.Hour, 5, false}} {
		dst, _ := New(r, 5)
		if err := dst.Import(c.at, states, nil); err != nil {
			t.Fatal(err)
		}
		if got := dst.Remaining("k", c.at); got != c.want {
			t.Errorf("restored at %v: Remaining = %d, want %d", c.at, got, c.want)
		}
		if got := dst.Remaining("k", c.at); got != src.Remaining("k", c.at) {
			t.Errorf("restored at %v: Remaining = %d, the original says %d", c.at, got, src.Remaining("k", c.at))
		}
		if (dst.Len() == 1) != c.kept {
			t.Errorf("restored at %v: %d buckets kept, want kept=%v", c.at, dst.Len(), c.kept)
		}
	}
}

// TestImportRefusesCorrupt: every kind of bad state is refused with an
// error naming it, and nothing is imported (not even the good states
// before it).
func TestImportRefusesCorrupt(t *testing.T) {
	good := strategy.KeyState{Key: "ok", Level: 0, Capacity: 5 * int64(time.Minute), TicksPerToken: int64(time.Minute), At: 0}
	for _, c := range []struct {
		name string
		bad  strategy.KeyState
		want string
	}{
		{"level above capacity", strategy.KeyState{Key: "a", Level: 6, Capacity: 5, TicksPerToken: 1}, "above its capacity"},
		{"level below any debt", strategy.KeyState{Key: "a", Level: strategy.MinKeyStateLevel - 1, Capacity: 5, TicksPerToken: 1}, "deeper than any bucket's debt"},
		{"zero ticks per token", strategy.KeyState{Key: "a", Level: 1, Capacity: 5, TicksPerToken: 0}, "ticks per token"},
		{"zero capacity", strategy.KeyState{Key: "a", Level: 0, Capacity: 0, TicksPerToken: 1}, "capacity"},
		{"empty key", strategy.KeyState{Level: 0, Capacity: 5, TicksPerToken: 1}, "empty key"},
		{"bad utf-8", strategy.KeyState{Key: "\xff", Level: 0, Capacity: 5, TicksPerToken: 1}, "UTF-8"},
		{"long key", strategy.KeyState{Key: strings.Repeat("k", 4097), Level: 0, Capacity: 5, TicksPerToken: 1}, "limit"},
		{"duplicate", good, "twice"},
	} {
		tb, _ := New(bucket.Rate{Tokens: 1, Per: time.Minute}, 5)
		err := tb.Import(time.Second, []strategy.KeyState{good, c.bad}, nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.want)
		}
		if tb.Len() != 0 {
			t.Errorf("%s: %d buckets imported despite the error", c.name, tb.Len())
		}
	}
}

// TestImportCapsAtNewBurst: a level saved under a larger burst (a static
// share before a re-split, or a rule whose burst was lowered) is capped
// at the current burst, across different tick sizes.
func TestImportCapsAtNewBurst(t *testing.T) {
	src, _ := New(bucket.Rate{Tokens: 1, Per: time.Second}, 10)
	src.Get("k", 0).AllowN(0, 1) // 9 left
	dst, _ := New(bucket.Rate{Tokens: 1, Per: 3 * time.Second}, 3)
	if err := dst.Import(0, export(src, 0), nil); err != nil {
		t.Fatal(err)
	}
	if got := dst.Remaining("k", 0); got != 3 {
		t.Fatalf("Remaining = %d, want the new burst 3", got)
	}
}

// TestSnapshotProperties: for any rate, burst and history of requests,
// (1) restoring the snapshot at the time it was taken gives every key the
// same level as the original, debts (overdraft charges) included, (2)
// restoring it later gives what the original would hold then (refill for
// the elapsed time), and (3) restoring any valid states into any table
// never yields more than its burst or a level below its floor (minus the
// larger of the burst and max_debt).
func TestSnapshotProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		rate := bucket.Rate{Tokens: rapid.Int64Range(0, 1000).Draw(t, "tokens"),
			Per: time.Duration(rapid.Int64Range(1, int64(time.Hour)).Draw(t, "per"))}
		burst := rapid.Int64Range(0, 1000).Draw(t, "burst")
		src, err := New(rate, burst)
		if err != nil {
			t.Skip(err)
		}
		keys := []string{"a", "b", "c", "d"}
		maxDebt := rapid.Int64Range(0, 2*burst+2).Draw(t, "max debt")
		debt := func(string) int64 { return maxDebt }
		now := time.Duration(rapid.Int64Range(-int64(time.Hour), int64(time.Hour)).Draw(t, "start"))
		for i, n := 0, rapid.IntRange(0, 40).Draw(t, "requests"); i < n; i++ {
			now += time.Duration(rapid.Int64Range(0, int64(time.Minute)).Draw(t, "gap"))
			b, tokens := src.Get(rapid.SampledFrom(keys).Draw(t, "key"), now), rapid.Int64Range(1, burst+1).Draw(t, "n")
			if rapid.Bool().Draw(t, "charge") {
				b.ChargeN(now, tokens, maxDebt)
			} else {
				b.AllowN(now, tokens)
			}
		}
		states := export(src, now)
		later := now + time.Duration(rapid.Int64Range(0, int64(time.Hour)).Draw(t, "elapsed"))
		for _, at := range []time.Duration{now, later} {
			dst, _ := New(rate, burst)
			if err := dst.Import(at, states, debt); err != nil {
				t.Fatalf("import at %v: %v", at, err)
			}
			for _, k := range keys {
				if got, want := dst.Remaining(k, at), src.Remaining(k, at); got != want {
					t.Fatalf("key %s restored at %v: Remaining %d, original %d", k, at, got, want)
				}
				if got, want := levelAt(dst, k, at), levelAt(src, k, at); got != want && burst > 0 { // burst 0 admits nothing: not exported
					t.Fatalf("key %s restored at %v: level %d ticks, original %d", k, at, got, want)
				}
			}
		}
		// Any valid state into any table: never above the burst.
		other := rapid.Int64Range(0, 50).Draw(t, "other burst")
		dst, err := New(bucket.Rate{Tokens: 1, Per: time.Duration(rapid.Int64Range(1, int64(time.Minute)).Draw(t, "other per"))}, other)
		if err != nil {
			t.Skip(err)
		}
		capacity := rapid.Int64Range(1, 1<<50).Draw(t, "capacity")
		s := strategy.KeyState{Key: "x", Capacity: capacity, Level: rapid.Int64Range(strategy.MinKeyStateLevel, capacity).Draw(t, "level"),
			TicksPerToken: rapid.Int64Range(1, 1<<40).Draw(t, "ticks per token"),
			At:            time.Duration(rapid.Int64().Draw(t, "at"))}
		at := time.Duration(rapid.Int64Range(-1<<62, 1<<62).Draw(t, "restore at"))
		if err := dst.Import(at, []strategy.KeyState{s}, debt); err != nil {
			t.Fatalf("valid state %+v refused: %v", s, err)
		}
		if got := dst.Remaining("x", at); got < 0 || got > other {
			t.Fatalf("restored %+v at %v into burst %d: Remaining %d", s, at, other, got)
		}
		if b, ok := dst.Lookup("x"); ok {
			if level, _ := b.Level(); level < b.FloorTicks(maxDebt) || level > b.CapacityTicks() {
				t.Fatalf("restored %+v at %v: level %d ticks outside [%d, %d]", s, at, level, b.FloorTicks(maxDebt), b.CapacityTicks())
			}
		}
	})
}
