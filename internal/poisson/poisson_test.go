package poisson

import (
	"math"
	"math/rand/v2"
	"testing"
)

// The sample mean and variance of many draws are the mean (a Poisson's
// variance is its mean), for small means and for means split into chunks.
func TestDrawMoments(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, mean := range []float64{0.5, 3, 29.5, 75} {
		const n = 20000
		var sum, sq float64
		for range n {
			x := float64(Draw(r, mean))
			sum += x
			sq += x * x
		}
		m := sum / n
		v := sq/n - m*m
		se := math.Sqrt(mean / n) // standard error of the sample mean
		if math.Abs(m-mean) > 5*se || math.Abs(v-mean) > 0.1*mean {
			t.Errorf("mean %v: sample mean %.3f, variance %.3f", mean, m, v)
		}
	}
	if Draw(r, 0) != 0 || Draw(r, -1) != 0 {
		t.Error("a mean <= 0 must give 0")
	}
}
