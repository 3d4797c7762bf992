// # Parameters
//
// Declared in Params (strategy.ParamSpec); given as NAME=value in a rule's
// params or --param STRATEGY.NAME=value; the generic partition too.
//
//   - hold (duration, default latency_hint): the primary's ordering buffer: a
//     request is decided once it is this old (003).
//   - timeout (duration, default 3*latency_hint + 100ms): how long a
//     forwarding node waits for the verdict; positive.
//   - retries (int, default 2): retransmissions of a forwarded request within
//     timeout; not negative.
//   - on_timeout (admit | reject | local, default local): the answer when no
//     verdict comes: local decides with a local bucket of (r/N, b/N) and keeps
//     the envelope, admit lets a dead owner's keys go unlimited, reject
//     refuses them.
//   - fail_open (bool): deprecated alias of on_timeout: true = admit, false =
//     reject; an error together with on_timeout.
//   - suspect (duration, default 1s): after a timeout, how long requests for
//     that owner's keys are answered by on_timeout at once.
//   - replicas (int, nodes, default 2): the nodes holding each key's level (K
//     >= 1); 1 keeps it on the primary only.
//   - sync (duration, default max(hold, 10ms)): how often the primary ships
//     changed levels to the replicas; positive.
//   - conserve_delay (duration, default 2s): under partition: conserve, how
//     long after seeing members missing a node starts deciding a key whose
//     owner it lost (the spread between the sides' failure detectors: the
//     other side may decide the key in full until it sees the cut).
//   - warmup (duration, default 1s): after joining or a membership change, how
//     long a key without a level is first asked of its possible holders.
//   - slack (duration, default 1s): how far in the future a peer's level may
//     be valid (clock skew) before it is refused.
//   - split (string, sub-buckets, default 1): each key's (r, b) is split over
//     K in [1, 64] sub-buckets, each owned on its own; every node of a rule
//     must use the same split. auto: K follows each key's measured rate, K =
//     ceil(rate / server_quota) in [1, min(64, live nodes, burst)], on the
//     key's first K nodes in rendezvous order (autosplit.go; needs
//     server_quota, implies split_placement=distinct).
//   - server_quota (float, tokens/s): the throttling article's preset
//     per-server quota: sets split to K = ceil(rate / server_quota) (at most
//     64), so each of a key's K sub-buckets decides at most server_quota
//     tokens/s; K comes from the rule's rate, not from measured traffic; an
//     error together with a numeric split. With split=auto: the quota of
//     offered tokens/s per node that sets each key's K from its measured rate.
//   - split_window (duration, default 1s): with split=auto, how often a key's
//     first node measures its offered rate and may change K (up when the rate
//     exceeds K*server_quota, down when it is at most 3/4 of
//     (K-1)*server_quota in this window and the one before).
//   - split_placement (independent | distinct, default independent): with
//     split > 1, where the sub-buckets are owned: independent places each
//     sub-key by its own rendezvous pick (two can share a node), distinct puts
//     sub-bucket i on the i-th node of the key's rendezvous order, so K <= N
//     sub-buckets sit on K distinct nodes (the throttling article's K servers
//     per tenant); every node of a rule must use the same placement.
//   - overdraft (bool, default false): charges (costs known after the
//     response: Envoy's apply_on_stream_done hits, limiter's Settle) are taken
//     whatever the key's level, which goes below zero (a debt, at most
//     max_debt); checks are refused until the refill repays it.
//   - max_debt (int, tokens, default burst): with overdraft, the deepest debt
//     of a key (at least 1; setting it turns overdraft on): the part of a
//     charge beyond it is forgiven; a debt of D takes D/r to repay.
package owner

import (
	"slices"

	"github.com/tokenmesh/tokenmesh/strategy"
)

// Params declares owner's parameters (strategy.ParamSpec), read by config
// validation, --param and `tokenmesh strategies`; New reads them (strategy.ReadParams; see its
// doc for the full story of each).
var Params = append([]strategy.ParamSpec{
	{Name: "hold", Type: strategy.ParamDuration, Default: "latency_hint", Example: "5ms",
		Doc: "the primary's ordering buffer: a request is decided once it is this old (003)."},
	{Name: "timeout", Type: strategy.ParamDuration, Default: "3*latency_hint + 100ms", Example: "300ms",
		Doc: "how long a forwarding node waits for the verdict; positive."},
	{Name: "retries", Type: strategy.ParamInt, Default: "2", Example: "3",
		Doc: "retransmissions of a forwarded request within timeout; not negative."},
	{Name: "on_timeout", Type: strategy.ParamEnum, Enum: []string{"admit", "reject", "local"}, Default: "local", Example: "reject",
		Doc: "the answer when no verdict comes: local decides with a local bucket of (r/N, b/N) and keeps the envelope, admit lets a dead owner's keys go unlimited, reject refuses them."},
	{Name: "fail_open", Type: strategy.ParamBool, Example: "false",
		Doc: "deprecated alias of on_timeout: true = admit, false = reject; an error together with on_timeout."},
	{Name: "suspect", Type: strategy.ParamDuration, Default: "1s", Example: "2s",
		Doc: "after a timeout, how long requests for that owner's keys are answered by on_timeout at once."},
	{Name: "replicas", Type: strategy.ParamInt, Unit: "nodes", Default: "2", Example: "3",
		Doc: "the nodes holding each key's level (K >= 1); 1 keeps it on the primary only."},
	{Name: "sync", Type: strategy.ParamDuration, Default: "max(hold, 10ms)", Example: "20ms",
		Doc: "how often the primary ships changed levels to the replicas; positive."},
	{Name: "conserve_delay", Type: strategy.ParamDuration, Default: "2s", Example: "3s",
		Doc: "under partition: conserve, how long after seeing members missing a node starts deciding a key whose owner it lost (the spread between the sides' failure detectors: the other side may decide the key in full until it sees the cut)."},
	{Name: "warmup", Type: strategy.ParamDuration, Default: "1s", Example: "500ms",
		Doc: "after joining or a membership change, how long a key without a level is first asked of its possible holders."},
	{Name: "slack", Type: strategy.ParamDuration, Default: "1s", Example: "2s",
		Doc: "how far in the future a peer's level may be valid (clock skew) before it is refused."},
	{Name: "split", Type: strategy.ParamString, Unit: "sub-buckets", Default: "1", Example: "4",
		Doc: "each key's (r, b) is split over K in [1, 64] sub-buckets, each owned on its own; every node of a rule must use the same split. auto: K follows each key's measured rate, K = ceil(rate / server_quota) in [1, min(64, live nodes, burst)], on the key's first K nodes in rendezvous order (autosplit.go; needs server_quota, implies split_placement=distinct)."},
	{Name: "server_quota", Type: strategy.ParamFloat, Unit: "tokens/s", Example: "100",
		Doc: "the throttling article's preset per-server quota: sets split to K = ceil(rate / server_quota) (at most 64), so each of a key's K sub-buckets decides at most server_quota tokens/s; K comes from the rule's rate, not from measured traffic; an error together with a numeric split. With split=auto: the quota of offered tokens/s per node that sets each key's K from its measured rate."},
	{Name: "split_window", Type: strategy.ParamDuration, Default: "1s", Example: "500ms",
		Doc: "with split=auto, how often a key's first node measures its offered rate and may change K (up when the rate exceeds K*server_quota, down when it is at most 3/4 of (K-1)*server_quota in this window and the one before)."},
	{Name: "split_placement", Type: strategy.ParamEnum, Enum: []string{placementIndependent, placementDistinct}, Default: placementIndependent, Example: placementDistinct,
		Doc: "with split > 1, where the sub-buckets are owned: independent places each sub-key by its own rendezvous pick (two can share a node), distinct puts sub-bucket i on the i-th node of the key's rendezvous order, so K <= N sub-buckets sit on K distinct nodes (the throttling article's K servers per tenant); every node of a rule must use the same placement."},
}, slices.Clone(strategy.OverdraftSpecs)...)
