package eval

import (
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/gdrl"
)

// Jain's fairness index of gdrl's performance indicators: GDRL's measure of
// convergence (001 §III-A, eq. (16): JFI(q(t)) = (sum_i q_i)^2 / (N sum_i
// q_i^2), between 1/N and 1, 1 when every node's indicator is the same;
// Figs. 4, 6 and 7 show it converging to about 1 after a change of demand).
// It applies to a strategy whose nodes expose a performance indicator per
// key (indicatorSource: gdrl); the report has it for those only.
//
// Ours: the paper has one aggregate (one key); here JFI is computed per key
// over the live nodes at every state sample of the simulator (every second
// of virtual time), for the keys some live node holds an explicit share of,
// and the cluster's JFI at that sample is the mean over those keys (a
// sample with no such key has none). The JFI convergence time after an
// event is the time from it to the first sample from which the JFI stays
// at or above JFIThreshold for Hold (ConvergenceSpec, 10 s), at or after
// the first sample below the threshold within Horizon (30 s) of the event,
// as for the admitted rate (convergence.go).

// JFIThreshold is the JFI at which the indicators count as equal: 0.99, as
// experiment/gdrlexp reads GDRL's Fig. 6 ("converge to the region very
// close to 1").
const JFIThreshold = 0.99

// indicatorSource is a strategy with per-key performance indicators
// (strategy/gdrl: Keys and Indicator).
type indicatorSource interface {
	Keys() []string
	Indicator(key string) float64
}

// JFI is Jain's fairness index of q (GDRL eq. (16)); 1 for an empty or
// all-zero vector (nothing is unequal): gdrl.JFI, the one the strategy
// and the GDRL experiments use.
func JFI(q []float64) float64 { return gdrl.JFI(q) }

// jfiSample is the cluster's JFI at one sample.
type jfiSample struct {
	at  time.Duration
	jfi float64
}

// jfiSampler collects the JFI at every sample (its observe is a
// sim.Config.Observe).
type jfiSampler struct {
	step    time.Duration // the sample interval (sim.Config.SampleEvery)
	samples []jfiSample
	q       []float64
}

// observe computes the JFI of live's indicators at now, if they have
// indicators: per key of the union of their keys (sorted, so the sum is
// the same every run), then the mean.
func (j *jfiSampler) observe(now time.Duration, live []strategy.Strategy) {
	var srcs []indicatorSource
	var keys []string
	for _, s := range live {
		src, ok := s.(indicatorSource)
		if !ok {
			return
		}
		srcs = append(srcs, src)
		keys = append(keys, src.Keys()...)
	}
	slices.Sort(keys)
	keys = slices.Compact(keys)
	if len(keys) == 0 {
		return
	}
	sum := 0.0
	for _, k := range keys {
		j.q = j.q[:0]
		for _, src := range srcs {
			j.q = append(j.q, src.Indicator(k))
		}
		sum += JFI(j.q)
	}
	j.samples = append(j.samples, jfiSample{now, sum / float64(len(keys))})
}

// JFIStats is the JFI of a strategy's performance indicators over a run
// (ConvergenceStats.JFI): its mean and 10th percentile over the samples,
// and how long after each fault and demand change it took to reach
// JFIThreshold and stay there for the hold (ConvergenceSpec.Hold).
type JFIStats struct {
	Samples     int             `json:"samples"`
	Mean        float64         `json:"mean"`
	P10         float64         `json:"p10"`
	AfterFaults ConvergenceDist `json:"after_faults"`
	AfterDemand ConvergenceDist `json:"after_demand_changes"`
}

// stats summarises the samples against the events; nil without samples.
func (j *jfiSampler) stats(faults, demand []time.Duration, hold, horizon time.Duration) *JFIStats {
	n := len(j.samples)
	if n == 0 {
		return nil
	}
	st := &JFIStats{Samples: n}
	vals := make([]float64, n)
	for i, s := range j.samples {
		vals[i] = s.jfi
		st.Mean += s.jfi
	}
	st.Mean = round(st.Mean/float64(n), 4)
	slices.Sort(vals)
	st.P10 = round(vals[min(max(int(math.Ceil(0.1*float64(n))), 1), n)-1], 4)
	st.AfterFaults = convergenceDist(j.timesAfter(faults, hold, horizon))
	st.AfterDemand = convergenceDist(j.timesAfter(demand, hold, horizon))
	return st
}

// timesAfter returns, per event, the time from it to the first sample, at
// t, from which every sample in [t, t+hold) is at or above JFIThreshold,
// at or after the first sample below it within horizon of the event (the
// event's own effect; ConvergenceSpec.Horizon), or at or after the event
// when there is none; Never if there is no such sample. The last sample
// counts for one step. Samples are in time order.
func (j *jfiSampler) timesAfter(events []time.Duration, hold, horizon time.Duration) []time.Duration {
	n := len(j.samples)
	// next[i]: the first sample i' >= i from which the samples stay at or
	// above the threshold for hold.
	run := make([]int, n+1) // the first sample from i on below the threshold (n: none)
	run[n] = n
	for i := n - 1; i >= 0; i-- {
		run[i] = i
		if j.samples[i].jfi >= JFIThreshold {
			run[i] = run[i+1]
		}
	}
	next := make([]int, n+1)
	next[n] = -1
	for i := n - 1; i >= 0; i-- {
		next[i] = next[i+1]
		end := run[i] // the first bad sample from i on, or n
		if end == i {
			continue
		}
		until := j.samples[n-1].at + j.step // good until the first bad sample, or the end
		if end < n {
			until = j.samples[end].at
		}
		if until-j.samples[i].at >= hold {
			next[i] = i
		}
	}
	out := make([]time.Duration, len(events))
	for k, e := range events {
		i, _ := slices.BinarySearchFunc(j.samples, e, func(s jfiSample, t time.Duration) int {
			if s.at < t {
				return -1
			}
			if s.at > t {
				return 1
			}
			return 0
		})
		if i < n && run[i] < n && j.samples[run[i]].at < e+horizon {
			i = run[i] // the first sample below the threshold within the horizon
		}
		if i >= n || next[i] < 0 {
			out[k] = Never
			continue
		}
		out[k] = j.samples[next[i]].at - e
	}
	return out
}

// jfiTable returns the JFI table: one row per result that has
// Convergence.JFI (none: no rows).
func jfiTable(rep *Report) (header []string, rows [][]string) {
	header = []string{"strategy", "samples", "JFI mean", "JFI p10", "faults", "never", "p50 s", "p90 s", "max s",
		"demand ch.", "never", "p50 s", "p90 s", "max s"}
	dist := func(d ConvergenceDist) []string {
		if d.Events == 0 {
			return []string{"0", "", "", "", ""}
		}
		return []string{strconv.Itoa(d.Events), strconv.Itoa(d.Never), convSeconds(d.MedianS), convSeconds(d.P90S), convSeconds(d.MaxS)}
	}
	for _, r := range rep.Results {
		if r.Convergence == nil || r.Convergence.JFI == nil {
			continue
		}
		j := r.Convergence.JFI
		row := []string{r.Strategy, strconv.Itoa(j.Samples), strconv.FormatFloat(j.Mean, 'f', 4, 64), strconv.FormatFloat(j.P10, 'f', 4, 64)}
		row = append(row, dist(j.AfterFaults)...)
		rows = append(rows, append(row, dist(j.AfterDemand)...))
	}
	return header, rows
}

// jfiLegend explains the JFI table.
const jfiLegend = "Jain's fairness index of the nodes' performance indicators (GDRL eq. (16); 1 = every node's indicator equal), per key over the live nodes at every second, averaged over the keys some node holds a share of; mean and 10th percentile over the samples, and after each fault and demand change the seconds until it is >= 0.99 and stays so for the hold, counted from its first drop below 0.99 within the horizon of the event if any (never: not before the samples ended)"
