package gdrl

import (
	"math"
	"time"

	"github.com/tokenmesh/tokenmesh/strategy"
)

// Indicators are the values of the indicator parameter (see New and the
// Indicator* constants).
var Indicators = []string{IndicatorFill, IndicatorSpare, IndicatorDiscard, IndicatorUtilisation, IndicatorResponse}

// Measured performance indicators (001 §I-A lists "mean response time,
// discard rate, utilisation" as q_i = f(D_i, C_i); ours: their measurement
// and scaling). Each node measures, per key and update interval, the
// tokens requested and the tokens its bucket refused, and filters the
// refused and admitted rates with the demand filter (alpha per interval,
// 001 §III-A). The value travels in the probe (GdrlShare.indicator) as
// the inputs of fill and spare do.
//
// The flow from j to i is eta * s * (q_i - q_j) (001 eq. (3) in the
// pairwise form of Theorem 2; towards the node whose indicator is larger,
// that is worse: more refused, more of its share used), where s turns the
// dimensionless difference into capacity: for discard the smaller demand
// of the ends that refuse (q ~ 1 - C/lambda below the demand, so -dq/dC =
// 1/lambda there and 0 at an end that refuses nothing: as for fill,
// Theorem 2's bound on the gain scales with lambda), the pair's smaller
// share for utilisation (q ~ lambda/C above the demand).
// No flow smaller than noise_band standard errors of the pair's relative
// demand noise times s is made. Unlike fill, no evidence of skew is asked
// for: under demand spread evenly over the nodes both ends measure the same
// indicator within the noise, and the update moves nothing.
//
// Mean response time (the third of §I-A, IndicatorResponse): a node
// decides a plain check at once, so only waiting mode (RequestWait) gives
// requests a wait in the node's queue (the reservations ahead of them, the
// DRL penalty of SRTM §2.1); for plain checks the indicator is the wait a
// reservation would have had (bucket.Bucket.DelayN), so that it is defined
// whatever the clients send. q is in seconds: the flow from j to i is
// eta * min(C_i, C_j) * (q_i - q_j) / max(q_i, q_j) (ours: near the
// demand the wait is about the deficit over C, so -dq/dC ~ q/C and the
// relative difference times the smaller share is the capacity that
// evens the waits; the flow is at most eta times the smaller share, so at
// eta <= 1/4 a step never gives away more than a quarter of it), 0 when
// both waits are 0.

// measuredIndicator reports whether the indicator in use is measured at
// the node (discard, utilisation) rather than modelled from the inputs.
func (g *GDRL) measuredIndicator() bool {
	return g.indicator == IndicatorDiscard || g.indicator == IndicatorUtilisation || g.indicator == IndicatorResponse
}

// measured is sh's measured indicator at this node: the discard rate
// refused/demand or the utilisation admitted/share, in [0, 1], or the
// mean response time in seconds (see IndicatorDiscard,
// IndicatorUtilisation, IndicatorResponse); 0 for a nil share or under the
// modelled indicators.
func (g *GDRL) measured(sh *share) float64 {
	if sh == nil {
		return 0
	}
	var q float64
	switch g.indicator {
	case IndicatorResponse:
		return sh.response // seconds, not capped at 1
	case IndicatorDiscard:
		q = sh.refused / math.Max(sh.demand, g.demandFloor)
	case IndicatorUtilisation:
		q = sh.admitted / math.Max(float64(sh.c), g.demandFloor)
	default:
		return 0
	}
	if math.IsNaN(q) {
		return 0
	}
	return math.Max(0, math.Min(1, q))
}

// measuredFlow is the capacity flow from j to i under a measured
// indicator and its noise (see above).
func (g *GDRL) measuredFlow(i, j side, eta float64) (f, sigma float64) {
	di, dj := math.Max(i.demand, g.demandFloor), math.Max(j.demand, g.demandFloor)
	if g.indicator == IndicatorResponse {
		return responseFlow(i, j, eta, g.demandFloor, math.Hypot(i.noise/di, j.noise/dj))
	}
	// Discard: -dq/dC is 1/lambda where the node refuses (q > 0) and 0
	// where it refuses nothing, so the bound of Theorem 2 takes the
	// smaller demand of the ends that refuse (an idle end's floor would
	// make every flow from it negligible).
	s := math.Min(di, dj)
	switch {
	case i.ind > 0 && j.ind <= 0:
		s = di
	case j.ind > 0 && i.ind <= 0:
		s = dj
	}
	if g.indicator == IndicatorUtilisation {
		s = math.Max(math.Min(float64(i.c), float64(j.c)), g.demandFloor)
	}
	return eta * s * (i.ind - j.ind), eta * s * math.Hypot(i.noise/di, j.noise/dj)
}

// countRefused counts a request's tokens as refused when it was not
// allowed (the measured indicators).
func (g *GDRL) countRefused(sh *share, tokens int64, allowed bool) {
	if !allowed && sh.refTokens < 1<<62-tokens {
		sh.refTokens += tokens
	}
}

// responseFlow is the capacity flow from j to i under the response
// indicator (see above) and its noise: rel is the pair's relative demand
// noise, floor the smallest scale.
func responseFlow(i, j side, eta, floor, rel float64) (f, sigma float64) {
	top := math.Max(i.ind, j.ind)
	s := eta * math.Max(math.Min(float64(i.c), float64(j.c)), floor)
	if top <= 0 {
		return 0, s * rel
	}
	return s * (i.ind - j.ind) / top, s * rel
}

// countWait counts a request's wait (seconds; ok false: no wait would be
// enough) for the response indicator, capped at idle.
func (g *GDRL) countWait(sh *share, wait time.Duration, ok bool) {
	if g.indicator != IndicatorResponse {
		return
	}
	if !ok || wait > g.idle {
		wait = g.idle
	}
	sh.waitSum += wait.Seconds()
	sh.waitN++
}

// closeWait folds the interval's mean wait into sh's response estimate
// (alpha per interval with requests) and starts the next interval.
func (g *GDRL) closeWait(sh *share) {
	if sh.waitN > 0 {
		sh.response = (1-g.alpha)*sh.response + g.alpha*sh.waitSum/float64(sh.waitN)
	}
	sh.waitSum, sh.waitN = 0, 0
}

// countReserved counts a waiting-mode request's wait (response): the
// reservation's delay when admitted, else the wait it would have needed
// (bucket.Bucket.DelayN, taking nothing).
func (g *GDRL) countReserved(sh *share, req strategy.Request, d strategy.Decision) {
	if g.indicator != IndicatorResponse {
		return
	}
	if d.Allowed {
		g.countWait(sh, d.Delay, true)
		return
	}
	wait, ok := sh.bkt.DelayN(req.Arrival, req.Tokens*g.perToken)
	g.countWait(sh, wait, ok && req.Tokens <= g.cfg.Burst)
}
