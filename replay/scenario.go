package replay

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/tokenmesh/tokenmesh/sim"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/topology"
	"github.com/tokenmesh/tokenmesh/workload"
)

// FromScenario maps the events of a simulator scenario (sim.Scenario, the
// YAML of `tokenmesh sim --scenario`) onto replay events for a live cluster
// of nodes named n0..n<nodes-1> (localcluster's names) replaying trace, so
// that one file drives both:
//
//   - crash: [nK, ...]: Kill of node K (a node already killed is skipped, as
//     the simulator ignores crashing a dead node);
//   - crash_owner_of_hottest: k: Kill of the nodes sim.OwnersOfHottest picks
//     on trace over all nodes, the simulator's choice;
//   - restart: [nK, ...]: Restart of node K (localcluster.Restart: a new
//     process with the same name and addresses joins the cluster); a node
//     that is not down is skipped, as the simulator ignores restarting a
//     live node. The replay sends the node requests again once it serves
//     and every node sees it, a few wall seconds later (the simulator sends
//     them at once);
//   - partition: Partition with the same groups, the nodes no group lists
//     forming one more group together (the simulator's rule; a node in no
//     group of localcluster's Partition would be cut off alone); a partition
//     that leaves every node in one group heals, as in the simulator;
//   - heal: Heal;
//   - with regions (the cluster spread over regions, `replay --regions`,
//     nodes named <region>.n<i> as the simulator names them,
//     sim.RegionNodes): cut: [R, ...]: Partition with each region listed
//     on its own side and the others together (the simulator's cut), and a
//     region name in a partition group stands for the region's nodes.
//
// The scenario's membership model (detection, detection_jitter,
// join_delay, reconnect_interval) is not used: in a live cluster the nodes'
// own failure detectors and reconnects do what it models (in wall time; at
// --speed S the simulator needs it multiplied by S to describe the replay,
// see docs/REPLAY.md). Errors: a network section (the live network is
// loopback or veth pairs; its latency and loss are not simulated), a node
// name that is not one of the cluster's (n0..n<nodes-1>, or with regions
// <region>.n<i>), a node in two partition groups, a cut without regions
// or naming an unknown region or one twice, regions whose nodes do not
// add up to nodes. The mapping is ours.
func FromScenario(sc *sim.Scenario, trace *workload.Trace, nodes int, regions []topology.Region) ([]Event, error) {
	if sc == nil {
		return nil, nil
	}
	if sc.Network != nil {
		return nil, fmt.Errorf("scenario: network: the live replay runs on loopback and cannot apply a network model (drop the network section)")
	}
	m := &scenarioMapper{trace: trace, nodes: nodes, killed: map[int]bool{}, regions: regions}
	if len(regions) > 0 {
		if topology.Nodes(regions) != nodes {
			return nil, fmt.Errorf("scenario: regions %s have %d nodes, the cluster %d", strings.Join(topology.Names(regions), ","), topology.Nodes(regions), nodes)
		}
		m.all = sim.RegionNodes(regions)
	} else {
		m.all = make([]strategy.NodeID, nodes)
		for i := range m.all {
			m.all[i] = strategy.NodeID("n" + strconv.Itoa(i))
		}
	}
	for i, e := range sc.Events {
		var err error
		switch {
		case len(e.Crash) > 0 || e.CrashOwnerOfHottest > 0:
			err = m.crash(i, e)
		case len(e.Restart) > 0:
			err = m.restart(i, e)
		case len(e.Partition) > 0:
			err = m.partition(i, e)
		case len(e.Cut) > 0:
			err = m.cut(i, e)
		case e.Heal:
			m.out = append(m.out, Event{At: e.At, Kind: Heal})
		}
		if err != nil {
			return nil, err
		}
	}
	return m.out, nil
}

// scenarioMapper maps a scenario's events, one kind per method, onto the
// events out.
type scenarioMapper struct {
	trace   *workload.Trace
	nodes   int
	regions []topology.Region // nil: none
	all     []strategy.NodeID // node i's name: n<i>, or with regions <region>.n<i>
	killed  map[int]bool      // the nodes down after the events so far
	out     []Event
}

// index is the index of node name of the cluster, named in the i-th
// scenario event e.
func (m *scenarioMapper) index(i int, e sim.ScenarioEvent, name string) (int, error) {
	if n := slices.Index(m.all, strategy.NodeID(name)); n >= 0 {
		return n, nil
	}
	return 0, fmt.Errorf("scenario event %d (%s): unknown node %q (the cluster has %s..%s)", i+1, e, name, m.all[0], m.all[len(m.all)-1])
}

// regionNodes is the indexes of region's nodes, or nil when region is not
// a region of the cluster.
func (m *scenarioMapper) regionNodes(region string) []int {
	var out []int
	for n, id := range m.all {
		if len(m.regions) > 0 && topology.Of(id) == region {
			out = append(out, n)
		}
	}
	return out
}

// cut maps a cut of regions onto the partition that puts each region
// listed on its own side (the others together), as the simulator does.
func (m *scenarioMapper) cut(i int, e sim.ScenarioEvent) error {
	if len(m.regions) == 0 {
		return fmt.Errorf("scenario event %d (%s): cut names regions, but the cluster has none (--regions)", i+1, e)
	}
	p := e
	p.Cut, p.Partition = nil, nil
	seen := map[string]bool{}
	for _, reg := range e.Cut {
		if topology.Index(m.regions, reg) < 0 {
			return fmt.Errorf("scenario event %d (%s): cut: unknown region %q (the regions are %s)", i+1, e, reg, strings.Join(topology.Names(m.regions), ", "))
		}
		if seen[reg] {
			return fmt.Errorf("scenario event %d (%s): cut: region %s is listed twice", i+1, e, reg)
		}
		seen[reg] = true
		p.Partition = append(p.Partition, []string{reg})
	}
	return m.partition(i, p)
}

// crash maps crash and crash_owner_of_hottest onto kills of the nodes
// that are up.
func (m *scenarioMapper) crash(i int, e sim.ScenarioEvent) error {
	names := e.Crash
	for _, o := range sim.OwnersOfHottest(m.trace, m.all, e.CrashOwnerOfHottest) {
		names = append(names, string(o))
	}
	for _, name := range names {
		n, err := m.index(i, e, name)
		if err != nil {
			return err
		}
		if !m.killed[n] {
			m.killed[n] = true
			m.out = append(m.out, Event{At: e.At, Kind: Kill, Node: n})
		}
	}
	return nil
}

// restart maps restart onto restarts of the nodes that are down.
func (m *scenarioMapper) restart(i int, e sim.ScenarioEvent) error {
	for _, name := range e.Restart {
		n, err := m.index(i, e, name)
		if err != nil {
			return err
		}
		if m.killed[n] {
			m.killed[n] = false
			m.out = append(m.out, Event{At: e.At, Kind: Restart, Node: n})
		}
	}
	return nil
}

// partition maps partition onto a Partition with the nodes no group lists
// as one more group, or a Heal when that leaves a single group.
func (m *scenarioMapper) partition(i int, e sim.ScenarioEvent) error {
	listed := map[int]bool{}
	var groups [][]int
	for _, g := range e.Partition {
		var group []int
		for _, name := range g {
			ns := m.regionNodes(name)
			if ns == nil {
				n, err := m.index(i, e, name)
				if err != nil {
					return err
				}
				ns = []int{n}
			}
			for _, n := range ns {
				if listed[n] {
					return fmt.Errorf("scenario event %d (%s): node %s is in two partition groups", i+1, e, m.all[n])
				}
				listed[n] = true
				group = append(group, n)
			}
		}
		groups = append(groups, group)
	}
	var rest []int
	for n := 0; n < m.nodes; n++ {
		if !listed[n] {
			rest = append(rest, n)
		}
	}
	if len(rest) > 0 {
		groups = append(groups, rest)
	}
	groups = slices.DeleteFunc(groups, func(g []int) bool { return len(g) == 0 })
	if len(groups) < 2 {
		m.out = append(m.out, Event{At: e.At, Kind: Heal})
		return nil
	}
	m.out = append(m.out, Event{At: e.At, Kind: Partition, Groups: groups})
	return nil
}
