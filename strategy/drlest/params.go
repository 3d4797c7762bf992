// # Parameters
//
// Declared in Params (strategy.ParamSpec); given as NAME=value in a rule's
// params or --param STRATEGY.NAME=value; the generic partition too.
//
//   - interval (duration, default 500ms): the period of demand estimates and
//     reports; at least 1ms.
//   - alpha (float, default 0.5): the low-pass filter's weight of the newest
//     interval's rate (GDRL §IV's estimator), in (0, 1].
//   - floor (float, fraction, default 0.1): fps: the fraction of (r, b) split
//     evenly over the live members; in [0, 1].
package drlest

import "github.com/tokenmesh/tokenmesh/strategy"

// Params declares the parameters of grd and fps (strategy.ParamSpec), read
// by config validation, --param and `tokenmesh strategies`; New reads them
// (strategy.ReadParams). floor matters to fps only.
//
//   - interval (duration, default 500ms): the period of demand estimates
//     and reports; at least 1ms.
//   - alpha (float, default 0.5): the low-pass filter's weight of the newest
//     interval's rate (GDRL §IV's estimator), in (0, 1].
//   - floor (float, fraction, default 0.1): fps: the fraction of (r, b)
//     split evenly over the live members; in [0, 1].
var Params = []strategy.ParamSpec{
	{Name: "interval", Type: strategy.ParamDuration, Default: "500ms", Example: "1s",
		Doc: "the period of demand estimates and reports; at least 1ms."},
	{Name: "alpha", Type: strategy.ParamFloat, Default: "0.5", Example: "0.2",
		Doc: "the low-pass filter's weight of the newest interval's rate (GDRL §IV's estimator), in (0, 1]."},
	{Name: "floor", Type: strategy.ParamFloat, Unit: "fraction", Default: "0.1", Example: "0.2",
		Doc: "fps: the fraction of (r, b) split evenly over the live members; in [0, 1]."},
}
