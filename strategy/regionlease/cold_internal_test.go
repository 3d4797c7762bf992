package regionlease

import (
	"math/big"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/tokenmesh/tokenmesh/bucket"
)

// refillAtLeast (whether a region may hold a stock: r * WAN round trip >=
// min_lease) is exact at the boundary and for any rate, against big
// integers.
func TestRefillAtLeast(t *testing.T) {
	for _, c := range []struct {
		rate bucket.Rate
		d    time.Duration
		n    int64
		want bool
	}{
		{bucket.Rate{Tokens: 50, Per: time.Second}, 80 * time.Millisecond, 4, true}, // 4 tokens exactly
		{bucket.Rate{Tokens: 50, Per: time.Second}, 80*time.Millisecond - 1, 4, false},
		{bucket.Rate{Tokens: 1, Per: time.Second}, 304 * time.Millisecond, 4, false},   // zanbil across regions
		{bucket.Rate{Tokens: 1000, Per: time.Second}, 304 * time.Millisecond, 4, true}, // the tenant workload
		{bucket.Rate{Tokens: 1 << 62, Per: time.Nanosecond}, 1 << 62, 1 << 62, true},   // no overflow
		{bucket.Rate{}, time.Second, 1, false},
	} {
		if got := refillAtLeast(c.rate, c.d, c.n); got != c.want {
			t.Errorf("refillAtLeast(%v, %v, %d) = %v, want %v", c.rate, c.d, c.n, got, c.want)
		}
	}
	rapid.Check(t, func(t *rapid.T) {
		rate := bucket.Rate{Tokens: rapid.Int64Range(1, 1<<62).Draw(t, "tokens"), Per: time.Duration(rapid.Int64Range(1, 1<<62).Draw(t, "per"))}
		d := time.Duration(rapid.Int64Range(1, 1<<62).Draw(t, "d"))
		n := rapid.Int64Range(1, 1<<62).Draw(t, "n")
		lhs := new(big.Int).Mul(big.NewInt(rate.Tokens), big.NewInt(int64(d)))
		rhs := new(big.Int).Mul(big.NewInt(n), big.NewInt(int64(rate.Per)))
		if want := lhs.Cmp(rhs) >= 0; refillAtLeast(rate, d, n) != want {
			t.Fatalf("refillAtLeast(%v, %v, %d) = %v, want %v", rate, d, n, !want, want)
		}
	})
}
