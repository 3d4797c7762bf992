package eval

import (
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tokenmesh/tokenmesh/sim"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/topology"
	"github.com/tokenmesh/tokenmesh/workload"
)

// This file is the evaluation of a cluster that spans regions (Options.Regions,
// sim.Config.Regions): where each decision was
// taken (on the node, within the region, across the WAN), its latency's
// tail, and the bytes that crossed between regions. Without regions the
// report is what it was, byte for byte.

// TopologySetup is Setup.Topology: the regions of the run and the links
// between them.
type TopologySetup struct {
	Regions    string  `json:"regions"` // as --regions reads it: eu:10,us:10
	WANLatency string  `json:"wan_latency"`
	WANLoss    float64 `json:"wan_loss"`
	// Pairs are the per-pair WAN latencies of the scenario's network
	// (sim.Network.Pairs), by "a/b"; absent when none.
	Pairs map[string]string `json:"pairs,omitempty"`
	// FollowS is the trace's follow-the-sun period in seconds
	// (workload.Trace.Follow), absent when it does not follow the sun.
	FollowS float64 `json:"follow_s,omitempty"`
}

// RegionCosts is Result.Regions: where the strategy's decisions were
// taken and what crossed between regions. The shares are of all requests
// (undecided ones are in none: the three sum to 100 less the undecided
// share); NodePct is LocalDecisionPct.
type RegionCosts struct {
	// NodePct: decided on the node that received the request without
	// waiting for a peer (sim.Outcome.Local).
	NodePct float64 `json:"node_pct"`
	// RegionPct: decided after waiting for messages within the region
	// only (neither Local nor WAN).
	RegionPct float64 `json:"region_pct"`
	// WANPct: decided on a message that crossed between regions, or was
	// sent on the delivery of one (sim.Outcome.WAN).
	WANPct                float64 `json:"wan_pct"`
	DecisionLatencyP999Ms float64 `json:"decision_latency_p999_ms"`
	WANMessages           int64   `json:"wan_messages"`
	WANBytes              int64   `json:"wan_bytes"`
	WANBytesPerRequest    float64 `json:"wan_bytes_per_request"`
	// RegionShortfallTokens is, per key and per region (where each
	// request arrived), over the whole run, central's admitted tokens
	// beyond the strategy's, summed (regionShortfall); RegionShortfallPct
	// is it as % of central's admitted tokens.
	RegionShortfallTokens int64   `json:"region_shortfall_tokens"`
	RegionShortfallPct    float64 `json:"region_shortfall_pct"`
}

// regionShortfall is how unevenly a strategy serves a key's regions
// against central (ours; issue 24): per key and per region, the tokens
// central admitted to the requests that arrived there beyond those the
// strategy admitted there, over the whole run, summed, and as % of
// central's admitted tokens. Central, one bucket deciding every request
// in arrival order, serves an overloaded key's regions in proportion to
// what each offers; a strategy whose key's owner serves its own region
// first refuses the other regions' requests in its stead, which the
// windowed shortfall (Shortfall, per key over all regions) does not see:
// 1,000 tokens moved from us to eu count 1,000 here and 0 there. It is at
// least the whole run's shortfall (the strategy's admitted tokens short of
// central's, per key). A request's region is that of the node it reached
// (received[i], an index in names, the run's node names: topology.Of;
// "" for -1); reqs, allowed, central and received are indexed alike. pct
// is 0 when central admitted nothing.
func regionShortfall(reqs []workload.Request, allowed, central []bool, received []int32, names []string) (tokens int64, pct float64) {
	type cell struct{ key, region string }
	tokens, centralTokens := cellShortfall(reqs, allowed, central, func(i int, r workload.Request) (cell, bool) {
		var region string
		if i < len(received) && received[i] >= 0 && int(received[i]) < len(names) {
			region = topology.Of(strategy.NodeID(names[received[i]]))
		}
		return cell{r.Key, region}, true
	})
	if centralTokens > 0 {
		pct = round(100*float64(tokens)/float64(centralTokens), 4)
	}
	return tokens, pct
}

// topologySetup is the report's TopologySetup of opts (nil without
// regions).
func topologySetup(opts Options) *TopologySetup {
	if len(opts.Regions) == 0 {
		return nil
	}
	n := opts.Network
	if opts.Scenario != nil && opts.Scenario.Network != nil {
		// The scenario's network overrides the flags' (sim applies it the same way).
		_ = opts.Scenario.ApplyNetwork(&n)
	}
	wan := n.WANLatency
	if wan.Kind == "" {
		wan = n.Latency
	}
	t := &TopologySetup{Regions: topology.Format(opts.Regions), WANLatency: wan.String(), WANLoss: n.WANLoss,
		FollowS: opts.Trace.Follow.Seconds()}
	if len(n.Pairs) > 0 {
		t.Pairs = map[string]string{}
		for k, l := range n.Pairs {
			t.Pairs[k] = l.String()
		}
	}
	return t
}

// regionCosts is the RegionCosts of one run's outcomes (latencies: the
// decided ones', any order).
func regionCosts(outs []sim.Outcome, res *sim.Result, latencies []time.Duration) *RegionCosts {
	c := &RegionCosts{WANMessages: res.WANMessages, WANBytes: res.WANBytes}
	if len(outs) == 0 {
		return c
	}
	node, region, wan := 0, 0, 0
	for _, o := range outs {
		switch {
		case !o.Decided:
		case o.Local:
			node++
		case o.WAN:
			wan++
		default:
			region++
		}
	}
	n := float64(len(outs))
	c.NodePct, c.RegionPct, c.WANPct = round(100*float64(node)/n, 2), round(100*float64(region)/n, 2), round(100*float64(wan)/n, 2)
	c.DecisionLatencyP999Ms = ms(Percentile(latencies, 99.9))
	c.WANBytesPerRequest = round(float64(res.WANBytes)/n, 1)
	return c
}

// regionFact is the setup line's description of the regions.
func regionFact(t *TopologySetup) [2]string {
	v := t.Regions + " (between regions: latency " + t.WANLatency + ", loss " + pct(t.WANLoss)
	for _, k := range slices.Sorted(maps.Keys(t.Pairs)) {
		v += ", " + k + " " + t.Pairs[k]
	}
	v += ")"
	if t.FollowS > 0 {
		v += "; load follows the sun, next region every " + num(t.FollowS) + " s"
	}
	return [2]string{"regions", v}
}

// regionColumns are the results table's columns of a run with regions.
func regionColumns() []column {
	f := func(v float64, prec int) string { return strconv.FormatFloat(v, 'f', prec, 64) }
	cell := func(get func(*RegionCosts) string) func(Result) string {
		return func(r Result) string {
			if r.Regions == nil {
				return ""
			}
			return get(r.Regions)
		}
	}
	return []column{
		{"region %", "regions.region_pct", 3, cell(func(c *RegionCosts) string { return f(c.RegionPct, 2) })},
		{"WAN %", "regions.wan_pct", 3, cell(func(c *RegionCosts) string { return f(c.WANPct, 2) })},
		{"p999 ms", "regions.decision_latency_p999_ms", 3, cell(func(c *RegionCosts) string { return f(c.DecisionLatencyP999Ms, 3) })},
		{"WAN B/req", "regions.wan_bytes_per_request", 3, cell(func(c *RegionCosts) string { return f(c.WANBytesPerRequest, 1) })},
		{"region short %", "regions.region_shortfall_pct", 3, cell(func(c *RegionCosts) string { return f(c.RegionShortfallPct, 2) })},
	}
}

// regionDefs explain the region columns.
var regionDefs = []metricDef{
	{"region %", "requests decided after waiting for peers in the receiving node's region only, as % of all (local % are those decided on the node; local + region + WAN = 100 less the undecided)"},
	{"WAN %", "requests decided on a message that crossed between regions, or that a node sent on receiving one, as % of all (a message buffered and sent at a later wake-up loses the mark: counted in region %)"},
	{"p999 ms", "decision latency, 99.9th percentile"},
	{"WAN B/req", "peer payload bytes sent between regions per request (part of B/req)"},
	{"region short %", "per key and per region (where each request arrived), over the whole run, central's admitted tokens beyond the strategy's, summed, as % of central's admitted (JSON regions.region_shortfall_pct): tokens one region's requests were refused while another region's were admitted in their stead (central serves an overloaded key's regions by what each offers), which shortfall % does not count"},
}

// regionNote is the note of a run with regions: what central's row means
// and how the strategies were told the latency.
func regionNote(t *TopologySetup) string {
	return "regions " + strings.ReplaceAll(t.Regions, ",", ", ") + ": central, the reference, is one bucket on one node with no network (all its decisions local); every other strategy is told one latency hint, the largest of the links' (the WAN's); regionlease reads each peer's region from its name, the others do not know regions"
}
