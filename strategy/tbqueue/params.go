// # Parameters
//
// Declared in Params (strategy.ParamSpec); given as NAME=value in a rule's
// params or --param STRATEGY.NAME=value; the generic partition too.
//
//   - gossip (duration, default 300ms): the gossip interval (Table 4.1);
//     positive.
//   - frequency_analysis (bool, default false): §4.2.3, listing 4.5: after
//     admitting, a neighbour's delta of the key is sent at once when the mean
//     interval of its last window elements is below frequency_threshold.
//   - frequency_threshold (duration, default 2400ms): §4.2.3, Table 4.2: the
//     frequency analysis' mean-interval threshold.
//   - window (int, tokens, default 0 = capacity / number of nodes, at least
//     1): §4.2.3, Table 4.2: the frequency analysis' window; not negative.
//   - linf (bool, default false): §4.2.4-4.2.5: Least Informed Neighbour
//     First: gossip goes to the neighbour with the most elements queued in its
//     delta state.
//   - unique_ids (bool, default false): ours: element identity is
//     (time-of-birth, admitting node, sequence number), so two requests
//     admitted at the same instant by two nodes are not counted as one
//     (§4.2.2).
//   - safe_margin (duration, default 0): ours: the fix for the data set D
//     failure (§5.4): an element is removed only safe_margin after its
//     time-of-death.
//   - catch_up (bool, default false): ours (§5.5 leaves it open): full-state
//     catch-up for members that join or rejoin.
//   - delta_duplicates (bool, default false): listing 4.2's
//     into_local_state=false: equal elements do not collapse in delta states;
//     not with unique_ids.
//   - coalesce (bool, default true): ours: the requests a node admits for a
//     key at one instant are one element; false is the thesis' one element per
//     request.
//   - topology (string, default full): the gossip topology: full (every other
//     member is a neighbour, one at random per round: the thesis, Table 4.1),
//     ring (the predecessor and successor in NodeID order, one of them at
//     random per round: GDRL's ring, 001 §III-A) or random:d (d distinct
//     members at random per round, each sent its delta state; random:1 draws
//     as full does); the thesis §5.5 leaves topologies other than full open.
//     Not random:d with linf.
package tbqueue

import (
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/internal/gossipgraph"
)

// Params declares tbqueue's parameters (strategy.ParamSpec), read by config
// validation, --param and `tokenmesh strategies`; New reads them (strategy.ReadParams). The
// defaults are the thesis' behaviour (002 ch. 4).
var Params = []strategy.ParamSpec{
	{Name: "gossip", Type: strategy.ParamDuration, Default: "300ms", Example: "100ms",
		Doc: "the gossip interval (Table 4.1); positive."},
	{Name: "frequency_analysis", Type: strategy.ParamBool, Default: "false", Example: "true",
		Doc: "§4.2.3, listing 4.5: after admitting, a neighbour's delta of the key is sent at once when the mean interval of its last window elements is below frequency_threshold."},
	{Name: "frequency_threshold", Type: strategy.ParamDuration, Default: "2400ms", Example: "1s",
		Doc: "§4.2.3, Table 4.2: the frequency analysis' mean-interval threshold."},
	{Name: "window", Type: strategy.ParamInt, Unit: "tokens", Default: "0 = capacity / number of nodes, at least 1", Example: "5",
		Doc: "§4.2.3, Table 4.2: the frequency analysis' window; not negative."},
	{Name: "linf", Type: strategy.ParamBool, Default: "false", Example: "true",
		Doc: "§4.2.4-4.2.5: Least Informed Neighbour First: gossip goes to the neighbour with the most elements queued in its delta state."},
	{Name: "unique_ids", Type: strategy.ParamBool, Default: "false", Example: "true",
		Doc: "ours: element identity is (time-of-birth, admitting node, sequence number), so two requests admitted at the same instant by two nodes are not counted as one (§4.2.2)."},
	{Name: "safe_margin", Type: strategy.ParamDuration, Default: "0", Example: "2s",
		Doc: "ours: the fix for the data set D failure (§5.4): an element is removed only safe_margin after its time-of-death."},
	{Name: "catch_up", Type: strategy.ParamBool, Default: "false", Example: "true",
		Doc: "ours (§5.5 leaves it open): full-state catch-up for members that join or rejoin."},
	{Name: "delta_duplicates", Type: strategy.ParamBool, Default: "false", Example: "true",
		Doc: "listing 4.2's into_local_state=false: equal elements do not collapse in delta states; not with unique_ids."},
	{Name: "coalesce", Type: strategy.ParamBool, Default: "true", Example: "false",
		Doc: "ours: the requests a node admits for a key at one instant are one element; false is the thesis' one element per request."},
	{Name: "topology", Type: strategy.ParamString, Default: gossipgraph.Full, Example: gossipgraph.Ring, Doc: gossipgraph.Doc + " Not random:d with linf."},
}
