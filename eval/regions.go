package eval

import (
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tokenmesh/tokenmesh/sim"
	"github.com/tokenmesh/tokenmesh/topology"
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
	}
}

// regionDefs explain the region columns.
var regionDefs = []metricDef{
	{"region %", "requests decided after waiting for peers in the receiving node's region only, as % of all (local % are those decided on the node; local + region + WAN = 100 less the undecided)"},
	{"WAN %", "requests decided on a message that crossed between regions, or that a node sent on receiving one, as % of all (a message buffered and sent at a later wake-up loses the mark: counted in region %)"},
	{"p999 ms", "decision latency, 99.9th percentile"},
	{"WAN B/req", "peer payload bytes sent between regions per request (part of B/req)"},
}

// regionNote is the note of a run with regions: what central's row means
// and how the strategies were told the latency.
func regionNote(t *TopologySetup) string {
	return "regions " + strings.ReplaceAll(t.Regions, ",", ", ") + ": central, the reference, is one bucket on one node with no network (all its decisions local); every other strategy is told one latency hint, the largest of the links' (the WAN's), as no strategy knows regions yet"
}
