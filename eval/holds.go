package eval

import (
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/tokenmesh/tokenmesh/sim"
	"github.com/tokenmesh/tokenmesh/workload"
)

// HoldStats is one strategy's permits in a run with holds (Options.Hold;
// sim.Config.Hold): the requests of a concurrency limit (strategy
// concurrency, 003's "concurrency" throttling) hold what they were granted
// for a service time, and what matters is how many are in flight at once
// per key against the limit N. Ours.
type HoldStats struct {
	// Permits is the number of requests that held a permit (admitted by a
	// strategy that hands out permits; 0 for a rate limit, which grants
	// none).
	Permits int `json:"permits"`
	// MaxInFlight is the most permits one key had held at one instant,
	// over the keys and the run (the limit N must bound it; a split can
	// hold more, by the strategy's stated bound).
	MaxInFlight int `json:"max_in_flight"`
	// MaxInFlightKey is a key that reached MaxInFlight (the first in key
	// order).
	MaxInFlightKey string `json:"max_in_flight_key,omitempty"`
	// MeanInFlight is the permits in flight per key, averaged over the
	// run's span (from the first request to the last release) and over the
	// keys that held any: the concurrency used, to set beside N.
	MeanInFlight float64 `json:"mean_in_flight"`
	// MeanHoldMs is the mean time a permit was held, from its grant to its
	// release or its expiry, milliseconds.
	MeanHoldMs float64 `json:"mean_hold_ms"`

	// The exact reference, for a strategy that hands out permits: one
	// semaphore of Limit permits per key that sees every request at its
	// arrival, admits it when fewer than Limit requests of its key are in
	// flight, and holds it for the request's own service time
	// (sim.DrawHolds: the same draw the strategy's admitted request held
	// for). It is to a concurrency limit what central's bucket is to a
	// rate limit. Absent (0) for a strategy that grants no permit.

	// Limit is N, permits: the strategy's limit parameter, else the rule's burst.
	Limit int64 `json:"limit,omitempty"`
	// ReferencePermits is the requests the semaphore admitted.
	ReferencePermits int `json:"reference_permits,omitempty"`
	// UsedPct is Permits in % of ReferencePermits: the capacity the
	// strategy used of what an exact semaphore would.
	UsedPct float64 `json:"used_pct,omitempty"`
	// Missed is the requests the semaphore admitted and the strategy
	// refused (its false rejections); Extra the ones it admitted and the
	// semaphore refused. Once decisions differ the two runs hold different
	// permits, so each also counts the other's knock-on decisions, as
	// false rejections against central do.
	Missed int `json:"missed,omitempty"`
	Extra  int `json:"extra,omitempty"`
}

// semaphore is the exact reference of a concurrency limit of n per key:
// request i (reqs in arrival order) is admitted when fewer than n
// requests of its key admitted before it are still held at its arrival,
// each held over [arrival, arrival + holds[i]) (a release at the instant
// of an arrival frees first).
func semaphore(reqs []workload.Request, holds []time.Duration, n int64) []bool {
	admitted := make([]bool, len(reqs))
	ends := map[string][]time.Duration{} // per key: the ends of the holds in flight
	for i, q := range reqs {
		live := ends[q.Key][:0]
		for _, e := range ends[q.Key] {
			if e > q.Arrival {
				live = append(live, e)
			}
		}
		if int64(len(live)) < n {
			admitted[i] = true
			live = append(live, q.Arrival+holds[i])
		}
		ends[q.Key] = live
	}
	return admitted
}

// compareSemaphore sets h's reference fields: the semaphore of n per key
// over reqs with holds, against the strategy's admissions.
func compareSemaphore(h *HoldStats, reqs []workload.Request, holds []time.Duration, n int64, allowed []bool) {
	ref := semaphore(reqs, holds, n)
	h.Limit = n
	for i, a := range ref {
		switch {
		case a:
			h.ReferencePermits++
			if !allowed[i] {
				h.Missed++
			}
		case allowed[i]:
			h.Extra++
		}
	}
	if h.ReferencePermits > 0 {
		h.UsedPct = round(100*float64(h.Permits)/float64(h.ReferencePermits), 2)
	}
}

// holdStats computes HoldStats from a run's outcomes over reqs (the same
// order): a permit is held over [HeldFrom, HeldUntil).
func holdStats(reqs []workload.Request, outs []sim.Outcome) *HoldStats {
	type edge struct {
		at    time.Duration
		delta int
	}
	byKey := map[string][]edge{}
	h := &HoldStats{}
	var held time.Duration
	var first, last time.Duration
	for i, o := range outs {
		if i == 0 || reqs[i].Arrival < first {
			first = reqs[i].Arrival
		}
		if o.HeldUntil <= o.HeldFrom {
			continue
		}
		h.Permits++
		held += o.HeldUntil - o.HeldFrom
		last = max(last, o.HeldUntil)
		k := reqs[i].Key
		byKey[k] = append(byKey[k], edge{o.HeldFrom, 1}, edge{o.HeldUntil, -1})
	}
	if h.Permits == 0 {
		return h
	}
	h.MeanHoldMs = round(float64(held)/float64(h.Permits)/float64(time.Millisecond), 3)
	for _, k := range slices.Sorted(maps.Keys(byKey)) {
		es := byKey[k]
		// a release at the instant of a grant frees first (the interval
		// is half-open)
		slices.SortFunc(es, func(a, b edge) int {
			if a.at != b.at {
				if a.at < b.at {
					return -1
				}
				return 1
			}
			return a.delta - b.delta
		})
		n := 0
		for _, e := range es {
			n += e.delta
			if n > h.MaxInFlight {
				h.MaxInFlight, h.MaxInFlightKey = n, k
			}
		}
	}
	if span := last - first; span > 0 {
		h.MeanInFlight = round(float64(held)/float64(span)/float64(len(byKey)), 3)
	}
	return h
}

// holdTable returns the permits table (runs with holds only): one row per
// result that has Holds.
func holdTable(rep *Report) (header []string, rows [][]string) {
	header = []string{"strategy", "permits", "max in flight (key)", "mean in flight per key", "mean hold ms", "N", "semaphore permits", "used %", "missed", "extra"}
	for _, r := range rep.Results {
		if r.Holds == nil {
			continue
		}
		h := r.Holds
		maxCell := strconv.Itoa(h.MaxInFlight)
		if h.MaxInFlightKey != "" {
			maxCell += " (" + h.MaxInFlightKey + ")"
		}
		ref := []string{"", "", "", "", ""}
		if h.Limit > 0 {
			ref = []string{strconv.FormatInt(h.Limit, 10), strconv.Itoa(h.ReferencePermits),
				strconv.FormatFloat(h.UsedPct, 'f', 2, 64), strconv.Itoa(h.Missed), strconv.Itoa(h.Extra)}
		}
		rows = append(rows, append([]string{r.Strategy, strconv.Itoa(h.Permits), maxCell,
			strconv.FormatFloat(h.MeanInFlight, 'f', 3, 64), strconv.FormatFloat(h.MeanHoldMs, 'f', 1, 64)}, ref...))
	}
	return header, rows
}

// holdLegend explains the permits table.
const holdLegend = "permits (a concurrency limit, with --hold): requests admitted by a strategy that hands out permits hold them for a service time drawn from --hold, released then or at their expiry; max in flight is the most one key held at once (the limit N bounds it), mean in flight is per key over the run; a rate limit grants no permit (0); the exact reference is one semaphore of N per key that sees every request at its arrival and holds it for the same service time: semaphore permits, used % (permits of the strategy in % of the semaphore's), missed (the semaphore admitted, the strategy refused) and extra (the reverse)"

// holdLimit is N of strategy's concurrency limit in a run with opts: its
// limit parameter ("concurrency.limit=10") when given and valid, else the
// rule's burst (the parameter's default).
func holdLimit(opts Options, strategy string) int64 {
	if v, ok := opts.Params.For(strategy).Values()["limit"]; ok {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil && n > 0 {
			return n
		}
	}
	return opts.Burst
}
