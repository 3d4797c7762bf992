// # Parameters
//
// Declared in Params (strategy.ParamSpec); given as NAME=value in a rule's
// params or --param STRATEGY.NAME=value; the generic partition too.
//
//   - gossip (duration, default 300ms): the gossip interval (thesis Table
//     4.1); positive.
//   - catch_up (bool, default false): ours: full-state catch-up for members
//     that join or rejoin, and per-instance G-Counter slots.
//   - idle (duration, default 10m): ours: a key unchanged for idle and full is
//     dropped and re-created with a new generation; 0 keeps every key forever
//     (the thesis); otherwise at least 10 gossip intervals.
//   - fold (duration, default 0): ours: cut each node's G-Counter slot in
//     periods of fold and sum the periods older than two into one base slot
//     per key, so that slots per key stay bounded under node churn; 0 keeps a
//     slot per node instance forever (the thesis); otherwise at least 1m and
//     10 gossip intervals. Turn on once every node runs a build that knows it.
//   - topology (string, default full): the gossip topology: full (every other
//     member is a neighbour, one at random per round: the thesis, Table 4.1),
//     ring (the predecessor and successor in NodeID order, one of them at
//     random per round: GDRL's ring, 001 §III-A) or random:d (d distinct
//     members at random per round, each sent its delta state; random:1 draws
//     as full does); the thesis §5.5 leaves topologies other than full open.
package gcounter

import (
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/internal/gossipgraph"
)

// Params declares gcounter's parameters (strategy.ParamSpec), read by
// config validation, --param and `tokenmesh strategies`; New reads them (strategy.ReadParams).
var Params = []strategy.ParamSpec{
	{Name: "gossip", Type: strategy.ParamDuration, Default: "300ms", Example: "100ms",
		Doc: "the gossip interval (thesis Table 4.1); positive."},
	{Name: "catch_up", Type: strategy.ParamBool, Default: "false", Example: "true",
		Doc: "ours: full-state catch-up for members that join or rejoin, and per-instance G-Counter slots."},
	{Name: "idle", Type: strategy.ParamDuration, Default: "10m", Example: "1m",
		Doc: "ours: a key unchanged for idle and full is dropped and re-created with a new generation; 0 keeps every key forever (the thesis); otherwise at least 10 gossip intervals."},
	{Name: "fold", Type: strategy.ParamDuration, Default: "0", Example: "1h",
		Doc: "ours: cut each node's G-Counter slot in periods of fold and sum the periods older than two into one base slot per key, so that slots per key stay bounded under node churn; 0 keeps a slot per node instance forever (the thesis); otherwise at least 1m and 10 gossip intervals. Turn on once every node runs a build that knows it."},
	{Name: "topology", Type: strategy.ParamString, Default: gossipgraph.Full, Example: gossipgraph.Ring, Doc: gossipgraph.Doc},
}
