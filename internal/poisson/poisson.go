// Package poisson draws Poisson variates for the experiments' and tests'
// demand models (one sampler instead of a copy in each).
package poisson

import (
	"math"
	"math/rand/v2"
)

// Draw returns a Poisson variate with the given mean (events per
// interval; <= 0 gives 0) from r: Knuth's multiplication method, in chunks
// of mean at most 30 summed (a Poisson of mean a+b is the sum of ones of
// means a and b), so that e^-mean never underflows. Deterministic for a
// seeded r; O(mean) draws.
func Draw(r *rand.Rand, mean float64) int64 {
	var n int64
	for mean > 0 {
		m := min(mean, 30)
		mean -= m
		l, p := math.Exp(-m), 1.0
		for {
			p *= r.Float64()
			if p <= l {
				break
			}
			n++
		}
	}
	return n
}
