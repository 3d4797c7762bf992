// # Parameters
//
// The strategy takes no parameters besides the generic partition.
package static

import "github.com/tokenmesh/tokenmesh/strategy"

// Params declares static's parameters: none (besides the generic partition).
var Params = []strategy.ParamSpec{}
