package main

import (
	"time"

	"github.com/spf13/pflag"

	"github.com/tokenmesh/tokenmesh/sim"
	"github.com/tokenmesh/tokenmesh/topology"
)

// replayRegionFlags are replay's flags of a cluster spread over regions
// (issue 24): --regions and --wan-latency, as sim's (regionFlags) so that
// one command line describes the live run and its simulation.
type replayRegionFlags struct {
	regions    string
	wanLatency string
	nodesSet   bool // --nodes was given on the command line
}

// add defines the flags on fl.
func (f *replayRegionFlags) add(fl *pflag.FlagSet) {
	fl.StringVar(&f.regions, "regions", "", "spread the nodes over regions, NAME:NODES,... (e.g. eu:1,us:1,ap:1), as sim --regions: the sum is the cluster's size (it replaces --nodes); node i is named <region>.n<i> (node.region set), which region-aware strategies (regionlease) read")
	fl.StringVar(&f.wanLatency, "wan-latency", "", "with --regions: one-way delay of every peer frame between regions, wall time, added by the nodes' fault injection (gossip is not delayed): fixed (30ms) or uniform (uniform:30ms-40ms), whole milliseconds; sim's equivalent of a replay at --speed S is S times it")
}

// replayRegions is what the region flags decided.
type replayRegions struct {
	regions   []topology.Region // --regions; nil without
	names     []string          // node i's region; nil without --regions
	wanDelay  time.Duration     // fixed part of the WAN delay
	wanJitter time.Duration     // uniform extra, [0, wanJitter)
}

// plan checks the region flags against --nodes (nodes) and returns the
// per-node regions and the WAN delay; with --regions it sets *nodes to
// their sum. Errors name the flag.
func (f *replayRegionFlags) plan(nodes *int) (replayRegions, error) {
	var out replayRegions
	if f.regions == "" {
		if f.wanLatency != "" {
			return out, usageErr("--wan-latency %s needs --regions: without regions no frame crosses a WAN", f.wanLatency)
		}
		return out, nil
	}
	regions, err := topology.Parse(f.regions)
	if err != nil {
		return out, usageErr("--regions: %v", err)
	}
	sum := topology.Nodes(regions)
	if f.nodesSet && *nodes != sum {
		return out, usageErr("--nodes %d and --regions %s (%d nodes) disagree: give --regions alone (its sum is the cluster's size), or the same count", *nodes, f.regions, sum)
	}
	out.regions = regions
	for _, r := range regions {
		for range r.Nodes {
			out.names = append(out.names, r.Name)
		}
	}
	*nodes = sum
	if f.wanLatency != "" {
		out.wanDelay, out.wanJitter, err = parseWANLatency(f.wanLatency)
	}
	return out, err
}

// parseWANLatency reads --wan-latency as the nodes' fault injection takes
// it: a fixed delay (30ms) or uniform:MIN-MAX (MIN plus a jitter below
// MAX - MIN), whole milliseconds, at most a minute each. Errors name the
// flag and the forms.
func parseWANLatency(s string) (delay, jitter time.Duration, err error) {
	l, err := sim.ParseLatency(s)
	if err != nil {
		return 0, 0, usageErr("--wan-latency: %v", err)
	}
	switch l.Kind {
	case "fixed":
		delay = l.Mean
	case "uniform":
		delay, jitter = l.Min, l.Max-l.Min
	default:
		return 0, 0, usageErr("--wan-latency %s: the live nodes delay a frame by a fixed time plus a uniform jitter; give 30ms or uniform:30ms-40ms (sim takes %s)", s, l.Kind)
	}
	for _, d := range []time.Duration{delay, jitter} {
		if d%time.Millisecond != 0 {
			return 0, 0, usageErr("--wan-latency %s: the nodes take whole milliseconds", s)
		}
		if d > time.Minute {
			return 0, 0, usageErr("--wan-latency %s: more than a minute between regions", s)
		}
	}
	return delay, jitter, nil
}
