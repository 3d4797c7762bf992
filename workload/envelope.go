package workload

import "math"

// EnvelopeExcess returns the largest amount, in tokens, by which the
// tokens admitted for one key in any interval [t, t+T] exceed b + r*T (SRTM
// §1.1: the aggregate must conform to the (r, b) envelope), over all keys; 0
// when every key conforms. An admitted request counts at its arrival time,
// the time the limiter's decision refers to. reqs must be sorted by arrival.
//
// For one key with admissions at t_1 <= ... <= t_n of n_k tokens and
// prefix sums S_k, the excess over [t_i, t_j] is S_j - S_{i-1} - b - r(t_j - t_i);
// the maximum over i <= j is found in one pass by keeping the minimum of
// S_{i-1} - r*t_i seen so far.
func EnvelopeExcess(reqs []Request, allowed []bool, ratePerSec float64, burst int64) float64 {
	type state struct {
		sum    int64   // S_j
		minPre float64 // min over i of S_{i-1} - r t_i
	}
	keys := map[string]*state{}
	worst := 0.0
	for i := range reqs {
		if !allowed[i] {
			continue
		}
		k := reqs[i].Key
		t := reqs[i].Arrival.Seconds()
		st, ok := keys[k]
		if !ok {
			st = &state{minPre: math.Inf(1)}
			keys[k] = st
		}
		st.minPre = math.Min(st.minPre, float64(st.sum)-ratePerSec*t)
		st.sum += reqs[i].Tokens
		if v := float64(st.sum) - ratePerSec*t - st.minPre - float64(burst); v > worst {
			worst = v
		}
	}
	// Float rounding of r*t can leave a few ulps where the exact value is 0.
	if worst < 1e-6 {
		return 0
	}
	return worst
}
