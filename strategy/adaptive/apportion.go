package adaptive

import (
	"math/bits"
	"sort"
)

// apportion splits total whole units over len(weights) holders in
// proportion to the weights, by the largest remainder method (Hamilton):
// every holder gets floor(total*w_i/W), and the units left over go one each
// to the largest remainders, ties to the smaller index. The result sums to
// total exactly. When every weight is 0 the split is equal (the first
// total mod n holders get one more), as bucket.SplitBurst does.
// Weights and total must be non-negative.
func apportion(total int64, weights []uint64) []int64 {
	n := len(weights)
	out := make([]int64, n)
	if n == 0 || total <= 0 {
		return out
	}
	var sum uint64
	overflow := false
	for _, w := range weights {
		s, c := bits.Add64(sum, w, 0)
		if c != 0 {
			overflow = true
		}
		sum = s
	}
	if overflow { // scale down: halve until the sum fits
		ws := make([]uint64, n)
		copy(ws, weights)
		for overflow {
			sum, overflow = 0, false
			for i := range ws {
				ws[i] >>= 1
				s, c := bits.Add64(sum, ws[i], 0)
				overflow = overflow || c != 0
				sum = s
			}
		}
		weights = ws
	}
	if sum == 0 {
		for i := range out {
			out[i] = total / int64(n)
			if int64(i) < total%int64(n) {
				out[i]++
			}
		}
		return out
	}
	rems := make([]uint64, n)
	left := total
	for i, w := range weights {
		hi, lo := bits.Mul64(uint64(total), w)
		q, r := bits.Div64(hi, lo, sum) // hi < sum since w <= sum and total fits
		out[i] = int64(q)
		rems[i] = r
		left -= int64(q)
	}
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return rems[idx[a]] > rems[idx[b]] })
	for k := 0; left > 0; k = (k + 1) % n {
		out[idx[k]]++
		left--
	}
	return out
}
