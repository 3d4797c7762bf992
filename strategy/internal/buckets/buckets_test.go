package buckets

import (
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
)

// TestWholeExact: Whole rounds down exactly where the float estimate of
// Bucket.Tokens rounds up (a level of 4e18-1 ticks of 1e15 per token is
// 3999.999... tokens, and float64 says 4000), and leaves the bucket as it
// was.
func TestWholeExact(t *testing.T) {
	r := bucket.Rate{Tokens: 1, Per: 1e6 * time.Second} // one tick per ns, 1e15 ticks per token
	b := bucket.MustNew(r, 4500, 0)
	if !b.AllowN(0, 4500) {
		t.Fatal("a full bucket refused its burst")
	}
	before := b
	at := time.Duration(4000e15 - 1)
	if got := Whole(b, at); got != 3999 {
		t.Fatalf("Whole = %d, want 3999 (Tokens says %v)", got, b.Tokens(at))
	}
	if b != before {
		t.Fatal("Whole changed the bucket")
	}
	if got := Whole(b, at+1); got != 4000 {
		t.Fatalf("Whole one ns later = %d, want 4000", got)
	}
}

// TestRemainingCreatesNothing: an unknown key is full, and no bucket is
// created for it.
func TestRemainingCreatesNothing(t *testing.T) {
	tb, err := New(bucket.Rate{Tokens: 1, Per: time.Second}, 5)
	if err != nil {
		t.Fatal(err)
	}
	if got := tb.Remaining("k", 0); got != 5 || tb.Len() != 0 {
		t.Fatalf("Remaining = %d with %d keys, want 5 and none", got, tb.Len())
	}
	tb.Get("k", 0).AllowN(0, 2)
	if got := tb.Remaining("k", 500*time.Millisecond); got != 3 {
		t.Fatalf("Remaining = %d, want 3", got)
	}
}

// TestDeleteForgetsKeyBytes: Delete takes the key's bytes out of both
// StateBytes and MemoryBytes, so a table whose keys were deleted reports
// what an empty table of the same peak does (no drift upward).
func TestDeleteForgetsKeyBytes(t *testing.T) {
	tb, err := New(bucket.Rate{Tokens: 1, Per: time.Second}, 5)
	if err != nil {
		t.Fatal(err)
	}
	empty := tb.MemoryBytes()
	tb.Get("a-key-of-forty-bytes-0123456789abcdefghi", 0)
	if tb.StateBytes() == 0 || tb.MemoryBytes() <= empty {
		t.Fatalf("one key: StateBytes %d, MemoryBytes %d; want both above an empty table's", tb.StateBytes(), tb.MemoryBytes())
	}
	slots := tb.MemoryBytes() - bucketAllocBytes - allocBytes(40) // the map's slots, kept after a delete
	tb.Delete("a-key-of-forty-bytes-0123456789abcdefghi")
	tb.Delete("absent")
	if tb.Len() != 0 || tb.StateBytes() != 0 || tb.MemoryBytes() != slots {
		t.Fatalf("after Delete: %d keys, StateBytes %d, MemoryBytes %d; want 0, 0, %d (the map's slots only)", tb.Len(), tb.StateBytes(), tb.MemoryBytes(), slots)
	}
}
