package quantile

import (
	"math"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"
)

func TestNearestRank(t *testing.T) {
	s := []time.Duration{10, 20, 30, 40}
	for q, want := range map[float64]time.Duration{0: 10, 0.25: 10, 0.26: 20, 0.5: 20, 0.75: 30, 0.99: 40, 1: 40, 2: 40, -1: 10} {
		if got := NearestRank(s, q); got != want {
			t.Errorf("q=%v: %v, want %v", q, got, want)
		}
	}
	if NearestRank(nil, 0.5) != 0 || NearestRank(s, math.NaN()) != 10 {
		t.Error("empty or NaN")
	}
}

// TestNearestRankIsAnElementWithRank: the result is an element of the
// sample with at least ceil(q*n) elements at or below it, and fewer than
// ceil(q*n) strictly below.
func TestNearestRankIsAnElementWithRank(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := rapid.SliceOfN(rapid.Int64Range(0, 100), 1, 50).Draw(t, "s")
		ds := make([]time.Duration, len(s))
		for i, x := range s {
			ds[i] = time.Duration(x)
		}
		slices.Sort(ds)
		q := rapid.Float64Range(0, 1).Draw(t, "q")
		got := NearestRank(ds, q)
		k := max(int(math.Ceil(q*float64(len(ds)))), 1)
		atOrBelow, below := 0, 0
		for _, d := range ds {
			if d <= got {
				atOrBelow++
			}
			if d < got {
				below++
			}
		}
		if !slices.Contains(ds, got) || atOrBelow < k || below >= k {
			t.Fatalf("q=%v of %v: %v (k=%d, at or below %d, below %d)", q, ds, got, k, atOrBelow, below)
		}
	})
}
