package eval

import (
	"fmt"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/sim"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/registry"
	"github.com/tokenmesh/tokenmesh/workload"
)

// This file exports the pieces of Run that other evaluators need (tokenmesh
// replay compares a live cluster's decisions with central's on the same
// trace): the reference decisions, one strategy's row built from its
// decisions, and the series for plots.

// Central returns the reference decisions on trace: one token bucket (rate,
// burst) per key for the whole cluster, every request decided at its arrival,
// in trace order: the decisions Run compares every strategy with (Run's
// central row). allowed[i] is request i's. Errors: a rate or burst the bucket
// rejects.
func Central(trace *workload.Trace, rate bucket.Rate, burst int64) ([]bool, error) {
	info, err := registry.Lookup("central")
	if err != nil {
		return nil, err
	}
	assign, err := workload.NewAssigner("roundrobin", 0)
	if err != nil {
		return nil, err
	}
	lat, err := sim.ParseLatency("1ms") // one node: no peer messages
	if err != nil {
		return nil, err
	}
	params, err := strategy.ParseParams(nil)
	if err != nil {
		return nil, err
	}
	res, err := sim.Run(trace, sim.Config{Name: info.Name, New: info.New, Nodes: 1, Rate: rate, Burst: burst,
		Params: params, Network: sim.Network{Latency: lat}, Assign: assign})
	if err != nil {
		return nil, err
	}
	allowed := make([]bool, len(res.Outcomes))
	for i, o := range res.Outcomes {
		if !o.Decided {
			return nil, fmt.Errorf("eval: central left request %d undecided", i)
		}
		allowed[i] = o.Allowed
	}
	return allowed, nil
}

// Score builds one strategy's row of a report from its decisions on reqs
// (allowed[i] false for undecided requests too), central's (see Central) and
// its decision latencies, with the metrics and rounding Run reports (Run
// builds its rows with it). Cost fields (messages, bytes, state, undecided,
// errors) are left for the caller. latencies is sorted in place.
func Score(name string, reqs []workload.Request, allowed, central []bool, ratePerSec float64, burst int64, latencies []time.Duration) Result {
	c := Compare(reqs, allowed, central)
	return Result{
		Strategy: name, Requests: c.Requests, Admitted: c.Admitted, Rejected: c.Rejected,
		Precision: c.Precision, ExcessAdmittedPct: round(c.ExcessPct, 4), ExcessAdmitted: c.ExcessAdmitted,
		FalseRejections:         c.FalseRejections,
		EnvelopeViolationTokens: round(EnvelopeViolation(reqs, allowed, ratePerSec, burst), 4),
		DecisionLatencyP50Ms:    ms(Percentile(latencies, 50)), DecisionLatencyP99Ms: ms(Percentile(latencies, 99)),
	}
}

// NewSeries returns the empty plot series of trace (Run's bins); Add fills
// one strategy's decisions in.
func NewSeries(trace *workload.Trace) *Series { return newSeries(trace) }

// Add records one strategy's decisions on reqs (the series' trace's
// requests) for the plots.
func (s *Series) Add(name string, reqs []workload.Request, allowed []bool) {
	s.add(name, reqs, allowed)
}

// ScoreShortfall sets r's ShortfallTokens, ShortfallPct and
// ShortfallAfterBirthPct: allowed's shortfall against central on reqs
// over windows of window (> 0; Shortfall, ShortfallAfterBirth), as Run
// sets them with Options.ShortfallWindow. allowed and central are indexed
// like reqs.
func ScoreShortfall(r *Result, reqs []workload.Request, allowed, central []bool, window time.Duration) {
	shortfall(r, reqs, allowed, central, window)
}

// AddShortfall records a strategy's shortfall per window of window (> 0)
// for the plots (shortfall.png, report.html), as Run does for every
// strategy but central.
func (s *Series) AddShortfall(name string, reqs []workload.Request, allowed, central []bool, window time.Duration) {
	s.addShortfall(name, ShortfallByWindow(reqs, allowed, central, window), window)
}
