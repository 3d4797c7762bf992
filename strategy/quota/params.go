// # Parameters
//
// Declared in Params (strategy.ParamSpec); given as NAME=value in a rule's
// params or --param STRATEGY.NAME=value; the generic partition too.
//
//   - ttl (duration, default 2s): how long an assignment is valid at its
//     client from receipt (RLQS assignment_time_to_live, whole seconds, at
//     least 1s); the owner renews every renew_every.
//   - apply_lag (duration, default 500ms): the longest time from a client's
//     node writing an assignment to the client's stream to the client applying
//     it; what a cut frees is held until apply_lag after that node confirms
//     the write (else until the replaced assignment expires); the bound
//     assumes it; positive, below ttl/2.
//   - renew_every (duration, default ttl/2): how often the owner sends an
//     unchanged assignment again (Envoy renews the TTL of an identical bucket)
//     and replicates the key's allocation; shorter lets the node that takes a
//     crashed owner's key over renew more of its clients at once (an
//     assignment is renewed only while the renewal surely arrives before it
//     expires), at more stream and peer messages; 50ms to ttl/2.
//   - headroom (float, default 1.25): a client's target rate is its reported
//     demand times headroom (max-min fair over the clients), so that a growing
//     demand is met before the next report; at least 1.
//   - timeout (duration, default 3*latency_hint + 100ms): how long a node
//     waits for the owner's verdict on a request it forwarded; refused after
//     it; positive.
//   - max_skew (duration, default 100ms): how far in the future a peer's time
//     (arrival, expiry) may lie; beyond it the message is refused.
//   - abandon_idle (duration, default 10s): a client whose reports show no
//     request for a key for this long is told to forget it (an RLQS
//     AbandonAction) and its share is taken back; its next request starts the
//     bucket anew. 0: never.
//   - replicas (int, default 2): the key's first K nodes in rendezvous order
//     hold its owner's allocation (sent with every change and at least every
//     renew_every), so that the node that takes the key over continues from it
//     instead of freezing the key; 1 turns replicas and hand-overs off (every
//     takeover freezes); 1 to 8.
//   - replica_wait (duration, default 100ms): how long after it sees a crashed
//     owner leave the view a successor waits before it adopts the owner's
//     replica (the longest one-way peer delay assumed: every replica sent
//     before the crash has arrived); the key is frozen meanwhile; 0 to ttl.
//   - replica_age (duration, default 5s): a crashed owner's replica older than
//     this at the view change that moves the key here is not adopted (the key
//     freezes instead); at least renew_every.
package quota

import "github.com/tokenmesh/tokenmesh/strategy"

// Params declares quota's parameters (strategy.ParamSpec), read by config
// validation, --param and `tokenmesh strategies`; New reads them
// (strategy.ReadParams). The package doc explains each one's part in the
// bound.
var Params = []strategy.ParamSpec{
	{Name: "ttl", Type: strategy.ParamDuration, Default: "2s", Example: "4s",
		Doc: "how long an assignment is valid at its client from receipt (RLQS assignment_time_to_live, whole seconds, at least 1s); the owner renews every renew_every."},
	{Name: "apply_lag", Type: strategy.ParamDuration, Default: "500ms", Example: "200ms",
		Doc: "the longest time from a client's node writing an assignment to the client's stream to the client applying it; what a cut frees is held until apply_lag after that node confirms the write (else until the replaced assignment expires); the bound assumes it; positive, below ttl/2."},
	{Name: "renew_every", Type: strategy.ParamDuration, Default: "ttl/2", Example: "500ms",
		Doc: "how often the owner sends an unchanged assignment again (Envoy renews the TTL of an identical bucket) and replicates the key's allocation; shorter lets the node that takes a crashed owner's key over renew more of its clients at once (an assignment is renewed only while the renewal surely arrives before it expires), at more stream and peer messages; 50ms to ttl/2."},
	{Name: "headroom", Type: strategy.ParamFloat, Default: "1.25", Example: "1.5",
		Doc: "a client's target rate is its reported demand times headroom (max-min fair over the clients), so that a growing demand is met before the next report; at least 1."},
	{Name: "timeout", Type: strategy.ParamDuration, Default: "3*latency_hint + 100ms", Example: "300ms",
		Doc: "how long a node waits for the owner's verdict on a request it forwarded; refused after it; positive."},
	{Name: "max_skew", Type: strategy.ParamDuration, Default: "100ms", Example: "200ms",
		Doc: "how far in the future a peer's time (arrival, expiry) may lie; beyond it the message is refused."},
	{Name: "abandon_idle", Type: strategy.ParamDuration, Default: "10s", Example: "30s",
		Doc: "a client whose reports show no request for a key for this long is told to forget it (an RLQS AbandonAction) and its share is taken back; its next request starts the bucket anew. 0: never."},
	{Name: "replicas", Type: strategy.ParamInt, Default: "2", Example: "3",
		Doc: "the key's first K nodes in rendezvous order hold its owner's allocation (sent with every change and at least every renew_every), so that the node that takes the key over continues from it instead of freezing the key; 1 turns replicas and hand-overs off (every takeover freezes); 1 to 8."},
	{Name: "replica_wait", Type: strategy.ParamDuration, Default: "100ms", Example: "50ms",
		Doc: "how long after it sees a crashed owner leave the view a successor waits before it adopts the owner's replica (the longest one-way peer delay assumed: every replica sent before the crash has arrived); the key is frozen meanwhile; 0 to ttl."},
	{Name: "replica_age", Type: strategy.ParamDuration, Default: "5s", Example: "10s",
		Doc: "a crashed owner's replica older than this at the view change that moves the key here is not adopted (the key freezes instead); at least renew_every."},
}
