package replay

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/tokenmesh/tokenmesh/eval"
	"github.com/tokenmesh/tokenmesh/workload"
)

// Live describes the replays of a report: the part of the setup the
// simulator's report has no field for.
type Live struct {
	Cluster     string  `json:"cluster"` // "processes" (localcluster) or "in-process"
	Nodes       int     `json:"nodes"`
	Speed       float64 `json:"speed"`
	DurationSec float64 `json:"duration_s,omitempty"` // the trace was cut to its first DurationSec; 0: whole
	RuleRatePS  float64 `json:"rule_rate_per_s"`      // the served rule's rate, per wall second
	LateAfterMs float64 `json:"late_after_ms"`
	// EdgeTimes: each request carried its due time as the time it reached
	// the edge (Options.EdgeTimes); false: the nodes stamped it on arrival.
	EdgeTimes bool `json:"edge_times"`
	// Regions are the nodes' regions as --regions reads them ("eu:1,us:1";
	// empty: none) and WANLatency the delay of a peer frame between
	// regions, wall time, as --wan-latency reads it.
	Regions    string    `json:"regions,omitempty"`
	WANLatency string    `json:"wan_latency,omitempty"`
	Runs       []RunInfo `json:"runs"`
}

// RunInfo is one strategy's replay facts.
type RunInfo struct {
	Strategy      string  `json:"strategy"`
	WallSec       float64 `json:"wall_s"`
	LateSends     int     `json:"late_sends"`
	MaxLatenessMs float64 `json:"max_lateness_ms"`
	Errors        int     `json:"errors"`
	FirstError    string  `json:"first_error,omitempty"`
	BytesError    string  `json:"bytes_error,omitempty"`
	// Canonicalized counts decisions moved between identical requests
	// (same key, arrival, tokens) before scoring: see Result.Canonicalized.
	Canonicalized int      `json:"canonicalized_decisions"`
	Events        []string `json:"events,omitempty"`
}

// Report is eval's report (the same JSON fields as `tokenmesh sim --json`)
// plus the live facts. eval.WriteTable(&r.Report) and friends print it; the
// facts are summarised in Setup.Scenario for them.
type Report struct {
	eval.Report
	Live Live `json:"live"`
}

// NewReport builds the report of runs (one per strategy, in order) over
// trace: central's row first, computed from central (eval.Central), then
// one row per run. setup is copied as is but for Latency, Loss and
// Scenario, which describe the live replay. With setup.ShortfallWindowS
// > 0 every row gets its shortfall against central over windows of that
// many seconds of trace time (eval.ScoreShortfall), and the plots the
// runs' shortfall per window, as tokenmesh sim --shortfall-window.
func NewReport(trace *workload.Trace, setup eval.Setup, live Live, central []bool, runs []*Result) *Report {
	reqs := trace.Requests
	rep := &Report{Live: live}
	rep.Input = eval.Input{Name: trace.Name, Requests: len(reqs), Keys: trace.Keys(), SpanSec: trace.Span().Seconds(), Skipped: trace.Skipped}
	rep.Series = eval.NewSeries(trace)
	c := eval.Score("central", reqs, central, central, setup.RatePerSec, setup.Burst, nil)
	// Central is computed from the trace, not run: it decides every
	// request alone and sends nothing, but has no state or latency to
	// measure.
	c.LocalDecisionPct = 100
	c.NotMeasured = []string{"state_bytes_peak", "decision_latency_p50_ms", "decision_latency_p99_ms"}
	window := time.Duration(math.Round(setup.ShortfallWindowS * float64(time.Second)))
	if window > 0 {
		eval.ScoreShortfall(&c, reqs, central, central, window)
	}
	rep.Results = append(rep.Results, c)
	rep.Series.Add("central", reqs, central)
	var notes []string
	for _, r := range runs {
		row := r.Row
		if window > 0 {
			eval.ScoreShortfall(&row, reqs, r.allowed, central, window)
			rep.Series.AddShortfall(row.Strategy, reqs, r.allowed, central, window)
		}
		rep.Results = append(rep.Results, row)
		rep.Series.Add(row.Strategy, reqs, r.allowed)
		info := RunInfo{Strategy: r.Row.Strategy, WallSec: round3(r.Wall.Seconds()), LateSends: r.Late,
			MaxLatenessMs: round3(float64(r.MaxLateness) / float64(time.Millisecond)), Errors: r.Errors,
			FirstError: r.FirstError, BytesError: r.BytesError, Canonicalized: r.Canonicalized, Events: r.EventNames()}
		rep.Live.Runs = append(rep.Live.Runs, info)
		note := fmt.Sprintf("%s: wall %.1f s, %d late sends", info.Strategy, info.WallSec, info.LateSends)
		if r.Errors > 0 {
			note += fmt.Sprintf(", %d errors", r.Errors)
		}
		if len(r.Applied) > 0 {
			note += ", " + strings.Join(info.Events, ", ")
		}
		if r.BytesError != "" {
			note += ", peer traffic not measured"
		}
		notes = append(notes, note)
	}
	setup.Latency, setup.Loss, setup.Duplicate, setup.Reorder = eval.LiveLatency, 0, 0, 0
	cut := ""
	if live.DurationSec > 0 {
		cut = fmt.Sprintf(", first %g s of the trace", live.DurationSec)
	}
	stamps := "stamped by the nodes"
	if live.EdgeTimes {
		stamps = "edge times sent"
	}
	where := ""
	if live.Regions != "" {
		where = " in regions " + live.Regions
		if live.WANLatency != "" {
			where += " (" + live.WANLatency + " between them)"
		}
	}
	setup.Scenario = fmt.Sprintf("live %s cluster of %d nodes%s at speed %gx%s, %s (central simulated); %s",
		live.Cluster, live.Nodes, where, live.Speed, cut, stamps, strings.Join(notes, "; "))
	rep.Setup = setup
	return rep
}

func round3(v float64) float64 { return math.Round(v*1000) / 1000 }
