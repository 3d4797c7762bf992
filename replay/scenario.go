package replay

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/tokenmesh/tokenmesh/sim"
	"github.com/tokenmesh/tokenmesh/strategy"
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
//   - heal: Heal.
//
// The scenario's membership model (detection, detection_jitter,
// join_delay, reconnect_interval) is not used: in a live cluster the nodes'
// own failure detectors and reconnects do what it models (in wall time; at
// --speed S the simulator needs it multiplied by S to describe the replay,
// see docs/REPLAY.md). Errors: a network section (the live network is
// loopback or veth pairs; its latency and loss are not simulated), a node
// name that is not n0..n<nodes-1>, a node in two partition groups. The
// mapping is ours.
func FromScenario(sc *sim.Scenario, trace *workload.Trace, nodes int) ([]Event, error) {
	if sc == nil {
		return nil, nil
	}
	if sc.Network != nil {
		return nil, fmt.Errorf("scenario: network: the live replay runs on loopback and cannot apply a network model (drop the network section)")
	}
	m := &scenarioMapper{trace: trace, nodes: nodes, killed: map[int]bool{}}
	m.all = make([]strategy.NodeID, nodes)
	for i := range m.all {
		m.all[i] = strategy.NodeID("n" + strconv.Itoa(i))
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
	trace  *workload.Trace
	nodes  int
	all    []strategy.NodeID // n0..n<nodes-1>
	killed map[int]bool      // the nodes down after the events so far
	out    []Event
}

// index is the index of node name of the cluster, named in the i-th
// scenario event e.
func (m *scenarioMapper) index(i int, e sim.ScenarioEvent, name string) (int, error) {
	n, err := strconv.Atoi(strings.TrimPrefix(name, "n"))
	if !strings.HasPrefix(name, "n") || err != nil || n < 0 || n >= m.nodes || name != "n"+strconv.Itoa(n) {
		return 0, fmt.Errorf("scenario event %d (%s): unknown node %q (the cluster has n0..n%d)", i+1, e, name, m.nodes-1)
	}
	return n, nil
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
			n, err := m.index(i, e, name)
			if err != nil {
				return err
			}
			if listed[n] {
				return fmt.Errorf("scenario event %d (%s): node %s is in two partition groups", i+1, e, name)
			}
			listed[n] = true
			group = append(group, n)
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
