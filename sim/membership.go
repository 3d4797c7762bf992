package sim

import (
	"slices"
	"time"

	"github.com/tokenmesh/tokenmesh/strategy"
)

// Membership: the nodes' failure detectors, their views and the members
// they expect back (reconnect_timeout), updated after the faults.

// membership carries out a membership event: a lost member's expiry, a
// dropped peer, or a view update.
func (r *runner) membership(e event) {
	if e.from == expireLost {
		r.updateExpected(int(e.node))
		return
	}
	if e.from == dropPeer {
		r.dropPeer(int(e.node), int(e.scen))
		return
	}
	r.updateView(int(e.node))
}

// detect schedules every node's view update after its own delay: for a
// join (a restart, or the merge after a heal) with Scenario.JoinDelay set,
// a uniform draw in [0, JoinDelay] (gossip spreading the join); otherwise
// Scenario.Detection plus a uniform draw in [0, DetectionJitter]. The draws
// are made for every node, live or not, in node order, so that they depend
// only on the seed and the scenario.
func (r *runner) detect(join bool) {
	sc := r.cfg.Scenario
	if !join && sc.DetectionSpacing > 0 {
		r.detectPerPeer()
		return
	}
	for i := range r.nodes {
		var d time.Duration
		switch {
		case join && sc.JoinDelay > 0:
			d = time.Duration(r.memRnd.Int64N(int64(sc.JoinDelay) + 1))
		default:
			d = r.detectionDelay()
		}
		r.push(event{at: r.now + d, prio: prioMembership, node: int32(i)})
	}
}

// detectionDelay is one node's failure-detection delay, Detection +
// U[0, DetectionJitter] (a draw from memRnd only when DetectionJitter > 0).
func (r *runner) detectionDelay() time.Duration {
	sc := r.cfg.Scenario
	if sc.DetectionJitter <= 0 {
		return sc.Detection
	}
	return sc.Detection + time.Duration(r.memRnd.Int64N(int64(sc.DetectionJitter)+1))
}

// detectPerPeer schedules, for a failure (crash, partition) with
// Scenario.DetectionSpacing set, every node's declarations one peer at a
// time: the peers node i must declare failed (in its view, not among the
// live nodes of its membership group) in an order drawn from the seed
// (memberlist probes a shuffled member list round-robin), the k-th
// (k = 0, 1, ...) after Detection + k x DetectionSpacing + U[0,
// DetectionJitter]. Every declaration but the last drops one peer
// (dropPeer); the last brings node i's view to the whole truth
// (updateView), as a single update does without spacing. A node with no
// peer to declare (dead, or its view already right) gets one full update
// after Detection + U[0, DetectionJitter]. The draws are made for every
// node in node order, so that they depend only on the seed and the
// scenario.
func (r *runner) detectPerPeer() {
	sc := r.cfg.Scenario
	for i, n := range r.nodes {
		var lost []int32
		if n.alive {
			live := r.reachable(i)
			for _, id := range n.view {
				if !slices.Contains(live, id) {
					lost = append(lost, int32(r.byName[string(id)]))
				}
			}
		}
		r.memRnd.Shuffle(len(lost), func(a, b int) { lost[a], lost[b] = lost[b], lost[a] })
		if len(lost) == 0 {
			r.push(event{at: r.now + r.detectionDelay(), prio: prioMembership, node: int32(i)})
			continue
		}
		for k, p := range lost {
			d := time.Duration(k)*sc.DetectionSpacing + r.detectionDelay()
			e := event{at: r.now + d, prio: prioMembership, node: int32(i), from: dropPeer, scen: p}
			if k == len(lost)-1 {
				e.from, e.scen = 0, 0 // the last: the whole truth
			}
			r.push(e)
		}
	}
}

// reachable is the sorted list of live nodes in node i's membership group:
// what its failure detector converges to.
func (r *runner) reachable(i int) []strategy.NodeID {
	var out []strategy.NodeID
	for _, j := range r.alive {
		if r.nodes[j].mgroup == r.nodes[i].mgroup {
			out = append(out, r.nodes[j].id)
		}
	}
	slices.Sort(out)
	return out
}

// updateView runs when node i's failure detector has caught up: if node i
// is live and its view differs from the live nodes of its membership group,
// its strategy is told.
func (r *runner) updateView(i int) {
	n := r.nodes[i]
	if !n.alive {
		return
	}
	r.setView(i, r.reachable(i))
}

// dropPeer runs when node i declares peer p failed (per-peer detection,
// detectPerPeer): if node i is live, p is in its view and p is not among
// the live nodes of node i's membership group now (a heal or restart since
// may have brought it back), p leaves node i's view.
func (r *runner) dropPeer(i, p int) {
	n := r.nodes[i]
	if !n.alive {
		return
	}
	id := r.nodes[p].id
	if !slices.Contains(n.view, id) || slices.Contains(r.reachable(i), id) {
		return
	}
	r.setView(i, slices.DeleteFunc(slices.Clone(n.view), func(x strategy.NodeID) bool { return x == id }))
}

// setView makes v (sorted) node i's view: the nodes that left it are
// recorded as lost, and the strategy is told (SetMembers, then
// SetExpected). Nothing happens if v is node i's view already.
func (r *runner) setView(i int, v []strategy.NodeID) {
	n := r.nodes[i]
	if slices.Equal(v, n.view) {
		return
	}
	for _, id := range n.view {
		if !slices.Contains(v, id) {
			n.lost[id] = r.now
			if to := r.reconnectTimeout(); to > 0 {
				r.push(event{at: r.now + to, prio: prioMembership, node: int32(i), from: expireLost})
			}
		}
	}
	for _, id := range v {
		delete(n.lost, id)
	}
	n.view = v
	r.inCall = prioMembership
	n.h.SetMembers(r.now, 0, v)
	r.updateExpected(i)
}

// expireLost marks a prioMembership event that ends ReconnectTimeout for
// nodes node i lost (in event.from).
const expireLost = -1

// dropPeer marks a prioMembership event in which node i declares one peer
// (the node index in event.scen) failed (per-peer detection).
const dropPeer = -2

func (r *runner) reconnectTimeout() time.Duration {
	if r.cfg.Scenario == nil {
		return 0
	}
	return r.cfg.Scenario.ReconnectTimeout
}

// updateExpected drops from node i's lost nodes those lost at least
// ReconnectTimeout ago and, if its expected members (view plus lost)
// changed, tells its strategy (strategy.Conserver).
func (r *runner) updateExpected(i int) {
	n := r.nodes[i]
	if !n.alive {
		return
	}
	if to := r.reconnectTimeout(); to > 0 {
		for id, at := range n.lost {
			if r.now-at >= to {
				delete(n.lost, id)
			}
		}
	}
	exp := slices.Clone(n.view)
	for id := range n.lost {
		exp = append(exp, id)
	}
	slices.Sort(exp)
	exp = slices.Compact(exp)
	if slices.Equal(exp, n.expect) {
		return
	}
	n.expect = exp
	n.h.SetExpected(r.now, 0, exp) // inCall stays the caller's
}
