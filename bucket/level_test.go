package bucket

import (
	"testing"
	"time"

	"pgregory.net/rapid"
)

// MergeLevel keeps the more consumed copy: it never raises the level, the
// result is the lower of the two refilled to the same time, and merging two
// copies into a third in either order gives the same bucket, and merging a
// copy again changes nothing (idempotent: a replayed update is harmless).
func TestMergeLevelProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		r := Rate{Tokens: rapid.Int64Range(1, 5).Draw(t, "tokens"), Per: time.Duration(rapid.Int64Range(1, 3).Draw(t, "per_s")) * time.Second}
		burst := rapid.Int64Range(1, 10).Draw(t, "burst")
		copyAt := func(label string) (int64, time.Duration) {
			b := MustNew(r, burst, 0)
			at := time.Duration(rapid.Int64Range(0, 5000).Draw(t, label+"_at_ms")) * time.Millisecond
			b.AllowN(at, rapid.Int64Range(0, burst).Draw(t, label+"_taken"))
			if rapid.Bool().Draw(t, label+"_debt") {
				b.Debit(at, rapid.Int64Range(0, burst).Draw(t, label+"_debit"))
			}
			return b.Level()
		}
		base := MustNew(r, burst, 0)
		base.AllowN(time.Duration(rapid.Int64Range(0, 5000).Draw(t, "base_at_ms"))*time.Millisecond, rapid.Int64Range(0, burst).Draw(t, "base_taken"))
		l1, a1 := copyAt("a")
		l2, a2 := copyAt("b")
		end := 6 * time.Second
		x, y := base, base
		if err := x.MergeLevel(l1, a1); err != nil {
			t.Fatal(err)
		}
		if err := x.MergeLevel(l2, a2); err != nil {
			t.Fatal(err)
		}
		if err := y.MergeLevel(l2, a2); err != nil {
			t.Fatal(err)
		}
		if err := y.MergeLevel(l1, a1); err != nil {
			t.Fatal(err)
		}
		refill := func(level int64, at time.Duration) int64 {
			b := base
			b.level, b.last = level, at
			b.advance(end)
			return b.level
		}
		bl, ba := base.Level()
		want := min(refill(bl, ba), refill(l1, a1), refill(l2, a2))
		z := x
		if err := z.MergeLevel(l1, a1); err != nil {
			t.Fatal(err)
		}
		x.advance(end)
		y.advance(end)
		z.advance(end)
		if x.level != want || y.level != want {
			t.Fatalf("merged levels %d and %d at %v, want the lowest refilled copy %d", x.level, y.level, end, want)
		}
		if z.level != want {
			t.Fatalf("merging copy a again gave %d at %v, want %d unchanged", z.level, end, want)
		}
	})
}

func TestMergeLevelRefusesOutOfBounds(t *testing.T) {
	b := MustNew(Rate{Tokens: 1, Per: time.Second}, 2, 0)
	before := b
	for _, c := range []struct {
		ticks int64
		at    time.Duration
	}{{2e9 + 1, 0}, {-2e9 - 1, 0}, {0, -1}} {
		if err := b.MergeLevel(c.ticks, c.at); err == nil {
			t.Errorf("MergeLevel(%d, %v) accepted", c.ticks, c.at)
		}
		if b != before {
			t.Fatalf("a refused merge changed the bucket")
		}
	}
}

// Debit takes tokens whatever the level, down to a debt of one burst.
func TestDebitBoundedDebt(t *testing.T) {
	b := MustNew(Rate{Tokens: 1, Per: time.Second}, 2, 0)
	if got := b.Debit(0, 3); got != 3 {
		t.Fatalf("Debit 3 of 2 took %d, want 3 (a debt of 1)", got)
	}
	if got := b.Debit(0, 5); got != 1 {
		t.Fatalf("Debit at a debt of 1 took %d, want 1 (down to -burst)", got)
	}
	if l, _ := b.Level(); l != -2e9 {
		t.Fatalf("level %d, want -2e9", l)
	}
	if b.AllowN(3*time.Second, 2) || !b.AllowN(4*time.Second, 2) {
		t.Fatal("the debt is not repaid by refill at the rate")
	}
}

// TestLevelRoundTrip: LevelAt reads the exact level without changing the
// bucket; SetLevel writes it back across tick sizes (rounding down),
// capped at the burst, and refuses bad input unchanged.
func TestLevelRoundTrip(t *testing.T) {
	b := MustNew(Rate{Tokens: 1, Per: time.Minute}, 5, 0)
	b.AllowN(0, 5)
	before := b
	level, capacity, per := b.LevelAt(30 * time.Second)
	if level != int64(30*time.Second) || capacity != 5*int64(time.Minute) || per != int64(time.Minute) {
		t.Fatalf("LevelAt = %d, %d, %d; want half a token of 5 at 60e9 ticks per token", level, capacity, per)
	}
	if b != before {
		t.Fatal("LevelAt changed the bucket")
	}
	// Into 1 token per 3 s (3e9 ticks per token): half a token is 1.5e9 ticks.
	c := MustNew(Rate{Tokens: 1, Per: 3 * time.Second}, 2, 0)
	if err := c.SetLevel(0, level, per); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := c.LevelAt(0); got != int64(1500*time.Millisecond) {
		t.Fatalf("rescaled level %d, want 1.5e9", got)
	}
	if err := c.SetLevel(0, 10*per, per); err != nil || c.Tokens(0) != 2 {
		t.Fatalf("10 tokens into a burst of 2: %v tokens, err %v; want capped at 2", c.Tokens(0), err)
	}
	saved := c
	for _, bad := range [][2]int64{{-1, per}, {1, 0}, {1, -5}} {
		if err := c.SetLevel(time.Hour, bad[0], bad[1]); err == nil || c != saved {
			t.Fatalf("SetLevel(level %d, per %d): err %v, bucket changed %v", bad[0], bad[1], err, c != saved)
		}
	}
}

// TestMergeLevelAtFromAhead: a copy reported from a clock ahead of now is
// merged at now, at the lowest level it can have had then, and does not
// advance the bucket past now.
func TestMergeLevelAtFromAhead(t *testing.T) {
	r := Rate{Tokens: 1, Per: time.Second} // 1 token/s, burst 5
	b := MustNew(r, 5, 0)
	per := int64(time.Second)
	// The copy says 4 tokens at 3 s; this node is at 1 s: at 1 s the copy
	// held at least 4 - 2 = 2 tokens.
	if err := b.MergeLevelAt(time.Second, 4*per, 3*time.Second); err != nil {
		t.Fatal(err)
	}
	if ticks, at := b.Level(); at != time.Second || ticks != 2*per {
		t.Fatalf("level %d ticks at %v; want %d at 1s", ticks, at, 2*per)
	}
	if !b.AllowN(time.Second, 2) || b.AllowN(time.Second, 1) {
		t.Fatal("the merged bucket does not hold exactly 2 tokens at 1 s")
	}
	// Far ahead: a debt of one burst at most.
	c := MustNew(r, 5, 0)
	if err := c.MergeLevelAt(0, 0, time.Hour); err != nil {
		t.Fatal(err)
	}
	if ticks, at := c.Level(); at != 0 || ticks != -5*per {
		t.Fatalf("far ahead: level %d ticks at %v; want %d at 0", ticks, at, -5*per)
	}
	if err := c.MergeLevelAt(0, 6*per, 0); err == nil {
		t.Fatal("a level above the burst was merged")
	}
}
