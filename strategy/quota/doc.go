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
//   - The owner is the throttling article's designated server ("Throttling in Distributed
//     Systems": one server per tenant found by consistent hashing, whose
//     local view is the global view), found as in strategy/owner.
//   - A share is an exactly conserved capacity transfer of GDRL (seeds
//     001/004: a node's share of the rate and burst moves, nothing is
//     created on the way), made to a client instead of a node; sizing the
//     shares max-min fairly by demand is SRTM's Step (2) (SRTM §4.2,
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
// estimate over reports, weighing a report over elapsed 1 -
// e^(-elapsed/2.5s): smooth), at least 1, or, when those wants exceed U
// (oversubscribed), d_i * S rounded to the nearest unit; all of U for a
// client whose demand is not known yet (Envoy's first report has
// time_elapsed 0); and the demand of the requests checked at the nodes
// for the reserve. A sent share that got its want keeps its units while
// the want is within the cut's hysteresis of them (sticky: the noise of a
// demand estimate moves no unit, and no other share is cut to pay for
// it). Bursts go by need: every share with units gets 3 tokens first
// (Envoy admits only from a whole token: a bucket of 1 loses its refill
// whenever it is full), then the rest of b in proportion to units times
// (units / (d_i * S))^2 for a share held below its demand (saturated:
// its bucket stays empty, a burst would idle there) and to units for the
// others (a client at about its demand loses about d_i / (2 * burst)
// tokens/s to a full bucket between its Poisson arrivals) — while some
// client is at about its demand (at most 1.25 times its units), else all
// in proportion to units (the noise of saturated clients' estimates
// would reshuffle bursts that none of them keeps); units no one takes
// keep their burst in the reserve. A key's first
// client waits `gather` (100 ms) for its first assignment, so that the
// first reports of its fellow clients (Envoy reports a bucket at its
// first request) are divided at once instead of each newcomer cutting the
// ones before it. Where the tokens go, measured: docs/RLQS.md
// (TestSkewedFleetLoss).
//
// Conservation, the invariant the bound rests on:
//   - Rate: the units held by shares, plus the units of cuts not yet
//     applied, plus the reserve's refill rate (in units) equal U; a raise
//     takes only free units.
//   - Burst: likewise for bursts; and a share's burst grows only by tokens
//     taken from the reserve's level (Envoy keeps a changed bucket's fill
//     ratio and starts a first one full, so a raise of Δ hands the client
//     up to Δ tokens at once). A client's first assignment is sent only
//     once its burst is paid (at least a token of it; the units follow the
//     part paid); until then its target units stay in the reserve, whose
//     refill pays it. First assignments are paid before the sent shares
//     below their targets are raised, the bursts below half their targets
//     (starved) before the other sent ones, whose bursts are raised only
//     beyond the cut's hysteresis; a sent share whose burst is starved
//     takes units up to twice the part paid (starvedBurst): with every
//     unit held the reserve refills nothing, and a share paid a token at a
//     time after a takeover kept a burst of 1 (ours; measured after an
//     owner's kill, # Takeover), and a client that came after the others'
//     first assignments kept one of 3-6 (the skewed fleet with its
//     clients' first requests at Poisson times: 94.9 % of the ceiling at
//     1 s reports with a quarter, 95.6 % with half; TestSkewedFleetLoss).
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
// checks the bound exactly with random demands, lags, crashes (of the
// key's owner among them) and restarts (also restarts faster than failure
// detection), with replicas 1 (every takeover freezes), 2 and 3 (the
// successors adopt replicas and hand-overs; # Takeover). What a client
// admits on its own after its assignment expired
// (expired_assignment_behavior, or no_assignment_behavior before the
// first answer reaches it) is the operator's fallback and outside the
// bound: set DENY_ALL, or a token bucket small enough for the fleet. A
// client whose first token bucket is not paid yet is sent a DENY_ALL
// blanket rule at once, renewed every renew_every, ttl/2 by default (strategy.QuotaAssignment
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
// Renewals: an unchanged assignment is sent again every renew_every (Envoy only
// renews the TTL of an identical bucket); renew_every <= ttl/2 and
// apply_lag < ttl/2 make a
// renewal arrive before the TTL ends, so that a client never restarts from
// a full bucket that nobody paid for.
//
// # Takeover
//
// Replication (replica.go). Ours; the replica set (the key's next nodes in
// rendezvous order, the throttling article's K servers per tenant) and a successor that
// continues from the replicated state instead of starting anew are
// strategy/owner's and strategy/lease's; what is replicated, the
// confirmation of the clients' assignments, the reserve's start and the
// bound below are ours. The owner sends each key's allocation (QuotaReplica:
// the reserve's whole tokens and their time, every share's units, burst,
// sending, expiry, demand, client and node, the pending releases with
// their times, its own takeover, the rule's geometry) to the key's next
// replicas-1 nodes in rendezvous order with every change (an assignment
// sent, a renewal among them, a cut confirmed, a release settled) and at
// least every ttl/2 while it holds the key (a key decided only at the
// nodes: at a decision, at most every ttl/2), in the same batch as the
// assignments it sends. When a view change moves a key away, the old owner
// sends its final state, marked handover, to the new owner and decides the
// key no more. A node takes a key over (a restart, or a view change in
// which another node owned it) from:
//   - a hand-over, sent after the change began (views converge within
//     1 s + max_skew), at once: the shares and releases as they are, the
//     reserve's whole tokens at the hand-over's time, refilled since. Exact:
//     the old owner's decisions end where the new one's begin, from the
//     same state (less than a token lost to the floor).
//   - a crashed owner's replica (its sender left the view; taken at most
//     replica_age, 5 s, before the change), replica_wait (100 ms) after the
//     change, the key frozen until then: every share and release counted as
//     held, the reserve empty at the change (its level at the replica's time
//     less what the owner could have taken since: requests checked at the
//     nodes are not replicated one by one, so all of it, and its refill
//     until its death, before the change), refilling from there. A share
//     whose renewal surely reaches its client before the assignment the
//     client holds expires there (sent + ttl > now + apply_lag) is renewed
//     at once, and a node that still sees the dead owner applies such a
//     renewal (an identical token bucket, unexpired: Envoy only renews its
//     TTL; Quota.renewsHeld); such a share is renewed as it is, neither cut
//     nor raised, until its node reports to the new owner (a changed
//     assignment would be dropped by a node that still sees the dead owner,
//     and the next one could reach the client after its old one expired:
//     the property test found it). A node that does not yet see the new
//     owner as a member (it restarted and rejoined, say) drops its
//     renewals, so only the previous owner's last send counts: the share
//     is renewed only while a renewal surely reaches the client before
//     that send + ttl, then waits for its node's report like the others,
//     and its node's first report to the new owner is taken as a
//     confirmation (share.pinnedUntil; the property test found a renewal
//     that reached its client 0.4 ms after the expiry, after one dropped
//     in a hand-over to a node that had just restarted). Any other share
//     waits for its node's report:
//     renewed if the client holds the replica's assignment long enough,
//     else released (the larger of the two, until both have surely
//     expired) and the client starts anew from a paid first assignment
//     (Envoy would start a renewal that arrives after the expiry full).
//
// Replicas are bounded and checked: one holds at most 4,096 shares and
// releases (a bigger allocation is not replicated: its successor freezes
// the key); a node keeps those of at most 65,536 keys and 2^20 shares and
// releases in all, dropping the ones older than replica_age before it
// refuses one; a replica of another geometry, with times after its own +
// ttl + apply_lag + max_skew, tokens beyond the key's, a share twice or
// shares that together hold more than the key is refused with an error
// naming the value, and changes nothing (Quota.recordOf).
//
// The bound with a replica: if, besides apply_lag, every replica the owner
// sent before it died reaches the successor within replica_wait of the
// successor seeing the crash (a one-way peer delay within replica_wait,
// nothing lost), the clients and the reserve admit at most b + r*T in any
// window T, exactly, across the crash: the adopted replica is the owner's
// last state, so the successor counts every share and release a client may
// hold until it has surely expired or been replaced; the owner decided
// nothing after its death, before the change, and the successor's reserve
// starts empty at the change; the refill rates of the clients and the
// reserve sum to at most U/S <= r throughout (one bucket's history); and
// no renewal reaches a client after its assignment expired. Replication
// lag (the change seen before the last replicas arrived, replicas lost)
// adds, per assignment the owner sent after the adopted state: for a raise
// (or a new share) not in it, its burst increase plus its units increase
// over S times the time until the client's node reports it (which releases
// the larger of the two) or its assignment expires, at most ttl + apply_lag;
// for a cut not in it, at most the burst the cut freed (the successor's
// renewal of the old size hands it back: Envoy keeps the fill ratio). The
// property test checks the exact bound with replica_wait at the world's
// longest hop; it does not measure the lag term.
//
// Without a replica to adopt — replicas=1, a successor that was not among
// the owner's replicas (both crashed), a replica older than replica_age, a
// key the previous owner held no allocation for (idle there, or never
// used), a restart faster than failure detection (nothing handed over), a
// hand-over that does not come (lost) — a node that starts owning a key
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
// than takeover: a partition; or a successor that believes a live owner
// dead, which adopts its replica at once) may both hand out capacity, as
// in `owner`; a node then also applies the second owner's identical
// renewals.
//
// Warm-up (warmup.go; strategy/lease's warm-up made quota's). Every node
// of the live runtime starts after time 0 and so counts as restarted: each
// key it owned was frozen for takeover after a cluster's start (a 3-node
// bench under a limit it could not reach refused 16,507 of 46,591 checks
// in 5 s, all 2,160 in 1 s). Now a node about to make a key's allocation
// frozen (or not yet refilled) — it started lately, or a view change moved
// the key to it — that has no replica or hand-over of the key and did not
// itself answer a query for it nor drop its state lately, with replicas >=
// 2, first asks the nodes that may hold the key's state (QuotaStateQuery):
// the live members among the key's first `replicas` nodes in its current
// view, in each view before a recent change (but a view of itself alone:
// a starting node sees itself alone before it joins, and only it decided
// there) and, after its start, in its view without itself. The key's
// requests (checked here or forwarded) and reports wait; each node answers
// (QuotaState) "none" when it holds no allocation of the key, no replica,
// no warm-up of its own, and dropped none of these within takeover + fill
// time (a hand-over sent, a replica swept, an owner's notice that its
// allocation is too large to replicate); answering "none" it decides the
// key, should it own it, as moved to it at the answer. When every node
// asked said "none" the key starts with its reserve full, as one central
// bucket would (and starts full again without asking when its allocation,
// dropped as idle, that is full, is made again with no view change
// since); an answer "some", no answer within timeout/2, or a view
// change after which the key's state may be nowhere (in some view its
// first nodes are all gone, or are this node just started) leaves the
// start as described above (adopted or frozen). Why the bound holds: an
// owner replicates its allocation to the key's next nodes with its first
// assignment or decision and then with every change and every ttl/2, so a
// key with state anywhere has a record (or an allocation, or a mark of
// one dropped) at one of the nodes asked, which answers "some"; an
// answerer of "none" decides nothing of the key from a full start
// afterwards (it freezes it as moved to it); what a node decided alone, in
// a view of itself only, is its own admissions. Not covered: when all of a
// key's first `replicas` nodes lose their memory together (crash or
// restart within about ttl of each other, before the owner replicated to
// the restarted ones again), the warm-up cannot tell that from a
// cluster's first start and starts the key full: the old owner's
// admissions and its clients' assignments (until they expire, ttl +
// apply_lag) overlap the new start, at most b + r*(ttl + apply_lag) over
// b + r*T per such loss (as owner's restart without state_dir admits one
// more burst). The property test allows exactly that in its runs where
// all the key's holders crashed within ttl, or where a crash took the last
// live node that held anything of the key (an owner that restarted faster
// than failure detection and had not made the key's allocation again, and
// its replica's holder crashing 2 s later: a run found at renew_every
// 300 ms, failing the same way at the default; 83 of 1,504 runs at 1,500
// checks, 2 of them beyond b + r*T), and checks b + r*T exactly in the
// others.
// TestWarmupLiveStart: 25 checks of a key at once after a live start, 20
// admitted (the burst) where 0 were.
//
// # Client ids
//
// Ours (clientid.go). RLQS carries no client identity: an Envoy whose
// node died reconnects to another node as a new client, which waits until
// its old share has surely expired and its first assignment is paid
// (ttl + apply_lag after the last renewal, then the reserve's refill).
// Envoy keeps its buckets in a cache keyed by bucket id, independent of
// the stream, so the Envoy still holds its old token bucket meanwhile. A
// client may name itself (strategy.QuotaUsage.ID: RLQS's
// tokenmesh-client-id header, set per Envoy in its grpc_service's
// initial_metadata): its share (units and burst) is replicated with the
// id and, for a share with an id, the time of the owner's latest send
// whose write the client's node confirmed (ackedAt; an acknowledged send
// of such a share is replicated at once, one more replica per renewal).
// A new stream's first report for the key that carries an id and
// time_elapsed > 0 (its Envoy holds the bucket: Envoy's first report of a
// bucket has 0, so a restarted Envoy, with a new cache, is a new client),
// with nothing held at its node, is a claim. The owner moves to the claim
// the share of its id — the share, not a copy — and sends it again as it
// is (an identical token bucket: Envoy renews its TTL, no token) at once,
// when that share is
//   - the only other share of the id in the key's allocation (two are
//     ambiguous: neither is taken, the claim is a new client),
//   - sent, and no longer renewed (not live, not awaiting or pinned),
//   - of a node gone from this node's view (a crash, a drain or a
//     partition; a stream that merely ends does not free a share, so that
//     streams opened and ended at will cannot hand an id's share around),
//   - acknowledged recently enough that the resend surely reaches the
//     client before the assignment it holds expires there: ackedAt + ttl
//     > now + apply_lag (the client received that send after ackedAt and
//     holds an assignment until at least then + ttl; after an expiry Envoy
//     would start the resend full, unpaid).
//
// Then the share resizes as any (a changed bucket keeps the fill ratio: a
// cut hands nothing, a raise is paid). A claim's DENY_ALL is withheld —
// a blanket rule would replace the Envoy's token bucket, and the token
// bucket after it would start full — while a replica is awaited or the
// share of its id may yet become free (its node not yet seen gone, its
// assignment still in time), at most ttl; the claim then starts as a new
// client (a DENY_ALL, a paid first assignment). A first token bucket paid
// meanwhile (the reserve pays it as any new client's) is sent, and the
// claim is a new client from then on (paid: safe whatever the Envoy
// holds; the share of its id is counted until it expires, as without
// ids). Meanwhile its Envoy
// decides from the bucket it holds (or, if it has none, from its
// expired_assignment_behavior, outside the bound as always).
//
// The bound with ids: b + r*T exactly, under the assumptions above, when
// no two Envoy processes that claim a bucket share an id: the share taken
// over is the claimant's own, still held (any token bucket it was sent
// was paid: counted in the share), and it is counted once. A shared or
// forged id (two Envoys configured alike), or an Envoy restarted under its
// predecessor's id whose first report of the bucket was lost (its stream
// down at its first request, so that its first report that arrives has
// time_elapsed > 0), may let another process take a share over: each such
// takeover adds at most 2*b_i + u_i/S*(ttl + apply_lag) tokens for the
// share's burst b_i and units u_i (the taker's bucket may start full, and
// the holder's still hold b_i and refill until its assignment expires),
// once per departure of the share's node, and only for an id that no other
// share of the key carries then. The property test
// (TestEnvelopeWithClientIDs) runs Envoys with unique, shared and
// restarted ids and checks the envelope with exactly that allowance per
// takeover by another process, and that every takeover by the share's own
// process reaches a bucket unexpired.
//
// When it helps: a returning client is renewed at once only if its last
// acknowledged assignment is still valid when the resend arrives, i.e.
// roughly renew_every + failure detection + replica_wait + apply_lag <
// ttl (TestOwnerCrashTakeoverClientIDs: ttl 4 s, apply_lag 1 s,
// renew_every 500 ms, detection 1.5 s: the killed owner's own clients
// assigned again 1.60 s after the kill, renewed, against 2.88-3.02 s
// without ids; at ttl 3 s one of the two misses the window). A node that
// shuts down (the RLQS server's Drain) no longer expires the buckets of
// streams with an id: their next streams take the shares over. A report
// with an id from a node that sees this node as the key's owner before
// this node does (after an owner's kill, the killed node's Envoys' new
// nodes may see it first) is kept, at most 256 for 1 s + max_skew, and
// handled at this node's view change if it then owns the key, instead of
// dropped (the client's next report would come a report interval later);
// reports without an id are dropped as before.
//
// Requests checked at a node that does not own the key are forwarded to
// the owner and refused when no verdict comes within timeout (no local
// fallback: the envelope holds exactly).
//
// The parameters are listed in the "# Parameters" section below (declared
// in Params, params.go).
package quota
