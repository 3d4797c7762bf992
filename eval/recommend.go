package eval

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/workload"
)

// This file is the evaluator's answer : which strategy, with
// which parameters, meets given accuracy bounds at the lowest cost
// (Recommend), and the notes every report carries so that a reader does
// not over-read it: what the assignment policy flatters (AssignNote) and
// what a precision other than 1 means in words (PrecisionNotes). Ours.

// Bounds are the accuracy a recommendation must meet, against central.
type Bounds struct {
	// MaxExcessPct bounds Result.ExcessAdmittedPct (% of central's
	// admitted tokens).
	MaxExcessPct float64 `json:"max_excess_pct"`
	// MaxFalseRejectionsPct bounds false rejections as % of the requests
	// central admitted.
	MaxFalseRejectionsPct float64 `json:"max_false_rejections_pct"`
	// MaxEnvelopeTokens bounds Result.EnvelopeViolationTokens.
	MaxEnvelopeTokens float64 `json:"max_envelope_tokens"`
	// MaxShortfallPct, when set, bounds Result.ShortfallPct (% of
	// central's admitted tokens) in place of MaxFalseRejectionsPct for the
	// results that have one (a run with a shortfall window): on an
	// overloaded key false rejections count the requests that lost a race
	// to the ones admitted in their stead (40% of a distributed scheme's,
	// TestShortfallRationale), the shortfall how many tokens were refused.
	// nil: false rejections bound every result.
	MaxShortfallPct *float64 `json:"max_shortfall_pct,omitempty"`
}

// overRejection is r's over-rejection as b bounds it: its shortfall % and
// b's bound on it when both are set, else its false rejections (% of
// central's admitted requests) and that bound; phrase states the bound
// for the recommendation's line.
func (b Bounds) overRejection(r Result, centralAdmitted int) (value, bound float64, phrase string) {
	if b.MaxShortfallPct != nil && r.ShortfallPct != nil {
		return *r.ShortfallPct, *b.MaxShortfallPct, "shortfall <= " + num(*b.MaxShortfallPct) + "% of central's admitted tokens"
	}
	return falseRejectionsPct(r, centralAdmitted), b.MaxFalseRejectionsPct,
		"false rejections <= " + num(b.MaxFalseRejectionsPct) + "% of central's admitted"
}

// Recommendation is Recommend's answer; Line is the verdict the report
// ends with, followed by the Next steps.
type Recommendation struct {
	Bounds   Bounds `json:"bounds"`
	Strategy string `json:"strategy,omitempty"` // "" when none meets the bounds
	Params   string `json:"params,omitempty"`   // "name=value,..." of Strategy; "" for defaults
	Closest  string `json:"closest,omitempty"`  // when none meets: the one nearest the bounds
	Line     string `json:"line"`
	// Next are the commands to run next (tokenmesh replay, serve), set by
	// the caller, which knows its command line; the reports print them
	// after Line.
	Next []Step `json:"next,omitempty"`
}

// Step is one thing to do next: why, in words, and the command.
type Step struct {
	Why     string `json:"why"`
	Command string `json:"command"`
}

// NoneMeetsStep is the step after a recommendation that names no strategy
// within the bounds: the closest one's parameters, to try some, or looser
// bounds.
func NoneMeetsStep(closest string, b Bounds) Step {
	over := "--max-false-rejections"
	if b.MaxShortfallPct != nil {
		over = "--max-shortfall"
	}
	return Step{Why: "no strategy meets the bounds: try " + closest + "'s parameters (--param " + closest + ".NAME=VALUE), or looser bounds (--max-excess, " + over + ", --max-envelope)",
		Command: "tokenmesh strategies " + closest}
}

// falseRejectionsPct is r's false rejections as % of the requests central
// admitted (0 when central admitted none).
func falseRejectionsPct(r Result, centralAdmitted int) float64 {
	if centralAdmitted == 0 {
		return 0
	}
	return 100 * float64(r.FalseRejections) / float64(centralAdmitted)
}

// bytesTie is how close, as a fraction of the fewest peer bytes per
// request among the strategies within the bounds, another strategy's
// bytes must be to count as the same cost in Recommend (plus
// bytesTieAbs, for runs that send almost nothing): then the decision
// latency decides. Without it a byte-level difference no deployment
// would see picked the slower of two strategies (the sample access log
// on 3 nodes: regionlease at 37.0 B/req and p99 4 ms over lease at 37.4
// and 2 ms). Ours.
const (
	bytesTie    = 0.05
	bytesTieAbs = 0.5 // bytes per request
)

// Recommend picks, among rep's strategies other than central (the
// reference, one bucket for the whole cluster) and the concurrency limits
// (compared with their own exact reference, HoldStats), those within b, and of
// them the cheapest: those within 5% plus 0.5 bytes (bytesTie) of the fewest
// peer bytes per request, and of these the lowest p99 and p50 decision
// latency, then the fewest bytes, then name. When none is within b it names the
// closest: the one whose worst ratio of metric to bound is smallest (a
// bound of 0 counts any excess over it as infinitely far). params are the
// run's parameters ("strategy.name=value"), reported for the pick.
func Recommend(rep *Report, b Bounds, params strategy.Params) *Recommendation {
	rec := &Recommendation{Bounds: b}
	if len(rep.Results) < 2 {
		rec.Line = "recommendation: no strategy besides central was run"
		return rec
	}
	centralAdmitted := rep.Results[0].Admitted
	rated := slices.DeleteFunc(slices.Clone(rep.Results[1:]), permitLimit)
	if len(rated) == 0 {
		rec.Line = "recommendation: none: every strategy run besides central is a concurrency limit, which central's bucket does not measure; compare it with the exact semaphore in the permits table (used %, missed, extra)"
		return rec
	}
	_, _, over := b.overRejection(rated[0], centralAdmitted)
	bounds := fmt.Sprintf("excess <= %s%%, %s, envelope violation <= %s tokens", num(b.MaxExcessPct), over, num(b.MaxEnvelopeTokens))
	var ok []Result
	var names []string
	for _, r := range rated {
		names = append(names, r.Strategy)
		over, bound, _ := b.overRejection(r, centralAdmitted)
		if r.ExcessAdmittedPct <= b.MaxExcessPct && over <= bound && r.EnvelopeViolationTokens <= b.MaxEnvelopeTokens {
			ok = append(ok, r)
		}
	}
	describe := func(r Result) string {
		measured := func(json, v string) string {
			if slices.Contains(r.NotMeasured, json) {
				return "n/a"
			}
			return v
		}
		shortfall := ""
		if r.ShortfallPct != nil {
			shortfall = ", shortfall " + num(round(*r.ShortfallPct, 3)) + "%"
		}
		return fmt.Sprintf("excess %s%%, false rej. %s%%%s, envelope %s tokens, %s B/req, p99 %s ms, local %s",
			num(round(r.ExcessAdmittedPct, 3)), num(round(falseRejectionsPct(r, centralAdmitted), 3)), shortfall, num(r.EnvelopeViolationTokens),
			measured("bytes_per_request", num(r.BytesPerRequest)), measured("decision_latency_p99_ms", num(r.DecisionLatencyP99Ms)),
			measured("local_decision_pct", num(r.LocalDecisionPct)+"%"))
	}
	if len(ok) > 0 {
		best := cheapest(ok)
		rec.Strategy, rec.Params = best.Strategy, paramList(params.For(best.Strategy))
		shown := rec.Params
		if shown == "" {
			shown = "default parameters"
		}
		rec.Line = fmt.Sprintf("recommendation: %s (%s) meets %s at the lowest cost of the %d that do (%s)",
			best.Strategy, shown, bounds, len(ok), describe(best))
		return rec
	}
	closest, dist := rated[0], -1.0
	for _, r := range rated {
		over, bound, _ := b.overRejection(r, centralAdmitted)
		d := max(ratio(r.ExcessAdmittedPct, b.MaxExcessPct), ratio(over, bound), ratio(r.EnvelopeViolationTokens, b.MaxEnvelopeTokens))
		if dist < 0 || d < dist {
			closest, dist = r, d
		}
	}
	rec.Closest = closest.Strategy
	rec.Line = fmt.Sprintf("recommendation: none of %s meets %s; closest: %s (%s)",
		strings.Join(names, ", "), bounds, closest.Strategy, describe(closest))
	return rec
}

// cheapest is Recommend's pick among ok (not empty): of the results whose
// bytes per request are within bytesTie and bytesTieAbs of the fewest,
// the one with the lowest p99, then p50, then bytes, then name.
func cheapest(ok []Result) Result {
	fewest := slices.MinFunc(ok, func(x, y Result) int { return cmp.Compare(x.BytesPerRequest, y.BytesPerRequest) }).BytesPerRequest
	tied := slices.DeleteFunc(slices.Clone(ok), func(r Result) bool {
		return r.BytesPerRequest > fewest*(1+bytesTie)+bytesTieAbs
	})
	return slices.MinFunc(tied, func(x, y Result) int {
		return cmp.Or(cmp.Compare(x.DecisionLatencyP99Ms, y.DecisionLatencyP99Ms),
			cmp.Compare(x.DecisionLatencyP50Ms, y.DecisionLatencyP50Ms),
			cmp.Compare(x.BytesPerRequest, y.BytesPerRequest),
			strings.Compare(x.Strategy, y.Strategy))
	})
}

// permitLimit reports whether r is a concurrency limit's (it held permits
// and has the exact semaphore beside it, HoldStats): Recommend leaves it
// out, since its bounds are central's bucket's.
func permitLimit(r Result) bool { return r.Holds != nil && r.Holds.Limit > 0 }

// ratio is v as a multiple of bound (1 = at the bound); a bound of 0
// makes any v > 0 far (1e12) and v <= 0 at 0.
func ratio(v, bound float64) float64 {
	if bound != 0 {
		return v / bound
	}
	if v <= 0 {
		return 0
	}
	return 1e12
}

// paramList renders p as sorted "name=value" pairs joined by commas.
func paramList(p strategy.Params) string {
	vals := p.Values()
	names := make([]string, 0, len(vals))
	for n := range vals {
		names = append(names, n)
	}
	slices.Sort(names)
	for i, n := range names {
		names[i] = n + "=" + vals[n]
	}
	return strings.Join(names, ",")
}

// ColocatedPct is the share, in % of all requests, of those that share
// their (key, arrival in whole ms) with another request: under the hash
// assignment (workload.NewAssigner) all of them reach one node together.
func ColocatedPct(t *workload.Trace) float64 {
	type slot struct {
		key string
		ms  int64
	}
	counts := map[slot]int{}
	for _, r := range t.Requests {
		counts[slot{r.Key, r.Arrival.Milliseconds()}]++
	}
	n := 0
	for _, c := range counts {
		if c > 1 {
			n += c
		}
	}
	if len(t.Requests) == 0 {
		return 0
	}
	return round(100*float64(n)/float64(len(t.Requests)), 1)
}

// ownView are the strategies that decide from a node's own view of a key,
// which the hash assignment flatters, in report order.
var ownView = []string{"local", "static", "gcounter", "tbqueue", "gdrl", "adaptive"}

// AssignNote states the report's assignment policy and whom of ran (the
// strategies of the report) it flatters. colocatedPct is ColocatedPct of
// the input (used for hash; 0 when unknown, e.g. a report built by
// tokenmesh replay, leaves it unsaid).
func AssignNote(policy string, colocatedPct float64, ran []string) string {
	switch policy {
	case "hash":
		share := "the requests of one key in the same ms reach one node together"
		if colocatedPct > 0 {
			share = num(colocatedPct) + "% of the requests share their (key, ms) with another and reach one node together"
		}
		var flattered []string
		for _, s := range ownView {
			if slices.Contains(ran, s) {
				flattered = append(flattered, s)
			}
		}
		note := "assign hash (key and arrival ms, the thesis' injector): " + share + "; "
		if len(flattered) == 0 {
			return note + "it flatters the strategies that decide from a node's own view, none of which ran here"
		}
		return note + "this FLATTERS the strategies that decide from a node's own view (" + strings.Join(flattered, ", ") +
			"): a load balancer spreads a key's requests; rerun with --assign roundrobin (the default)"
	case "key":
		return "assign key (sticky): every key's requests reach one node; this FLATTERS every strategy (each key is decided by one node, as by central); rerun with --assign roundrobin (the default)"
	case "roundrobin", "random":
		return "assign " + policy + ": requests are spread over the nodes whatever their key, as a load balancer does (the hard case; no strategy is flattered)"
	}
	return "assign " + policy
}

// PrecisionNotes explains, for every strategy whose precision is not 1,
// what it means in words ("static rejects 2.7x what central rejects");
// precisions that round to 1.000 get none.
func PrecisionNotes(rep *Report) []string {
	var out []string
	for _, r := range rep.Results {
		switch {
		case r.Precision == nil:
			out = append(out, r.Strategy+" rejects "+strconv.Itoa(r.Rejected)+" requests where central rejects none (precision undefined)")
		case *r.Precision == 0:
			out = append(out, r.Strategy+" rejects nothing where central rejects some (precision 0: it admits everything)")
		case round(*r.Precision, 3) > 1:
			out = append(out, fmt.Sprintf("%s rejects %sx what central rejects (precision > 1: it refuses more than central)", r.Strategy, num(round(*r.Precision, 3))))
		case round(*r.Precision, 3) < 1:
			out = append(out, fmt.Sprintf("%s rejects %sx what central rejects (precision < 1: it admits some of what central refuses)", r.Strategy, num(round(*r.Precision, 3))))
		}
	}
	return out
}
