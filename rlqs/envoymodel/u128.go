package envoymodel

import (
	"math"
	"math/big"
	"math/bits"
)

// u128 is an unsigned 128-bit integer, enough for a limiter's ticks: a
// capacity is at most 2^32 tokens of at most 2^69 ticks each (fill intervals
// up to protobuf's 315,576,000,000 s), and a refill is at most 2^63 ns of 2^32
// ticks. The operations below never overflow for values in those ranges.
type u128 struct{ hi, lo uint64 }

func mul64(a, b uint64) u128 {
	hi, lo := bits.Mul64(a, b)
	return u128{hi, lo}
}

// mul is x*m; x.hi*m must not overflow.
func (x u128) mul(m uint64) u128 {
	hi, lo := bits.Mul64(x.lo, m)
	return u128{x.hi*m + hi, lo}
}

func (x u128) add(y u128) u128 {
	lo, c := bits.Add64(x.lo, y.lo, 0)
	return u128{x.hi + y.hi + c, lo}
}

// sub is x-y for y <= x.
func (x u128) sub(y u128) u128 {
	lo, b := bits.Sub64(x.lo, y.lo, 0)
	return u128{x.hi - y.hi - b, lo}
}

func (x u128) less(y u128) bool {
	return x.hi < y.hi || (x.hi == y.hi && x.lo < y.lo)
}

func (x u128) big() *big.Int {
	b := new(big.Int).SetUint64(x.hi)
	return b.Lsh(b, 64).Or(b, new(big.Int).SetUint64(x.lo))
}

func (x u128) float() float64 {
	return float64(x.hi)*math.Exp2(64) + float64(x.lo)
}
