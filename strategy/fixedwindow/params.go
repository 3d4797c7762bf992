// # Parameters
//
// Declared in Params (strategy.ParamSpec); given as NAME=value in a rule's
// params or --param STRATEGY.NAME=value; the generic partition too.
//
//   - align (duration, default 0): windows start where now + align is a
//     multiple of the window; the server sets it so that windows are
//     Unix-aligned like envoyproxy/ratelimit's.
//   - timeout (duration, default 3*latency_hint + 100ms): how long a
//     forwarding node waits for the verdict; positive.
//   - fail_open (bool, default true): the answer when no verdict comes.
package fixedwindow

import "github.com/tokenmesh/tokenmesh/strategy"

// Params declares fixedwindow's parameters (strategy.ParamSpec), read by
// config validation, --param and `tokenmesh strategies`; New reads them (strategy.ReadParams).
var Params = []strategy.ParamSpec{
	{Name: "align", Type: strategy.ParamDuration, Default: "0", Example: "250ms",
		Doc: "windows start where now + align is a multiple of the window; the server sets it so that windows are Unix-aligned like envoyproxy/ratelimit's."},
	{Name: "timeout", Type: strategy.ParamDuration, Default: "3*latency_hint + 100ms", Example: "300ms",
		Doc: "how long a forwarding node waits for the verdict; positive."},
	{Name: "fail_open", Type: strategy.ParamBool, Default: "true", Example: "false",
		Doc: "the answer when no verdict comes."},
}
