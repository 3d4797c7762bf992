package loadgen

// Key choice (uniform or Zipf) and the per-key account of admissions
// against a token bucket's envelope (Options.RecordAdmissions,
// WindowExcess): peers on realistic keys, with accuracy in the same
// table.

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"time"

	"github.com/tokenmesh/tokenmesh/workload"
)

// keyPicker draws a check's key: uniformly from keys, or, with cdf set,
// key i with probability cdf[i] - cdf[i-1] (cdf ascending, last 1). It is
// read-only once built, shared by the workers (each with its own rng).
type keyPicker struct {
	keys []string
	cdf  []float64
}

// newKeyPicker builds the picker of keys: uniform when zipfS is 0, else
// Zipf: key i (from 0) with probability proportional to (i+1)^-zipfS.
func newKeyPicker(keys []string, zipfS float64) *keyPicker {
	p := &keyPicker{keys: keys}
	if zipfS > 0 && len(keys) > 1 {
		p.cdf = ZipfCDF(len(keys), zipfS)
	}
	return p
}

// ZipfCDF returns the cumulative distribution of Zipf's law over n keys
// with exponent s: element i is P(key <= i), key k (from 0) drawn with
// probability (k+1)^-s / H(n, s); the last element is exactly 1.
func ZipfCDF(n int, s float64) []float64 {
	cdf := make([]float64, n)
	sum := 0.0
	for i := range cdf {
		sum += math.Pow(float64(i+1), -s)
		cdf[i] = sum
	}
	for i := range cdf {
		cdf[i] /= sum
	}
	cdf[n-1] = 1
	return cdf
}

// pick draws one key; with a single key (or uniform keys) it draws as
// drawKey does.
func (p *keyPicker) pick(rng *rand.Rand) string {
	if p.cdf == nil {
		return drawKey(p.keys, rng)
	}
	u := rng.Float64()
	i := sort.SearchFloat64s(p.cdf, u) // first i with cdf[i] >= u
	if i >= len(p.keys) {
		i = len(p.keys) - 1
	}
	return p.keys[i]
}

// Admission is one admitted check of a run with Options.RecordAdmissions:
// its key, its tokens, and when the load generator saw the answer, on its
// own clock, from the start of the measured Duration. The decision was
// taken between the call's send and At, so a window's count can be off by
// what one call's latency moves across a window's edge.
type Admission struct {
	At     time.Duration
	Key    string
	Tokens int64
}

// Excess is the account of admissions against a token bucket (rate r,
// burst b) per key: one key may be admitted at most b + r*T tokens in any
// interval of length T.
type Excess struct {
	// Window is T, the length of the fixed windows counted (from the start
	// of the measured Duration: [0, T), [T, 2T), ...).
	Window time.Duration `json:"window"`
	// Worst is the largest excess of one key in one window, tokens
	// admitted above b + r*T (max over keys and windows); 0: none above.
	Worst float64 `json:"worst_window_excess"`
	// Sum is the excess summed over every key and window (tokens admitted
	// above b + r*T in total, windows within the bound counting 0).
	Sum float64 `json:"excess_sum"`
	// Keys is how many keys had a window above b + r*T.
	Keys int `json:"keys_over"`
	// Sliding is the largest excess of one key over b + r*T' in any
	// interval of any length T' (workload.EnvelopeExcess on the same log):
	// stricter than the fixed windows, and more sensitive to the latency
	// that separates a decision from the load generator's clock.
	Sliding float64 `json:"sliding_excess"`
}

// WindowExcess counts adm per key and fixed window of length window and
// returns the excess over b + r*window (ratePerS = r, burst = b). adm
// need not be sorted; its order is not changed. window must be positive
// (else the zero Excess).
func WindowExcess(adm []Admission, ratePerS float64, burst int64, window time.Duration) Excess {
	e := Excess{Window: window}
	if window <= 0 || len(adm) == 0 {
		return e
	}
	type cell struct {
		key string
		w   int64
	}
	counts := map[cell]int64{}
	for _, a := range adm {
		w := int64(a.At / window)
		if a.At < 0 {
			w = -1 - int64((-a.At-1)/window) // floor for times before the start
		}
		counts[cell{a.Key, w}] += a.Tokens
	}
	bound := float64(burst) + ratePerS*window.Seconds()
	over := map[string]bool{}
	for c, n := range counts {
		if x := float64(n) - bound; x > 1e-9 {
			e.Sum += x
			e.Worst = max(e.Worst, x)
			over[c.key] = true
		}
	}
	e.Keys = len(over)
	sorted := slices.Clone(adm)
	slices.SortStableFunc(sorted, func(a, b Admission) int { return cmp.Compare(a.At, b.At) })
	reqs := make([]workload.Request, len(sorted))
	allowed := make([]bool, len(sorted))
	for i, a := range sorted {
		reqs[i] = workload.Request{Arrival: a.At, Key: a.Key, Tokens: a.Tokens}
		allowed[i] = true
	}
	e.Sliding = workload.EnvelopeExcess(reqs, allowed, ratePerS, burst)
	return e
}
