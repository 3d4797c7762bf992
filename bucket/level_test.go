package bucket

import (
	"testing"
	"time"
)

// TestLevelRoundTrip: Level reads the exact level without changing the
// bucket; SetLevel writes it back across tick sizes (rounding down),
// capped at the burst, and refuses bad input unchanged.
func TestLevelRoundTrip(t *testing.T) {
	b := MustNew(Rate{Tokens: 1, Per: time.Minute}, 5, 0)
	b.AllowN(0, 5)
	before := b
	level, capacity, per := b.Level(30 * time.Second)
	if level != int64(30*time.Second) || capacity != 5*int64(time.Minute) || per != int64(time.Minute) {
		t.Fatalf("Level = %d, %d, %d; want half a token of 5 at 60e9 ticks per token", level, capacity, per)
	}
	if b != before {
		t.Fatal("Level changed the bucket")
	}
	// Into 1 token per 3 s (3e9 ticks per token): half a token is 1.5e9 ticks.
	c := MustNew(Rate{Tokens: 1, Per: 3 * time.Second}, 2, 0)
	if err := c.SetLevel(0, level, per); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := c.Level(0); got != int64(1500*time.Millisecond) {
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
