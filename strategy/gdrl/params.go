// # Parameters
//
// Declared in Params (strategy.ParamSpec); given as NAME=value in a rule's
// params or --param STRATEGY.NAME=value; the generic partition too.
//
//   - interval (duration, default 100ms): the update interval between a node's
//     exchanges; positive. A departure from 001 §IV, which takes several
//     seconds (indicators well estimated, delays negligible): ours is shorter,
//     for tenants that burst within a second (noise_band and evidence handle
//     the estimates' noise; while nothing moves, probes back off to
//     max_probe_gap).
//   - indicator (fill | spare | discard | utilisation | response, default
//     fill): the performance indicator: fill ratio S/D (004 eq. (1)), spare
//     bandwidth lambda - C (001 eq. (14)), discard rate (refused over
//     requested tokens, filtered), utilisation (admitted tokens over the
//     capacity share, filtered) or mean response time (seconds: the wait a
//     reservation of each request needs at the node's bucket, its wait in
//     waiting mode, filtered) (001 §I-A).
//   - eta (float, default 1/(2*d) for the graph's degree d): the gain (001 eq.
//     (15)), in (0, 1/(2d)]: above the stability bound 1/(2d) of Theorem 1 it
//     is refused; for fill, scaled by the pair's smaller demand.
//   - alpha (float, default 0.02): the demand filter gain per interval (001
//     §III-A), in (0, 1].
//   - graph (ring | regular | full, default ring): the communication graph
//     (see Neighbours).
//   - degree (int, default 4): the degree of the regular graph: even, >= 2.
//   - idle (duration, default 30s): a key not requested at a node for this
//     long is idle there: it receives capacity only by relaxation.
//   - noise_band (float, standard errors, default 2): flows smaller than this
//     many standard errors of their noise are not made; in [0, 100].
//   - evidence (float, standard errors, default 2): how significant the
//     evidence that a key's demand is skewed towards one node of a pair must
//     be before fill moves shares from the 1/N split; in [0, 100].
//   - retransmit (duration, default max(interval, 4*latency_hint)): the
//     timeout after which unacknowledged transfers, records and fences are
//     sent again; positive.
//   - max_keys (int, keys, default 1024): the most keys one probe carries; >=
//     1.
//   - refresh (duration, default 50*interval): a key whose inputs did not
//     change is probed to a neighbour again after this long (a key probed for
//     its evidence alone: after twice as long as the previous time, up to 8
//     idle windows); positive.
//   - max_probe_gap (duration, default 512*interval): the longest gap between
//     a node's probes while no capacity moves at it: the gap doubles from one
//     interval after every probe, and is back to one interval once capacity
//     moves (ours); at least interval (interval: a probe every interval).
package gdrl

import "github.com/tokenmesh/tokenmesh/strategy"

// Params declares gdrl's parameters (strategy.ParamSpec), read by config
// validation, --param and `tokenmesh strategies`; New parses them (its doc
// tells more of each).
var Params = []strategy.ParamSpec{
	{Name: "interval", Type: strategy.ParamDuration, Default: "100ms", Example: "50ms",
		Doc: "the update interval between a node's exchanges; positive. A departure from 001 §IV, which takes several seconds (indicators well estimated, delays negligible): ours is shorter, for tenants that burst within a second (noise_band and evidence handle the estimates' noise; while nothing moves, probes back off to max_probe_gap)."},
	{Name: "indicator", Type: strategy.ParamEnum, Enum: Indicators, Default: IndicatorFill, Example: IndicatorSpare,
		Doc: "the performance indicator: fill ratio S/D (004 eq. (1)), spare bandwidth lambda - C (001 eq. (14)), discard rate (refused over requested tokens, filtered), utilisation (admitted tokens over the capacity share, filtered) or mean response time (seconds: the wait a reservation of each request needs at the node's bucket, its wait in waiting mode, filtered) (001 §I-A)."},
	{Name: "eta", Type: strategy.ParamFloat, Default: "1/(2*d) for the graph's degree d", Example: "0.2",
		Doc: "the gain (001 eq. (15)), in (0, 1/(2d)]: above the stability bound 1/(2d) of Theorem 1 it is refused; for fill, scaled by the pair's smaller demand."},
	{Name: "alpha", Type: strategy.ParamFloat, Default: "0.02", Example: "0.1",
		Doc: "the demand filter gain per interval (001 §III-A), in (0, 1]."},
	{Name: "graph", Type: strategy.ParamEnum, Enum: []string{GraphRing, GraphRegular, GraphFull}, Default: GraphRing, Example: GraphFull,
		Doc: "the communication graph (see Neighbours)."},
	{Name: "degree", Type: strategy.ParamInt, Default: "4", Example: "6",
		Doc: "the degree of the regular graph: even, >= 2."},
	{Name: "idle", Type: strategy.ParamDuration, Default: "30s", Example: "10s",
		Doc: "a key not requested at a node for this long is idle there: it receives capacity only by relaxation."},
	{Name: "noise_band", Type: strategy.ParamFloat, Unit: "standard errors", Default: "2", Example: "1",
		Doc: "flows smaller than this many standard errors of their noise are not made; in [0, 100]."},
	{Name: "evidence", Type: strategy.ParamFloat, Unit: "standard errors", Default: "2", Example: "0.8",
		Doc: "how significant the evidence that a key's demand is skewed towards one node of a pair must be before fill moves shares from the 1/N split; in [0, 100]."},
	{Name: "retransmit", Type: strategy.ParamDuration, Default: "max(interval, 4*latency_hint)", Example: "200ms",
		Doc: "the timeout after which unacknowledged transfers, records and fences are sent again; positive."},
	{Name: "max_keys", Type: strategy.ParamInt, Unit: "keys", Default: "1024", Example: "64",
		Doc: "the most keys one probe carries; >= 1."},
	{Name: "refresh", Type: strategy.ParamDuration, Default: "50*interval", Example: "1s",
		Doc: "a key whose inputs did not change is probed to a neighbour again after this long (a key probed for its evidence alone: after twice as long as the previous time, up to 8 idle windows); positive."},
	{Name: "max_probe_gap", Type: strategy.ParamDuration, Default: "512*interval", Example: "1s",
		Doc: "the longest gap between a node's probes while no capacity moves at it: the gap doubles from one interval after every probe, and is back to one interval once capacity moves (ours); at least interval (interval: a probe every interval)."},
}
