// # Parameters
//
// The strategy takes no parameters besides the generic partition.
package local

import "github.com/tokenmesh/tokenmesh/strategy"

// Params declares the parameters of local and central: none (besides the
// generic partition).
var Params = []strategy.ParamSpec{}
