package eval

import (
	"github.com/tokenmesh/tokenmesh/sim"
)

// HotServerStats is the hot-server measure of one run: how unevenly the
// decisions fell on the nodes. The throttling article ends on the "hot
// server" issue: each tenant's K servers are chosen by rendezvous hashing,
// they overlap, and a server that happens to serve more heavy tenants than
// others is hotter than the rest. Here the load of a node is the decisions
// it took (sim.Outcome.Node: the node whose state decided a request, the
// owner for a forwarded one), and the measure is max over nodes / mean over
// nodes: 1 when every node decides as many requests, N when one node of N
// decides them all. Every node of the cluster counts in the mean, also one
// that decided nothing; decisions at a proxy are left out.
type HotServerStats struct {
	// MaxOverMean is max over nodes of decisions handled / mean over
	// nodes (>= 1; 0 when no decision was taken on a node).
	MaxOverMean float64 `json:"max_over_mean"`
	// Node is the node that decided the most (the first by index of equals).
	Node string `json:"node"`
	// MaxDecisions is Node's count, MeanDecisions the mean over the nodes.
	MaxDecisions  int     `json:"max_decisions"`
	MeanDecisions float64 `json:"mean_decisions"`
}

// HotServer is the hot-server measure of the decided outcomes over the
// nodes named names (sim.Result.NodeNames, indexed by sim.Outcome.Node).
// Outcomes that are undecided, decided at a proxy (Node -1) or at a node
// index outside names are not counted.
func HotServer(outcomes []sim.Outcome, names []string) HotServerStats {
	if len(names) == 0 {
		return HotServerStats{}
	}
	counts := make([]int, len(names))
	total := 0
	for _, o := range outcomes {
		if !o.Decided || o.Node < 0 || int(o.Node) >= len(names) {
			continue
		}
		counts[o.Node]++
		total++
	}
	hot := 0
	for i, c := range counts {
		if c > counts[hot] {
			hot = i
		}
	}
	st := HotServerStats{Node: names[hot], MaxDecisions: counts[hot], MeanDecisions: round(float64(total)/float64(len(names)), 2)}
	if total > 0 {
		st.MaxOverMean = round(float64(counts[hot])*float64(len(names))/float64(total), 3)
	}
	return st
}

// hasHotServer reports whether some result of rep has the hot-server
// measure (every sim report; not a replay's).
func hasHotServer(rep *Report) bool {
	for _, r := range rep.Results {
		if r.HotServer != nil {
			return true
		}
	}
	return false
}
