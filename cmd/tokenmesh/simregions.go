package main

import (
	"strconv"
	"strings"

	"github.com/spf13/pflag"

	"github.com/tokenmesh/tokenmesh/eval"
	"github.com/tokenmesh/tokenmesh/sim"
	"github.com/tokenmesh/tokenmesh/topology"
)

// regionFlags are sim's flags of a cluster that spans regions :
// --regions, --wan-latency, --wan-loss.
type regionFlags struct {
	regions    string
	wanLatency string
	wanLoss    string
	nodesSet   bool // --nodes was given (set by runSim from the command line)
}

// add defines the region flags on fl.
func (f *regionFlags) add(fl *pflag.FlagSet) {
	fl.StringVar(&f.regions, "regions", "", "spread the cluster over regions, NAME:NODES,... (e.g. eu:10,us:10,ap:10): the sum is the cluster's size (it replaces --nodes, which may be given only if it agrees); nodes are named <region>.n<i> (eu.n0 .. eu.n9, us.n10 ...); --latency and --loss are then the links within a region, --wan-latency and --wan-loss those between regions; the report adds where decisions were taken (node, region, WAN), p999 and WAN bytes per request")
	fl.StringVar(&f.wanLatency, "wan-latency", "", "with --regions: one-way latency between regions, in --latency's forms, e.g. exp:60ms+20ms (default: --latency); a scenario file's network can set it per pair of regions")
	fl.StringVar(&f.wanLoss, "wan-loss", "", "with --regions: probability that a message between regions is lost (default: --loss)")
}

// apply checks the region flags against the rest of o and sets
// o.Regions, o.Nodes and the network's WAN links; nodes is --nodes. It
// runs after the input is read (a workload that follows the sun needs
// regions). Errors name the flag.
func (f *regionFlags) apply(o *eval.Options, nodes *int) error {
	if f.regions == "" {
		switch {
		case f.wanLatency != "":
			return usageErr("--wan-latency %s needs --regions: without regions every link is --latency", f.wanLatency)
		case f.wanLoss != "":
			return usageErr("--wan-loss %s needs --regions: without regions every link is --loss", f.wanLoss)
		case o.Trace != nil && o.Trace.Follow > 0:
			return usageErr("--workload %s: the load follows the sun from region to region; give --regions", o.Trace.Name)
		}
		return nil
	}
	regions, err := topology.Parse(f.regions)
	if err != nil {
		return usageErr("--regions: %v", err)
	}
	sum := topology.Nodes(regions)
	if f.nodesSet && *nodes != sum {
		return usageErr("--nodes %d and --regions %s (%d nodes) disagree: give --regions alone (its sum is the cluster's size), or the same count", *nodes, f.regions, sum)
	}
	if o.Proxies.Proxies > 0 {
		return usageErr("--regions with --proxies: a proxy tier across regions is not modelled; give one")
	}
	net := &o.Network
	if f.wanLatency != "" {
		if net.WANLatency, err = sim.ParseLatency(f.wanLatency); err != nil {
			return usageErr("--wan-latency: %v", err)
		}
	}
	net.WANLoss = net.Loss
	if f.wanLoss != "" {
		v, err := strconv.ParseFloat(strings.TrimSpace(f.wanLoss), 64)
		if err != nil {
			return usageErr("--wan-loss %q: want a probability in [0, 1]", f.wanLoss)
		}
		net.WANLoss = v
	}
	if err := net.Validate(); err != nil {
		return usageErr("--wan-loss: %v", err)
	}
	*nodes = sum
	o.Nodes, o.Regions = sum, regions
	return nil
}
