package buckets

import (
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
)

// TestLender: tokens lent are spent from the table's point of view until
// returned; nothing is lent without a cap; a return credits only unused.
func TestLender(t *testing.T) {
	tb, err := New(bucket.Rate{Tokens: 10, Per: time.Second}, 20)
	if err != nil {
		t.Fatal(err)
	}
	var l Lender
	if n, _ := l.Grant(tb, 0, "k", 5, 0); n != 0 {
		t.Fatalf("lent %d with a cap of 0", n)
	}
	n, until := l.Grant(tb, 0, "k", 5, 4)
	if n != 4 || until <= 0 {
		t.Fatalf("Grant(want 5, most 4) = %d until %v; want 4", n, until)
	}
	if got := l.Remaining(tb, 0, "k"); got != 16 {
		t.Fatalf("remaining with 4 lent = %d, want 16", got)
	}
	l.Return(tb, 0, "k", 1) // 3 used, 1 back
	if got := l.Remaining(tb, 0, "k"); got != 17 {
		t.Fatalf("remaining after returning 1 of 4 = %d, want 17", got)
	}
	l.Return(tb, 0, "k", 5) // nothing lent any more: ignored
	if got := l.Remaining(tb, 0, "k"); got != 17 {
		t.Fatalf("a return with nothing lent changed the level: %d", got)
	}
}
