// # Parameters
//
// Declared in Params (strategy.ParamSpec); given as NAME=value in a rule's
// params or --param STRATEGY.NAME=value; the generic partition too.
//
//   - window (duration, default 10s): the history window (SRTM §5.4); a
//     multiple (1 to 1000 times) of step.
//   - step (duration, default 1s): the increment of the window and the period
//     of reports and re-splits; positive.
//   - floor (float, fraction, default 0.1): the fraction of a re-split key's
//     rate and burst split evenly; in [0, 1].
//   - significance (float, standard deviations, default 3): how far above its
//     mean the chi-squared statistic of a key's spread must be for the key to
//     be re-split; >= 0.
//   - min_mean (float, tokens per node, default 1): the least mean offered
//     tokens per node in the window for a key to be re-split; >= 0.
//   - raise_after (duration, default max(4*latency_hint, 10ms)): how long
//     after an epoch's decreases its increases are applied.
//   - units (int, default 1000): the rate's resolution, in [1, 1000000];
//     reduced (down to N) when r/units is below the bucket package's
//     resolution.
//   - max_wait (duration, default 0): the longest wait waiting mode (SRTM
//     §5.2) grants; 0 turns it off. It lengthens every epoch's raise_after by
//     as much, so that reservations made at a node's old share are due before
//     another node raises its share; at most 1h.
package adaptive

import "github.com/tokenmesh/tokenmesh/strategy"

// Params declares adaptive's parameters (strategy.ParamSpec), read by
// config validation, --param and `tokenmesh strategies`; New reads them (strategy.ReadParams).
var Params = []strategy.ParamSpec{
	{Name: "window", Type: strategy.ParamDuration, Default: "10s", Example: "20s",
		Doc: "the history window (SRTM §5.4); a multiple (1 to 1000 times) of step."},
	{Name: "step", Type: strategy.ParamDuration, Default: "1s", Example: "500ms",
		Doc: "the increment of the window and the period of reports and re-splits; positive."},
	{Name: "floor", Type: strategy.ParamFloat, Unit: "fraction", Default: "0.1", Example: "0.2",
		Doc: "the fraction of a re-split key's rate and burst split evenly; in [0, 1]."},
	{Name: "significance", Type: strategy.ParamFloat, Unit: "standard deviations", Default: "3", Example: "2",
		Doc: "how far above its mean the chi-squared statistic of a key's spread must be for the key to be re-split; >= 0."},
	{Name: "min_mean", Type: strategy.ParamFloat, Unit: "tokens per node", Default: "1", Example: "2",
		Doc: "the least mean offered tokens per node in the window for a key to be re-split; >= 0."},
	{Name: "raise_after", Type: strategy.ParamDuration, Default: "max(4*latency_hint, 10ms)", Example: "20ms",
		Doc: "how long after an epoch's decreases its increases are applied."},
	{Name: "units", Type: strategy.ParamInt, Default: "1000", Example: "100",
		Doc: "the rate's resolution, in [1, 1000000]; reduced (down to N) when r/units is below the bucket package's resolution."},
	{Name: "max_wait", Type: strategy.ParamDuration, Default: "0", Example: "1s",
		Doc: "the longest wait waiting mode (SRTM §5.2) grants; 0 turns it off. It lengthens every epoch's raise_after by as much, so that reservations made at a node's old share are due before another node raises its share; at most 1h."},
}
