// Package replay replays a trace against a running cluster, in wall time,
// and compares its decisions with central's on the same requests: the live
// counterpart of package eval (which replays through the simulator).
//
// Request i of the trace is sent at origin + (arrival_i - arrival_0)/speed
// by a scheduler goroutine that hands it to a pool of senders, so slow
// answers do not delay later sends. It goes to the node the assigner picks
// (workload.NewAssigner, as in the simulator) among the nodes still alive.
//
// Time scaling: at speed S the cluster's rule must have rate r*S tokens per
// wall second and burst b (ScaledRate). Then a key's bucket refills r*S
// tokens per wall second for requests 1/S apart in wall time as they are in
// trace time, which is r per trace second: the cluster's decisions are
// comparable with central computed on the trace timeline with (r, b).
//
// Decisions are scored with eval's metrics against eval.Central, after
// putting the decisions of identical requests (same key, arrival and
// tokens), which reach the cluster in any order, in trace order.
//
// Files: replay.go (the targets' interfaces), events.go (faults at trace
// times, rate scaling), run.go (Run: scheduling, sending, scoring),
// rules.go (the rules Run checks events by, one per event kind),
// report.go (the JSON report), inprocess.go and live.go (the in-process
// and the live-process targets), scenario.go (sim scenarios as faults),
// detection.go (membership-change times from the nodes' logs).
package replay

import (
	"context"
	"time"
)

// Target is the cluster a replay runs against.
type Target interface {
	// Nodes is the number of nodes, indexed from 0.
	Nodes() int
	// Check asks node for hits tokens of key under the replayed rule;
	// created, when not zero, is the request's due time, sent as the time
	// it reached the edge (CheckItem.created_at_unix_ns; Options.EdgeTimes).
	// It is called from several goroutines at once.
	Check(ctx context.Context, node int, key string, hits int64, created time.Time) (allowed bool, err error)
	// Bytes returns the peer messages and payload bytes sent so far for the
	// replayed rule, summed over the nodes (killed ones included, with the
	// counts they had when killed).
	Bytes(ctx context.Context) (msgs, bytes int64, err error)
}

// FaultInjector is implemented by targets that can inject failures; a replay with
// Events needs it.
type FaultInjector interface {
	Kill(node int) error             // stop node at once (SIGKILL)
	Partition(groups ...[]int) error // cut the data plane between groups
	Heal() error                     // undo Partition
}

// Restarter is implemented by targets that can bring a killed node back; a
// replay with Restart events needs it. Restart starts node again and
// returns once it serves checks (or with the reason it cannot); Run calls it
// from its own goroutine, so requests keep going out on time meanwhile, and
// sends the node requests again only once it has returned.
type Restarter interface {
	Restart(node int) error
}

// StateSampler is implemented by targets that can report the size of the
// replayed rule's strategy state at each live node; Run samples it now and
// then for the report's state columns (0 without it).
type StateSampler interface {
	StateBytes(ctx context.Context) ([]int64, error) // one per live node
}
