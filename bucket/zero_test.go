package bucket

import (
	"testing"
	"time"

	"pgregory.net/rapid"
)

// The zero Bucket is usable as documented: empty, never refills, refuses
// every request of a token or more, and every method works on it.
func TestZeroBucket(t *testing.T) {
	var b Bucket
	if got := b.Burst(); got != 0 {
		t.Fatalf("Burst = %d, want 0", got)
	}
	if r := b.Rate(); r != (Rate{}) {
		t.Fatalf("Rate = %v, want the zero Rate", r)
	}
	for _, at := range []time.Duration{0, time.Second, time.Hour} {
		if b.Allow(at) || b.AllowN(at, 3) {
			t.Fatalf("at %v: the zero bucket admitted", at)
		}
		if !b.AllowN(at, 0) {
			t.Fatalf("at %v: AllowN(0) refused (0 tokens always conform)", at)
		}
		if d, ok := b.ReserveN(at, 1); ok {
			t.Fatalf("at %v: ReserveN(1) = %v, true; want false (never refills)", at, d)
		}
		if d, ok := b.DelayN(at, 1); ok {
			t.Fatalf("at %v: DelayN(1) = %v, true; want false", at, d)
		}
		if got := b.Tokens(at); got != 0 {
			t.Fatalf("at %v: Tokens = %v, want 0", at, got)
		}
		if !b.Full(at) {
			t.Fatalf("at %v: not Full (a burst of 0 is full at 0)", at)
		}
		if got := b.Debit(at, 2); got != 0 {
			t.Fatalf("at %v: Debit took %d, want 0 (no room below a burst of 0)", at, got)
		}
	}
	if level, capacity, per := b.LevelAt(time.Hour); level != 0 || capacity != 0 || per != int64(time.Second) {
		t.Fatalf("LevelAt = %d, %d, %d; want 0, 0, 1e9", level, capacity, per)
	}
	if err := b.SetLevel(time.Hour, 5e9, int64(time.Second)); err != nil {
		t.Fatal(err)
	}
	if b.Allow(time.Hour) {
		t.Fatal("SetLevel raised the zero bucket above its burst of 0")
	}
	if err := b.MergeLevel(0, time.Hour); err != nil {
		t.Fatal(err)
	}
	// SetRate makes it a live bucket that starts empty.
	var c Bucket
	if err := c.SetRate(0, Rate{Tokens: 1, Per: time.Second}, 2); err != nil {
		t.Fatal(err)
	}
	if c.Allow(0) {
		t.Fatal("a zero bucket given a rate admitted at once: it held no token")
	}
	if !c.Allow(time.Second) {
		t.Fatal("a zero bucket given 1 token/s had no token a second later")
	}
}

// The zero Bucket behaves exactly as New(Rate{}, 0, 0) under any sequence
// of calls.
func TestZeroBucketIsNewZero(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var z Bucket
		n := MustNew(Rate{}, 0, 0)
		now := time.Duration(0)
		for i := range rapid.IntRange(1, 50).Draw(t, "calls") {
			now += time.Duration(rapid.Int64Range(0, int64(time.Minute)).Draw(t, "dt"))
			k := rapid.Int64Range(-1, 3).Draw(t, "n")
			var a, b any
			switch rapid.IntRange(0, 5).Draw(t, "op") {
			case 0:
				a, b = z.AllowN(now, k), n.AllowN(now, k)
			case 1:
				d1, ok1 := z.ReserveN(now, k)
				d2, ok2 := n.ReserveN(now, k)
				a, b = [2]any{d1, ok1}, [2]any{d2, ok2}
			case 2:
				d1, ok1 := z.DelayN(now, k)
				d2, ok2 := n.DelayN(now, k)
				a, b = [2]any{d1, ok1}, [2]any{d2, ok2}
			case 3:
				a, b = z.Debit(now, k), n.Debit(now, k)
			case 4:
				a, b = z.Tokens(now), n.Tokens(now)
			case 5:
				l1, c1, p1 := z.LevelAt(now)
				l2, c2, p2 := n.LevelAt(now)
				a, b = [3]int64{l1, c1, p1}, [3]int64{l2, c2, p2}
			}
			if a != b {
				t.Fatalf("call %d at %v: zero bucket %v, New(Rate{}, 0, 0) %v", i, now, a, b)
			}
		}
		z.zeroTicks() // LevelAt works on a copy: z may not have been touched
		if z != n {
			t.Fatalf("states differ: %+v vs %+v", z, n)
		}
	})
}
