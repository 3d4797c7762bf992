package bucket

import (
	"testing"
	"time"

	"pgregory.net/rapid"
)

// MergeLevel keeps the more consumed copy: it never raises the level, the
// result is the lower of the two refilled to the same time, and merging two
// copies into a third in either order gives the same bucket.
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
		x.advance(end)
		y.advance(end)
		if x.level != want || y.level != want {
			t.Fatalf("merged levels %d and %d at %v, want the lowest refilled copy %d", x.level, y.level, end, want)
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
