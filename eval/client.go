package eval

import (
	"cmp"
	"math/rand/v2"
	"slices"

	"github.com/tokenmesh/tokenmesh/sim"
	"github.com/tokenmesh/tokenmesh/workload"
)

// clientSeedMix separates the client-path draws from every other use of
// Options.Seed.
const clientSeedMix = 0x636c69656e74 // "client"

// delayed is a trace whose requests reach their nodes after a client-path
// delay (Options.ClientLatency): Trace holds the requests in the order of
// their delayed arrivals, each stamped with it, and Orig[j] is the index in
// the original trace of Trace.Requests[j].
type delayed struct {
	Trace *workload.Trace
	Orig  []int
}

// delayTrace draws each request's delay from lat with a generator seeded by
// seed and returns the delayed trace (ours: the simulator's model of the
// path from the client to the node, which stamps a request when it gets it,
// so requests a few milliseconds apart can reach the cluster in another
// order than the trace's; central, the reference, still sees the trace's
// times). The same seed gives the same delays for every strategy.
func delayTrace(tr *workload.Trace, lat sim.Latency, seed uint64) delayed {
	rnd := rand.New(rand.NewPCG(seed, clientSeedMix))
	n := len(tr.Requests)
	reqs := make([]workload.Request, n)
	orig := make([]int, n) // sorted below into delayed order
	for i, r := range tr.Requests {
		r.Arrival += lat.Sample(rnd)
		reqs[i], orig[i] = r, i
	}
	// Stable: requests delayed to the same instant keep the trace's order.
	slices.SortStableFunc(orig, func(a, b int) int { return cmp.Compare(reqs[a].Arrival, reqs[b].Arrival) })
	out := &workload.Trace{Name: tr.Name, Skipped: tr.Skipped, Follow: tr.Follow, Requests: make([]workload.Request, n)}
	for j, i := range orig {
		out.Requests[j] = reqs[i]
	}
	return delayed{Trace: out, Orig: orig}
}

// origAssigner assigns a delayed request as the wrapped policy assigns the
// original one (same request, same index), so a client delay changes when a
// request reaches its node, not which node it reaches.
type origAssigner struct {
	inner workload.Assigner
	d     delayed
	trace *workload.Trace // the original
}

func (a origAssigner) Assign(_ *workload.Request, j int, n int) int {
	i := a.d.Orig[j]
	return a.inner.Assign(&a.trace.Requests[i], i, n)
}
