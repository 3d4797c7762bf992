// Package eval runs coordination strategies over the same input in the
// simulator and measures how far each one's decisions drift from a
// centralized token bucket, and at what cost in messages, bytes, memory and
// decision latency.
//
// The method is the thesis' (the CRDT thesis §4.3.1): replay recorded requests
// through the cluster, record every decision, and compare with a centralized
// run that "will take the correct decision". Precision is the thesis'
// metric (§5.1.1); excess admitted, false rejections and the envelope
// violation are ours (docs/ARCHITECTURE.md, "Metrics"), because precision
// alone hides errors that cancel out.
package eval

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/sim"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/registry"
	"github.com/tokenmesh/tokenmesh/topology"
	"github.com/tokenmesh/tokenmesh/workload"
)

// Options is one evaluation: one input, one cluster setup, several strategies.
type Options struct {
	Trace        *workload.Trace
	Strategies   []registry.Info // central first (registry.ParseList puts it there)
	Nodes        int
	Rate         bucket.Rate
	Burst        int64
	Params       strategy.Params // "strategy.name=value" pairs
	Network      sim.Network
	Scenario     *sim.Scenario
	ScenarioName string
	AssignPolicy string
	Seed         uint64
	// Progress, if set, is told how far each strategy's run is.
	Progress func(strategy string, done, total int)
	// MaxWait > 0 runs every strategy, central included, in waiting mode
	// (SRTM §5.2; sim.Config.MaxWait) and adds each one's waiting
	// time distribution (Result.Wait).
	MaxWait time.Duration
	// Hold, when its Max is above 0, runs every strategy's admitted
	// requests as holding what they were granted for a service time
	// (sim.Config.Hold): a concurrency limit's permits are released then;
	// each result gets Holds. The zero value: no holds.
	Hold sim.Hold
	// ShortfallWindow > 0 adds each strategy's shortfall against central
	// over windows of this length (Shortfall; Result.ShortfallTokens and
	// ShortfallPct, Setup.ShortfallWindowS); 0 leaves it out, and the
	// report keeps the bytes it had before the measure existed.
	ShortfallWindow time.Duration
	// ClientLatency, when set, delays every request of the strategies
	// other than the centralized ones (central, the reference) on its way
	// from the client to its node by a draw from it (seeded by Seed; the
	// node stamps the request when it gets it): the model of a live
	// cluster's client path, e.g. `tokenmesh replay`'s gRPC calls (see
	// delayTrace); decisions among identical requests are then scored in
	// trace order (Canonicalize), as replay scores them. nil: requests
	// reach their nodes at their trace times.
	ClientLatency *sim.Latency
	// EdgeTimes, with ClientLatency, has each request carry its trace
	// time as the time it reached the edge (sim.Config.EdgeTimes): owner
	// orders a key's requests by it, as the live runtime does with
	// created_at_unix_ns (`tokenmesh replay --edge-times`).
	EdgeTimes bool
	// Proxies puts every strategy but central behind a tier of Envoy
	// proxies (sim.ProxyTier; proxies.go): the zero value, none, keeps
	// the report's bytes as they were. Not with ClientLatency (the
	// proxies' hop is the path to the nodes).
	Proxies sim.ProxyTier
	// Regions spreads the Nodes over regions (sim.Config.Regions; their
	// counts sum to Nodes) for every strategy but the centralized ones
	// (one node), and adds each one's RegionCosts (Result.Regions) and
	// the regions to the setup (Setup.Topology). Nil: the report keeps
	// its bytes.
	Regions []topology.Region
}

// Result is one strategy's row of the report. JSON names are the ones the
// `--json` output promises.
type Result struct {
	Strategy                string   `json:"strategy"`
	Requests                int      `json:"requests"`
	Admitted                int      `json:"admitted"`
	Rejected                int      `json:"rejected"`
	Precision               *float64 `json:"precision"` // null when central rejects nothing and the strategy does
	ExcessAdmittedPct       float64  `json:"excess_admitted_pct"`
	ExcessAdmitted          int      `json:"excess_admitted_tokens"`
	FalseRejections         int      `json:"false_rejections"`
	EnvelopeViolationTokens float64  `json:"envelope_violation_tokens"`
	Messages                int64    `json:"messages"`
	Bytes                   int64    `json:"bytes"`
	MessagesLost            int64    `json:"messages_lost"`
	StateBytesPeak          int      `json:"state_bytes_peak"`
	StateBytesMean          float64  `json:"state_bytes_mean"`
	DecisionLatencyP50Ms    float64  `json:"decision_latency_p50_ms"`
	DecisionLatencyP99Ms    float64  `json:"decision_latency_p99_ms"`
	Undecided               int      `json:"undecided"`
	ReceiveErrors           int64    `json:"receive_errors"`
	CrashedNodes            []string `json:"crashed_nodes,omitempty"`
	// LocalDecisionPct is the share of requests, in % of all, decided
	// without waiting for a peer (sim.Outcome.Local); BytesPerRequest is
	// Bytes / Requests. Both come after the older fields, so that those
	// keep their bytes in the JSON output.
	LocalDecisionPct float64 `json:"local_decision_pct"`
	BytesPerRequest  float64 `json:"bytes_per_request"`
	// NotMeasured names (by their JSON names, e.g. "local_decision_pct")
	// the metrics the run did not measure: their values are 0, and the
	// reports print n/a. Empty for the simulator, which measures every
	// one; tokenmesh replay cannot see which decisions were local.
	NotMeasured []string `json:"not_measured,omitempty"`
	// Wait is the waiting time distribution in waiting mode
	// (Options.MaxWait > 0); absent otherwise, so that runs without it
	// keep their JSON bytes.
	Wait *WaitStats `json:"wait,omitempty"`
	// ShortfallTokens is Shortfall over Options.ShortfallWindow: per key
	// and per window, the tokens central admitted beyond this strategy's
	// admitted tokens, summed (count-based: which requests got the tokens
	// does not matter, how many did); ShortfallPct is it in % of central's
	// admitted tokens. ShortfallAfterBirthPct is the same with each key's
	// first window left out (ShortfallAfterBirth: the float a strategy
	// holds is short there once, at the key's birth), in % of central's
	// admitted tokens in the windows it counts: the steady part, which a
	// longer run does not dilute. All absent without
	// Options.ShortfallWindow.
	ShortfallTokens        *int64   `json:"shortfall_tokens,omitempty"`
	ShortfallPct           *float64 `json:"shortfall_pct,omitempty"`
	ShortfallAfterBirthPct *float64 `json:"shortfall_after_birth_pct,omitempty"`
	// Proxy is the traffic between the strategy's proxies and their
	// nodes, with Options.Proxies (absent otherwise, and for central);
	// BytesPerRequest then counts the proxies' bytes with the peers'.
	Proxy *ProxyCosts `json:"proxy,omitempty"`
	// Regions is where the decisions were taken and what crossed between
	// regions, with Options.Regions (absent otherwise).
	Regions *RegionCosts `json:"regions,omitempty"`
	// Convergence is the strategy's convergence times after the run's
	// faults and the trace's demand changes (the CRDT thesis §3.5;
	// convergence.go has the definitions, Setup.Convergence the spec and
	// the event counts). Set by Run (every sim report); absent in a
	// replay's.
	Convergence *ConvergenceStats `json:"convergence,omitempty"`
	// HotServer is the hot-server measure of the run (HotServer: max over
	// nodes of the decisions each took / mean over nodes, the throttling
	// article's "hot server"). Set by Run (every sim report); absent in a
	// replay's. Last, so that the older fields keep their bytes.
	HotServer *HotServerStats `json:"hot_server,omitempty"`
	// Holds are the run's permits with Options.Hold (a concurrency limit);
	// absent otherwise. Last, so that the older fields keep their bytes.
	Holds *HoldStats `json:"holds,omitempty"`
}

// WaitStats is one strategy's waiting time distribution in waiting mode
// (SRTM §5.2): the delay each admitted request was given before it may
// proceed, the DRL penalty of SRTM §2.1 (a request that waits is
// served late rather than refused). Percentiles are over all admitted
// requests, those admitted at once counting 0; milliseconds.
type WaitStats struct {
	// WaitingMode is false for a strategy that has no waiting mode
	// (strategy.Waiter): it was run with plain requests and never delays.
	WaitingMode bool    `json:"waiting_mode"`
	Waited      int     `json:"waited"`     // admitted requests given a delay > 0
	WaitedPct   float64 `json:"waited_pct"` // of admitted requests
	MeanMs      float64 `json:"mean_ms"`
	P50Ms       float64 `json:"p50_ms"`
	P90Ms       float64 `json:"p90_ms"`
	P99Ms       float64 `json:"p99_ms"`
	MaxMs       float64 `json:"max_ms"`
	// MD1 sets the mean wait beside SRTM's M/D/1 prediction (Prop. 1,
	// eq. (1); MD1Comparison) for central and static; absent for others.
	MD1 *MD1Comparison `json:"md1,omitempty"`
}

// Input describes what was replayed.
type Input struct {
	Name     string  `json:"name"`
	Requests int     `json:"requests"`
	Keys     int     `json:"keys"`
	SpanSec  float64 `json:"span_s"`
	Skipped  int     `json:"skipped_lines,omitempty"`
}

// LiveLatency is Setup.Latency of a report on a live cluster (tokenmesh
// replay): its decision latencies were measured, not simulated.
const LiveLatency = "live"

// Setup describes the simulated cluster.
type Setup struct {
	Nodes      int     `json:"nodes"`
	RatePerSec float64 `json:"rate_per_s"`
	Burst      int64   `json:"burst"`
	Assign     string  `json:"assign"`
	Latency    string  `json:"latency"`
	Loss       float64 `json:"loss"`
	Duplicate  float64 `json:"duplicate"`
	Reorder    float64 `json:"reorder"`
	Scenario   string  `json:"scenario,omitempty"`
	// Detection is the scenario's membership model
	// (sim.Scenario.DetectionModel); Faults its events in time order, so
	// that a reader can mark the fault windows. Both empty without a
	// scenario, or with one that has no events.
	Detection string  `json:"detection,omitempty"`
	Faults    []Fault `json:"faults,omitempty"`
	Seed      uint64  `json:"seed"`
	// MaxWaitMs is the waiting mode's max_wait (Options.MaxWait), absent
	// without waiting mode.
	MaxWaitMs float64 `json:"max_wait_ms,omitempty"`
	// ShortfallWindowS is Options.ShortfallWindow in seconds, absent
	// without it.
	ShortfallWindowS float64 `json:"shortfall_window_s,omitempty"`
	// ClientLatency is Options.ClientLatency, absent when not set.
	ClientLatency string `json:"client_latency,omitempty"`
	// EdgeTimes is Options.EdgeTimes, absent when false.
	EdgeTimes bool `json:"edge_times,omitempty"`
	// Proxies is Options.Proxies, absent without proxies.
	Proxies *ProxySetup `json:"proxies,omitempty"`
	// Topology is Options.Regions and the links between them, absent
	// without regions.
	Topology *TopologySetup `json:"topology,omitempty"`
	// Convergence is how the convergence times of the results were
	// measured (DefaultConvergence) and on how many events; set by Run.
	Convergence *ConvergenceSetup `json:"convergence,omitempty"`
}

// Fault is one scenario event of the report: at AtSec seconds of trace time,
// Event (sim.ScenarioEvent.Action, e.g. "partition n0,n1|n2", "heal").
type Fault struct {
	AtSec float64 `json:"at_s"`
	Event string  `json:"event"`
}

// Faults lists the events of sc for Setup.Faults (nil for none).
func Faults(sc *sim.Scenario) []Fault {
	if sc == nil {
		return nil
	}
	var out []Fault
	for _, e := range sc.Events {
		out = append(out, Fault{AtSec: e.At.Seconds(), Event: e.Action()})
	}
	return out
}

// Series is the decisions over time for plots (not part of the JSON): bin i
// covers [i*Bin, (i+1)*Bin) of arrival time.
type Series struct {
	Origin   time.Duration // arrival of the first request
	Bin      time.Duration
	Requests []int            // requests per bin
	Admitted map[string][]int // by strategy
	Rejected map[string][]int
	// RequestTokens and AdmittedTokens (by strategy) are Requests and
	// Admitted in tokens (workload.Request.Tokens), for report.html.
	RequestTokens  []int64
	AdmittedTokens map[string][]int64
	// ShortfallWindow and Shortfall (by strategy, central's left out) are
	// ShortfallByWindow's windows of Options.ShortfallWindow, from the
	// first arrival: shortfall.png and report.html's shortfall plot;
	// absent without it.
	ShortfallWindow time.Duration
	Shortfall       map[string][]int64
}

// Report is an evaluation's outcome.
type Report struct {
	Input   Input    `json:"input"`
	Setup   Setup    `json:"setup"`
	Results []Result `json:"results"`
	Series  *Series  `json:"-"`
	// Recommendation is set by the caller (Recommend; tokenmesh sim and
	// replay do unless --recommend=false); absent otherwise.
	Recommendation *Recommendation `json:"recommendation,omitempty"`
	// ColocatedPct is ColocatedPct of the input, for AssignNote (not in
	// the JSON, whose bytes stay those of earlier versions).
	ColocatedPct float64 `json:"-"`
	// Reproduce are the commands that reproduce the report, set by the
	// caller, which knows its command line (tokenmesh sim and replay);
	// report.html shows them. Not in the JSON.
	Reproduce []Step `json:"-"`
}

// Run simulates every strategy of opts over the trace and compares each
// with central. Errors: no strategies, central missing, a bad assignment
// policy, or any error of sim.Run.
func Run(opts Options) (*Report, error) {
	if len(opts.Strategies) == 0 || opts.Strategies[0].Name != "central" {
		return nil, fmt.Errorf("eval: the first strategy must be central, the reference")
	}
	reqs := opts.Trace.Requests
	rep := newReport(opts)
	client, edge, err := clientPath(opts, rep)
	if err != nil {
		return nil, err
	}
	spec := DefaultConvergence
	faults, demand, late := ConvergenceEvents(reqs, opts.Scenario, opts.Rate.PerSec(), spec)
	rep.Setup.Convergence = convergenceSetup(spec, len(faults), len(demand), late)
	var central []bool
	for _, s := range opts.Strategies {
		jfi := &jfiSampler{step: time.Second} // sim's default SampleEvery
		res, cfg, delayedTrace, err := simulate(opts, s, client, edge, jfi.observe)
		if err != nil {
			return nil, err
		}
		allowed, lat, localPct, bytesPer := decisions(reqs, res)
		if delayedTrace {
			// Behind a client path identical requests reach the nodes in
			// any order, as in a live replay: scored as replay scores them.
			Canonicalize(reqs, allowed)
		}
		if central == nil {
			central = allowed
		}
		r := Score(s.Name, reqs, allowed, central, opts.Rate.PerSec(), opts.Burst, lat)
		costs(&r, opts, res, lat, allowed)
		r.LocalDecisionPct, r.BytesPerRequest = localPct, bytesPer
		proxyCosts(&r, res, cfg.Proxies)
		if opts.ShortfallWindow > 0 {
			shortfall(&r, reqs, allowed, central, opts.ShortfallWindow)
			if s.Name != "central" {
				rep.Series.AddShortfall(s.Name, reqs, allowed, central, opts.ShortfallWindow)
			}
		}
		if r.Regions != nil {
			r.Regions.RegionShortfallTokens, r.Regions.RegionShortfallPct = regionShortfall(reqs, allowed, central, res.Received, res.NodeNames)
		}
		r.Convergence = Convergence(reqs, allowed, central, faults, demand, spec)
		r.Convergence.JFI = jfi.stats(faults, demand, spec.Hold, spec.Horizon)
		hot := HotServer(res.Outcomes, res.NodeNames)
		r.HotServer = &hot
		rep.Results = append(rep.Results, r)
		rep.Series.add(s.Name, reqs, allowed)
	}
	return rep, nil
}

// newReport is the report of opts without results: its input and setup.
func newReport(opts Options) *Report {
	reqs := opts.Trace.Requests
	rep := &Report{
		Input: Input{Name: opts.Trace.Name, Requests: len(reqs), Keys: opts.Trace.Keys(), SpanSec: opts.Trace.Span().Seconds(), Skipped: opts.Trace.Skipped},
		Setup: Setup{Nodes: opts.Nodes, RatePerSec: opts.Rate.PerSec(), Burst: opts.Burst, Assign: opts.AssignPolicy,
			Latency: opts.Network.Latency.String(), Loss: opts.Network.Loss, Duplicate: opts.Network.Duplicate,
			Reorder: opts.Network.Reorder, Scenario: opts.ScenarioName, Seed: opts.Seed, MaxWaitMs: ms(opts.MaxWait),
			ShortfallWindowS: opts.ShortfallWindow.Seconds(), Proxies: proxySetup(opts.Proxies)},
		Series: newSeries(opts.Trace), ColocatedPct: ColocatedPct(opts.Trace),
	}
	rep.Setup.Topology = topologySetup(opts)
	if rep.Setup.Faults = Faults(opts.Scenario); rep.Setup.Faults != nil {
		rep.Setup.Detection = opts.Scenario.DetectionModel()
	}
	return rep
}

// clientPath is the trace as the nodes receive it behind opts'
// client latency (client.Trace nil without one) and, with EdgeTimes, each
// delayed request's trace time; both noted in rep's setup. Errors: a
// client latency with proxies, edge times without a client latency.
func clientPath(opts Options, rep *Report) (client delayed, edge []time.Duration, err error) {
	if opts.ClientLatency != nil && opts.Proxies.Proxies > 0 {
		return client, nil, errors.New("eval: a client latency and proxies: the proxies' hop is the path from the clients to the nodes; give one")
	}
	if opts.ClientLatency != nil {
		rep.Setup.ClientLatency = opts.ClientLatency.String()
		client = delayTrace(opts.Trace, *opts.ClientLatency, opts.Seed)
	}
	if !opts.EdgeTimes {
		return client, nil, nil
	}
	if client.Trace == nil {
		return client, nil, errors.New("eval: edge times need a client latency (requests reach their nodes at their trace times otherwise)")
	}
	rep.Setup.EdgeTimes = true
	edge = make([]time.Duration, len(client.Orig))
	for j, i := range client.Orig {
		edge[j] = opts.Trace.Requests[i].Arrival
	}
	return client, edge, nil
}

// simulate runs strategy s of opts in the simulator, behind the client
// path (client, edge) if any and s is not centralized (delayedTrace:
// then its outcomes are put back in trace order).
// observe, when not nil, is the run's sim.Config.Observe (not for a
// centralized strategy: one node has nothing to compare).
func simulate(opts Options, s registry.Info, client delayed, edge []time.Duration, observe func(time.Duration, []strategy.Strategy)) (res *sim.Result, cfg sim.Config, delayedTrace bool, err error) {
	assign, err := workload.NewAssigner(opts.AssignPolicy, opts.Seed)
	if err != nil {
		return nil, cfg, false, err
	}
	cfg = sim.Config{
		Name: s.Name, New: s.New, Nodes: opts.Nodes, Rate: opts.Rate, Burst: opts.Burst,
		Params: opts.Params.For(s.Name), Network: opts.Network, Scenario: opts.Scenario,
		Assign: assign, Seed: opts.Seed, MaxWait: opts.MaxWait, Regions: opts.Regions, Hold: opts.Hold,
	}
	if s.Centralized {
		cfg.Nodes, cfg.Scenario, cfg.Regions = 1, nil, nil
	} else {
		cfg.Observe = observe
	}
	if cfg.Proxies, err = proxyTier(opts, s); err != nil {
		return nil, cfg, false, err
	}
	if opts.Progress != nil {
		name := s.Name
		cfg.Progress = func(done, total int) { opts.Progress(name, done, total) }
	}
	trace := opts.Trace
	if client.Trace != nil && !s.Centralized {
		trace, cfg.Assign, cfg.EdgeTimes = client.Trace, origAssigner{inner: assign, d: client, trace: opts.Trace}, edge
	}
	res, err = sim.Run(trace, cfg)
	if err != nil {
		return nil, cfg, false, err
	}
	if trace != opts.Trace {
		outs := make([]sim.Outcome, len(res.Outcomes))
		for j, o := range res.Outcomes {
			outs[client.Orig[j]] = o
		}
		res.Outcomes = outs
	}
	return res, cfg, trace != opts.Trace, nil
}

// decisions are res's decisions on reqs (false for undecided), the decided
// requests' latencies, the % of decisions taken locally and the bytes per
// request.
func decisions(reqs []workload.Request, res *sim.Result) (allowed []bool, lat []time.Duration, localPct, bytesPer float64) {
	allowed = make([]bool, len(reqs))
	lat = make([]time.Duration, 0, len(reqs))
	local := 0
	for i, o := range res.Outcomes {
		allowed[i] = o.Decided && o.Allowed
		if o.Decided {
			lat = append(lat, o.Latency)
		}
		if o.Decided && o.Local {
			local++
		}
	}
	if len(reqs) > 0 {
		localPct = round(100*float64(local)/float64(len(reqs)), 2)
		bytesPer = round(float64(res.Bytes)/float64(len(reqs)), 1)
	}
	return allowed, lat, localPct, bytesPer
}

// costs sets r's region costs, waits (with the envelope counted when the
// admitted requests proceed), traffic, state and failures from res.
func costs(r *Result, opts Options, res *sim.Result, lat []time.Duration, allowed []bool) {
	reqs := opts.Trace.Requests
	if len(opts.Regions) > 0 {
		r.Regions = regionCosts(res.Outcomes, res, lat)
	}
	if opts.MaxWait > 0 {
		r.Wait = waitStats(res.Outcomes, res.WaitingMode)
		if res.WaitingMode {
			r.Wait.MD1 = md1Compare(r.Strategy, reqs, res.Outcomes, opts.Rate, opts.Burst, opts.Nodes)
		}
		// A request admitted with a delay takes its tokens when it
		// proceeds: the envelope counts it then.
		served, servedAllowed := servedOrder(reqs, allowed, res.Outcomes)
		r.EnvelopeViolationTokens = round(EnvelopeViolation(served, servedAllowed, opts.Rate.PerSec(), opts.Burst), 4)
	}
	if opts.Hold.Max > 0 {
		r.Holds = holdStats(reqs, res.Outcomes)
		if r.Holds.Permits > 0 {
			compareSemaphore(r.Holds, reqs, sim.DrawHolds(opts.Hold, opts.Seed, len(reqs)), holdLimit(opts, r.Strategy), allowed)
		}
	}
	r.Messages, r.Bytes, r.MessagesLost = res.Messages, res.Bytes, res.MessagesLost
	r.StateBytesPeak, r.StateBytesMean = res.StateBytesPeak, round(res.StateBytesMean, 1)
	r.Undecided, r.ReceiveErrors, r.CrashedNodes = res.Undecided, res.ReceiveErrors, res.Crashed
}

// shortfall sets r's shortfall of allowed against central over window.
func shortfall(r *Result, reqs []workload.Request, allowed, central []bool, window time.Duration) {
	short, centralTokens := Shortfall(reqs, allowed, central, window)
	var shortPct float64
	if centralTokens > 0 {
		shortPct = round(100*float64(short)/float64(centralTokens), 4)
	}
	later, laterCentral := ShortfallAfterBirth(reqs, allowed, central, window)
	var laterPct float64
	if laterCentral > 0 {
		laterPct = round(100*float64(later)/float64(laterCentral), 4)
	}
	r.ShortfallTokens, r.ShortfallPct, r.ShortfallAfterBirthPct = &short, &shortPct, &laterPct
}

// waitStats is the waiting time distribution of the admitted outcomes.
func waitStats(outs []sim.Outcome, waitingMode bool) *WaitStats {
	w := &WaitStats{WaitingMode: waitingMode}
	var delays []time.Duration
	var sum time.Duration
	for _, o := range outs {
		if !o.Decided || !o.Allowed {
			continue
		}
		delays = append(delays, o.Delay)
		sum += o.Delay
		if o.Delay > 0 {
			w.Waited++
		}
	}
	if len(delays) == 0 {
		return w
	}
	w.WaitedPct = round(100*float64(w.Waited)/float64(len(delays)), 2)
	w.MeanMs = ms(sum / time.Duration(len(delays)))
	w.P50Ms, w.P90Ms = ms(Percentile(delays, 50)), ms(Percentile(delays, 90))
	w.P99Ms, w.MaxMs = ms(Percentile(delays, 99)), ms(Percentile(delays, 100))
	return w
}

// servedOrder returns the admitted requests at the time they proceed
// (arrival + the waiting-mode delay), sorted by that time, with an
// all-true allowed slice: the input EnvelopeViolation needs in waiting
// mode.
func servedOrder(reqs []workload.Request, allowed []bool, outs []sim.Outcome) ([]workload.Request, []bool) {
	var served []workload.Request
	for i, r := range reqs {
		if allowed[i] {
			r.Arrival += outs[i].Delay
			served = append(served, r)
		}
	}
	sort.SliceStable(served, func(a, b int) bool { return served[a].Arrival < served[b].Arrival })
	all := make([]bool, len(served))
	for i := range all {
		all[i] = true
	}
	return served, all
}

func ms(d time.Duration) float64 { return round(float64(d)/float64(time.Millisecond), 3) }

// round keeps JSON output short and stable: v to places decimals, halves
// away from zero.
func round(v float64, places int) float64 {
	p := math.Pow(10, float64(places))
	return math.Round(v*p) / p
}

// newSeries picks a bin width giving about 200 bins, rounded up to a whole
// number of seconds (the traces' coarsest resolution).
func newSeries(t *workload.Trace) *Series {
	span := t.Span()
	bin := span / 200
	bin = (bin + time.Second - 1) / time.Second * time.Second
	if bin <= 0 {
		bin = time.Second
	}
	n := int(span/bin) + 1
	s := &Series{Bin: bin, Requests: make([]int, n), Admitted: map[string][]int{}, Rejected: map[string][]int{},
		RequestTokens: make([]int64, n), AdmittedTokens: map[string][]int64{}}
	if len(t.Requests) > 0 {
		s.Origin = t.Requests[0].Arrival
	}
	for _, r := range t.Requests {
		i := s.index(r.Arrival)
		s.Requests[i]++
		s.RequestTokens[i] += r.Tokens
	}
	return s
}

func (s *Series) index(arrival time.Duration) int { return int((arrival - s.Origin) / s.Bin) }

// addShortfall keeps a strategy's shortfall by window (ShortfallByWindow).
func (s *Series) addShortfall(name string, byWindow []int64, window time.Duration) {
	if s.Shortfall == nil {
		s.Shortfall = map[string][]int64{}
	}
	s.ShortfallWindow = window
	s.Shortfall[name] = byWindow
}

func (s *Series) add(name string, reqs []workload.Request, allowed []bool) {
	adm, rej := make([]int, len(s.Requests)), make([]int, len(s.Requests))
	tokens := make([]int64, len(s.Requests))
	for i, r := range reqs {
		b := s.index(r.Arrival)
		if allowed[i] {
			adm[b]++
			tokens[b] += r.Tokens
		} else {
			rej[b]++
		}
	}
	s.Admitted[name], s.Rejected[name] = adm, rej
	if s.AdmittedTokens == nil {
		s.AdmittedTokens = map[string][]int64{}
	}
	s.AdmittedTokens[name] = tokens
}
