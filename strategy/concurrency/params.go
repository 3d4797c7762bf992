// # Parameters
//
// Declared in Params (strategy.ParamSpec); given as NAME=value in a rule's
// params or --param STRATEGY.NAME=value; the generic partition too.
//
//   - limit (int, permits, default burst): N, the most requests of a key in
//     flight across the cluster (the sum of the weights of its live permits);
//     at least 1. The rule's rate is not used.
//   - permit_ttl (duration, default 10s): how long a permit lives when it is
//     not released: a holder must be done within it (a crashed holder's permit
//     comes back after it); also how long a node refuses the keys it takes
//     over (after it starts or its view of the members changes) so that the
//     permits of their former owner have lapsed; positive, at most 1h.
//   - timeout (duration, default 3*latency_hint + 100ms): how long a node
//     waits for the owner's verdict on a forwarded acquire before it refuses
//     the request (a verdict that comes later is released at once); positive.
package concurrency

import "github.com/tokenmesh/tokenmesh/strategy"

// Params declares concurrency's parameters (strategy.ParamSpec), read by
// config validation, --param and `tokenmesh strategies`; New reads them
// (strategy.ReadParams).
var Params = []strategy.ParamSpec{
	{Name: "limit", Type: strategy.ParamInt, Unit: "permits", Default: "burst", Example: "10",
		Doc: "N, the most requests of a key in flight across the cluster (the sum of the weights of its live permits); at least 1. The rule's rate is not used."},
	{Name: "permit_ttl", Type: strategy.ParamDuration, Default: "10s", Example: "2s",
		Doc: "how long a permit lives when it is not released: a holder must be done within it (a crashed holder's permit comes back after it); also how long a node refuses the keys it takes over (after it starts or its view of the members changes) so that the permits of their former owner have lapsed; positive, at most 1h."},
	{Name: "timeout", Type: strategy.ParamDuration, Default: "3*latency_hint + 100ms", Example: "300ms",
		Doc: "how long a node waits for the owner's verdict on a forwarded acquire before it refuses the request (a verdict that comes later is released at once); positive."},
}
