package gdrl

import "math"

// Indicators are the values of the indicator parameter (see New and the
// Indicator* constants).
var Indicators = []string{IndicatorFill, IndicatorSpare, IndicatorDiscard, IndicatorUtilisation}

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
// Mean response time (the third of §I-A) is not offered: a node decides a
// plain check at once, so there is no queue whose delay would measure
// anything; only waiting mode (RequestWait) gives requests a delay (the
// reservations ahead of them, the DRL penalty of SRTM §2.1), and an
// indicator defined only for waiting-mode requests would be 0 wherever
// clients send plain checks.

// measuredIndicator reports whether the indicator in use is measured at
// the node (discard, utilisation) rather than modelled from the inputs.
func (g *GDRL) measuredIndicator() bool {
	return g.indicator == IndicatorDiscard || g.indicator == IndicatorUtilisation
}

// measured is sh's measured indicator at this node, in [0, 1]: the
// discard rate refused/demand or the utilisation admitted/share (see
// IndicatorDiscard, IndicatorUtilisation); 0 for a nil share or under the
// modelled indicators.
func (g *GDRL) measured(sh *share) float64 {
	if sh == nil {
		return 0
	}
	var q float64
	switch g.indicator {
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
