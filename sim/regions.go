package sim

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/topology"
	"github.com/tokenmesh/tokenmesh/workload"
)

// This file is the simulator's side of a cluster that spans regions
// (Config.Regions).
//
//   - Nodes: the regions' nodes in order, named "<region>.n<i>" with i
//     the node's index in the whole cluster (topology.NodeID): a strategy
//     reads a peer's region from the names it is given (Config.Self,
//     Config.Members, SetMembers) with topology.Of. No strategy does yet.
//   - Links: a message within a region takes Network.Latency and Loss,
//     between regions Network.WANLatency (or the pair's Network.Pairs
//     entry) and WANLoss. Every strategy is told one latency hint, the
//     largest of the links' (Latency.Hint): what a node that measures all
//     its peers, as the live estimator does, converges to when most of
//     its peers are across the WAN.
//   - Scenario events name regions: `cut: [ap]` isolates region ap (each
//     region listed on its own side, the others together), and a
//     partition group may list region names among node names
//     (`partition: [[eu, us], [ap]]`). `heal: true` ends either.
//   - Assignment: a trace with Follow (workload `tenants:...,follow=20s`)
//     has each key's requests offered in one region at a time, moving to
//     the next region every Follow: the k-th key in sorted order (from 0)
//     is offered in region (k + floor(arrival / Follow)) mod R, and the
//     assigner picks among that region's live nodes (all live nodes when
//     none of the region is up). Without Follow requests are spread over
//     all live nodes as without regions.
//   - Attribution (Outcome.WAN): a delivered message is WAN-tainted when
//     it crossed between regions, or when its sender sent it while
//     handling the delivery of a WAN-tainted message; a decision taken on
//     the delivery of a tainted message waited for the WAN. A chain broken
//     by a wake-up (a message buffered, then sent at a Tick) loses its
//     taint: such a decision counts as waiting within the region.

// topo is a run's regions: each node's region, the links between
// regions, and the follow-the-sun assignment.
type topo struct {
	region []int    // node index -> region index
	links  [][]link // [from region][to region]
	follow time.Duration
	rank   map[string]int // key -> its index among the trace's sorted keys (follow)
	buf    []int          // followNode's scratch: the live nodes of a region
}

// newTopo checks cfg.Regions against cfg and builds the run's topo; nil
// without regions (a trace that follows the sun is then spread over all
// nodes: `tokenmesh sim` refuses follow=D without --regions). Errors: counts that do not sum to cfg.Nodes, proxies,
// a bad Network.Pairs key.
func newTopo(cfg Config, trace *workload.Trace) (*topo, error) {
	if len(cfg.Regions) == 0 {
		return nil, nil // a trace's Follow is ignored: central runs it on one node
	}
	if n := topology.Nodes(cfg.Regions); n != cfg.Nodes {
		return nil, fmt.Errorf("sim: regions %s have %d nodes, the cluster %d", topology.Format(cfg.Regions), n, cfg.Nodes)
	}
	if cfg.Proxies.Proxies > 0 {
		return nil, fmt.Errorf("sim: regions with a proxy tier are not modelled; give one")
	}
	t := &topo{follow: trace.Follow}
	for ri, reg := range cfg.Regions {
		if err := topology.CheckName(reg.Name); err != nil {
			return nil, fmt.Errorf("sim: region name %v", err)
		}
		if reg.Nodes < 1 {
			return nil, fmt.Errorf("sim: region %s has %d nodes", reg.Name, reg.Nodes)
		}
		for range reg.Nodes {
			t.region = append(t.region, ri)
		}
	}
	var err error
	if t.links, err = cfg.Network.links(topology.Names(cfg.Regions)); err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	if t.follow > 0 {
		counts := trace.KeyCounts()
		keys := make([]string, 0, len(counts))
		for k := range counts {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		t.rank = make(map[string]int, len(keys))
		for i, k := range keys {
			t.rank[k] = i
		}
	}
	return t, nil
}

// latencyHint is the latency strategies are told to expect: the network's
// one latency's hint, or with regions the largest hint of any link.
func (r *runner) latencyHint() time.Duration {
	if r.topo == nil {
		return r.cfg.Network.Latency.Hint()
	}
	var h time.Duration
	for _, row := range r.topo.links {
		for _, l := range row {
			h = max(h, l.lat.Hint())
		}
	}
	return h
}

// FollowRegion is the index of the region where request req of a trace
// that follows the sun every follow is offered, among n regions: the
// region (rank + floor(arrival / follow)) mod n, rank the key's index
// among the trace's sorted keys.
func FollowRegion(rank int, arrival, follow time.Duration, n int) int {
	return (rank + int(arrival/follow)) % n
}

// followNode is the node that receives request i when the trace follows
// the sun: the assigner's pick among the live nodes of the request's
// region, or among all live nodes when none of them is up.
func (r *runner) followNode(i int, req *workload.Request) int {
	t := r.topo
	reg := FollowRegion(t.rank[req.Key], req.Arrival, t.follow, len(r.cfg.Regions))
	t.buf = t.buf[:0]
	for _, ni := range r.alive {
		if t.region[ni] == reg {
			t.buf = append(t.buf, ni)
		}
	}
	if len(t.buf) == 0 {
		return r.alive[r.cfg.Assign.Assign(req, i, len(r.alive))]
	}
	return t.buf[r.cfg.Assign.Assign(req, i, len(t.buf))]
}

// expandRegions returns e with its regions replaced by their nodes: a cut
// becomes the partition that puts each region listed on its own side,
// and a region name in a partition group becomes the region's nodes.
func (r *runner) expandRegions(e ScenarioEvent) ScenarioEvent {
	if r.topo == nil {
		return e
	}
	nodesOf := func(name string) []string {
		ri := topology.Index(r.cfg.Regions, name)
		var out []string
		for ni, n := range r.nodes {
			if r.topo.region[ni] == ri {
				out = append(out, string(n.id))
			}
		}
		return out
	}
	if len(e.Cut) > 0 {
		e.Partition = nil
		for _, reg := range e.Cut {
			e.Partition = append(e.Partition, nodesOf(reg))
		}
		e.Cut = nil
		return e
	}
	if len(e.Partition) > 0 {
		groups := make([][]string, len(e.Partition))
		for g, names := range e.Partition {
			for _, name := range names {
				if topology.Index(r.cfg.Regions, name) >= 0 {
					groups[g] = append(groups[g], nodesOf(name)...)
				} else {
					groups[g] = append(groups[g], name)
				}
			}
		}
		e.Partition = groups
	}
	return e
}

// RegionNodes returns the names of the nodes of a run with regions, in
// index order, and each one's region: what NewWorld names them.
func RegionNodes(regions []topology.Region) []strategy.NodeID {
	var out []strategy.NodeID
	for _, reg := range regions {
		for range reg.Nodes {
			out = append(out, topology.NodeID(reg.Name, len(out)))
		}
	}
	return out
}

// checkRegions checks the region names of event i (1-based) against
// regions: a cut needs regions and names each of them once.
func checkRegions(i int, e ScenarioEvent, regions []topology.Region) error {
	if len(e.Cut) > 0 && len(regions) == 0 {
		return fmt.Errorf("scenario event %d (at %v): cut %s names regions, but the cluster has none (--regions)", i, e.At, strings.Join(e.Cut, ","))
	}
	seen := map[string]bool{}
	for _, reg := range e.Cut {
		if topology.Index(regions, reg) < 0 {
			return fmt.Errorf("scenario event %d (at %v): cut: unknown region %q (the regions are %s)", i, e.At, reg, strings.Join(topology.Names(regions), ", "))
		}
		if seen[reg] {
			return fmt.Errorf("scenario event %d (at %v): cut: region %s is listed twice", i, e.At, reg)
		}
		seen[reg] = true
	}
	return nil
}
