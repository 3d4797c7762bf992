package sim

import (
	"slices"
	"sort"
	"time"

	"github.com/tokenmesh/tokenmesh/rendezvous"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/workload"
)

// Faults: a scenario's events carried out on the network and the nodes
// (crashes, restarts, partitions, heals) at the time they are due.

// scenario carries out e on the network at once and schedules the nodes'
// view updates (detect): a restart or a heal is a join, the others are
// failures.
func (r *runner) scenario(e ScenarioEvent) {
	e = r.expandRegions(e)
	join := false
	switch {
	case len(e.Crash) > 0:
		for _, name := range e.Crash {
			r.crash(r.byName[name])
		}
	case e.CrashOwnerOfHottest > 0:
		for _, name := range r.ownersOfHottest(e.CrashOwnerOfHottest) {
			r.crash(r.byName[string(name)])
		}
	case len(e.Restart) > 0:
		join = true
		r.restart(e.Restart)
	case len(e.Partition) > 0:
		r.partition(e.Partition)
	case e.Heal:
		if !r.heal() {
			return
		}
		join = true
	}
	r.detect(join)
}

// restart brings the named nodes that are down back up, each with a new
// epoch and the nodes it reaches as its view.
func (r *runner) restart(names []string) {
	for _, name := range names {
		i := r.byName[name]
		n := r.nodes[i]
		if n.alive {
			continue
		}
		n.alive, n.epoch = true, n.epoch+1
		r.alive = append(r.alive, i)
		slices.Sort(r.alive)
		n.view = r.reachable(i)
		n.expect, n.lost = slices.Clone(n.view), map[strategy.NodeID]time.Duration{}
		_ = r.start(i, r.now) // the factory accepted this configuration at time 0
	}
}

// partition cuts the network into groups (the nodes not listed form a
// group of their own), for messages and failure detectors alike.
func (r *runner) partition(groups [][]string) {
	r.healGen++
	for _, n := range r.nodes {
		n.group = len(groups) // nodes not listed form a group of their own
	}
	for g, names := range groups {
		for _, name := range names {
			r.nodes[r.byName[name]].group = g
		}
	}
	for _, n := range r.nodes {
		n.mgroup = n.group // each side's detectors lose the other side
	}
}

// heal joins the network again. It reports whether the membership groups
// merge now; false when they wait for the first reconnect attempt (then
// queued).
func (r *runner) heal() bool {
	r.healGen++
	for _, n := range r.nodes {
		n.group = 0
	}
	if at, ok := r.firstReconnect(); ok {
		// Messages flow again, but the views stay split until the
		// first reconnect attempt merges the membership groups.
		r.push(event{at: at, prio: prioReconnect, epoch: r.healGen})
		return false
	}
	for _, n := range r.nodes {
		n.mgroup = 0
	}
	return true
}

// firstReconnect is the time of the first reconnect attempt of any live
// node at or after now; false when reconnects are not modelled
// (ReconnectInterval 0) or no node is up.
func (r *runner) firstReconnect() (time.Duration, bool) {
	iv := r.cfg.Scenario.ReconnectInterval
	if iv <= 0 || len(r.alive) == 0 {
		return 0, false
	}
	first := time.Duration(-1)
	for _, i := range r.alive {
		ph := r.nodes[i].phase
		at := ph
		if r.now > ph {
			at = ph + (r.now-ph+iv-1)/iv*iv
		}
		if first < 0 || at < first {
			first = at
		}
	}
	return first, true
}

// merge runs at the reconnect attempt that ends a partition: the
// membership groups become the network's again, and every node learns of
// it after its own detection delay.
func (r *runner) merge() {
	for _, n := range r.nodes {
		n.mgroup = n.group
	}
	r.detect(true)
}

func (r *runner) crash(i int) {
	n := r.nodes[i]
	if !n.alive {
		return
	}
	n.alive = false
	n.epoch++
	r.alive = slices.DeleteFunc(r.alive, func(x int) bool { return x == i })
	r.res.Crashed = append(r.res.Crashed, string(n.id))
	r.proxiesLoseNode(i)
}

// OwnersOfHottest returns the distinct rendezvous owners (rendezvous.Owner)
// among members of the k most requested keys of trace (ties by key), in the
// order of the keys: the nodes a crash_owner_of_hottest: k event crashes.
func OwnersOfHottest(trace *workload.Trace, members []strategy.NodeID, k int) []strategy.NodeID {
	counts := trace.KeyCounts()
	keys := make([]string, 0, len(counts))
	for key := range counts {
		keys = append(keys, key)
	}
	sort.Slice(keys, func(a, b int) bool {
		if counts[keys[a]] != counts[keys[b]] {
			return counts[keys[a]] > counts[keys[b]]
		}
		return keys[a] < keys[b]
	})
	var out []strategy.NodeID
	for _, key := range keys[:max(0, min(k, len(keys)))] {
		if o := rendezvous.Owner(key, members); !slices.Contains(out, o) {
			out = append(out, o)
		}
	}
	return out
}

// ownersOfHottest is OwnersOfHottest over all nodes, live or not.
func (r *runner) ownersOfHottest(k int) []strategy.NodeID {
	all := make([]strategy.NodeID, len(r.nodes))
	for i, n := range r.nodes {
		all[i] = n.id
	}
	return OwnersOfHottest(r.trace, all, k)
}
