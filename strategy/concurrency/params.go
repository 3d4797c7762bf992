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
//   - lease (int, permits, default 0): K > 0 leases permits to nodes where a
//     key is hot: a node that forwarded K acquires of a key within lease_ttl
//     asks its owner for a lease of up to K slots and grants the key's permits
//     itself from it until lease_ttl after it asked, with no round trip; the
//     owner counts the slots until lease_ttl + permit_ttl (less those
//     returned). It lengthens the takeover wait to permit_ttl + lease_ttl. 0
//     (off) to limit.
//   - lease_ttl (duration, default 1s): how long a lessee grants from a lease
//     (from its ask); also the hot window. Positive, at most 1h.
//   - join_wait (duration, default permit_ttl (+ lease_ttl with leases)): how
//     much longer than permit_ttl (+ lease_ttl) a node that starts waits
//     before it grants: the peers, until their failure detector sees it
//     (back), still grant its keys as their owner, and those permits lapse
//     permit_ttl after they see it. With the default, a restart or join seen
//     by every peer within permit_ttl never takes a key above N; 0 leaves the
//     split of a restart (up to 2N for permit_ttl). In [0, 1h].
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
	{Name: "lease", Type: strategy.ParamInt, Unit: "permits", Default: "0", Example: "4",
		Doc: "K > 0 leases permits to nodes where a key is hot: a node that forwarded K acquires of a key within lease_ttl asks its owner for a lease of up to K slots and grants the key's permits itself from it until lease_ttl after it asked, with no round trip; the owner counts the slots until lease_ttl + permit_ttl (less those returned). It lengthens the takeover wait to permit_ttl + lease_ttl. 0 (off) to limit."},
	{Name: "lease_ttl", Type: strategy.ParamDuration, Default: "1s", Example: "500ms",
		Doc: "how long a lessee grants from a lease (from its ask); also the hot window. Positive, at most 1h."},
	{Name: "join_wait", Type: strategy.ParamDuration, Default: "permit_ttl (+ lease_ttl with leases)", Example: "0s",
		Doc: "how much longer than permit_ttl (+ lease_ttl) a node that starts waits before it grants: the peers, until their failure detector sees it (back), still grant its keys as their owner, and those permits lapse permit_ttl after they see it. With the default, a restart or join seen by every peer within permit_ttl never takes a key above N; 0 leaves the split of a restart (up to 2N for permit_ttl). In [0, 1h]."},
	{Name: "timeout", Type: strategy.ParamDuration, Default: "3*latency_hint + 100ms", Example: "300ms",
		Doc: "how long a node waits for the owner's verdict on a forwarded acquire before it refuses the request (a verdict that comes later is released at once); positive."},
}
