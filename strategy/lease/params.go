// # Parameters
//
// Declared in Params (strategy.ParamSpec); given as NAME=value in a rule's
// params or --param STRATEGY.NAME=value; the generic partition too.
//
//   - hold (duration, default latency_hint): the owner's ordering buffer.
//   - timeout (duration, default 3*latency_hint + 100ms): how long a holder
//     waits for a verdict, grant or return acknowledgement; positive.
//   - retries (int, default 2): retransmissions within timeout; not negative.
//   - on_timeout (admit | reject | local, default local): the answer to a
//     forwarded request when no verdict comes within timeout: local decides
//     with a local bucket of (r/N, b/N) per key (at most one more envelope
//     while an owner is unreachable), admit is unbounded, reject keeps the
//     envelope exactly and refuses the owner's keys until failure detection
//     moves them.
//   - fail_open (bool): deprecated alias of on_timeout: true = admit, false =
//     reject; an error together with on_timeout.
//   - period (duration, default 250ms): the time a lease is sized for (ask
//     ceil(d*period) tokens); positive.
//   - ttl (duration, default 2*period): a lease's validity from its ask; at
//     least period.
//   - quantum (duration, default period/5): when a key is contended (the
//     holders' asks within ttl, scaled to a quantum, exceed the owner's whole
//     tokens plus its refill over a quantum), the owner grants each holder its
//     share of that supply, in proportion to its ask, for a quantum (at least
//     1 token), and tells it to refuse once the lease is used until its next
//     turn; 0 turns it off (the grant is what was asked for, capped by the
//     bucket).
//   - min_lease (int, tokens, default 4): a node asks for leases only when it
//     expects to use at least this many tokens per period (>= 1); below it the
//     key is decided at the owner, as in owner.
//   - window (duration, default 1s): the demand measurement window; positive.
//   - takeover (duration, default ttl + 1s + max_wait): how long a node that
//     takes over a key with no state to continue from (replicas=1, or no
//     trusted replicated state and a failed warm-up) keeps its bucket empty,
//     and how long a node that answered a warm-up query decides the key as
//     moved to it; at least ttl + max_wait.
//   - conserve_delay (duration, default 2s): under partition: conserve, how
//     long after seeing members missing a node starts deciding a key whose
//     owner it lost (the spread between the sides' failure detectors: the
//     other side may decide the key in full until it sees the cut).
//   - max_skew (duration, default 100ms): how far in the future a peer's time
//     (arrival, ask) may lie; beyond it the message is refused.
//   - max_wait (duration, default 0): the longest wait waiting mode grants
//     (SRTM §5.2), at most 1h; 0 turns waiting mode off. It adds to
//     takeover's default.
//   - replicas (int, default 2): the key's first K nodes in rendezvous order
//     hold its owner's state (level and lent tokens), shipped every sync, so
//     that the node that takes the key over continues from it (or from what
//     its warm-up asks them for); 1 turns replicas and warm-up off (every
//     takeover starts empty); at least 1.
//   - sync (duration, default max(hold, 10ms)): how often the owner ships the
//     states of the keys whose bucket changed to their replicas; positive.
//   - overdraft (bool, default false): charges (costs known after the
//     response: Envoy's apply_on_stream_done hits, limiter's Settle) are taken
//     whatever the key's level, which goes below zero (a debt, at most
//     max_debt); checks are refused until the refill repays it.
//   - max_debt (int, tokens, default burst): with overdraft, the deepest debt
//     of a key (at least 1; setting it turns overdraft on): the part of a
//     charge beyond it is forgiven; a debt of D takes D/r to repay.
package lease

import (
	"slices"

	"github.com/tokenmesh/tokenmesh/strategy"
)

// Params declares lease's parameters (strategy.ParamSpec), read by config
// validation, --param and `tokenmesh strategies`; New reads them (strategy.ReadParams).
var Params = append([]strategy.ParamSpec{
	{Name: "hold", Type: strategy.ParamDuration, Default: "latency_hint", Example: "5ms",
		Doc: "the owner's ordering buffer."},
	{Name: "timeout", Type: strategy.ParamDuration, Default: "3*latency_hint + 100ms", Example: "300ms",
		Doc: "how long a holder waits for a verdict, grant or return acknowledgement; positive."},
	{Name: "retries", Type: strategy.ParamInt, Default: "2", Example: "3",
		Doc: "retransmissions within timeout; not negative."},
	{Name: "on_timeout", Type: strategy.ParamEnum, Enum: []string{"admit", "reject", "local"}, Default: "local", Example: "reject",
		Doc: "the answer to a forwarded request when no verdict comes within timeout: local decides with a local bucket of (r/N, b/N) per key (at most one more envelope while an owner is unreachable), admit is unbounded, reject keeps the envelope exactly and refuses the owner's keys until failure detection moves them."},
	{Name: "fail_open", Type: strategy.ParamBool, Example: "false",
		Doc: "deprecated alias of on_timeout: true = admit, false = reject; an error together with on_timeout."},
	{Name: "period", Type: strategy.ParamDuration, Default: "250ms", Example: "500ms",
		Doc: "the time a lease is sized for (ask ceil(d*period) tokens); positive."},
	{Name: "ttl", Type: strategy.ParamDuration, Default: "2*period", Example: "1s",
		Doc: "a lease's validity from its ask; at least period."},
	{Name: "quantum", Type: strategy.ParamDuration, Default: "period/5", Example: "40ms",
		Doc: "when a key is contended (the holders' asks within ttl, scaled to a quantum, exceed the owner's whole tokens plus its refill over a quantum), the owner grants each holder its share of that supply, in proportion to its ask, for a quantum (at least 1 token), and tells it to refuse once the lease is used until its next turn; 0 turns it off (the grant is what was asked for, capped by the bucket)."},
	{Name: "min_lease", Type: strategy.ParamInt, Unit: "tokens", Default: "4", Example: "8",
		Doc: "a node asks for leases only when it expects to use at least this many tokens per period (>= 1); below it the key is decided at the owner, as in owner."},
	{Name: "window", Type: strategy.ParamDuration, Default: "1s", Example: "2s",
		Doc: "the demand measurement window; positive."},
	{Name: "takeover", Type: strategy.ParamDuration, Default: "ttl + 1s + max_wait", Example: "3s",
		Doc: "how long a node that takes over a key with no state to continue from (replicas=1, or no trusted replicated state and a failed warm-up) keeps its bucket empty, and how long a node that answered a warm-up query decides the key as moved to it; at least ttl + max_wait."},
	{Name: "conserve_delay", Type: strategy.ParamDuration, Default: "2s", Example: "3s",
		Doc: "under partition: conserve, how long after seeing members missing a node starts deciding a key whose owner it lost (the spread between the sides' failure detectors: the other side may decide the key in full until it sees the cut)."},
	{Name: "max_skew", Type: strategy.ParamDuration, Default: "100ms", Example: "200ms",
		Doc: "how far in the future a peer's time (arrival, ask) may lie; beyond it the message is refused."},
	{Name: "max_wait", Type: strategy.ParamDuration, Default: "0", Example: "100ms",
		Doc: "the longest wait waiting mode grants (SRTM §5.2), at most 1h; 0 turns waiting mode off. It adds to takeover's default."},
	{Name: "replicas", Type: strategy.ParamInt, Default: "2", Example: "3",
		Doc: "the key's first K nodes in rendezvous order hold its owner's state (level and lent tokens), shipped every sync, so that the node that takes the key over continues from it (or from what its warm-up asks them for); 1 turns replicas and warm-up off (every takeover starts empty); at least 1."},
	{Name: "sync", Type: strategy.ParamDuration, Default: "max(hold, 10ms)", Example: "20ms",
		Doc: "how often the owner ships the states of the keys whose bucket changed to their replicas; positive."},
}, slices.Clone(strategy.OverdraftSpecs)...)
