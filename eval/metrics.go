package eval

import (
	"math"
	"slices"
	"time"

	"github.com/tokenmesh/tokenmesh/workload"
)

// Counts compares one strategy's decisions with central's on the same
// requests (docs/ARCHITECTURE.md, "Metrics").
type Counts struct {
	Requests        int
	Admitted        int // requests admitted
	Rejected        int // requests rejected (undecided ones included)
	Precision       *float64
	ExcessAdmitted  int // sum over keys of max(0, admitted - central's admitted), in tokens
	ExcessPct       float64
	FalseRejections int // requests rejected that central admitted
}

// Compare computes the decision metrics of allowed against central's
// decisions on the same requests (both indexed like reqs).
//
// precision is rejections by the strategy / rejections by central (thesis
// 002 §5.1.1): 1 when neither rejects anything, nil (undefined) when central
// rejects nothing and the strategy rejects something. Above 1 means the
// strategy rejected more than central.
func Compare(reqs []workload.Request, allowed, central []bool) Counts {
	c := Counts{Requests: len(reqs)}
	centralRejected, centralAdmittedTokens := 0, int64(0)
	diff := map[string]int64{} // admitted tokens: strategy - central, per key
	for i := range reqs {
		if allowed[i] {
			c.Admitted++
			diff[reqs[i].Key] += reqs[i].Tokens
		} else {
			c.Rejected++
		}
		if central[i] {
			centralAdmittedTokens += reqs[i].Tokens
			diff[reqs[i].Key] -= reqs[i].Tokens
			if !allowed[i] {
				c.FalseRejections++
			}
		} else {
			centralRejected++
		}
	}
	for _, d := range diff {
		if d > 0 {
			c.ExcessAdmitted += int(d)
		}
	}
	if centralAdmittedTokens > 0 {
		c.ExcessPct = 100 * float64(c.ExcessAdmitted) / float64(centralAdmittedTokens)
	}
	switch {
	case centralRejected > 0:
		p := float64(c.Rejected) / float64(centralRejected)
		c.Precision = &p
	case c.Rejected == 0:
		p := 1.0
		c.Precision = &p
	}
	return c
}

// EnvelopeViolation returns the largest amount, in tokens, by which the
// tokens admitted for one key in any interval [t, t+T] exceed b + r*T, over
// all keys (SRTM §1.1); 0 when every key conforms: workload.EnvelopeExcess,
// which has the details (the load generator uses it without the simulator).
func EnvelopeViolation(reqs []workload.Request, allowed []bool, ratePerSec float64, burst int64) float64 {
	return workload.EnvelopeExcess(reqs, allowed, ratePerSec, burst)
}

// Shortfall is a count-based measure of over-rejection (ours):
// per key and per window of length window, the tokens central admitted
// beyond the strategy's admitted tokens, summed over keys and windows:
//
//	shortfall = sum over (key, w) of max(0, central_k,w - admitted_k,w)
//
// where window w of a request at arrival t is floor((t - t0) / window), t0
// the earliest arrival in reqs, and a request counts its tokens in the
// window of its arrival. It returns the shortfall in tokens and central's
// admitted tokens (its denominator as a share). Unlike false rejections
// (requests central admitted and the strategy refused), it does not count
// a request refused while another request of the same key in the same
// window was admitted in its stead: on an overloaded key, a strategy that
// admits as many tokens as central in every window has shortfall 0
// whichever requests it picks. allowed and central are indexed like reqs;
// window must be positive (else 0, 0).
func Shortfall(reqs []workload.Request, allowed, central []bool, window time.Duration) (shortfall, centralTokens int64) {
	if window <= 0 || len(reqs) == 0 {
		return 0, 0
	}
	for _, w := range ShortfallByWindow(reqs, allowed, central, window) {
		shortfall += w
	}
	for i, r := range reqs {
		if central[i] {
			centralTokens += r.Tokens
		}
	}
	return shortfall, centralTokens
}

// ShortfallByWindow is Shortfall by window: element w is the sum over
// keys of max(0, central_k,w - admitted_k,w), tokens, for windows of
// length window from the earliest arrival in reqs; its elements sum to
// Shortfall's shortfall. It shows where a strategy's windowed shortfall
// comes from: the first window (the tokens a strategy holds when
// central's burst runs out), a change of load, or the steady swing
// (ours; issue 24's analyses, docs/EVALUATION.md). nil for a window <= 0
// or no requests; allowed and central are indexed like reqs.
func ShortfallByWindow(reqs []workload.Request, allowed, central []bool, window time.Duration) []int64 {
	if window <= 0 || len(reqs) == 0 {
		return nil
	}
	t0 := firstArrival(reqs)
	type cell struct {
		key string
		w   int64
	}
	diff := map[cell]int64{}
	var last int64
	for i, r := range reqs {
		c := cell{r.Key, int64((r.Arrival - t0) / window)}
		last = max(last, c.w)
		if central[i] {
			diff[c] += r.Tokens
		}
		if allowed[i] {
			diff[c] -= r.Tokens
		}
	}
	out := make([]int64, last+1)
	for c, d := range diff {
		out[c.w] += max(d, 0)
	}
	return out
}

// ShortfallAfterBirth is Shortfall without the cells (key, w) whose
// window w holds the key's first arrival, its birth: a strategy that
// holds tokens away from where they are used is short of them once, in
// the window where central's burst of a new key runs out, and what is
// left is the steady part, which a longer run does not dilute (ours;
// issue 24, docs/EVALUATION.md "regionlease: the 0.5% line and the run's
// length"). It returns the tokens short in the cells kept and central's
// admitted tokens in them (its denominator as a share). A key idle long
// enough to refill is not born again here. Windows as in Shortfall; 0, 0
// for a window <= 0 or no requests.
func ShortfallAfterBirth(reqs []workload.Request, allowed, central []bool, window time.Duration) (later, laterCentral int64) {
	if window <= 0 || len(reqs) == 0 {
		return 0, 0
	}
	t0 := firstArrival(reqs)
	windowOf := func(r workload.Request) int64 { return int64((r.Arrival - t0) / window) }
	born := map[string]int64{} // key -> the window of its first arrival
	for _, r := range reqs {
		if b, ok := born[r.Key]; !ok || windowOf(r) < b {
			born[r.Key] = windowOf(r)
		}
	}
	type cell struct {
		key string
		w   int64
	}
	return cellShortfall(reqs, allowed, central, func(_ int, r workload.Request) (cell, bool) {
		w := windowOf(r)
		return cell{r.Key, w}, w != born[r.Key]
	})
}

// cellShortfall sums, over the cells cellOf puts requests in, central's
// admitted tokens beyond the strategy's (a cell where the strategy
// admitted more counts 0), and returns it with central's admitted tokens
// in those cells; a request cellOf returns false for is left out.
// ShortfallAfterBirth's cells are (key, window) but a key's first window,
// regionShortfall's (key, region). allowed and central are indexed like
// reqs.
func cellShortfall[C comparable](reqs []workload.Request, allowed, central []bool, cellOf func(i int, r workload.Request) (C, bool)) (shortfall, centralTokens int64) {
	diff := map[C]int64{} // central's admitted tokens - the strategy's
	for i, r := range reqs {
		c, ok := cellOf(i, r)
		if !ok {
			continue
		}
		if central[i] {
			diff[c] += r.Tokens
			centralTokens += r.Tokens
		}
		if allowed[i] {
			diff[c] -= r.Tokens
		}
	}
	for _, d := range diff {
		shortfall += max(d, 0)
	}
	return shortfall, centralTokens
}

// Percentile returns the p-th percentile (0..100, nearest rank) of ds, or 0
// for none. It sorts ds.
func Percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	rank := int(math.Ceil(p / 100 * float64(len(ds))))
	return ds[min(max(rank, 1), len(ds))-1]
}
