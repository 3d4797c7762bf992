package static

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// TestRestoreShare: a node's drained share stays drained when restored
// into a different split, and a level saved under a larger share is
// capped at the new, smaller one.
func TestRestoreShare(t *testing.T) {
	mk := func(members ...strategy.NodeID) *Static {
		s, err := New(strategy.Config{Self: "a", Members: members, Rate: bucket.Rate{Tokens: 1, Per: time.Minute}, Burst: 9, Rand: rand.New(rand.NewPCG(1, 1))})
		if err != nil {
			t.Fatal(err)
		}
		s.Start(0, &strategy.Effects{})
		return s
	}
	snap := func(s *Static) (out []strategy.KeyState) {
		s.Snapshot(0, func(st strategy.KeyState) { out = append(out, st) })
		return out
	}
	three := mk("a", "b", "c") // share 3 of 9
	for i := range 3 {
		if d, _ := three.Request(0, strategy.Request{ID: uint64(i), Key: "drained", Tokens: 1}, &strategy.Effects{}); !d.Allowed {
			t.Fatalf("request %d refused", i)
		}
	}
	one := mk("a") // the whole burst 9
	if err := one.Restore(0, snap(three)); err != nil {
		t.Fatal(err)
	}
	if rem, _ := one.Remaining(0, "drained"); rem != 0 {
		t.Fatalf("drained share restored alone: Remaining %d, want 0", rem)
	}

	alone := mk("a")
	alone.Request(0, strategy.Request{ID: 1, Key: "k", Tokens: 1}, &strategy.Effects{}) // 8 of 9 left
	again := mk("a", "b", "c")
	if err := again.Restore(0, snap(alone)); err != nil {
		t.Fatal(err)
	}
	if rem, _ := again.Remaining(0, "k"); rem != 3 {
		t.Fatalf("8 tokens restored into a share of 3: Remaining %d, want 3", rem)
	}
}
