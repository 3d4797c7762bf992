// Package gcounter implements the `gcounter` strategy: a replicated token
// bucket per key on a G-Counter of consumed tokens, kept consistent by delta
// states sent by flat gossip.
//
// Source: Henriksson & Bennhage (the CRDT thesis), ch. 3, §3.1, listings 3.1-3.4,
// and Table 4.1 for the gossip interval. From the thesis:
//   - Per key, a bucket of three values: the token counter, a G-Counter
//     (node -> tokens that node admitted; the consumed tokens are its sum);
//     the limit, the tokens the key may have consumed by now; and the refill
//     timestamp, when the limit was last raised (listing 3.1).
//   - A request for n tokens is admitted when consumed + n <= limit after
//     refilling the limit to the request's arrival; admitting adds n to this
//     node's slot of the G-Counter (listing 3.2). A key seen for the first
//     time starts with limit = capacity (= Config.Burst).
//   - Merge takes the maximum per node of the G-Counter, and the larger
//     limit together with its refill timestamp (listing 3.4).
//   - One delta state per neighbour (every other live member): the keys that
//     changed since the last message to it. Every gossip interval the node
//     sends the delta state of ONE neighbour chosen uniformly at random
//     (flat gossip, with Config.Rand) and clears it. The keys a received
//     delta state changed are added to the delta states of the neighbours
//     other than the sender (listing 3.3).
//
// Ours, not the thesis':
//   - Token-bucket refill. Listing 3.1 adds min((now-refill)*rate, capacity)
//     to the limit, so a key idle for a while can hold up to twice its
//     capacity (the cap applies to one refill, not to the bucket). Here the
//     limit never exceeds consumed + capacity: a bucket holds at most Burst
//     tokens, as bucket.Bucket does, and one node alone decides exactly as
//     `central` does. The cap is applied with the consumed tokens this node
//     knows; when it learns of more, its limit may be lower than a central
//     bucket's would be (false rejections, repaid at the refill rate).
//   - Exact arithmetic: tokens are int64 and the limit is kept as whole
//     tokens plus a fraction in ticks of 1/Rate.Per tokens (one nanosecond
//     refills Rate.Tokens ticks), as in package bucket: no float drift.
//   - Ties: listing 3.4 keeps the local limit when the two are equal, so the
//     result depends on which side is local (merge is not commutative; see
//     TestThesisMergeNotCommutative). Here the larger (limit, fraction,
//     refill timestamp) wins: merge is commutative, associative and
//     idempotent (the property tests).
//   - A delta state holds key names; the bucket sent is this node's current
//     bucket for the key (a join of every update the thesis would have
//     merged into the delta state, so never less information).
//   - An empty delta state sends nothing (no empty message).
//   - topology (§5.5 leaves topologies other than fully connected open;
//     strategy/internal/gossipgraph): the neighbours above are the
//     topology's, every other member by default (full, the thesis' Table
//     4.1); ring keeps the predecessor and successor in NodeID order, and
//     random:d sends d neighbours drawn at random their delta states each
//     round instead of one. Catch-up reaches every newcomer, a neighbour
//     or not.
//   - catch_up (§5.5: the thesis does not handle nodes that rejoin): when
//     SetMembers shows a new member, one established member (the first one
//     after it in sorted order) sends it the full state. With catch_up each
//     node instance also draws a random 32-bit incarnation from
//     Config.Rand, and its G-Counter slot is (node, incarnation): a node
//     that restarts with an empty state would otherwise count again from 0
//     in its old slot, and max() would swallow its new admissions until it
//     passed its old count.
//
// Idle keys expire (our design, not the thesis'). The thesis' counter never
// forgets a key: its local state "will increase in size or remain the same,
// depending on if new users send requests" (§5.2.5), and it grows with
// every user in data set C, where the queue, which forgets, used 86% less
// memory (§5.3, Figure 5.13; the CRDT thesis). A G-Counter slot cannot simply be
// dropped: a node that forgot a key would count its own slot again from 0,
// and the merge (max per slot) would hide its new admissions behind its old
// count. So
// each key's state carries a GENERATION, and a new life of a key never
// merges into an old one:
//   - Expiry. A key whose state has not changed for the parameter idle
//     (default 10 minutes; 0 turns expiry off) -- no local request for it
//     and no received bucket that changed it -- and whose bucket is full
//     again at now (its limit has refilled to consumed + capacity by its own
//     arithmetic, so it is indistinguishable from a new bucket), and that is
//     in no pending delta state, is dropped by a sweep run from the gossip
//     timer at most every idle/10.
//   - Generation. A node that gets a request for a key it does not hold
//     creates it with generation = the number of whole idle periods in now
//     (now: ns since the cluster's epoch, as the node sees it), that is now
//     rounded down to a multiple of idle, counted in idle periods so that it
//     encodes in a few bytes (0 with expiry off, and 0 for keys first seen
//     within the first idle, so the first life of a key is generation 0,
//     which is also what encodings from before the field decode to). Deltas
//     carry it (GCounterBucket.generation); nodes of a rule share its idle.
//   - Merge. The higher generation wins the whole key state: a bucket of a
//     lower generation than the local one is ignored, one of a higher
//     generation replaces the local state. Equal generations merge as above.
//     This is a lexicographic join on (generation, bucket), so the merge
//     stays commutative, associative and idempotent (the property tests draw
//     random generations), and limit <= consumed + capacity still holds.
//   - Monotone. A key's state is dropped no earlier than idle after its
//     last change, hence idle after its creation at time t0 >= its
//     generation (in time, g0*idle); re-created at t > t0 + idle, its new
//     generation floor(t/idle) periods starts at floor(t/idle)*idle >
//     t - idle > t0 >= g0*idle, so it is above g0. So a key's new life always
//     beats its old one, wherever the old one is still held. Rounding (not
//     the raw time) makes two nodes that create the same key within one
//     idle period agree on the generation and merge exactly as the thesis'
//     counter does, instead of one discarding the other's admissions.
//   - Why an active key is not discarded. "Idle" counts merged changes too:
//     a node that holds a key another node is still using receives that
//     node's admissions (a delta state reaches a given neighbour within a few
//     gossip intervals: expected N-1 of them with flat gossip) and each one
//     restarts its idle clock. So a node only drops a key when nobody has
//     admitted a request for it for about idle minus the time a delta takes
//     to arrive, and every node's copy is then full: the new generation
//     replaces only full (equivalent to new) buckets, losing nothing. The
//     exception needs an admission elsewhere within the last delta delay
//     before the expiry (seconds out of idle = 10 minutes), or one whose
//     delta was lost (a lost delta is repaired only by the key's next
//     change, as without expiry): that node's recent consumption is then
//     replaced by the new generation. See
//     TestActiveElsewhereNotExpired and TestExpiryRace. Generations compare
//     times of different nodes, like refill timestamps already do: the
//     nodes need a common epoch (cluster.Config.Epoch), and a clock skew
//     above idle would break the monotone argument.
//   - Cost, the consequence to know: when a key has expired at some node
//     and two nodes admit requests for it within one delta delay of each
//     other (before either hears of the other) with different generations
//     -- both re-create it after it expired everywhere, on both sides of a
//     multiple of idle, or one re-creates it while the other still holds
//     its old (full) copy -- the lower side's admissions in that window
//     are discarded: an over-admission of at most what it admitted there
//     (at most the burst, plus the refill in the window). Until some node
//     drops the key nothing changes (every copy keeps its generation), and
//     with idle=0 nothing changes at all (every generation is 0, and the
//     wire encoding is the same as before).
//
// # Partitions (ours)
//
// Under `partition: available` (the thesis' behaviour) every side of a
// split keeps admitting from its replicated buckets: each side may admit
// the whole (r, b) per key, and at the heal the merge (max per slot, larger
// limit) leaves the cluster in debt by what the sides admitted beyond one
// bucket. Repaid at the rate, that debt refused every check of a busy key
// for about the split's length (a 30 s split: 100% of checks for ~27 s on
// real processes; 34.8 s for the worst key in TestPostHealOutage).
// So (ours) a debt beyond one burst is forgiven after a heal: for
// forgiveWindow after this node's view becomes full again (every expected
// member in view: 3 x members gossip intervals, at least 10 s), refill
// raises a key's limit to consumed - Burst when it is below (forgive). The
// key then refuses outright for about burst/rate at most (TestPostHealOutage,
// 3 nodes, a 30 s split, 100 keys at 3x rate 1/s burst 5: the worst key
// 8.5 s from its first refusal, which includes the time until the nodes
// see the heal, against 34.8 s; under conserve 7.7 s against 15.0 s). The
// price is what the debt was: the tokens the sides admitted beyond one
// burst stay admitted (there 2,236 tokens over central, 14.5%, against
// 28; the worst window beyond b + r*T is unchanged, 32 tokens), so the
// excess over b + r*T over a whole run with a split grows by at most what
// the split admitted. Forgiving raises the limit, an inflation of the
// replicated state like a refill, so the merge and its laws are
// unchanged; a limit therefore has no time bound on the wire
// (checkSinceGeneration). Debts merged outside the window (a heal no
// failure detector saw, or a key whose other side's delta arrives later)
// are repaid at the rate as before: burst/rate is then not a bound.
// Forgiving on every merge instead cost excess without any fault
// (wrccdc, 3 nodes, default assignment: 14.59% -> 15.10%); within the
// window it costs none (14.59%; docs/EVALUATION.md, "gcounter after a
// heal").
// Under `partition: conserve` (strategy.Conserver) a node that sees k of
// the last agreed N members refills each key's limit at k/N of the rate
// and caps it at consumed + floor(k/N * burst), applied at the view change
// (the limit is clamped at once), to new keys and to every merged bucket
// while k < N. Once every node of both sides has seen the split, each side
// holds at most k_i/N of the burst above the consumption it knows and
// refills at k_i/N of the rate, so the sides together admit at most
// b + r*T over a split of T (plus what a side admitted before its nodes
// detected the split: the failure detector's delay at full rate). At the
// heal k = N again: full rate and capacity; the merge's debt is at most the
// smaller side's admissions during the split, forgiven beyond one burst as
// under available.
//
// # Folding (ours)
//
// With the parameter fold (off by default) each node's slot is cut in
// periods of fold and the periods older than two are summed into one base
// slot per key, so that a key keeps a base plus a few periods' slots per
// node that admitted for it lately, not one slot per node instance that
// ever did (restarts with catch_up, scale-ups and downs). The rule, the
// proof and what breaks it are in fold.go. A node folds only after it has
// seen every expected member for a whole fold period, and then every
// frozen period, not only those of nodes that left: a departed node's
// slots are among them once its last period is two periods old.
//
// Memory: a key costs its encoded bucket (see BenchmarkIdleKeyBytes: one
// slot per node instance that admitted for it, or with fold per node and
// recent period, plus the base) plus
// its idle clock while it is in use, and nothing once it has been idle and
// full for idle (plus up to idle/10 until the next sweep).
package gcounter

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"math/bits"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/internal/buddy"
	"github.com/tokenmesh/tokenmesh/strategy/internal/gossipgraph"
	"github.com/tokenmesh/tokenmesh/strategy/internal/keyorder"
)

// Name is the strategy's name in the registry and in errors.
const Name = "gcounter"

// DefaultGossip is the gossip interval of the thesis' Table 4.1 (the CRDT thesis).
const DefaultGossip = 300 * time.Millisecond

// DefaultIdle is how long a key stays unchanged (and full) before it
// expires (ours; see the package comment).
const DefaultIdle = 10 * time.Minute

// maxConsumed bounds a key's consumed tokens (and any slot of its
// G-Counter) accepted from a peer, so that consumed + capacity never
// overflows.
const maxConsumed = math.MaxInt64 / 4

// GCounter is one node of the gcounter strategy: per key a token bucket on a
// G-Counter of consumed tokens, and one delta state (changed keys) per
// neighbour (the CRDT thesis §3.1). Not safe for concurrent use.
type GCounter struct {
	self        strategy.NodeID
	selfUTF8    bool // self is valid UTF-8 (see encode)
	incarnation uint32
	rate        bucket.Rate
	per         int64 // ticks per token (Rate.Per in ns)
	capacity    int64 // tokens (Config.Burst)
	gossip      time.Duration
	idle        time.Duration // 0: keys never expire
	catchUp     bool
	fold        time.Duration // 0: slots never folded (fold.go)
	rnd         *rand.Rand
	topo        gossipgraph.Topology // the topology parameter
	picks       []strategy.NodeID    // the peers of a gossip round (reused)

	members    []strategy.NodeID // sorted, self included
	neighbours []strategy.NodeID // the topology's neighbours among members, sorted
	state      map[string]*bucketState

	// partition: conserve: the node sees scaleK of the scaleN last agreed
	// members (scaleK == scaleN: full rate and capacity).
	conserve       bool
	expected       []strategy.NodeID
	scaleK, scaleN int64
	delta          map[strategy.NodeID]map[string]struct{} // per neighbour, the keys changed since the last message

	nextGossip time.Duration
	sweeper    keyorder.Sweeper // the sweeps of idle keys, in steps (sweepStep)
	order      keyorder.Order   // the state's keys, for the sweep's steps
	nextFold   time.Duration

	// fold (fold.go): this period's segment name, and since when this
	// node has seen every expected member (-1: not now).
	segPeriod int64
	segName   strategy.NodeID
	fullSince time.Duration
	healAt    time.Duration // the last time the view became full again (-1: never)
	foldedTo  int64         // the epoch of the last foldAll pass (-1: none)

	names map[string]strategy.NodeID // node names of decoded slots, shared (decodeMessage)

	mem memory // heap accounting for MemoryBytes (memory.go)
}

// entry is one slot of a G-Counter.
type entry struct {
	node        strategy.NodeID
	incarnation uint32
	consumed    int64
}

// cmpSlot orders G-Counter slots by (node, incarnation). strings.Compare
// is one comparison where cmp.Compare on strings makes up to three (its
// NaN checks included); merges call this for every slot of every bucket.
func cmpSlot(a, b entry) int {
	if c := strings.Compare(string(a.node), string(b.node)); c != 0 {
		return c
	}
	return cmp.Compare(a.incarnation, b.incarnation)
}

// bucketState is one key's replicated token bucket. Invariant:
// limit + frac/per <= consumed + capacity (frac is 0 when limit reaches it).
type bucketState struct {
	gen      int64   // generation (see the package comment); replicated
	counter  []entry // sorted by (node, incarnation), no repeats
	consumed int64   // sum of counter
	limit    int64   // whole tokens
	frac     int64   // ticks beyond limit, in [0, per)
	refill   time.Duration
	touched  time.Duration // local only: the last request or merged change
	// size caches the size of the bucket's encoding for StateBytes and
	// encode (bucketBodySize; 0: not known); every change of the
	// replicated fields above clears it (refill, add, merge).
	size int
	// pending counts the neighbours' delta states that hold this key
	// (local only), so that StateBytes need not look every delta key up.
	pending int
	pos     int // local only: the key's place in GCounter.order (the sweep's)
}

// New builds a node with the parameters declared in Params (params.go:
// names, types, units and defaults; `tokenmesh strategies` lists them).
//
// Errors: an invalid Config, an unknown or invalid parameter, or a burst too
// large for the rate's tick arithmetic (as bucket.New).
func New(cfg strategy.Config) (*GCounter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	g := &GCounter{self: cfg.Self, selfUTF8: utf8.ValidString(string(cfg.Self)), rate: cfg.Rate, capacity: cfg.Burst, rnd: cfg.Rand,
		state: map[string]*bucketState{}, delta: map[strategy.NodeID]map[string]struct{}{}}
	v, err := strategy.ReadParams(Name, Params, cfg.Params)
	if err != nil {
		return nil, err
	}
	if g.gossip = v.Duration("gossip"); g.gossip <= 0 {
		return nil, fmt.Errorf("%s: parameter gossip must be positive", Name)
	}
	g.catchUp = v.Bool("catch_up")
	if g.topo, err = gossipgraph.Parse(v.String("topology")); err != nil {
		return nil, fmt.Errorf("%s: parameter %w", Name, err)
	}
	g.idle = v.Duration("idle")
	if g.idle < 0 || (g.idle > 0 && g.idle < 10*g.gossip) {
		return nil, fmt.Errorf("%s: parameter idle %v must be 0 (no expiry) or at least 10 gossip intervals (%v)", Name, g.idle, 10*g.gossip)
	}
	g.fold = v.Duration("fold")
	if g.fold < 0 || (g.fold > 0 && g.fold < max(minFold, 10*g.gossip)) {
		return nil, fmt.Errorf("%s: parameter fold %v must be 0 (no folding) or at least %v and 10 gossip intervals (%v)", Name, g.fold, minFold, 10*g.gossip)
	}
	if _, err := bucket.New(cfg.Rate, cfg.Burst, 0); err != nil {
		return nil, fmt.Errorf("%s: %w", Name, err)
	}
	g.per = int64(cfg.Rate.Per)
	if cfg.Rate.Tokens == 0 {
		g.per = 1 // no refill: the fraction stays 0
	}
	if g.catchUp {
		for g.incarnation == 0 {
			g.incarnation = g.rnd.Uint32()
		}
	}
	g.conserve = cfg.Partition == strategy.PartitionConserve
	g.expected = slices.Clone(cfg.Members)
	g.setMembers(cfg.Members)
	g.scaleK, g.scaleN = 1, 1
	g.fullView(0)
	g.healAt, g.foldedTo = -1, -1
	return g, nil
}

// scaled reports whether the limit is scaled by k/N (conserve, k < N).
func (g *GCounter) scaled() bool { return g.scaleK < g.scaleN }

// scaledCapacity is the capacity this node enforces, in tokens: the
// burst, or floor(k/N * burst) while scaled.
func (g *GCounter) scaledCapacity() int64 {
	if !g.scaled() {
		return g.capacity
	}
	hi, lo := bits.Mul64(uint64(g.capacity), uint64(g.scaleK))
	q, _ := bits.Div64(hi, lo, uint64(g.scaleN)) // hi < scaleN: capacity < 2^62, scaleK <= scaleN
	return int64(q)
}

// clamp lowers b's limit to consumed + cap while scaled.
func (g *GCounter) clamp(b *bucketState) {
	if !g.scaled() {
		return
	}
	if c := b.consumed + g.scaledCapacity(); b.limit >= c {
		b.limit, b.frac = c, 0
	}
}

// SetExpected records the last agreed members (strategy.Conserver; ours,
// see "Partitions" in the package documentation). Under conserve, with k
// of those N members in view, every key is refilled to now at the old
// scale, and its limit is clamped to consumed + floor(k/N * burst) tokens;
// refills then run at k/N of the rate. With k = N: the whole rate and
// burst again. Under available it only records them.
func (g *GCounter) SetExpected(now time.Duration, expected []strategy.NodeID, fx *strategy.Effects) {
	g.expected = slices.Clone(expected)
	g.fullView(now)
	g.rescale(now)
}

// rescale sets k/N from the live and expected members: every key is
// refilled to now at the old scale first, and clamped to the new one.
func (g *GCounter) rescale(now time.Duration) {
	if !g.conserve {
		return
	}
	k, n, _ := strategy.ConserveScale(g.self, g.members, g.expected)
	if int64(k) == g.scaleK && int64(n) == g.scaleN || (k == n && !g.scaled()) {
		return
	}
	for _, b := range g.state {
		g.refill(b, now)
	}
	g.scaleK, g.scaleN = int64(k), int64(n)
	if k == n {
		g.scaleK, g.scaleN = 1, 1
	}
	for _, b := range g.state {
		g.clamp(b)
	}
}

var _ strategy.Conserver = (*GCounter)(nil)

// Start arms the gossip timer, which also runs the expiry sweep. The first
// round comes after a part of the gossip interval drawn uniformly from
// (0, gossip] with Config.Rand (ours; see gossipPhase).
func (g *GCounter) Start(now time.Duration, fx *strategy.Effects) {
	g.nextGossip = now + gossipPhase(g.rnd, g.gossip)
	if g.idle > 0 {
		g.sweeper.Every = g.idle / 10
		g.sweeper.Start(now, fx)
	}
	g.nextFold = now + g.fold/10
	fx.WakeAt(g.nextGossip)
}

// Request decides at once from the local bucket (listing 3.1): refill the
// limit to req.Arrival, admit when consumed + Tokens <= limit, and count the
// tokens in this node's slot. Tokens <= 0 is admitted and takes nothing;
// more than the burst is rejected.
func (g *GCounter) Request(now time.Duration, req strategy.Request, fx *strategy.Effects) (strategy.Decision, bool) {
	d := strategy.Decision{RequestID: req.ID}
	n := req.Tokens
	if n <= 0 {
		d.Allowed = true
		return d, true
	}
	if n > g.capacity {
		return d, true
	}
	b, ok := g.state[req.Key]
	if !ok {
		b = &bucketState{gen: g.generation(now), limit: g.scaledCapacity(), refill: req.Arrival}
		g.addKey(req.Key, b)
	}
	b.touched = now
	g.refill(b, req.Arrival)
	if b.consumed+n > b.limit {
		return d, true
	}
	slots := cap(b.counter)
	b.add(entry{node: g.selfSlot(now), incarnation: g.incarnation, consumed: n})
	g.mem.resized(slots, cap(b.counter))
	for _, nb := range g.neighbours {
		addPending(g.delta[nb], req.Key, b)
	}
	d.Allowed = true
	return d, true
}

// generation is the generation of a key created at now: the whole idle
// periods in now (0 with expiry off; see the package comment).
func (g *GCounter) generation(now time.Duration) int64 {
	if g.idle <= 0 || now <= 0 {
		return 0
	}
	return int64(now / g.idle)
}

// refill raises b's limit to now at the refill rate, never above
// consumed + capacity (the token-bucket semantic; see the package comment),
// and, within forgiveWindow of a heal, never leaves it below
// consumed - capacity: a debt beyond one burst (what the sides of a split
// admitted, merged at the heal) is forgiven (forgive; ours, see
// "Partitions" in the package comment).
func (g *GCounter) refill(b *bucketState, now time.Duration) {
	if g.healAt >= 0 && now-g.healAt <= g.forgiveWindow() {
		g.forgive(b)
	}
	if now <= b.refill {
		return
	}
	dt := uint64(now - b.refill)
	b.refill = now
	b.size = 0
	if g.rate.Tokens == 0 {
		return
	}
	capacity := g.scaledCapacity()
	room := b.consumed + capacity - b.limit // >= 0 by the invariant (and clamp)
	if room <= 0 {
		return
	}
	if g.scaled() { // conserve: refill at k/N of the rate (rounded down)
		h, l := bits.Mul64(dt, uint64(g.scaleK))
		dt, _ = bits.Div64(h, l, uint64(g.scaleN))
	}
	hi, lo := bits.Mul64(dt, uint64(g.rate.Tokens))
	var carry uint64
	lo, carry = bits.Add64(lo, uint64(b.frac), 0)
	hi += carry
	if hi >= uint64(g.per) { // more than 2^64 tokens: full
		b.limit, b.frac = b.consumed+capacity, 0
		return
	}
	q, r := bits.Div64(hi, lo, uint64(g.per))
	if q >= uint64(room) {
		b.limit, b.frac = b.consumed+capacity, 0
		return
	}
	b.limit += int64(q)
	b.frac = int64(r)
}

// minForgiveWindow is the shortest time after a heal during which a debt
// beyond one burst is forgiven (forgiveWindow).
const minForgiveWindow = 10 * time.Second

// forgiveWindow is how long after the view becomes full again (a heal, or a
// rejoin) the debts merged from the other side are forgiven beyond one
// burst: 3 * members gossip intervals (a delta state reaches a given
// neighbour in N-1 rounds on average with flat gossip), at least 10 s.
// Measured (TestPostHealOutage, 3 nodes): windows of 10 s to 60 s give the
// same outcome, 3 s leaves keys refused for 29.6 s.
func (g *GCounter) forgiveWindow() time.Duration {
	return max(minForgiveWindow, 3*time.Duration(len(g.members))*g.gossip)
}

// forgive raises b's limit to consumed - capacity (Config.Burst, the
// whole burst even while conserve scales it) when it is below: after a
// heal a key is never more than one burst in debt, so it refuses outright
// for about burst/rate at most. Raising the limit is an inflation of the
// replicated state like a refill (the merge is unchanged, and the raised
// limit is gossiped with the key's next change); the tokens forgiven are
// what the sides admitted beyond one burst (ours; see "Partitions" in the
// package comment).
func (g *GCounter) forgive(b *bucketState) {
	if floor := b.consumed - g.capacity; b.limit < floor {
		b.limit, b.frac, b.size = floor, 0, 0
	}
}

// Receive merges a delta state (listing 3.3) and adds the keys it changed to
// the delta states of the neighbours other than from. A full state
// (catch-up) is merged without being passed on. Errors: an undecodable
// payload, or a bucket with an empty key, unsorted or repeated G-Counter
// slots, an empty node name, a negative or oversized count, a negative
// limit, refill timestamp or fraction, a fraction of a token of 1 or more,
// or a limit above consumed + capacity; and values the rule cannot have
// produced by now (ours, peerbound): a generation after now (or any but 0
// with expiry off), a refill timestamp after now, or a slot's consumed
// tokens above burst + rate * (now - the generation's start) (the limit has
// no time bound since forgive: see checkSinceGeneration),
// each with peerbound.ClockSkew of slack. Errors change no state.
func (g *GCounter) Receive(now time.Duration, from strategy.NodeID, payload []byte, fx *strategy.Effects) error {
	m, err := g.decodeMessage(payload)
	if err != nil {
		return fmt.Errorf("%s: message from %s does not decode: %w", Name, from, err)
	}
	in := make([]*bucketState, len(m.Buckets))
	for i := range m.Buckets {
		b, err := g.decodeBucket(now, &m.Buckets[i])
		if err != nil {
			return fmt.Errorf("%s: message from %s: %w", Name, from, err)
		}
		in[i] = b
	}
	for i, b := range in {
		key := m.Buckets[i].Key
		local, ok := g.state[key]
		changed := true
		if ok {
			slots := cap(local.counter)
			if g.fold > 0 {
				alignFold(local, b) // representation only: changes no count
			}
			changed = local.merge(b)
			g.mem.resized(slots, cap(local.counter))
		} else {
			g.addKey(key, b)
			local = b
		}
		g.clamp(local) // conserve: a merged limit is held to this side's capacity
		if changed {
			local.touched = now
		}
		if !changed || m.Full {
			continue
		}
		for _, nb := range g.neighbours {
			if nb != from {
				addPending(g.delta[nb], key, local)
			}
		}
	}
	return nil
}

// Tick gossips when the gossip interval has come: flat gossip picks one
// neighbour uniformly at random and sends it its delta state, if any. After
// gossiping it sweeps the idle keys when idle/10 has passed since the last
// sweep.
func (g *GCounter) Tick(now time.Duration, fx *strategy.Effects) {
	if g.idle > 0 {
		g.sweeper.Step(now, fx, 1, nil, func(int) bool { return g.sweepStep(now, keyorder.Budget) })
	}
	if now < g.nextGossip {
		return
	}
	g.gossipOnce(fx)
	if g.fold > 0 && now >= g.nextFold {
		g.foldAll(now)
		g.nextFold = now + g.fold/10
	}
	for g.nextGossip <= now {
		g.nextGossip += g.gossip
	}
	fx.WakeAt(g.nextGossip)
}

// sweep drops the keys unchanged for idle, full at now and in no pending
// delta state, all in one call, and returns how many it dropped (a pass
// under way starts over).
func (g *GCounter) sweep(now time.Duration) int {
	n := len(g.state)
	g.order.Restart()
	g.sweepStep(now, math.MaxInt)
	return n - len(g.state)
}

// sweepStep visits the next keys of the sweep's pass under way, at most
// budget (keyorder.Order: the pass goes on at the next call), and drops
// each unchanged for idle, full at now and in no pending delta state; it
// reports whether the pass is over (every key held at its start or added
// since visited; the state map rebuilt if it shrank under a quarter of
// its peak). Ours (issue 28: a sweep of 1M keys in one go held the loop
// for 120 ms of CPU). A key is dropped at its visit if it is idle and
// full then, as the sweep in one go dropped it at its time: later, never
// earlier.
func (g *GCounter) sweepStep(now time.Duration, budget int) bool {
	over := keyorder.Step(&g.order, &budget, func(k string) bool {
		if b := g.state[k]; now-b.touched >= g.idle && g.full(b, now) && b.pending == 0 {
			g.dropKey(k, b)
			return true
		}
		return false
	})
	if over {
		g.shrinkState()
	}
	return over
}

// addKey puts key's new bucket b in the state, the order and the count.
func (g *GCounter) addKey(key string, b *bucketState) {
	g.state[key] = b
	b.pos = g.order.Add(key)
	g.mem.added(key, b)
}

// dropKey deletes key, whose bucket is b, from the state, the order and
// the count.
func (g *GCounter) dropKey(key string, b *bucketState) {
	delete(g.state, key)
	g.order.Remove(b.pos, g.movedKey)
	g.mem.dropped(key, b)
}

// movedKey records that key's place in the order is now pos.
func (g *GCounter) movedKey(key string, pos int) { g.state[key].pos = pos }

// full reports whether b has refilled to consumed + capacity at now (on a
// copy: b is not changed).
func (g *GCounter) full(b *bucketState, now time.Duration) bool {
	c := *b
	g.refill(&c, now)
	return c.limit == c.consumed+g.scaledCapacity() && c.frac == 0
}

func (g *GCounter) gossipOnce(fx *strategy.Effects) {
	pending := false
	for _, nb := range g.neighbours {
		if len(g.delta[nb]) > 0 {
			pending = true
			break
		}
	}
	if !pending {
		return // nothing to send anywhere: no draw
	}
	g.picks = g.topo.Pick(g.rnd, g.neighbours, g.picks)
	for _, nb := range g.picks {
		keys := g.delta[nb]
		if len(keys) == 0 {
			continue
		}
		fx.Send(nb, g.encode(sortedKeys(keys), false))
		g.dropPending(keys)
		clear(keys)
	}
}

// addPending adds key, whose bucket is b, to the delta state keys.
func addPending(keys map[string]struct{}, key string, b *bucketState) {
	n := len(keys)
	keys[key] = struct{}{}
	if len(keys) > n {
		b.pending++
	}
}

// dropPending counts the keys of a delta state that is about to be
// cleared or dropped out of their buckets' pending counts. Every key of a
// delta state has a bucket (sweep keeps pending keys).
func (g *GCounter) dropPending(keys map[string]struct{}) {
	for k := range keys {
		if b := g.state[k]; b != nil {
			b.pending--
		}
	}
}

// sortedKeys returns the keys of m in ascending order, so that nothing sent
// depends on map iteration order.
func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

// allKeys returns every key of the local state, sorted.
func (g *GCounter) allKeys() []string { return sortedKeys(g.state) }

// SetMembers updates the neighbours: a member that left loses its delta
// state, a new one starts with an empty one. With catch_up, the first
// established member after each new member (in sorted order, wrapping)
// sends it the full state (buddy.Of: a node counts itself as
// established even if its view leaves it out).
func (g *GCounter) SetMembers(now time.Duration, members []strategy.NodeID, fx *strategy.Effects) {
	old := g.members
	g.setMembers(members)
	g.fullView(now)
	g.rescale(now)
	if !g.catchUp || len(g.state) == 0 {
		return
	}
	for _, nb := range g.members { // every newcomer, a neighbour or not (topology)
		if nb != g.self && !slices.Contains(old, nb) && buddy.Of(g.self, nb, g.members, old) == g.self {
			fx.Send(nb, g.encode(g.allKeys(), true))
		}
	}
}

func (g *GCounter) setMembers(members []strategy.NodeID) {
	g.members = slices.Clone(members)
	slices.Sort(g.members)
	g.members = slices.Compact(g.members)
	g.neighbours = g.topo.Neighbours(g.self, g.members)
	for nb := range g.delta {
		if !slices.Contains(g.neighbours, nb) {
			g.dropPending(g.delta[nb])
			delete(g.delta, nb)
		}
	}
	for _, nb := range g.neighbours {
		if g.delta[nb] == nil {
			g.delta[nb] = map[string]struct{}{}
		}
	}
}

// Remaining is the whole tokens key's replicated bucket holds at now as
// this node sees it: the limit refilled to now minus the consumed tokens
// it knows of, rounded down and clamped to [0, Burst] (the capacity for a
// key it has not seen: a new key starts full); under conserve with k of
// the N expected members in view, to [0, floor(k/N * Burst)]. Always known. It changes no
// state (strategy.Remainer): the refill is computed on a copy.
func (g *GCounter) Remaining(now time.Duration, key string) (int64, bool) {
	b, ok := g.state[key]
	if !ok {
		return g.scaledCapacity(), true
	}
	c := *b // refill touches limit, frac and refill only, never the counter
	g.refill(&c, now)
	return min(max(c.limit-c.consumed, 0), g.scaledCapacity()), true
}

var _ strategy.Remainer = (*GCounter)(nil)

// StateBytes is the exact size, in bytes of the wire encoding, of the
// node's local state as a full-state GCounterMessage plus the delta
// message it would send to each neighbour now (computed field by field,
// equal to proto.Size of those messages; see TestStateBytesExact).
//
// The simulator samples it every second of trace time on every node, so a
// bucket's size is cached until it changes (bucketState.size), and the
// delta states holding a key are counted as they change
// (bucketState.pending).
func (g *GCounter) StateBytes() int {
	n := 0
	for k, b := range g.state {
		n += bucketSize(k, b) * (1 + b.pending) // once in the state, once per delta state holding it
	}
	return n
}

// gossipPhase returns when, after Start, a node's first gossip round comes:
// a duration drawn uniformly from (0, interval] (ours, not the thesis'). The
// thesis' rounds start with the node; in a simulation that starts every
// node at the same instant they would all gossip in step, and a delta state
// relayed through a third node would wait a whole interval for its next
// hop. Live processes never start in step, so each node's rounds have a
// phase of their own: measured on wrccdc at 3 nodes (--speed 10, gossip
// 300 ms), the live cluster admitted 0.6-0.9 points less excess than the
// simulator with rounds in step, and as much as the simulator with this
// draw (docs/EVALUATION.md, "The simulator against the live cluster under
// faults").
func gossipPhase(rnd *rand.Rand, interval time.Duration) time.Duration {
	return 1 + time.Duration(rnd.Int64N(int64(interval)))
}
