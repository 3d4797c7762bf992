package eval

import (
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/tokenmesh/tokenmesh/sim"
	"github.com/tokenmesh/tokenmesh/workload"
)

// Convergence time, the third metric of the CRDT thesis (§3.5, "Convergence
// time": how long it takes the system to converge; the thesis reads it off
// its monitor as the time until every delta state and message queue is
// empty, §4.3.1). The thesis' measure is a state that stops changing after
// the last request; ours is measured on decisions, after every event of a
// run, so that it applies to every strategy (a strategy without delta
// states has no queues to empty) and says what a user sees: how long after
// a fault or a change of demand the cluster again admits, per key, what the
// exact central limiter admits.
//
// Definitions (ours; the seed names the metric, not a formula):
//
//   - Time is cut into bins of ConvergenceSpec.Bin (1 s) from the first
//     arrival of the trace. The admitted rate is measured over a sliding
//     window of Window (10 s, a whole number of bins) that starts on a bin
//     boundary.
//   - The window starting at bin j is within tolerance when
//     sum over keys k of |A_k - C_k| <= Tolerance * sum over k of C_k
//     (Tolerance 1%), A_k and C_k the tokens of key k the strategy and
//     central admitted in the window (by arrival time). Errors of opposite
//     sign on two keys do not cancel. A window in which central admits
//     nothing is never within: agreement is shown on traffic, and a quiet
//     stretch of the trace, where every strategy agrees by doing nothing,
//     shows no convergence.
//   - The cluster has converged at bin j when the windows starting at j,
//     j+1, ..., j+Hold/Bin-1 are all within (it stays within for Hold, 10
//     s). Only whole windows are measured (none runs past the trace's
//     last bin), so an event less than Window + Hold - Bin before the end
//     of the trace cannot be measured: ConvergenceEvents leaves it out and
//     counts it (ConvergenceSetup.Late).
//   - After an event at time e, the convergence time is t_j - e for the
//     first bin j at which the cluster has converged, at or after the
//     first window out of tolerance that starts within Horizon (30 s) of
//     the event (t_j = origin + j*Bin >= e): an event's effect on the
//     decisions may show only after a failure detector's delay or a few
//     gossip rounds, and is measured from there. Without such a window it
//     is the first bin at or after e at which the cluster has converged: 0
//     up to one bin's rounding. None: it never converged before the trace
//     ended.
//
// Events (ConvergenceEvents):
//
//   - fault: every event of the run's scenario (crash, restart, partition,
//     heal, cut, ...; Setup.Faults), at its time.
//   - demand change: a demand window of DemandWindow (10 s, from the first
//     arrival) in which some key's offered tokens at least doubled or fell
//     to half or less against the window before, by more than the key's
//     limit over the window (rate * DemandWindow tokens): the key's demand
//     moved by more than all it may be given, so a limiter has to move its
//     decisions (start or stop rejecting, move shares) to keep up. The event
//     is at the start of the window; several keys changing in one window
//     are one event.
type ConvergenceSpec struct {
	Bin          time.Duration // resolution of the times, and the window's step (1 s)
	Window       time.Duration // the window the admitted rate is measured over (10 s), a multiple of Bin
	Hold         time.Duration // how long the rate must stay within tolerance (10 s), a multiple of Bin
	Tolerance    float64       // 0.01: within 1% of central's admitted tokens in the window
	DemandWindow time.Duration // the windows offered tokens are compared over (10 s), a multiple of Bin
	DemandFactor float64       // 2: a change is a doubling or a halving ...
	Horizon      time.Duration // how long after an event its effect may first show (30 s), a multiple of Bin
}

// DefaultConvergence is the spec every sim report uses.
var DefaultConvergence = ConvergenceSpec{Bin: time.Second, Window: 10 * time.Second, Hold: 10 * time.Second,
	Tolerance: 0.01, DemandWindow: 10 * time.Second, DemandFactor: 2, Horizon: 30 * time.Second}

// ConvergenceSetup is the spec and the events a report's convergence times
// were measured on (Setup.Convergence).
type ConvergenceSetup struct {
	BinS          float64 `json:"bin_s"`
	WindowS       float64 `json:"window_s"`
	HoldS         float64 `json:"hold_s"`
	TolerancePct  float64 `json:"tolerance_pct"`
	DemandWindowS float64 `json:"demand_window_s"`
	DemandFactor  float64 `json:"demand_factor"`
	HorizonS      float64 `json:"horizon_s"`
	// FaultEvents and DemandChanges count the events measured (the same
	// for every strategy: they are the scenario's and the trace's); Late
	// the events of either kind too close to the trace's end to measure
	// (Measurable), left out.
	FaultEvents   int `json:"fault_events"`
	DemandChanges int `json:"demand_changes"`
	Late          int `json:"late_events,omitempty"`
}

// ConvergenceDist is the distribution of one strategy's convergence times
// after one kind of event, in seconds. Percentiles are nearest-rank over
// all Events, an event that never converged counting as infinitely long:
// a percentile that falls on one is null (never), and so is Max when
// Never > 0. Without events every percentile is null and Events is 0.
type ConvergenceDist struct {
	Events  int      `json:"events"`
	Never   int      `json:"never"` // events after which the run never converged
	MedianS *float64 `json:"median_s"`
	P90S    *float64 `json:"p90_s"`
	MaxS    *float64 `json:"max_s"`
}

// ConvergenceStats is one strategy's convergence times (Result.Convergence),
// after faults and after demand changes.
type ConvergenceStats struct {
	Faults ConvergenceDist `json:"after_faults"`
	Demand ConvergenceDist `json:"after_demand_changes"`
	// The windows' deviation, sum_k |A_k - C_k| / sum_k C_k in %, over
	// the windows (every bin's, ConvergenceSpec) in which central admitted
	// something: its median and 90th percentile (nearest rank), and the
	// share of those windows within the tolerance (in %). What the
	// convergence times are measured against: a strategy whose median
	// deviation is above the tolerance rarely converges at all.
	DeviationP50Pct float64 `json:"deviation_p50_pct"`
	DeviationP90Pct float64 `json:"deviation_p90_pct"`
	WithinPct       float64 `json:"within_pct"`
	// JFI is Jain's fairness index of the strategy's performance
	// indicators and its convergence (jfi.go; GDRL eq. (16)), for a
	// strategy that has indicators (gdrl); absent otherwise.
	JFI *JFIStats `json:"jfi,omitempty"`
}

// Never is what ConvergenceTimes returns for an event after which the run
// never converged.
const Never time.Duration = -1

// ConvergenceEvents returns the fault times of sc (its events in order)
// and the demand changes of reqs (ascending), as spec defines them, for a
// limit of ratePerSec tokens per second per key, less those too close to
// the end of reqs to be measured (Measurable), which it counts in late.
func ConvergenceEvents(reqs []workload.Request, sc *sim.Scenario, ratePerSec float64, spec ConvergenceSpec) (faults, demand []time.Duration, late int) {
	keep := func(e time.Duration, to []time.Duration) []time.Duration {
		if Measurable(reqs, spec, e) {
			return append(to, e)
		}
		late++
		return to
	}
	if sc != nil {
		for _, e := range sc.Events {
			faults = keep(e.At, faults)
		}
	}
	for _, e := range DemandChanges(reqs, ratePerSec, spec) {
		demand = keep(e, demand)
	}
	return faults, demand, late
}

// Measurable reports whether the convergence after an event at e can be
// measured on reqs: the Hold/Bin whole windows that start from the first
// bin at or after e all end by the trace's last bin.
func Measurable(reqs []workload.Request, spec ConvergenceSpec, e time.Duration) bool {
	if len(reqs) == 0 || spec.Bin <= 0 {
		return false
	}
	origin := firstArrival(reqs)
	nbins := int64(0)
	for _, r := range reqs {
		nbins = max(nbins, int64((r.Arrival-origin)/spec.Bin)+1)
	}
	wb, hb := max(1, int64(spec.Window/spec.Bin)), max(1, int64(spec.Hold/spec.Bin))
	return firstBin(origin, e, spec.Bin)+hb-1 < nbins-wb+1
}

// firstBin is the index of the first bin starting at or after e.
func firstBin(origin, e, bin time.Duration) int64 {
	if e <= origin {
		return 0
	}
	return int64((e - origin + bin - 1) / bin)
}

// DemandChanges returns the starts of the demand windows of reqs in which
// some key's offered tokens changed by spec's definition (see
// ConvergenceSpec): O_m >= factor*O_{m-1} or factor*O_m <= O_{m-1}, and
// |O_m - O_{m-1}| > ratePerSec * DemandWindow, O_m the key's tokens in
// window m. Window m starts at origin + m*DemandWindow, origin the first
// arrival; m >= 1. Ascending.
func DemandChanges(reqs []workload.Request, ratePerSec float64, spec ConvergenceSpec) []time.Duration {
	if len(reqs) == 0 || spec.DemandWindow <= 0 {
		return nil
	}
	origin := firstArrival(reqs)
	type cell struct {
		key string
		m   int64
	}
	offered := map[cell]int64{}
	last := int64(0)
	for _, r := range reqs {
		m := int64((r.Arrival - origin) / spec.DemandWindow)
		offered[cell{r.Key, m}] += r.Tokens
		last = max(last, m)
	}
	floor := ratePerSec * spec.DemandWindow.Seconds()
	changed := make([]bool, last+2)
	for c, o := range offered {
		// Window c.m against the one before (a rise from 0 included), and
		// the window after when the key is absent from it (a drop to 0).
		if c.m >= 1 && demandChanged(offered[cell{c.key, c.m - 1}], o, floor, spec.DemandFactor) {
			changed[c.m] = true
		}
		if _, ok := offered[cell{c.key, c.m + 1}]; !ok && c.m+1 <= last && demandChanged(o, 0, floor, spec.DemandFactor) {
			changed[c.m+1] = true
		}
	}
	var out []time.Duration
	for m := int64(1); m <= last; m++ {
		if changed[m] {
			out = append(out, origin+time.Duration(m)*spec.DemandWindow)
		}
	}
	return out
}

// demandChanged: cur against prev doubled or halved (factor) by more than
// floor tokens.
func demandChanged(prev, cur int64, floor, factor float64) bool {
	p, c := float64(prev), float64(cur)
	if math.Abs(c-p) <= floor {
		return false
	}
	return c >= factor*p || factor*c <= p
}

// ConvergenceTimes returns, for each event time, how long after it the
// cluster's admitted tokens per key came back within spec's tolerance of
// central's and stayed there (see ConvergenceSpec), or Never. allowed and
// central are the strategy's and central's decisions, indexed like reqs.
func ConvergenceTimes(reqs []workload.Request, allowed, central []bool, events []time.Duration, spec ConvergenceSpec) []time.Duration {
	if len(reqs) == 0 || spec.Bin <= 0 {
		out := make([]time.Duration, len(events))
		for i := range out {
			out[i] = Never // no traffic shows convergence
		}
		return out
	}
	origin := firstArrival(reqs)
	next, bad, _ := convergedFrom(reqs, allowed, central, spec, origin)
	return timesAfter(next, bad, origin, events, spec)
}

// timesAfter is ConvergenceTimes from convergedFrom's next and bad: from
// the first window out of tolerance that starts within Horizon of the
// event (or from the event when there is none), the first window start at
// which the cluster has converged.
func timesAfter(next, bad []int, origin time.Duration, events []time.Duration, spec ConvergenceSpec) []time.Duration {
	out := make([]time.Duration, len(events))
	hz := int64(spec.Horizon / spec.Bin)
	for i, e := range events {
		j := firstBin(origin, e, spec.Bin)
		if j >= int64(len(next)) {
			out[i] = Never
			continue
		}
		if b := int64(bad[j]); b < int64(len(next)) && b < j+hz {
			j = b // the event's effect shows here: converge after it
		}
		if next[j] < 0 {
			out[i] = Never
			continue
		}
		out[i] = origin + time.Duration(next[j])*spec.Bin - e
	}
	return out
}

// convergedFrom returns, for every window start j, the first window start
// j' >= j at which the cluster has converged (next; -1: none) and the
// first window j' >= j out of tolerance (bad; len(bad): none), and the
// relative deviation sum_k |A_k - C_k| / sum_k C_k of every window where
// central admitted something, in window order.
func convergedFrom(reqs []workload.Request, allowed, central []bool, spec ConvergenceSpec, origin time.Duration) (next, bad []int, devs []float64) {
	bins := binDiffs(reqs, allowed, central, spec.Bin, origin)
	wb := max(1, int(spec.Window/spec.Bin))
	hb := max(1, int(spec.Hold/spec.Bin))
	within, devs := bins.windows(wb, spec.Tolerance)
	next, bad = convergedAfter(within, hb)
	return next, bad, devs
}

// binnedDiffs are a run's decisions per bin of a ConvergenceSpec: central's
// admitted tokens, and each request decided otherwise than central's signed
// difference (strategy - central, in tokens) for its key (keys numbered
// from 0 in order of first mismatch; nkeys of them).
type binnedDiffs struct {
	centralTok []int64
	diffs      [][]keyDiff
	nkeys      int
}

// keyDiff is one mismatched request's tokens, signed, for key number key.
type keyDiff struct {
	key int
	d   int64
}

// binDiffs bins reqs by arrival (bins of length bin from origin).
func binDiffs(reqs []workload.Request, allowed, central []bool, bin, origin time.Duration) binnedDiffs {
	nbins := 0
	for _, r := range reqs {
		nbins = max(nbins, int((r.Arrival-origin)/bin)+1)
	}
	out := binnedDiffs{centralTok: make([]int64, nbins), diffs: make([][]keyDiff, nbins)}
	keys := map[string]int{}
	for i, r := range reqs {
		b := int((r.Arrival - origin) / bin)
		if central[i] {
			out.centralTok[b] += r.Tokens
		}
		if allowed[i] == central[i] {
			continue
		}
		k, ok := keys[r.Key]
		if !ok {
			k = len(keys)
			keys[r.Key] = k
		}
		d := r.Tokens
		if central[i] {
			d = -d
		}
		out.diffs[b] = append(out.diffs[b], keyDiff{k, d})
	}
	out.nkeys = len(keys)
	return out
}

// windows slides a window of wb bins over b, one bin at a time, for every
// whole window j (starting at bin j): within[j] when central admitted
// something in it and sum_k |A_k - C_k| <= tolerance * sum_k C_k, and the
// deviation sum_k |A_k - C_k| / sum_k C_k of each window where central
// admitted something, in window order.
func (b binnedDiffs) windows(wb int, tolerance float64) (within []bool, devs []float64) {
	nbins := len(b.centralTok)
	nw := max(0, nbins-wb+1)      // whole windows
	sum := make([]int64, b.nkeys) // per key, strategy - central in the window
	var dev, cen int64            // sum of |sum[k]|, central's tokens in the window
	add := func(bin int, sign int64) {
		cen += sign * b.centralTok[bin]
		for _, x := range b.diffs[bin] {
			old := sum[x.key]
			sum[x.key] += sign * x.d
			dev += abs64(sum[x.key]) - abs64(old)
		}
	}
	for bin := 0; bin < min(wb, nbins); bin++ {
		add(bin, 1)
	}
	within = make([]bool, nw)
	for j := 0; j < nw; j++ {
		within[j] = cen > 0 && float64(dev) <= tolerance*float64(cen)
		if cen > 0 {
			devs = append(devs, float64(dev)/float64(cen))
		}
		if j+1 < nw {
			add(j, -1)
			add(j+wb, 1)
		}
	}
	return within, devs
}

// convergedAfter is, for every window j of within, the first window j' >=
// j that starts hb windows within in a row (next; -1: none) and the first
// window j' >= j not within (bad; len(within): none).
func convergedAfter(within []bool, hb int) (next, bad []int) {
	nw := len(within)
	run := make([]int, nw+1) // windows within in a row from j
	for j := nw - 1; j >= 0; j-- {
		if within[j] {
			run[j] = run[j+1] + 1
		}
	}
	next = make([]int, nw+1)
	next[nw] = -1
	bad = make([]int, nw+1)
	bad[nw] = nw
	for j := nw - 1; j >= 0; j-- {
		next[j] = next[j+1]
		if run[j] >= hb {
			next[j] = j
		}
		bad[j] = bad[j+1]
		if !within[j] {
			bad[j] = j
		}
	}
	return next[:nw], bad[:nw]
}

func abs64(v int64) int64 {
	if v < 0 {
		return -v
	}
	return v
}

func firstArrival(reqs []workload.Request) time.Duration {
	t := reqs[0].Arrival
	for _, r := range reqs {
		t = min(t, r.Arrival)
	}
	return t
}

// convergenceDist summarises convergence times (Never counted as longer
// than any).
func convergenceDist(times []time.Duration) ConvergenceDist {
	d := ConvergenceDist{Events: len(times)}
	if len(times) == 0 {
		return d
	}
	s := slices.Clone(times)
	for i, t := range s {
		if t == Never {
			s[i] = time.Duration(math.MaxInt64)
			d.Never++
		}
	}
	slices.Sort(s)
	at := func(p float64) *float64 {
		rank := int(math.Ceil(p / 100 * float64(len(s))))
		t := s[min(max(rank, 1), len(s))-1]
		if t == time.Duration(math.MaxInt64) {
			return nil
		}
		v := round(t.Seconds(), 3)
		return &v
	}
	d.MedianS, d.P90S, d.MaxS = at(50), at(90), at(100)
	return d
}

// Convergence is one strategy's ConvergenceStats: its convergence times
// after the fault and demand-change events (ConvergenceEvents), against
// central's decisions, and the distribution of its windows' deviation.
func Convergence(reqs []workload.Request, allowed, central []bool, faults, demand []time.Duration, spec ConvergenceSpec) *ConvergenceStats {
	if len(reqs) == 0 || spec.Bin <= 0 {
		return &ConvergenceStats{Faults: convergenceDist(ConvergenceTimes(reqs, allowed, central, faults, spec)),
			Demand: convergenceDist(ConvergenceTimes(reqs, allowed, central, demand, spec))}
	}
	origin := firstArrival(reqs)
	next, bad, devs := convergedFrom(reqs, allowed, central, spec, origin)
	st := &ConvergenceStats{
		Faults: convergenceDist(timesAfter(next, bad, origin, faults, spec)),
		Demand: convergenceDist(timesAfter(next, bad, origin, demand, spec)),
	}
	if len(devs) > 0 {
		slices.Sort(devs)
		q := func(p float64) float64 {
			rank := int(math.Ceil(p / 100 * float64(len(devs))))
			return round(100*devs[min(max(rank, 1), len(devs))-1], 2)
		}
		st.DeviationP50Pct, st.DeviationP90Pct = q(50), q(90)
		for _, d := range devs {
			if d <= spec.Tolerance {
				st.WithinPct++
			}
		}
		st.WithinPct = round(100*st.WithinPct/float64(len(devs)), 2)
	}
	return st
}

// convergenceSetup is spec and the event counts, for Setup.Convergence.
func convergenceSetup(spec ConvergenceSpec, faults, demand, late int) *ConvergenceSetup {
	return &ConvergenceSetup{BinS: spec.Bin.Seconds(), WindowS: spec.Window.Seconds(), HoldS: spec.Hold.Seconds(),
		TolerancePct: round(100*spec.Tolerance, 4), DemandWindowS: spec.DemandWindow.Seconds(),
		DemandFactor: spec.DemandFactor, HorizonS: spec.Horizon.Seconds(), FaultEvents: faults, DemandChanges: demand, Late: late}
}

// convSeconds formats a convergence percentile: seconds, or "never".
func convSeconds(v *float64) string {
	if v == nil {
		return "never"
	}
	return strconv.FormatFloat(*v, 'f', 1, 64)
}

// convergenceTable returns the convergence table: one row per result that
// has Convergence (none: no rows).
func convergenceTable(rep *Report) (header []string, rows [][]string) {
	header = []string{"strategy", "faults", "never", "p50 s", "p90 s", "max s",
		"demand ch.", "never", "p50 s", "p90 s", "max s", "dev. p50 %", "dev. p90 %", "within %"}
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) }
	dist := func(d ConvergenceDist) []string {
		if d.Events == 0 {
			return []string{"0", "", "", "", ""}
		}
		return []string{strconv.Itoa(d.Events), strconv.Itoa(d.Never), convSeconds(d.MedianS), convSeconds(d.P90S), convSeconds(d.MaxS)}
	}
	for _, r := range rep.Results {
		c := r.Convergence
		if c == nil {
			continue
		}
		row := append([]string{r.Strategy}, dist(c.Faults)...)
		row = append(row, dist(c.Demand)...)
		rows = append(rows, append(row, f(c.DeviationP50Pct), f(c.DeviationP90Pct), f(c.WithinPct)))
	}
	return header, rows
}

// convergenceLegend explains the convergence table, with rep's spec.
func convergenceLegend(rep *Report) string {
	s := rep.Setup.Convergence
	if s == nil {
		s = convergenceSetup(DefaultConvergence, 0, 0, 0)
	}
	return "convergence time (the CRDT thesis §3.5): after each fault (scenario event) and each demand change (a " +
		num(s.DemandWindowS) + " s window in which some key's offered tokens at least doubled or halved, by more than rate x " +
		num(s.DemandWindowS) + " s), the time until the admitted tokens per key over a sliding " + num(s.WindowS) +
		" s window are within " + num(s.TolerancePct) + "% of central's (sum over keys of |strategy - central| <= " +
		num(s.TolerancePct) + "% of central's) and stay so for " + num(s.HoldS) + " s, counted from the first window out of it within " +
		num(s.HorizonS) + " s of the event if any (the event's effect), in seconds (" + num(s.BinS) +
		" s resolution); never: not before the trace ended (percentiles count those as longest); dev.: that deviation over every window where central admitted something, within %: the share of those windows within " +
		num(s.TolerancePct) + "%"
}
