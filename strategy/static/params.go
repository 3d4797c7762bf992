// # Parameters
//
// Declared in Params (strategy.ParamSpec); given as NAME=value in a rule's
// params or --param STRATEGY.NAME=value; the generic partition too.
//
//   - overdraft (bool, default false): charges (costs known after the
//     response: Envoy's apply_on_stream_done hits, limiter's Settle) are taken
//     whatever the key's level, which goes below zero (a debt, at most
//     max_debt); checks are refused until the refill repays it.
//   - max_debt (int, tokens, default burst): with overdraft, the deepest debt
//     of a key (at least 1; setting it turns overdraft on): the part of a
//     charge beyond it is forgiven; a debt of D takes D/r to repay.
package static

import (
	"slices"

	"github.com/tokenmesh/tokenmesh/strategy"
)

// Params declares static's parameters: the overdraft ones
// (strategy.OverdraftSpecs; each node takes its share of max_debt), besides
// the generic partition.
var Params = slices.Clone(strategy.OverdraftSpecs)
