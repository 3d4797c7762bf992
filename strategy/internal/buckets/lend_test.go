package buckets

import (
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/strategy"
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

// TestSeedAndKeyLevel: a seeded table creates a key's bucket at the seed's
// level (rescaled to its ticks, capped at its burst), not full, and only
// when it creates it; KeyLevel reads a bucket with the tokens lent as
// spent, and nothing for a missing or full one, changing nothing.
func TestSeedAndKeyLevel(t *testing.T) {
	src, _ := New(bucket.Rate{Tokens: 1, Per: time.Hour}, 100)
	var l Lender
	src.Get("k", 0).AllowN(0, 97) // 3 left
	if n, _ := l.Grant(src, 0, "k", 1, 1); n != 1 {
		t.Fatal("no grant")
	}
	st, ok := l.KeyLevel(src, 0, "k")
	if !ok || st.Level/st.TicksPerToken != 2 || st.Key != "k" || st.At != 0 {
		t.Fatalf("KeyLevel = %+v, %v; want 2 tokens (3 less 1 lent)", st, ok)
	}
	if got := l.Remaining(src, 0, "k"); got != 2 {
		t.Fatalf("KeyLevel changed the table: %d left", got)
	}
	if _, ok := l.KeyLevel(src, 0, "absent"); ok {
		t.Error("KeyLevel of a missing key")
	}
	src.Get("full", 0)
	if _, ok := l.KeyLevel(src, 0, "full"); ok || src.Len() != 2 {
		t.Errorf("KeyLevel of a full bucket: %v (keys %d)", ok, src.Len())
	}

	dst, _ := New(bucket.Rate{Tokens: 1, Per: time.Second}, 5)
	calls := 0
	dst.SetSeed(func(now time.Duration, key string) (strategy.KeyState, bool) {
		calls++
		return l.KeyLevel(src, now, key)
	})
	if got := Whole(*dst.Get("k", 0), 0); got != 2 {
		t.Errorf("seeded bucket holds %d, want 2", got)
	}
	dst.Get("k", 0).AllowN(0, 1)
	if got := Whole(*dst.Get("k", 0), 0); got != 1 || calls != 1 {
		t.Errorf("an existing bucket: %d tokens, %d seed calls; want 1 and 1 (seeded once)", got, calls)
	}
	if got := Whole(*dst.Get("absent", 0), 0); got != 5 {
		t.Errorf("a key the seed lacks: %d, want full 5", got)
	}
	// A seed above the burst is capped.
	src2, _ := New(bucket.Rate{Tokens: 1, Per: time.Hour}, 100)
	src2.Get("k", 0).AllowN(0, 10)
	dst2, _ := New(bucket.Rate{Tokens: 1, Per: time.Second}, 5)
	dst2.SetSeed(func(now time.Duration, key string) (strategy.KeyState, bool) { return l.KeyLevel(src2, now, key) })
	if got := Whole(*dst2.Get("k", 0), 0); got != 5 {
		t.Errorf("a seed of 90 into a burst of 5: %d", got)
	}
}

// TestLenderLend: a lent key's bucket holds nothing for the strategy
// (Remaining and KeyLevel see it spent, a Return or a second Lend of it
// does nothing, a sweep keeps it) until Reclaim puts the driver's copy
// back; a copy of another shape is dropped.
func TestLenderLend(t *testing.T) {
	rate := bucket.Rate{Tokens: 10, Per: time.Second}
	tb, err := New(rate, 20)
	if err != nil {
		t.Fatal(err)
	}
	var l Lender
	b, ok := l.Lend(tb, 0, "k")
	if !ok || b.Tokens(0) != 20 || !l.IsLent("k") {
		t.Fatalf("Lend = %v tokens, %v", b.Tokens(0), ok)
	}
	if _, ok := l.Lend(tb, 0, "k"); ok {
		t.Fatal("a second Lend succeeded")
	}
	if got := l.Remaining(tb, time.Hour, "k"); got != 0 {
		t.Fatalf("Remaining of a lent key an hour later = %d, want 0", got)
	}
	if st, ok := l.KeyLevel(tb, time.Hour, "k"); !ok || st.Level != 0 {
		t.Fatalf("KeyLevel of a lent key = %+v, %v; want level 0", st, ok)
	}
	l.Return(tb, time.Hour, "k", 5) // not an allowance: ignored
	l.ClampAll(tb, time.Hour)
	tb.Sweep(time.Hour)
	if tb.Len() != 1 {
		t.Fatalf("the sweep dropped the lent key's bucket")
	}
	if !b.AllowN(time.Second, 13) {
		t.Fatal("the lent copy refused 13 of 20")
	}
	l.Reclaim(tb, time.Second, "k", b)
	if l.IsLent("k") || l.Held.Held("k") != 0 {
		t.Fatal("still lent after Reclaim")
	}
	if got := l.Remaining(tb, time.Second, "k"); got != 7 {
		t.Fatalf("Remaining after Reclaim = %d, want 7 (the copy's)", got)
	}
	l.Reclaim(tb, time.Second, "k", b) // not lent: ignored
	if _, ok := l.Lend(tb, time.Second, "k"); !ok {
		t.Fatal("Lend after Reclaim refused")
	}
	l.Reclaim(tb, time.Second, "k", bucket.MustNew(bucket.Rate{Tokens: 1, Per: time.Second}, 20, 0))
	if got := l.Remaining(tb, time.Second, "k"); got != 0 {
		t.Fatalf("Remaining after a Reclaim of another shape = %d, want 0 (dropped)", got)
	}
	// A copy of another shape whose last update is after the Reclaim's
	// time (the driver's clock ran ahead): the table's bucket holds no
	// token at that later time (it refills from there, not from now).
	tb2, err := New(rate, 20)
	if err != nil {
		t.Fatal(err)
	}
	var l2 Lender
	if _, ok := l2.Lend(tb2, time.Second, "k"); !ok {
		t.Fatal("Lend refused")
	}
	l2.Reclaim(tb2, time.Second, "k", bucket.MustNew(bucket.Rate{Tokens: 1, Per: time.Second}, 20, 3*time.Second))
	if got := l2.Remaining(tb2, 3*time.Second, "k"); got != 0 {
		t.Fatalf("Remaining at the dropped copy's last update = %d, want 0 (refilled from the Reclaim's earlier time)", got)
	}
	if got := l2.Remaining(tb2, 4*time.Second, "k"); got != 10 {
		t.Fatalf("Remaining a second after the dropped copy's last update = %d, want 10", got)
	}
}
