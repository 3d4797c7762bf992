// Package quantile is the nearest-rank quantile of a sorted sample, the
// percentile definition tokenmesh uses wherever it summarizes durations
// (srtm's delay statistics, cluster's measured latency hint). A leaf, so
// that the runtime need not import the evaluation packages for it. Ours
// (the nearest-rank method is the textbook one).
package quantile

import (
	"math"
	"time"
)

// NearestRank returns the nearest-rank q-quantile of sorted: the value at
// rank ceil(q*n) (1-based), q in [0, 1] (values outside clamp to the
// ends, NaN to the first value); sorted must be in increasing order; 0 if
// it is empty.
func NearestRank(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	if math.IsNaN(q) {
		return sorted[0] // int(NaN) is not defined by Go
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}
