package eval

import (
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/sim"
	"github.com/tokenmesh/tokenmesh/workload"
)

// MD1WorkAbove is P(U > x) for the unfinished work U of an M/D/1 queue at
// load rho = lambda/r (0 <= rho < 1), U and x counted in service times
// (tokens, for SRTM's token bucket: one token takes 1/r to refill). By
// PASTA it is the FCFS waiting time's distribution, Erlang's formula
// (the M/D/1 waiting time; SRTM §2.1 points to [40, Section 15.1]):
//
//	P(U <= x) = (1 - rho) * sum_{k=0}^{floor(x)} (rho*(k - x))^k / k! * exp(-rho*(k - x))
//
// The sum alternates, so it loses precision as x grows; for x > 60 it
// returns NaN. rho outside [0, 1) or a negative x: NaN (x < 0: 1).
func MD1WorkAbove(rho, x float64) float64 {
	switch {
	case x < 0:
		return 1
	case !(rho >= 0 && rho < 1) || x > 60 || math.IsNaN(x):
		return math.NaN()
	}
	sum := 0.0
	for k := 0; k <= int(math.Floor(x)); k++ {
		u := rho * (float64(k) - x) // <= 0
		lg, _ := math.Lgamma(float64(k + 1))
		term := math.Exp(-u - lg)
		if k > 0 {
			term *= math.Pow(u, float64(k))
		}
		sum += term
	}
	return min(max(1-(1-rho)*sum, 0), 1)
}

// MD1TokenBucketWait is SRTM's expected delay of a message in a token
// bucket (r, b) fed Poisson arrivals at lambda (SRTM §2.1, Proposition
// 1's Poisson case, eq. (1)): the bucket behaves as an M/D/1 queue of
// service time 1/r whose messages wait only when the unfinished work U
// they find exceeds b - 1, and
//
//	E[T] = 1/(2r) * P(U > b - 1) / (1 - lambda/r)
//
// (seconds, with lambda and r in tokens per second and b in tokens).
// Splitting (r, b) into k sub-token buckets (r/k, b/k), each fed lambda/k,
// multiplies 1/(2r) by k and raises P(U > b - 1): the DRL penalty. ok is
// false when there is no finite mean (lambda >= r) or the work term
// cannot be computed (MD1WorkAbove); b = 0 never admits (ok false).
func MD1TokenBucketWait(lambda, r float64, b int64) (seconds float64, ok bool) {
	if !(lambda >= 0) || !(r > 0) || b < 1 || lambda >= r {
		return 0, false
	}
	rho := lambda / r
	p := MD1WorkAbove(rho, float64(b-1))
	if math.IsNaN(p) {
		return 0, false
	}
	return p / (2 * r * (1 - rho)), true
}

// MD1Comparison sets a strategy's measured mean wait beside SRTM's
// prediction (MD1TokenBucketWait) for the buckets it holds, over the keys
// the prediction covers: those offered less than their bucket's rate over
// the trace (lambda_key < r; their rate is the key's tokens over the
// trace's span). For central each key has one bucket (r, b); for static
// each key's traffic is spread over N sub-token buckets (r/N, b_i) (SRTM
// §1.2; round-robin and hash assignment spread it evenly), each fed
// lambda_key/N, and the prediction is their mean. Keys offered at or
// above r have no finite mean wait (their M/D/1 queue is unstable) and are
// counted apart. Milliseconds.
type MD1Comparison struct {
	Buckets         string  `json:"buckets"`       // "(r, b)" or "(r/N, b_i)": the buckets the prediction is for
	Keys            int     `json:"keys"`          // keys with lambda < r, which the prediction covers
	UnstableKeys    int     `json:"unstable_keys"` // keys offered at or above r over the trace
	Requests        int     `json:"requests"`      // requests of the covered keys
	PredictedMeanMs float64 `json:"predicted_mean_ms"`
	// MeasuredMeanMs is the mean delay the strategy gave the admitted
	// requests of the covered keys (Admitted of Requests).
	MeasuredMeanMs float64 `json:"measured_mean_ms"`
	Admitted       int     `json:"admitted"`
}

// md1Compare is the MD1Comparison of a run of strategy (central or
// static; nil for others) over reqs at (r, b) on nodes, from its outcomes.
func md1Compare(strategy string, reqs []workload.Request, outs []sim.Outcome, r bucket.Rate, burst int64, nodes int) *MD1Comparison {
	if len(reqs) < 2 || (strategy != "central" && strategy != "static") {
		return nil
	}
	span := (reqs[len(reqs)-1].Arrival - reqs[0].Arrival).Seconds()
	if span <= 0 {
		return nil
	}
	n := 1
	c := &MD1Comparison{Buckets: "(r, b)"}
	if strategy == "static" {
		n = max(nodes, 1)
		c.Buckets = "(r/N, b_i)"
	}
	predicted, unstable, ok := md1PredictedWaits(reqs, span, r.PerSec(), burst, n)
	if !ok {
		return nil
	}
	c.UnstableKeys = unstable
	c.Keys = len(predicted)
	var pred float64
	var measured time.Duration
	for i, q := range reqs {
		w, ok := predicted[q.Key]
		if !ok {
			continue
		}
		c.Requests++
		pred += w
		if o := outs[i]; o.Decided && o.Allowed {
			c.Admitted++
			measured += o.Delay
		}
	}
	if c.Requests > 0 {
		c.PredictedMeanMs = round(1000*pred/float64(c.Requests), 3)
	}
	if c.Admitted > 0 {
		c.MeasuredMeanMs = ms(measured / time.Duration(c.Admitted))
	}
	return c
}

// md1PredictedWaits is SRTM's M/D/1 mean wait (MD1TokenBucketWait), in
// seconds, of every key of reqs offered below r over span seconds, on n
// buckets of (r/n, b_i) (the burst split as bucket.SplitBurst splits it;
// n = 1: one bucket of (r, b)), each taking 1/n of the key's requests:
// the mean over the n buckets. unstable counts the keys left out (offered
// at or above r). ok is false when the burst cannot be split n ways.
func md1PredictedWaits(reqs []workload.Request, span, rate float64, burst int64, n int) (predicted map[string]float64, unstable int, ok bool) {
	tokens := map[string]int64{}
	for _, q := range reqs {
		tokens[q.Key] += max(q.Tokens, 0)
	}
	predicted = map[string]float64{}
	for k, t := range tokens {
		lambda := float64(t) / span
		sum, stable := 0.0, true
		for i := 0; i < n && stable; i++ {
			bi, err := bucket.SplitBurst(burst, n, i)
			if err != nil {
				return nil, 0, false
			}
			var w float64
			w, stable = MD1TokenBucketWait(lambda/float64(n), rate/float64(n), bi)
			sum += w
		}
		if !stable {
			unstable++
			continue
		}
		predicted[k] = sum / float64(n)
	}
	return predicted, unstable, true
}

// md1Lines are the report's lines on SRTM's M/D/1 prediction, one per
// result with an MD1Comparison.
func md1Lines(rep *Report) []string {
	var out []string
	for _, r := range rep.Results {
		if r.Wait == nil || r.Wait.MD1 == nil {
			continue
		}
		c := r.Wait.MD1
		out = append(out, fmt.Sprintf("SRTM's M/D/1 prediction (Prop. 1, eq. (1); Poisson arrivals, no bound on the wait), %s on %s buckets: mean wait %s ms predicted over the %d keys offered below r (%d requests; %d keys at or above r left out), %s ms measured over their %d admitted requests",
			r.Strategy, c.Buckets, strconv.FormatFloat(c.PredictedMeanMs, 'f', 3, 64), c.Keys, c.Requests, c.UnstableKeys,
			strconv.FormatFloat(c.MeasuredMeanMs, 'f', 3, 64), c.Admitted))
	}
	return out
}
