// Package quota implements the `quota` strategy: the key's owner, chosen
// by rendezvous hashing over the live members, divides the key's one token
// bucket (r, b) among quota clients — Envoy proxies speaking the Rate Limit
// Quota Service (RLQS), attached to any node — by their reported demand,
// and each client enforces its share locally as a token bucket: no call
// per request. Requests checked at the nodes (RLS, tokenmesh.v1) are
// decided at the owner from the reserve, the part of (r, b) that no client
// holds, so RLS and RLQS checks of one key draw on the same bucket.
//
// Sources, and what is ours:
//   - The owner is seed 003's designated server ("Throttling in Distributed
//     Systems": one server per tenant found by consistent hashing, whose
//     local view is the global view), found as in strategy/owner.
//   - A share is an exactly conserved capacity transfer of GDRL (seeds
//     001/004: a node's share of the rate and burst moves, nothing is
//     created on the way), made to a client instead of a node; sizing the
//     shares max-min fairly by demand is SRTM's Step (2) (seed 000 §4.2,
//     max-min quota) over the clients. Everything about Envoy's behaviour
//     and the bound below is ours.
//
// # The allocation (alloc.go)
//
// The rule's rate is counted in units, whole tokens per fill interval S
// (whole seconds, the shortest with r*S >= 100 tokens; fixed per rule,
// because Envoy compares only the nanos of fill_interval and changes rates
// through tokens_per_fill): U = floor(r*S). A client's share is (u_i
// tokens per S, b_i tokens of burst), sent as an RLQS token_bucket
// (tokens_per_fill u_i, fill_interval S, max_tokens b_i) with a TTL. At
// every report, and when a cut has applied or a renewal is due, the owner
// water-fills U over the wants — ceil(d_i * headroom * S) for a client that
// reported a demand d_i = (allowed + denied) / time_elapsed tokens/s (an
// estimate over reports: smooth), at least 1, or, when those wants exceed
// U (oversubscribed), d_i * S rounded to the nearest unit; all of U for a client whose demand is not known yet (Envoy's
// first report has time_elapsed 0); and the demand of the requests
// checked at the nodes for the reserve — and gives bursts in proportion to
// units (at least 1 token a client while the burst lasts). A key's first
// client waits `gather` (100 ms) for its first assignment, so that the
// first reports of its fellow clients (Envoy reports a bucket at its
// first request) are divided at once instead of each newcomer cutting the
// ones before it.
//
// Conservation, the invariant the bound rests on:
//   - Rate: the units held by shares, plus the units of cuts not yet
//     applied, plus the reserve's refill rate (in units) equal U; a raise
//     takes only free units.
//   - Burst: likewise for bursts; and a share's burst grows only by tokens
//     taken from the reserve's level (Envoy keeps a changed bucket's fill
//     ratio and starts a first one full, so a raise of Δ hands the client
//     up to Δ tokens at once). A client's first assignment is sent only
//     once its burst is paid; until then its target units stay in the
//     reserve, whose refill pays it.
//   - A cut (smaller units or burst) is sent at once; what it frees is
//     counted as held until the client surely applied it: apply_lag after
//     the client's node confirms it wrote the cut to the client's stream
//     (QuotaAck, from the RLQS server's successful write: Quoter.Delivered),
//     or, without that confirmation (the stream broke, the node restarted
//     unseen, the message was lost), until the assignment the cut replaced
//     has expired at the client (its last sending + ttl + apply_lag). A
//     client whose stream ended (Detach), whose node left, or whose node
//     no longer knows it (an assignment for an unknown client is answered
//     with a detach) is no longer renewed, and its share is counted until
//     its assignment has surely expired.
//
// The bound: if every assignment a node writes to a client's live stream
// is applied by the client within apply_lag of the write (the stream's
// delivery: milliseconds on a LAN; default 500 ms), the clients and the reserve
// together admit at most b + r*T tokens of a key in any window of length
// T, exactly: the tokens in the clients' buckets and the reserve never
// exceed b (bursts are conserved), every raise is paid with tokens the
// reserve held, a cut only destroys tokens, and the refill rates sum to at
// most U/S <= r. Envoy's own float arithmetic in its token bucket is
// outside (well under a token). An assignment applied later than
// apply_lag after its write adds at most its freed units/S times the
// lateness, plus its freed burst. The property test (property_test.go)
// checks the bound exactly with random demands, lags, crashes and
// restarts (also restarts faster than failure detection). What a client
// admits on its own after its assignment expired
// (expired_assignment_behavior, or no_assignment_behavior before the
// first answer reaches it) is the operator's fallback and outside the
// bound: set DENY_ALL, or a token bucket small enough for the fleet. A
// client whose first token bucket is not paid yet is sent a DENY_ALL
// blanket rule at once, renewed every ttl/2 (strategy.QuotaAssignment
// DenyAll), so that Envoy's default no_assignment_behavior, ALLOW_ALL,
// decides only until that first answer arrives.
//
// Idle clients: a client whose reports show no request for abandon_idle
// (10 s) is told to forget the key (an RLQS AbandonAction) and its share
// is counted as a release, as a cut's; Envoy reports the bucket again at
// its next request, which starts a new share (a DENY_ALL blanket rule at
// once, then a paid token bucket). Without it, Envoy reports every bucket
// it ever saw for as long as the stream lives, and every one is renewed.
//
// Renewals: an unchanged assignment is sent again every ttl/2 (Envoy only
// renews the TTL of an identical bucket); apply_lag < ttl/2 makes a
// renewal arrive before the TTL ends, so that a client never restarts from
// a full bucket that nobody paid for.
//
// # Takeover
//
// The owner's allocation is not replicated (yet): a node that starts owning
// a key (a restart, or a view change in which another node owned it)
// treats the key's bucket as emptied at the end of takeover = ttl +
// apply_lag + 1 s + max_skew after that change (as lease's conservative
// start does). Until then the key is frozen: its reserve empty and not
// refilling, no raise and no new client, while the nodes whose clients
// hold the key's assignments report them (every report carries what its
// client holds, and every node re-reports its clients to the owner it sees
// after a change), and the new owner counts and renews them as they are.
// By the end of takeover every assignment the previous owner made and
// nobody reported has expired at its client (it renewed for at most a
// failure detector's delay, 1 s, after the change). When the previous
// owner left the view (a crash or a drain) it renewed nothing after its
// death, which came before the change: takeover is then ttl + apply_lag
// + max_skew (one alive but cut off from this node is a partition, below). After it, the reserve
// refills from empty (an allocation created later starts refilled since
// then). The old owner's admissions, up to the change, conformed; the new
// ones start from nothing: together within b + r*T. The price: a new
// client, or a raise, waits up to takeover after an owner change, then for
// the refill, and the requests checked at the nodes are refused meanwhile.
// Two nodes that both believe they own a key (views that disagree longer
// than takeover: a partition) may both hand out capacity, as in `owner`.
//
// Requests checked at a node that does not own the key are forwarded to
// the owner and refused when no verdict comes within timeout (no local
// fallback: the envelope holds exactly).
//
// The parameters are listed in the "# Parameters" section below (declared
// in Params, params.go).
package quota
