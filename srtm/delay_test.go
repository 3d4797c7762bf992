package srtm

import (
	"math"
	"math/rand"
	"strings"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"pgregory.net/rapid"
)

// genArrivals draws n arrival times with gaps around the service time
// service (including simultaneous arrivals), so buckets fill and drain.
func genArrivals(t *rapid.T, n int, service time.Duration, label string) []time.Duration {
	gaps := rapid.SliceOfN(rapid.Int64Range(0, 3*int64(service)), n, n).Draw(t, label)
	out := make([]time.Duration, n)
	var now time.Duration
	for i, g := range gaps {
		if g < int64(service) { // half the time: a burst of close arrivals
			g /= 8
		}
		now += time.Duration(g)
		out[i] = now
	}
	return out
}

// TestDelaysMatchesReserveN cross-checks eq. (2) (Delays) against the
// project's exact token bucket in waiting mode, message by message.
func TestDelaysMatchesReserveN(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		r := bucket.Rate{
			Tokens: rapid.Int64Range(1, 1000).Draw(t, "tokens"),
			Per:    time.Duration(rapid.Int64Range(int64(time.Microsecond), int64(10*time.Second)).Draw(t, "per")),
		}
		b := rapid.Int64Range(1, 50).Draw(t, "b")
		n := rapid.IntRange(0, 300).Draw(t, "n")
		service := r.Per / time.Duration(r.Tokens)
		if service < 1 {
			service = 1
		}
		arr := genArrivals(t, n, service, "gaps")
		if n > 2 && rapid.Bool().Draw(t, "backwards") { // a time earlier than the last
			i := rapid.IntRange(1, n-1).Draw(t, "back")
			arr[i] = arr[i-1] - time.Duration(rapid.Int64Range(1, int64(service)+1).Draw(t, "by"))
		}
		got := Delays(arr, r, b)
		if len(got) != n {
			t.Fatalf("len %d, want %d", len(got), n)
		}
		var bk bucket.Bucket
		for i, a := range arr {
			if i == 0 {
				bk = bucket.MustNew(r, b, a)
			}
			d, ok := bk.ReserveN(a, 1)
			if !ok || d != got[i] {
				t.Fatalf("message %d at %v: Delays %v, ReserveN %v (ok %v)", i, a, got[i], d, ok)
			}
		}
	})
}

func TestDelaysInvalid(t *testing.T) {
	arr := []time.Duration{0, 1}
	if Delays(arr, bucket.Rate{}, 1) != nil {
		t.Error("zero rate: want nil")
	}
	if Delays(arr, bucket.Rate{Tokens: 1, Per: time.Second}, 0) != nil {
		t.Error("b = 0: want nil")
	}
	if d := Delays(nil, bucket.Rate{Tokens: 1, Per: time.Second}, 1); d == nil || len(d) != 0 {
		t.Errorf("no arrivals: got %v, want empty", d)
	}
	// b = 2, 1 token/s, three simultaneous messages: 0, 0, 1 s.
	d := Delays([]time.Duration{0, 0, 0}, bucket.Rate{Tokens: 1, Per: time.Second}, 2)
	if d[0] != 0 || d[1] != 0 || d[2] != time.Second {
		t.Errorf("got %v, want [0 0 1s]", d)
	}
	rates := []bucket.Rate{{Tokens: 1, Per: time.Second}}
	for _, tc := range []struct {
		assign []int
		bursts []int64
		want   string
	}{
		{[]int{0}, []int64{1}, "entries"},
		{[]int{0, 0}, []int64{1, 1}, "bursts"},
		{[]int{0, 1}, []int64{1}, "assign[1]"},
		{[]int{0, 0}, []int64{0}, "sub-bucket 0"},
	} {
		if _, err := SplitDelays(arr, tc.assign, rates, tc.bursts); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("SplitDelays(%v, %v): err %v, want it to mention %q", tc.assign, tc.bursts, err, tc.want)
		}
	}
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// runningSum returns S(t) = sum_i min(d_i, max(0, t - a_i)): the delay
// accrued by all messages up to time t (Appendix A.1).
func runningSum(arr, d []time.Duration, t time.Duration) int64 {
	var s int64
	for i, a := range arr {
		if t > a {
			s += int64(min(d[i], t-a))
		}
	}
	return s
}

// TestProposition1 checks SRTM Proposition 1 (§2.1, Appendix A.2) on random
// arrival sequences and random splits into k = 2..5 sub-token buckets with
// sum r_l = r and sum b_l = b: S^(k)(t) >= S(t) at every t. Both sums are
// piecewise linear with breakpoints at arrivals and departures, so checking
// every breakpoint checks every t. The rates share a period divisible by
// every token count, so every delay is a whole number of nanoseconds and the
// comparison is exact (no rounding).
func TestProposition1(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		k := rapid.IntRange(2, 5).Draw(t, "k")
		toks := rapid.SliceOfN(rapid.Int64Range(1, 6), k, k).Draw(t, "tokens")
		bs := rapid.SliceOfN(rapid.Int64Range(1, 5), k, k).Draw(t, "bursts")
		var T, B int64
		L := int64(1)
		for l := range toks {
			T += toks[l]
			B += bs[l]
			L = L / gcd(L, toks[l]) * toks[l]
		}
		L = L / gcd(L, T) * T
		per := time.Duration(L * rapid.Int64Range(1000, 1000000).Draw(t, "scale"))
		rates := make([]bucket.Rate, k)
		for l := range rates {
			rates[l] = bucket.Rate{Tokens: toks[l], Per: per}
		}
		r := bucket.Rate{Tokens: T, Per: per}
		n := rapid.IntRange(1, 150).Draw(t, "n")
		arr := genArrivals(t, n, per/time.Duration(T), "gaps")
		assign := rapid.SliceOfN(rapid.IntRange(0, k-1), n, n).Draw(t, "assign")

		one := Delays(arr, r, B)
		split, err := SplitDelays(arr, assign, rates, bs)
		if err != nil {
			t.Fatal(err)
		}
		var points []time.Duration
		for i, a := range arr {
			points = append(points, a, a+one[i], a+split[i])
		}
		for _, p := range points {
			s1, sk := runningSum(arr, one, p), runningSum(arr, split, p)
			if sk < s1 {
				t.Fatalf("t=%v: S^(%d)(t)=%d ns < S(t)=%d ns", p, k, sk, s1)
			}
		}
	})
}

func TestMD1TailN(t *testing.T) {
	for _, rho := range []float64{0.1, 0.5, 0.9, 0.99} {
		if got := MD1TailN(rho, 1); math.Abs(got-rho) > 1e-12 {
			t.Errorf("P(N>=1) at rho=%v: %v, want rho", rho, got)
		}
		// pi_0 + pi_1 = (1-rho) e^rho for M/D/1.
		if got, want := MD1TailN(rho, 2), 1-(1-rho)*math.Exp(rho); math.Abs(got-want) > 1e-12 {
			t.Errorf("P(N>=2) at rho=%v: %v, want %v", rho, got, want)
		}
		prev := 1.0
		for n := 1; n < 3000; n *= 3 {
			p := MD1TailN(rho, n)
			if !(p >= 0 && p <= prev) {
				t.Errorf("rho=%v: P(N>=%d)=%v not in [0, %v]", rho, n, p, prev)
			}
			prev = p
		}
	}
	if !math.IsNaN(MD1TailN(1, 3)) {
		t.Error("rho=1: want NaN")
	}
	for _, tc := range []struct {
		lambda, r float64
		b         int
		want      string
	}{
		{-1, 10, 1, "lambda"}, {math.NaN(), 10, 1, "lambda"}, {1, 0, 1, "r=0"},
		{1, 10, 0, "b=0"}, {10, 10, 3, "infinite"},
	} {
		if _, err := MD1Delay(tc.lambda, tc.r, tc.b); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("MD1Delay(%v, %v, %d): err %v, want it to mention %q", tc.lambda, tc.r, tc.b, err, tc.want)
		}
	}
}

// TestMD1AgainstSimulation feeds 1e6 seeded Poisson arrivals per case into
// Delays (r = 1000 tokens/s, an exact 1 ms per token) and compares:
//   - the fraction of delayed messages with P_{M/D/1}(U > b-1) (exact theory:
//     within 5%);
//   - for b = 1 the mean delay with eq. (1) (exact there: within 5%);
//   - for b > 1 the mean delay with eq. (1), which is the paper's
//     approximation: within 25% where P(U > b-1) >= 1%, logged.
func TestMD1AgainstSimulation(t *testing.T) {
	const n = 1_000_000
	r := bucket.Rate{Tokens: 1000, Per: time.Second}
	arr := make([]time.Duration, n)
	for ci, rho := range []float64{0.5, 0.8, 0.9} {
		rng := rand.New(rand.NewSource(int64(ci + 1)))
		lambda := rho * 1000
		var now float64
		for i := range arr {
			now += rng.ExpFloat64() / lambda
			arr[i] = time.Duration(now * 1e9)
		}
		for _, b := range []int{1, 2, 5, 10, 20} {
			d := Delays(arr, r, int64(b))
			var sum float64
			delayed := 0
			for _, x := range d {
				sum += x.Seconds()
				if x > 0 {
					delayed++
				}
			}
			simMean, simP := sum/n, float64(delayed)/n
			eq1, err := MD1Delay(lambda, 1000, b)
			if err != nil {
				t.Fatal(err)
			}
			p := MD1TailN(rho, b)
			t.Logf("rho=%.1f b=%2d  P(delayed) sim %.5f theory %.5f (%.3f)  mean delay sim %.4g s eq.(1) %.4g s (ratio %.3f)",
				rho, b, simP, p, simP/p, simMean, eq1, eq1/simMean)
			if p >= 0.01 && math.Abs(simP/p-1) > 0.05 {
				t.Errorf("rho=%v b=%d: delayed fraction %v vs P(U>b-1)=%v: more than 5%% apart", rho, b, simP, p)
			}
			if p < 0.01 && math.Abs(simP-p) > 0.001 {
				t.Errorf("rho=%v b=%d: delayed fraction %v vs P(U>b-1)=%v: more than 0.001 apart", rho, b, simP, p)
			}
			if b == 1 && math.Abs(eq1/simMean-1) > 0.05 {
				t.Errorf("rho=%v b=1: mean delay %v vs eq. (1) %v: more than 5%% apart", rho, simMean, eq1)
			}
			if b > 1 && p >= 0.01 && math.Abs(eq1/simMean-1) > 0.25 {
				t.Errorf("rho=%v b=%d: mean delay %v vs eq. (1) %v: more than 25%% apart", rho, b, simMean, eq1)
			}
		}
	}
}

// TestKFoldPenalty tests SRTM 000 §2.1's reading of eq. (1) directly:
// "under the assumption of Poisson arrivals, splitting the token bucket
// k-ways yields at least a k-fold increase in access delay (e.g.,
// assuming r_l = r/k), and likely more". 400,000 seeded Poisson arrivals
// at load rho go to one bucket (r, b) and, each to a sub-bucket drawn
// uniformly at random (so each sub-stream is Poisson at lambda/k and
// lambda_l/r_l = lambda/r, the paper's matched case), to k sub-buckets
// (r/k, b/k); the mean delay of the split system over the one-bucket
// system's must be at least k (factor (ii), 1/(2 r_l) = k/(2r)) and
// above k by factor (i), P(U_l > b_l - 1) >= P(U > b - 1). The test
// asserts the measured ratio is at least 0.95 k (a margin for sampling
// noise near saturation, where the measured means move most) and above
// the ratio eq. (1) predicts within a factor of 2 either way (eq. (1) is
// approximate for b > 1, TestMD1AgainstSimulation); it logs both. Cases
// where the one bucket delays fewer than 1 in 1,000 messages are skipped
// for the assertion (their ratio is huge and noisy, not near k).
func TestKFoldPenalty(t *testing.T) {
	const n = 400_000
	const r = 1000.0 // tokens/s: 1 ms per token, exact in nanoseconds at r/k for k | 1000
	for ci, rho := range []float64{0.5, 0.8, 0.9, 0.95} {
		rng := rand.New(rand.NewSource(int64(100 + ci)))
		lambda := rho * r
		arr := make([]time.Duration, n)
		var now float64
		for i := range arr {
			now += rng.ExpFloat64() / lambda
			arr[i] = time.Duration(now * 1e9)
		}
		for _, k := range []int{2, 4, 8} {
			assign := make([]int, n)
			for i := range assign {
				assign[i] = rng.Intn(k)
			}
			for _, bl := range []int64{1, 2, 5} {
				b := bl * int64(k)
				one := Delays(arr, bucket.Rate{Tokens: 1000, Per: time.Second}, b)
				rates := make([]bucket.Rate, k)
				bursts := make([]int64, k)
				for l := range rates {
					rates[l] = bucket.Rate{Tokens: 1000 / int64(k), Per: time.Second}
					bursts[l] = bl
				}
				split, err := SplitDelays(arr, assign, rates, bursts)
				if err != nil {
					t.Fatal(err)
				}
				mOne, pOne := meanAndDelayed(one)
				mSplit, _ := meanAndDelayed(split)
				eqOne, err1 := MD1Delay(lambda, r, int(b))
				eqSplit, err2 := MD1Delay(lambda/float64(k), r/float64(k), int(bl))
				if err1 != nil || err2 != nil {
					t.Fatal(err1, err2)
				}
				ratio, eqRatio := mSplit/mOne, eqSplit/eqOne
				t.Logf("rho=%.2f k=%d b=%2d b_l=%d: mean delay one %.4g s, split %.4g s: ratio %.2f (k=%d; eq. (1) predicts %.2f); one bucket delays %.4f of messages",
					rho, k, b, bl, mOne, mSplit, ratio, k, eqRatio, pOne)
				if pOne < 0.001 {
					continue
				}
				if ratio < 0.95*float64(k) {
					t.Errorf("rho=%v k=%d b=%d: the split's mean delay is %.2f times the one bucket's, below the k-fold of §2.1", rho, k, b, ratio)
				}
				if ratio < eqRatio/2 || ratio > eqRatio*2 {
					t.Errorf("rho=%v k=%d b=%d: measured ratio %.2f is not within a factor 2 of eq. (1)'s %.2f", rho, k, b, ratio, eqRatio)
				}
			}
		}
	}
}

// meanAndDelayed is the mean of delays in seconds and the fraction that
// are above 0.
func meanAndDelayed(d []time.Duration) (meanSeconds, delayed float64) {
	var sum float64
	var c int
	for _, x := range d {
		sum += x.Seconds()
		if x > 0 {
			c++
		}
	}
	return sum / float64(len(d)), float64(c) / float64(len(d))
}
