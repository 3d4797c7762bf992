// Package lease implements the `lease` strategy: the key's owner, chosen by
// rendezvous hashing over the live members, holds the key's only token
// bucket; nodes with demand for the key hold leases of whole tokens taken
// out of that bucket and decide locally while a lease has tokens; a request
// that finds no leased token is forwarded to the owner and decided there, as
// in `owner`.
//
// Sources, and what is ours:
//   - The owner is the throttling article's designated server ("Throttling in Distributed
//     Systems": direct a tenant's traffic to one server found by consistent
//     hashing, so its local view is the global view), found as in
//     strategy/owner (rendezvous.Owner). Forwarded requests carry their
//     arrival time and the owner decides them in (arrival, ID) order after an
//     ordering buffer `hold`, as in strategy/owner (the forwarding record
//     and the table of remembered forwards are shared with it,
//     strategy/internal/forwarding and dedupe; the ordering buffer is
//     lease's own, as it also orders asks and lease releases).
//   - Leases are the exactly conserved capacity transfers of GDRL and Ramsden
//     (GDRL: a share moves from one node to another with nothing created or
//     lost on the way), applied to tokens instead of rates: a grant moves
//     whole tokens from the owner's bucket to a holder, and the owner's
//     bucket capacity shrinks by the tokens in leases (pool), so the owner's
//     level plus the tokens in leases never exceed the burst b. New tokens
//     appear only by the owner's refill at rate r; hence the tokens admitted
//     for a key in any window of length T are at most b + r*T (SRTM §1.1's
//     envelope) by construction, whatever the network does. Sizing leases
//     from measured demand, the dry hint and the conservative takeover are
//     ours.
//
// # Protocol (api/peer/v1/lease.proto)
//
//   - Holder: counts the tokens requested for each key it receives (demand
//     d, in tokens/s over a sliding `window`; 0 until min_lease distinct
//     arrival instants were seen, see holding.demand). When d*period >=
//     min_lease and its leases hold less than half of d*period tokens, it
//     sends LeaseAsk for ceil(d*period) tokens (at most the burst),
//     numbered by seq per (holder, key), counting from the holder's start
//     time in nanoseconds (a restarted holder never reuses a seq the owner
//     has answered); it resends the same seq every timeout/(retries+1)
//     until the grant comes or timeout passes.
//   - Owner: an ask waits in the ordering buffer like a request and is
//     answered, at its sending time, with LeaseGrant of min(asked, whole
//     tokens in the bucket) tokens, valid until asked_at + ttl, or, when
//     the key is contended, of the holder's fair share (below, "Contended
//     keys"). A duplicate
//     ask (same seq) gets the same grant again; nothing is taken twice.
//     When it grants less than asked because the bucket holds no more,
//     the grant says the bucket is empty until asked_at + min(period, the
//     time the bucket takes to refill to its capacity) (the bucket's
//     refill until then is spoken for by the other holders' next asks;
//     ours, an approximation of central's empty bucket; bounded by the
//     fill time so that the refill is not lost to a full bucket while
//     every holder refuses, which a burst smaller than rate x period made
//     happen).
//   - Holder: a request takes a token of a lease if one has it (a local
//     decision, allowed). Otherwise, while the owner's last word is that
//     the bucket is empty until T and the request arrived before T, it is
//     refused locally (as central would, approximately: a key offered
//     twice its limit does not send half its requests over the network).
//     Otherwise it is forwarded to the owner (as owner, with retries,
//     timeout and on_timeout); a refused forward comes back with the time at
//     which the owner's bucket holds a token again, and the holder refuses
//     locally until then (exact as long as no lease is returned meanwhile).
//   - A holder reports a lease it has used up at once, with a LeaseReturn
//     of 0 unused tokens (sent once, not acknowledged), and again with its
//     next ask (LeaseAsk.spent), in case the first report was lost (then
//     without an ask the owner releases the lease at expiry); the owner
//     releases them in arrival order at the message's receipt (not
//     earlier: the holder may have held their tokens until then), so that
//     their room in the bucket comes back before they expire. Else the
//     owner's bucket counts spent tokens as lent: an overloaded key whose
//     burst is all lent refills nothing (tenants at rate 1000/s, burst 100,
//     30 nodes: lease admitted 37% of central's tokens before this, 99.7%
//     after).
//   - A holder stops using a lease min(2*LatencyHint, ttl/4) (ttl/4
//     without a latency hint, as in serve) before
//     asked_at + ttl and returns its unused tokens (LeaseReturn); the owner
//     credits them once per (holder, key, seq) if the return comes before it
//     releases the lease at asked_at + ttl, and acknowledges it in any case;
//     the holder resends the return until acknowledged or timeout passes. A
//     return that comes after the release is not credited (the bucket may
//     have refilled the lease's room meanwhile: a credit would make tokens),
//     and without a return the unused tokens are lost (refilled at rate r).
//
// # Contended keys
//
// A key whose holders together ask for more than its owner can give (a
// tenant offered twice its limit from 30 nodes) left a float in leases:
// each holder took leases for a whole period of its demand (17 tokens at
// 67 requests/s and 250 ms) and held them while the others refused on the
// owner's dry hint. Sampling every node's leases and the owner's pool
// every 10 ms in a test (tenant workload: 20 keys at 2,000/s, limit
// 1,000/s, burst 1,000, 30 nodes, round-robin, exp:1ms+4ms, 1% loss,
// seed 1) showed, per key, 136 unused tokens in leases (standard
// deviation 28 over time) and 37 in the owner's level (sd 19; 19 of them
// the refill of the ordering buffer, kept for asks sent earlier): about
// 220 tokens that central would have admitted, counted once when the
// burst runs out (the run's constant deficit) and moving across window
// boundaries as the float rises and falls (shortfall per 1 s window
// 1.4%).
//
// The owner now sizes a contended key's grants from what it can still
// give (share, owner.go; ours): it keeps each holder's latest ask within
// ttl; when the tokens they ask for, scaled from a period to a quantum
// (parameter quantum, default period/5), exceed its whole tokens plus its
// refill over a quantum, the key is contended, and a holder's fair rate
// is that supply's share in proportion to its ask. Its grant is that rate
// over a quantum (rounded, at least 1 token, at most what it asked for
// and the whole tokens in the bucket), and its dry hint is its next turn:
// the time its fair rate takes to refill what was granted (1 token if
// nothing), plus lead, so that the holder, which asks again lead before a
// dry hint ends, asks once per turn, and refuses locally once its lease
// is used until then. An ask that gets such a share is answered at its
// receipt, out of the bucket as it is then (not after the ordering
// buffer, at its sending time: the buffer's refill would wait in the
// level meanwhile); its tokens leave the bucket before the holder can use
// one. Sharing is left out, and the grant is as before, when quantum is
// 0, when the refill over a quantum is less than min_lease (a key at
// 1/s with a burst of 10: its supply is its burst, first come first
// served), and when the turn would end no earlier than the dry hint of
// an empty bucket. Nothing changes at the holder nor on the wire: grants
// are smaller and hints shorter, so the envelope and the conservation
// argument are those above (TestEnvelopeContendedUnderFaults runs them
// on contended keys).
//
// On the same run a key's leases now hold 28 unused tokens (sd 6) and
// its owner's level 6 (sd 3.5); the tenant workload (60 s, round-robin,
// seeds 1-3) has shortfall per 1 s window 0.42-0.44% (1.37-1.44% before),
// 99.7% local decisions and 18.6 bytes per request (6.2 before; owner's
// 33.7): smaller leases, asked for more often. What remains (seed 1,
// about 5,300 tokens of shortfall over the 60 s): the first window's
// 1,950, the float at the burst's end plus the refill lost while the
// owner's bucket was still flush (the used part of partly used leases
// counts against its capacity until the holders report them spent: about
// 35 tokens per key; gone since, "# Partly used leases"), and about 55
// tokens a window over the 20 keys, the float's rise and fall across
// window boundaries.
//
// A key about to be contended kept one more float: its holders asked for
// a period's demand while the bucket still had tokens, and those granted
// last held them past the moment the bucket ran dry, while the holders
// that asked after it got shares or dry hints. An uncontended grant is
// now cut to its holder's demand until the bucket runs dry (untilDry,
// owner.go; ours): when the latest asks within ttl take more than the
// bucket refills, its whole tokens last whole / (asked/period - r), and
// an ask gets that time's part of a period's ask less what the holder
// may still hold of its earlier leases (lent, not released nor reported
// used), at least 1 token. It only makes grants smaller, under the same
// conditions as sharing. The quantum's default went from period/4 to
// period/5 at the same time (measured: the float's rise and fall across
// windows shrinks with it, for more asks). Tenant workload, round-robin,
// seeds 1-3, shortfall per 1 s window: 0.58-0.62% (partly used leases
// alone) -> 0.45-0.47% on 20 s, 0.39-0.40% -> 0.32-0.33% on 60 s, at
// 20.8-21.4 bytes per request instead of 18.1-18.8 (owner's 33); every
// run length and both assignments in docs/EVALUATION.md, "Contended keys:
// partly used leases and leases that outlast the bucket".
//
// # Partly used leases
//
// Until a holder reported a lease spent, the owner counted all of its
// tokens as lent, the used ones too; while a key's leases were being
// used, not yet spent, the owner's level could sit at its capacity (its
// burst less every token out) and its refill was lost. On the tenant
// workload above that happened in the first quarter second of every key,
// when holders took leases of a period's demand out of a full bucket
// (every owner's bucket at its capacity from 180 to 260 ms in a sampled
// run): about 40 of the ~80 tokens per key that lease admitted less than
// central over the run, whatever its length.
//
// Now an ask also reports, for each earlier lease from the same owner
// that holds tokens of which some are used, the tokens used so far
// (LeaseAsk.used, counted from the grant; the driver's open allowance is
// out, not used, and not counted). The owner gives that many tokens of
// room back to the pool at the ask's receipt, in arrival order as a spent
// lease's, credits nothing, and keeps the rest of the lease lent; the
// lease's end (spent, returned or expired) releases only the rest. Each
// token of a lease is released once (the report is cumulative; a resent
// or late one releases nothing more), a report never releases more than
// the grant, and a return credits at most what is left. The argument is
// the spent lease's: the used tokens were taken at the holder before the
// ask was sent, so their room coming back at its receipt lets the bucket
// refill what central's would have, and no one can take them again.
// Ours. On the tenant workload (20 s, seed 1) the lost refill is gone and
// lease admits 808 tokens fewer than central instead of 1,577; shortfall
// per 1 s window 0.58% (0.72% before); docs/EVALUATION.md, "Partly used
// leases".
//
// Lost, duplicated and reordered messages cannot break the envelope: a
// grant is taken once per (holder, key, seq) and accepted once, a return is
// credited once, and a holder never uses a lease after asked_at + ttl, the
// time at which the owner releases it. A request or ask that reaches the
// owner after its turn (latency above hold) takes only tokens the bucket is
// sure to have held since its arrival (shape.spare), so a late decision
// never uses refill that came after the time it is counted at; a bucket is
// forgotten only once no late message can still need it (sweepLag). The
// rapid test TestEnvelopeUnderFaults checks both the conservation and the
// envelope under loss, duplication, reordering, crashes and restarts
// (exactly with replicas=1; with replicas, within the bound of "# Crashes").
//
// # Crashes
//
//   - Holder: its leases' unused tokens are lost until the owner releases
//     them at expiry (at most one lease per ask in flight: a holder loses at
//     most its leases, never more than it was granted).
//   - Owner, without replicas (replicas=1), or for a key whose state is
//     nowhere to be found (no trusted replicated state and a warm-up,
//     below, that failed): a node
//     that takes over a key (the key's rendezvous owner moved to it with a
//     membership change, or it restarted) starts that key's bucket empty
//     and refilling only from the change + takeover (default ttl + 1s): by
//     then every lease the old owner granted has expired, and every node's
//     view has caught up with the change if failure detection and gossip
//     take under a second (memberlist on a LAN). No fresh burst, unlike
//     owner, which starts full; the price is false rejections for
//     takeover + b/r after an owner change.
//   - Owner, with replicas (replicas=K, default 2; replica.go): the owner
//     ships, every `sync` (default max(hold, 10ms)), the state of each key
//     whose bucket changed in a way a replica cannot compute from the last
//     state (tokens taken by a request or lent by a grant; a lease spent or
//     returned; a lease released at expiry, but for the last one out, at
//     the latest expiry: after it, as after a refused request or a grant
//     of 0 tokens, the bucket is the last state refilled) to the key's
//     next K-1 nodes in rendezvous order (LeaseReplicas, times counted
//     from the message's base time; one state alone as LeaseReplica): its
//     level in exact ticks at a time, and the whole tokens in its
//     unexpired leases (its own and those it inherited) with the latest of
//     their expiries, an upper bound of each lease's. A replica keeps the
//     state (a later one from the same owner replaces it; any other is
//     merged keeping the more consumed bucket: both
//     refilled to the later time, the lower level, the larger lent tokens
//     until the later end, as owner's merge rule). The node that takes a
//     key over continues from the replicated state, counting its lent
//     tokens against its capacity until they end (pool.Inherited) and
//     then releasing them with none unused, so that its level plus the
//     old owner's leases (as shipped) plus its own stay within b, when
//     the state's owner is no longer a member in its view (it crashed or
//     left) or handed the key over: at a membership change a node that
//     owned a key it no longer owns ships its state, marked handover, to
//     the key's new replica set and decides the key no more (a restarted
//     owner gets its keys back this way from the node that held them, in
//     place of its conservative start, as long as it has taken nothing
//     from that start yet). A node that still owns its keys after a change
//     ships them to the new replica set. A state from an owner that is
//     still a member and did not hand the key over is only merged into a
//     conservative start (it may still be deciding). An untouched
//     conservative start is never shipped: it tells nothing the previous
//     owner's state does not. A full state is kept fill time + sweepLag
//     after it was shipped; after that the key starts conservatively.
//     What is over-admitted: the state a replica holds misses what the old
//     owner took after it, those of the last sync interval and in flight
//     (more when ships are lost: they are not acknowledged, the next one
//     supersedes). Per crash of an owner, the key's admissions exceed
//     b + r*T by at most b + r*(max_wait + staleness), staleness being the
//     age of the successor's state at the old owner's last decision that
//     took tokens (at the latest, the crash): the owner's history up to
//     the state followed by the successor's continuation from it is one
//     bucket's history (within b + r*T); beyond it come only the old
//     owner's decisions after the state, which took at most its level then
//     plus the lent tokens returned to it (together at most b), its refill
//     since (r*staleness) and its waiting-mode reservations (r*max_wait
//     below 0). Without lost ships staleness is at most a sync interval
//     plus a one-way latency; each ship of a busy key lost in a row adds a
//     sync interval (TestEnvelopeUnderFaults checks b + r*(max_wait + 2
//     sync + latency) per crash with up to 30% loss); owner states "one
//     burst per crash" for the same window. Ours; the replica set is
//     owner's (the throttling article's K servers per tenant from rendezvous order).
//   - Owner, warm-up (replicas >= 2; warmup.go; modelled on owner's
//     warm-up and its OwnerLevelQuery, the lease-specific parts ours): a
//     node about to start a key it owns conservatively (it restarted, or
//     a change moved the key to it, recently enough that the conservative
//     start would not be full at the request's arrival) and holding no
//     trusted record for it first asks the nodes that may hold the key's
//     state (LeaseStateQuery): the live members among the key's first K
//     nodes in its current view, in each view before a recent change
//     (kept takeover + fill time), after a restart in its view without
//     itself, and the sender of an untrusted record. Each answers
//     (LeaseState) with the most consumed of what it holds of the key (its
//     pool as owner, as stateOf ships it: level, the tokens in its
//     unexpired leases and their latest end, an untouched conservative
//     start counting as nothing; its replica record; a state it handed
//     over or answered with lately; its own warm-up's answers so far) or
//     "none". The key's requests, forwards and asks wait while the query
//     is out (resent every timeout/(retries+1), given up after timeout
//     less one resend interval, so that a held forward still gets its
//     verdict within its forwarder's timeout), then are decided in
//     (arrival, ID) order from the most consumed answer ("none" a full
//     bucket), its lent tokens inherited as from a replica. If some node
//     does not answer in time, or if in one of those views all the key's
//     first K nodes are gone (or are this node just restarted, which
//     forgot its state; a past view of this node alone does not count:
//     see holdersOf), the key starts conservatively as above, merged
//     with the answers it got. Why this keeps the bounds:
//     (1) Answering is a hand-over. The answerer drops its pool and,
//     for takeover + fill time after its answer, decides the key as
//     moved to it at the answer (a conservative start, no warm-up of its
//     own) even where its view still makes it the owner, and takes up no
//     replicated state of the key but a hand-over meanwhile (the asker
//     ships its state to it as a replica, and a lagging view that does
//     not list the asker would count it as a gone owner's). Its decisions
//     end at the answer and the asker's begin after all answers, from a
//     state at least as consumed: one bucket's history, within b + r*T.
//     What the answerer is still sent while its view lags is refused
//     (false rejections within the window of any membership change); two
//     nodes decide at once only when views disagree for longer than
//     takeover - ttl (the clause below).
//     (2) The old owner's unexpired leases are in its answer's lent
//     tokens (its pool's leased and inherited tokens). A node with no
//     pool has none out of its own: sweep drops only a full pool with
//     nothing leased or inherited, and a pool dropped at a membership
//     change or by an answer leaves its state, lent tokens included, in
//     `gave`, which later answers include until its leases have ended and
//     its level refilled (takeover + fill time; takeover >= ttl).
//     (3) A holder that is gone (crashed, left) left its state on its
//     replicas, the key's first K nodes in the view in which it owned the
//     key, which are asked (or are this node: the coverage condition
//     above); what they miss of its last decisions is the per-crash bound
//     above. A restarted node's previous incarnation is such a holder:
//     what it took or lent after its last shipped state is within that
//     same bound, b + r*(max_wait + staleness) per crash. Without
//     replicas nothing holds the state: replicas=1 keeps the conservative
//     start (no warm-up) and its exact envelope.
//     (4) Answers are peer input, bounded like LeaseReplicas (a level
//     within [-r*max_wait, (b - lent)*per] ticks, lent tokens within [0,
//     b], times before now + takeover (+ ttl) + max_skew) and taken only
//     from a node asked, for the query under way; a bad one is an error
//     and changes nothing; a late one is ignored.
//     The price is one round trip before the first decision of each such
//     key. Without it, every node of a live cluster (each starts after
//     time 0: it joins) refused each key it owned for takeover at first,
//     and every cold key moved by a change or a crash did too.
//   - While views disagree for longer than takeover - ttl (slow detection,
//     partitions), two nodes may both act as owner and the envelope can be
//     exceeded, as in `owner`. So may a node that believes a live owner
//     gone (a false suspicion, a partition) at once: it continues from the
//     owner's replicated state (a trusted record, or a warm-up that cannot
//     ask the owner it thinks gone), as owner's replicas do.
//     Until the others' failure detectors drop a crashed owner, their
//     forwards to it time out and are decided by on_timeout: by default
//     with local (r/N, b/N) buckets that start empty at the first
//     timed-out request's arrival (strategy.FallbackStart; together at
//     most one more envelope while the owner is unreachable).
//     Under `partition: conserve` (conserve.go) none of this exceeds the
//     envelope: each side decides from its share of one bucket.
//
// Overdraft (the parameters overdraft and max_debt; ours): a
// charge is taken at the key's owner, into its pool, down to a debt
// of max_debt, or from a holder's lease that holds all of it; the owner
// grants no lease while in debt (overdraft.go has the details and what a
// timed-out charge costs).
//
// The live driver's fast path (allowance.go; ours): lease is a
// strategy.ExpiringAllowancer. A holder hands the driver tokens of its
// fullest lease, valid until the lease's expiry, and a key's owner (with
// hold 0) tokens lent out of its pool as a lease to itself; the driver
// admits checks from them in the caller's goroutine, and the unused come
// back. Nothing above changes: an allowance is a part of a lease.
//
// The parameters are listed in the "# Parameters" section below (declared
// in Params, params.go). max_wait's waits are RequestWait's (SRTM
// §5.2): checks with a max wait are decided as plain requests while it is
// 0; reservations, like leases, die with a crashed owner and must have
// passed before a new owner's bucket refills, hence takeover's default.
package lease

import (
	"fmt"
	"maps"
	"slices"
	"time"

	peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"
	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/internal/minheap"
	"github.com/tokenmesh/tokenmesh/rendezvous"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/internal/buckets"
	"github.com/tokenmesh/tokenmesh/strategy/internal/dedupe"
	"github.com/tokenmesh/tokenmesh/strategy/internal/forwarding"
	"github.com/tokenmesh/tokenmesh/strategy/internal/keyorder"
)

// Lease is one node of the lease strategy.
type Lease struct {
	self    strategy.NodeID
	members []strategy.NodeID
	sh      shape

	hold, timeout, retryEvery time.Duration
	period, ttl, window       time.Duration
	quantum                   time.Duration // parameter quantum: the time a contended pool's grants are sized for (share)
	takeover                  time.Duration
	maxWait                   time.Duration // parameter max_wait: the longest wait waiting mode grants
	maxSkew                   time.Duration
	lead                      time.Duration // how long before a dry hint ends a holder asks again
	returnLead                time.Duration // how long before the owner's release a holder stops using a lease and returns it
	onTimeout                 strategy.OnTimeout
	rate                      bucket.Rate
	local                     *buckets.Table // on_timeout=local fallback buckets, (r/N, b/N) each
	minLease                  int64
	hinted                    strategy.ForwardTimers // for SetLatencyHint (hint.go)

	// membership history for the conservative takeover: the views before
	// the recent changes (kept for ttl + the time to fill the bucket)
	changes   []change
	fillTime  time.Duration
	restartAt time.Duration
	restarted bool
	seqBase   uint64 // first ask seq of every key: the start time in ns, so a restarted holder never reuses a seq

	// owner side
	pools   map[string]*pool
	grants  map[grantID]*grantRec
	gexpiry *minheap.Heap[grantExp]
	queue   *minheap.Heap[queued]
	seen    *dedupe.Table[forwardID, *verdict] // forwards received, so that a duplicate is decided once

	// holder side
	keys    map[string]*holding
	pending map[uint64]*forwarding.Pending
	timers  *minheap.Heap[timer]
	returns map[grantID]*returning // keyed by (owner, key, seq)

	sweepEvery time.Duration
	sweeper    keyorder.Sweeper // the sweep's passes, in steps (sweep.go)
	pass       uint32           // the number of the pass under way or last
	passAt     time.Duration    // when it began
	sweepAt    int              // the table it is at (sweepSome)
	poolOrder  keyorder.Order   // the keys of pools, records, gave and keys (holdings), for the sweep's steps
	recOrder   keyorder.Order
	gaveOrder  keyorder.Order
	holdOrder  keyorder.Order
	sweepLag   time.Duration // how late a forward or an ask may come: timeout + 3*LatencyHint + hold + max_skew

	// replicas (replica.go): K of parameter replicas, the sync interval,
	// the keys whose pool changed since the last sync, and the states
	// other owners shipped here.
	replicas  int
	syncEvery time.Duration
	syncAt    time.Duration // the sync wake-up asked for; -1: none
	dirty     map[string]bool
	records   map[string]*record
	rank      []strategy.NodeID // scratch for rendezvous.Rank

	// warm-up (warmup.go): the keys whose holders are being asked for
	// their state, and the keys this node gave up lately.
	fetching map[string]*fetch
	gave     map[string]*gave
	fetchSeq uint64

	// overdraft (overdraft.go): the rule's setting and its max_debt in
	// ticks, the deepest a pool's level goes (0 without overdraft).
	od        strategy.Overdraft
	debtTicks int64

	// partition: conserve (conserve.go)
	cons conserveState

	mem memory // heap accounting for MemoryBytes (memory.go)
}

// grantID names one lease: holder (at the owner) or owner (at the holder),
// key, seq.
type grantID struct {
	node strategy.NodeID
	key  string
	seq  uint64
}

type change struct {
	at   time.Duration
	prev []strategy.NodeID
}

// timer kinds at a holder
const (
	timerForward = iota
	timerAsk
	timerLease
	timerReturn
	timerRenew
	timerFetch // a warm-up query's resend or deadline (key, seq = its id)
)

type timer struct {
	at   time.Duration
	kind int8
	id   uint64 // request ID (forward)
	key  string
	seq  uint64
	node strategy.NodeID
}

// MaxWait bounds the max_wait a peer may ask for in a forward (an hour):
// a longer one is refused as an error, so a peer cannot reserve a key's
// bucket arbitrarily far ahead (forwarding.MaxWait).
const MaxWait = forwarding.MaxWait

// New builds a node. Parameters are listed in the package doc. Errors: an
// invalid Config or parameter (named).
func New(cfg strategy.Config) (*Lease, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if _, err := bucket.New(cfg.Rate, cfg.Burst, 0); err != nil {
		return nil, fmt.Errorf("lease: %w", err)
	}
	l := &Lease{self: cfg.Self, members: slices.Clone(cfg.Members),
		sh:    shape{tokensPerNs: cfg.Rate.Tokens, per: int64(cfg.Rate.Per), burst: cfg.Burst},
		pools: map[string]*pool{}, grants: map[grantID]*grantRec{}, gexpiry: minheap.New(grantExpLess),
		queue: minheap.New(queuedLess),
		keys:  map[string]*holding{}, pending: map[uint64]*forwarding.Pending{}, timers: minheap.New(timerLess),
		returns: map[grantID]*returning{},
		dirty:   map[string]bool{}, records: map[string]*record{}, syncAt: -1,
		fetching: map[string]*fetch{}, gave: map[string]*gave{},
	}
	v, err := strategy.ReadParams("lease", Params, cfg.Params)
	if err != nil {
		return nil, err
	}
	l.hold = v.DurationOr("hold", cfg.LatencyHint)
	l.timeout = v.DurationOr("timeout", strategy.HintTimeout(cfg.LatencyHint))
	l.period = v.Duration("period")
	l.ttl = v.DurationOr("ttl", 2*l.period)
	l.quantum = v.DurationOr("quantum", l.period/5)
	l.window = v.Duration("window")
	l.maxWait = v.Duration("max_wait")
	l.takeover = v.DurationOr("takeover", l.ttl+time.Second+l.maxWait)
	l.maxSkew = v.Duration("max_skew")
	l.syncEvery = v.DurationOr("sync", strategy.DefaultSync(l.hold))
	if l.onTimeout, err = strategy.ReadOnTimeout(v); err != nil {
		return nil, err
	}
	l.cons = conserveState{on: cfg.Partition == strategy.PartitionConserve, delay: v.Duration("conserve_delay"), expected: slices.Clone(l.members)}
	l.onTimeout = strategy.ConserveOnTimeout(l.onTimeout, l.cons.on, v)
	if l.od, err = strategy.ReadOverdraft(v, cfg.Rate, cfg.Burst); err != nil {
		return nil, err
	}
	if l.od.On {
		b := bucket.MustNew(cfg.Rate, cfg.Burst, 0) // validated above
		l.debtTicks = b.DebtTicks(l.od.MaxDebt)
	}
	l.rate = cfg.Rate
	if r, b, err := localShare(cfg.Rate, cfg.Burst, cfg.Self, l.members); err != nil {
		return nil, err
	} else if l.local, err = buckets.New(r, b); err != nil {
		return nil, fmt.Errorf("lease: local fallback: %w", err)
	}
	retries := v.Int("retries")
	minLease := v.Int("min_lease")
	l.replicas = v.Int("replicas")
	if err := l.checkParams(retries, minLease); err != nil {
		return nil, err
	}
	l.minLease = int64(minLease)
	l.retryEvery = l.timeout / time.Duration(retries+1)
	l.hinted = strategy.ReadForwardTimers(v, retries)
	l.seen = dedupe.New[forwardID, *verdict](2*l.timeout + l.hold + 4*cfg.LatencyHint)
	l.lead = 2*cfg.LatencyHint + l.hold
	l.returnLead = min(2*cfg.LatencyHint, l.ttl/4)
	if cfg.LatencyHint <= 0 {
		// No hint (serve): a return sent at the release would always come
		// after it and be lost; a quarter of ttl leaves room for any LAN.
		l.returnLead = l.ttl / 4
	}
	l.sweepEvery = buckets.SweepInterval(cfg.Rate, cfg.Burst)
	l.sweepLag = l.timeout + 3*cfg.LatencyHint + l.hold + l.maxSkew
	if cfg.Rate.Tokens > 0 {
		l.fillTime = buckets.FillTime(cfg.Rate, cfg.Burst)
	}
	return l, nil
}

// checkParams refuses parameters out of range, naming the first: timeout,
// period or window not positive, ttl below period, max_wait above
// MaxWait, takeover below ttl + max_wait, retries negative, min_lease or
// replicas below 1, sync not positive.
func (l *Lease) checkParams(retries, minLease int) error {
	switch {
	case l.timeout == 0:
		return fmt.Errorf("lease: parameter timeout must be positive")
	case l.period == 0:
		return fmt.Errorf("lease: parameter period must be positive")
	case l.ttl < l.period:
		return fmt.Errorf("lease: parameter ttl=%s must be at least period=%s", l.ttl, l.period)
	case l.maxWait > MaxWait:
		return fmt.Errorf("lease: parameter max_wait=%s is above %s", l.maxWait, MaxWait)
	case l.takeover < l.ttl+l.maxWait:
		return fmt.Errorf("lease: parameter takeover=%s must be at least ttl + max_wait=%s (the old owner's leases and reservations must have ended)", l.takeover, l.ttl+l.maxWait)
	case l.window == 0:
		return fmt.Errorf("lease: parameter window must be positive")
	case retries < 0:
		return fmt.Errorf("lease: parameter retries=%d is negative", retries)
	case minLease < 1:
		return fmt.Errorf("lease: parameter min_lease=%d must be at least 1", minLease)
	case l.replicas < 1:
		return fmt.Errorf("lease: parameter replicas=%d must be at least 1", l.replicas)
	case l.syncEvery <= 0:
		return fmt.Errorf("lease: parameter sync must be positive")
	}
	return nil
}

// Start schedules the first sweep. A start after time 0 is a restart: every
// key this node owns is warmed up before its first decision, or starts
// with an empty bucket (replicas=1, or the warm-up failed; see Crashes).
func (l *Lease) Start(now time.Duration, fx *strategy.Effects) {
	if now > 0 {
		l.restarted, l.restartAt = true, now
	}
	l.seqBase = uint64(now)
	l.fetchSeq = uint64(now)
	l.sweeper.Every = l.sweepEvery
	l.sweeper.Start(now, fx)
}

func (l *Lease) owner(key string) strategy.NodeID {
	o := rendezvous.Owner(key, l.members)
	if o == "" {
		return l.self
	}
	return o
}

// Receive handles a peer's message. Errors (no state change): a payload
// that does not decode or has no body; an empty or oversized key;
// non-positive tokens; a time before 0 or more than max_skew after now; a
// grant above the burst or expiring beyond now + ttl + max_skew; a verdict
// or grant from a node that was not
// asked.
func (l *Lease) Receive(now time.Duration, from strategy.NodeID, payload []byte, fx *strategy.Effects) error {
	m, err := decodeMessage(from, payload)
	if err != nil {
		return err
	}
	if err := l.validate(now, from, m); err != nil {
		return err
	}
	switch b := m.Body.(type) {
	case *peerv1.LeaseMessage_Forward:
		l.onForward(now, from, b.Forward, fx)
	case *peerv1.LeaseMessage_Ask:
		l.onAsk(now, from, b.Ask, fx)
	case *peerv1.LeaseMessage_Return:
		l.onReturn(now, from, b.Return, fx)
	case *peerv1.LeaseMessage_Replicas:
		l.receiveReplicas(now, from, b.Replicas)
	case *peerv1.LeaseMessage_Replica:
		l.receiveReplicas(now, from, oneReplica(b.Replica))
	case *peerv1.LeaseMessage_StateQuery:
		l.answer(now, from, b.StateQuery, fx)
	case *peerv1.LeaseMessage_State:
		return l.receiveState(now, from, b.State, fx)
	case *peerv1.LeaseMessage_Refund:
		l.receiveRefund(now, from, b.Refund, fx)
	case *peerv1.LeaseMessage_ReturnAck:
		l.onReturnAck(from, b.ReturnAck)
	case *peerv1.LeaseMessage_Verdict:
		return l.onVerdict(now, from, b.Verdict, fx)
	case *peerv1.LeaseMessage_Grant:
		return l.onGrant(now, from, b.Grant, fx)
	}
	return nil
}

// oneToken is the time the rate takes to refill one token.
func (l *Lease) oneToken() time.Duration {
	if l.sh.tokensPerNs == 0 {
		return 0
	}
	return time.Duration((l.sh.per + l.sh.tokensPerNs - 1) / l.sh.tokensPerNs)
}

// Tick decides due requests and asks, resends or times out forwards, asks
// and returns, ends expired leases (holder: return the unused tokens;
// owner: release them), and sweeps idle state.
func (l *Lease) Tick(now time.Duration, fx *strategy.Effects) {
	l.healDue(now, fx)
	l.decideDue(now, fx)
	for l.timers.Len() > 0 && l.timers.Peek().at <= now {
		t := l.popTimer()
		switch t.kind {
		case timerForward:
			l.forwardTimer(now, t, fx)
		case timerAsk:
			l.askTimer(now, t, fx)
		case timerLease:
			l.leaseTimer(now, t, fx)
		case timerRenew:
			if h := l.keys[t.key]; h != nil {
				l.maybeAsk(now, t.key, h, fx)
			}
		case timerFetch:
			l.fetchTimer(now, t, fx)
		case timerReturn:
			l.returnTimer(now, t, fx)
		}
	}
	l.expireGrants(now, fx)
	l.seen.Expire(now, fx)
	if l.syncAt >= 0 && now >= l.syncAt {
		l.syncDirty(now, fx)
	}
	l.sweeper.Step(now, fx, 1, func() { l.beginPass(now) }, func(int) bool { return l.sweepSome(now, keyorder.Budget) })
}

// SetMembers re-routes pending forwards and asks whose owner left, and
// remembers the change for the conservative takeover of moved keys.
func (l *Lease) SetMembers(now time.Duration, members []strategy.NodeID, fx *strategy.Effects) {
	l.changes = slices.DeleteFunc(l.changes, func(c change) bool { return c.at+l.takeover+l.fillTime < now })
	l.changes = append(l.changes, change{at: now, prev: slices.Clone(l.members)})
	l.members = append(l.members[:0], members...)
	l.resplitLocal(now)
	if l.cons.on {
		l.rescale(now, fx) // before any pool is shipped (capPools)
	}
	// A key that moved away loses its bucket here: if it comes back, it
	// starts again empty (the other owner may have spent it meanwhile). So
	// does a key that moves here while this node holds a bucket for it
	// (made for a peer whose view lagged): it starts again as moved.
	prev := l.changes[len(l.changes)-1].prev
	l.shipPools(now, prev, fx)
	for _, key := range sortedKeys(l.records) {
		switch {
		case l.owner(key) == l.self:
			l.adopt(key, now)
		case !slices.Contains(l.replicasOf(key, l.members), l.self):
			l.dropRecord(key)
		}
	}
	for _, id := range forwarding.Orphaned(l.pending, members) {
		p := l.pending[id]
		if o := l.owner(p.Req.Key); o != l.self {
			l.forward(now, p, o, fx)
			continue
		}
		delete(l.pending, id) // this node owns the key now
		l.queue.Push(queued{arrival: p.Req.Arrival, id: p.Req.ID, key: p.Req.Key, tokens: p.Req.Tokens, maxWait: p.MaxWait, charge: p.Req.Charge})
		fx.WakeAt(max(p.Req.Arrival+l.hold, now))
	}
	for _, h := range l.keys {
		if h.asking && !slices.Contains(members, h.askTo) {
			h.asking = false
		}
	}
	l.membersChanged(now, fx)
}

// shipPools, after a membership change from prev, ships the state of each
// pool whose key this node still owns to the key's new replicas, and drops
// every other pool, handing its key over (shipped with handover) when this
// node owned it in prev, and keeping its state to answer warm-up queries
// (gaveUp).
func (l *Lease) shipPools(now time.Duration, prev []strategy.NodeID, fx *strategy.Effects) {
	out := map[strategy.NodeID][]ship{}
	for _, key := range sortedKeys(l.pools) {
		p := l.pools[key]
		owned := rendezvous.Owner(key, prev) == l.self
		if l.owner(key) == l.self && owned {
			if l.replicas > 1 && !p.untouched(now) { // the new replicas get the state now
				l.addShip(out, key, l.stateOf(p, now), l.replicasOf(key, l.members))
			}
			continue
		}
		if l.replicas > 1 && !p.untouched(now) {
			s := l.stateOf(p, now)
			// Kept to answer warm-up queries for the key: this node has
			// no pool for it any more, but its leases may be unexpired.
			l.gaveUp(key, s, now)
			if owned {
				// Hand the key over: this node decides it no more.
				to := l.replicasOf(key, l.members)
				if slices.Contains(to, l.self) {
					own := s
					own.from = l.self
					l.setRecord(key, &own)
				}
				s.handover = true
				l.addShip(out, key, s, to)
			}
		}
		l.dropPool(key)
		l.dropDirty(key)
	}
	l.sendShips(out, fx)
}

// StateBytes counts pools (with their askers), lease records, holdings,
// queued requests and the on_timeout=local fallback buckets.
func (l *Lease) StateBytes() int {
	const perPool, perGrant, perHolding, perLease, perRequest, perSeen = 24, 32, 64, 24, 40, 16
	n := 0
	const perAsker = 24
	for k, p := range l.pools {
		n += perPool + len(k) + len(p.askers)*perAsker
	}
	for id := range l.grants {
		n += perGrant + len(id.key)
	}
	for k, h := range l.keys {
		n += perHolding + len(k) + len(h.leases)*perLease
	}
	for _, q := range l.queue.Items() {
		n += perRequest + len(q.key)
	}
	for _, p := range l.pending {
		n += perRequest + len(p.Req.Key)
	}
	const perRecord = 48
	for k := range l.records {
		n += perRecord + len(k)
	}
	for k := range l.gave {
		n += perRecord + len(k)
	}
	for k, f := range l.fetching {
		n += perRecord + len(k) + len(f.asked)*16 + len(f.waiting)*perRequest
	}
	return n + l.seen.Len()*perSeen + l.local.StateBytes() + len(l.dirty)*8
}

// sortedKeys is m's keys in order.
func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

func timerLess(a, b timer) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	if a.kind != b.kind {
		return a.kind < b.kind
	}
	if a.id != b.id {
		return a.id < b.id
	}
	if a.key != b.key {
		return a.key < b.key
	}
	if a.seq != b.seq {
		return a.seq < b.seq
	}
	return a.node < b.node
}
