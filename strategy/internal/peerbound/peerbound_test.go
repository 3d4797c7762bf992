package peerbound

import (
	"math"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/tokenmesh/tokenmesh/bucket"
)

func TestRefill(t *testing.T) {
	for _, c := range []struct {
		r    bucket.Rate
		d    time.Duration
		want int64
	}{
		{bucket.Rate{Tokens: 1, Per: time.Second}, 2500 * time.Millisecond, 2},
		{bucket.Rate{Tokens: 10, Per: time.Second}, time.Hour, 36000},
		{bucket.Rate{Tokens: 1, Per: time.Second}, -time.Second, 0},
		{bucket.Rate{Tokens: 0, Per: time.Second}, time.Hour, 0},
		{bucket.Rate{Tokens: math.MaxInt64, Per: 1}, math.MaxInt64, math.MaxInt64 / 4},
	} {
		if got := Refill(c.r, c.d); got != c.want {
			t.Errorf("Refill(%v, %v) = %d, want %d", c.r, c.d, got, c.want)
		}
	}
	if got := Tokens(bucket.Rate{Tokens: 1, Per: time.Second}, 5, time.Minute, 2*time.Minute); got != 5+60+int64(ClockSkew/time.Second) {
		t.Errorf("Tokens = %d", got)
	}
}

// TestTokensCoversBucket: a bucket.Bucket started at start never admits
// more than Tokens(r, b, start, now) by now.
func TestTokensCoversBucket(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		r := bucket.Rate{Tokens: rapid.Int64Range(1, 1000).Draw(t, "tokens"), Per: time.Duration(rapid.Int64Range(1, int64(time.Hour)).Draw(t, "per"))}
		b := rapid.Int64Range(1, 1000).Draw(t, "burst")
		start := time.Duration(rapid.Int64Range(0, int64(time.Hour)).Draw(t, "start"))
		bk, err := bucket.New(r, b, start)
		if err != nil {
			t.Skip(err)
		}
		now, admitted := start, int64(0)
		for range rapid.IntRange(1, 50).Draw(t, "n") {
			now += time.Duration(rapid.Int64Range(0, int64(time.Minute)).Draw(t, "dt"))
			n := rapid.Int64Range(1, b).Draw(t, "want")
			if bk.AllowN(now, n) {
				admitted += n
			}
			if bound := Tokens(r, b, start, now); admitted > bound {
				t.Fatalf("admitted %d by %v, above the bound %d", admitted, now, bound)
			}
		}
	})
}
