// Package srtm plans how a topic's publishers are spread over message brokers
// and how its token bucket (r, b) is split into sub-token buckets (r_l, b_l),
// after Li et al., "SRTM".
//
// Two halves:
//
//   - delay analysis (§2.1, Appendix A): the exact per-message token-bucket
//     delay of any arrival sequence in waiting mode (eq. (2)), the same for a
//     split bucket, and the paper's closed form eq. (1) for Poisson arrivals;
//   - the Load Distributor (§4.2-4.3): concentration, max-min quotas,
//     correlation-aware assignment of publishers, online fitting, and the
//     YAML files `tokenmesh plan` reads.
//
// Each docstring says which part is the paper's and which is ours.
package srtm

import (
	"fmt"
	"math"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
)

// gd1 is the G/D/1 queue behind a token bucket (Appendix A.1): one message is
// one unit of work, served at the token rate. Work is counted in the same
// ticks as bucket.Bucket: one message is per ticks and the queue drains
// tokens ticks per nanosecond, so the unfinished work is exact.
type gd1 struct {
	tokens, per int64
	limit       int64 // b*per: unfinished work (including the arrival) that passes undelayed
	u           int64 // unfinished work just after the last arrival, ticks
	last        time.Duration
	first       time.Duration // the first arrival: the bucket was full until then
	started     bool
}

func newGD1(r bucket.Rate, b int64) (gd1, error) {
	if err := r.Validate(); err != nil {
		return gd1{}, err
	}
	if r.Tokens == 0 {
		return gd1{}, fmt.Errorf("rate %v is zero: delayed messages would wait forever", r)
	}
	if b < 1 {
		return gd1{}, fmt.Errorf("burst %d is below 1: no message could ever pass", b)
	}
	if _, err := bucket.New(r, b, 0); err != nil {
		return gd1{}, err
	}
	return gd1{tokens: r.Tokens, per: int64(r.Per), limit: b * int64(r.Per)}, nil
}

// arrive feeds one message at time a and returns its delay, eq. (2):
// d(a_i) = max{0, U(a_i^-) + 1 - b} in units of one token's time 1/r.
func (q *gd1) arrive(a time.Duration) time.Duration {
	if q.started && a > q.last && q.u > 0 {
		q.drain(int64(a - q.last))
	}
	// A backwards arrival (bucket.Bucket's late decisions) passes only on
	// tokens held throughout since it (the bucket was full before the
	// first arrival), and otherwise waits from the last arrival.
	var late, spareLate int64
	if q.started && a < q.last {
		late, spareLate = int64(q.last-a), int64(q.last-max(a, q.first))
	}
	if !q.started {
		q.first = a
	}
	if !q.started || a > q.last {
		q.last = a
	}
	q.started = true
	if q.u > math.MaxInt64-q.per {
		q.u = math.MaxInt64 // saturate: a backlog of ~1e18 ticks is not a real workload
	} else {
		q.u += q.per
	}
	excess := q.u - q.limit
	if late > 0 {
		if excess > 0 || spareLate > -excess/q.tokens { // spareLate*tokens > -excess: not spared since a
			ns := ceilDiv(excess, q.tokens)
			q.rounded(ns)
			return time.Duration(late + ns)
		}
		return 0 // the tokens were there throughout: no wait
	}
	if excess <= 0 {
		return 0
	}
	ns := (excess-1)/q.tokens + 1
	q.rounded(ns)
	return time.Duration(ns)
}

// rounded accounts for a message that waits ns whole nanoseconds from the
// last arrival (rounded up from the instant its token is there): a bucket
// full before then loses the refill beyond the burst meanwhile, so the
// work the message leaves behind is at least ns of refill plus its own
// token (bucket.Bucket.ReserveN's cap, which keeps every window within
// b + r*T; ours, the paper's delays are real numbers).
func (q *gd1) rounded(ns int64) {
	if ns > 0 {
		q.u = max(q.u, ns*q.tokens+q.per)
	}
}

// drain lowers the backlog u by dt ticks of refill, to 0 at least.
func (q *gd1) drain(dt int64) {
	if dt >= q.u/q.tokens+1 {
		q.u = 0
		return
	}
	q.u -= dt * q.tokens
	if q.u < 0 {
		q.u = 0
	}
}

// ceilDiv is a/b rounded up, for b > 0 and any a.
func ceilDiv(a, b int64) int64 {
	if a >= 0 {
		return (a + b - 1) / b
	}
	return -((-a) / b)
}

// Delays returns the token-bucket delay of every message of an arrival
// sequence at one bucket (r, b) in waiting (shaping) mode: each message takes
// one token, messages that find no full token wait in FCFS order, and the
// bucket is full before the first arrival.
//
// Paper (Appendix A, eq. (2)): the bucket is a G/D/1 queue with service time
// 1/r, and message i waits d_i = max{0, U(a_i^-) + 1/r - b/r}, where U(a_i^-)
// is the unfinished work it finds. Ours: the work is kept in integer ticks
// (as bucket.Bucket does), so delays are exact, rounded up to the nanosecond;
// the result equals bucket.Bucket.ReserveN(a_i, 1) message by message.
//
// arrivals are times since any epoch and should be non-decreasing; an
// arrival earlier than the previous one is served as bucket.Bucket serves
// a late decision: it takes only tokens held throughout since its time,
// and otherwise waits from the previous arrival (its delay, counted from
// its own time, includes the lateness). The result has one delay per
// arrival (the message leaves at arrivals[i]+delay[i]). It is nil
// when (r, b) cannot drive a bucket: an invalid or zero rate, b < 1, or a
// burst too large for the rate's resolution (see bucket.New).
func Delays(arrivals []time.Duration, r bucket.Rate, b int64) []time.Duration {
	q, err := newGD1(r, b)
	if err != nil {
		return nil
	}
	out := make([]time.Duration, len(arrivals))
	for i, a := range arrivals {
		out[i] = q.arrive(a)
	}
	return out
}

// SplitDelays returns the per-message delays when the bucket is split into
// k = len(rates) sub-token buckets (rates[l], bursts[l]) and message i goes
// to sub-bucket assign[i] (SRTM §1.2, §2.1 and Appendix A.1: "the original
// stream of arrivals is split arbitrarily across the sub-token buckets").
// Each sub-bucket is an independent bucket as in Delays.
//
// Proposition 1 (§2.1, proved in Appendix A.2) says that when the rates sum
// to r and the bursts to b, the running sum of these delays is never below
// that of Delays(arrivals, r, b), whatever the assignment; the package tests
// check it. (Ours: delays are rounded up to the nanosecond, so the
// comparison is exact when every rate's time per token is a whole number of
// nanoseconds; otherwise the one-bucket sum may gain up to 1 ns per message
// from rounding.)
//
// Errors name the offending input: len(assign) != len(arrivals),
// len(bursts) != len(rates), an assignment outside [0, k), or a sub-bucket
// that cannot drive a bucket (zero rate, burst < 1, ...).
func SplitDelays(arrivals []time.Duration, assign []int, rates []bucket.Rate, bursts []int64) ([]time.Duration, error) {
	if len(assign) != len(arrivals) {
		return nil, fmt.Errorf("assign has %d entries for %d arrivals", len(assign), len(arrivals))
	}
	if len(bursts) != len(rates) {
		return nil, fmt.Errorf("%d rates but %d bursts", len(rates), len(bursts))
	}
	qs := make([]gd1, len(rates))
	for l := range rates {
		q, err := newGD1(rates[l], bursts[l])
		if err != nil {
			return nil, fmt.Errorf("sub-bucket %d: %w", l, err)
		}
		qs[l] = q
	}
	out := make([]time.Duration, len(arrivals))
	for i, a := range arrivals {
		l := assign[i]
		if l < 0 || l >= len(qs) {
			return nil, fmt.Errorf("assign[%d] = %d is not a sub-bucket in [0, %d)", i, l, len(qs))
		}
		out[i] = qs[l].arrive(a)
	}
	return out, nil
}

// MD1Delay returns the mean token-bucket delay, in seconds, of Poisson
// arrivals at rate lambda (messages/s) into a bucket with token rate r
// (tokens/s) and burst b, by the paper's eq. (1) (§2.1):
//
//	E[T] = 1/(2r) * P_{M/D/1}(U > b-1) / (1 - lambda/r)
//
// where U is the unfinished work (in tokens) of the M/D/1 queue with arrival
// rate lambda and service time 1/r. Eq. (1) is exact for b = 1 (it is then
// the M/D/1 mean wait, Pollaczek-Khinchine); for b > 1 it is the paper's
// approximation, which treats the conditional excess of U as having the
// b = 1 mean. The tests measure how close it is to the exact simulation.
//
// P(U > b-1), ours (the paper defers it to [40, §15.1]): with unit service
// time, an arrival that finds j >= 1 messages in the M/D/1 system finds
// U = (j-1) + R with R in (0, 1] the residual service, so for an integer n,
// U <= n exactly when j <= n and P(U > b-1) = P(N >= b), with N the
// number in system (PASTA: as seen by an arrival = time average = at
// departures, for M/G/1). N's distribution {pi_j} is the standard M/G/1
// embedded-chain one with a_k = e^{-rho} rho^k / k! arrivals per service
// (rho = lambda/r), computed by the level-crossing recursion
//
//	pi_0 = 1 - rho
//	pi_{j+1} a_0 = pi_0 abar_j + sum_{i=1..j} pi_i abar_{j-i+1},  abar_m = sum_{k>m} a_k,
//
// (rate of crossings up between levels j and j+1 = rate down; cf. Tijms, A
// First Course in Stochastic Models, §4.5, and Kleinrock, Queueing Systems
// Vol. 1, §5.6). Every term is positive, so unlike the alternating
// closed-form series (Erlang's / Crommelin's) it loses no precision for large
// b. The recursion stops once the remaining tail is below 1e-16.
//
// Errors: lambda negative or not finite, r not positive or not finite,
// b < 1, or lambda >= r (the queue is unstable and the mean delay infinite).
func MD1Delay(lambda, r float64, b int) (meanDelaySeconds float64, err error) {
	switch {
	case math.IsNaN(lambda) || math.IsInf(lambda, 0) || lambda < 0:
		return 0, fmt.Errorf("arrival rate lambda=%v msg/s must be a finite non-negative number", lambda)
	case math.IsNaN(r) || math.IsInf(r, 0) || r <= 0:
		return 0, fmt.Errorf("token rate r=%v tokens/s must be a finite positive number", r)
	case b < 1:
		return 0, fmt.Errorf("burst b=%d must be at least 1", b)
	case lambda >= r:
		return 0, fmt.Errorf("arrival rate lambda=%v msg/s is not below the token rate r=%v tokens/s: the mean delay is infinite", lambda, r)
	}
	if lambda == 0 {
		return 0, nil
	}
	rho := lambda / r
	return 1 / (2 * r) * MD1TailN(rho, b) / (1 - rho), nil
}

// MD1TailN returns P(N >= n) for the number in system N of a stable M/D/1
// queue with load rho in [0, 1), which equals P(U > n-1) for its unfinished
// work U in units of the service time (see MD1Delay for the derivation).
// It returns 1 for n <= 0 and NaN for rho outside [0, 1).
func MD1TailN(rho float64, n int) float64 {
	if !(rho >= 0 && rho < 1) {
		return math.NaN()
	}
	if n <= 0 {
		return 1
	}
	if rho == 0 {
		return 0
	}
	// a_k for k = 0..K; beyond K they are below the float64 range.
	a := []float64{math.Exp(-rho)}
	for k := 1; ; k++ {
		v := a[k-1] * rho / float64(k)
		if v == 0 || k > 400 {
			break
		}
		a = append(a, v)
	}
	K := len(a) - 1
	abar := make([]float64, K+1) // abar[m] = sum_{k>m} a_k; 0 for m >= K
	for m := K - 1; m >= 0; m-- {
		abar[m] = abar[m+1] + a[m+1]
	}
	ab := func(m int) float64 {
		if m > K {
			return 0
		}
		return abar[m]
	}
	pi := []float64{1 - rho}
	sum := pi[0]
	for j := 0; j+1 < n; j++ {
		v := pi[0] * ab(j)
		lo := j + 1 - K
		if lo < 1 {
			lo = 1
		}
		for i := lo; i <= j; i++ {
			v += pi[i] * ab(j-i+1)
		}
		v /= a[0]
		pi = append(pi, v)
		sum += v
		if 1-sum < 1e-16 {
			return 0
		}
	}
	if sum >= 1 {
		return 0
	}
	return 1 - sum
}
