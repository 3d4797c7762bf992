// Package tbqueue implements the `tbqueue` strategy: per key, a replicated
// token-bucket queue of (time-of-birth, time-of-death) elements, one per
// admitted request (by default one per node and instant, see coalesce),
// kept consistent by delta states sent by gossip.
//
// Source: Henriksson & Bennhage (the CRDT thesis), ch. 4. From the thesis:
//   - §4.1.2, §4.2.1, eq. (4.2): a request is admitted when the key's queue
//     holds fewer than capacity (= Config.Burst) live elements; the new
//     element is born now and dies 1/rate after the queue's last element
//     (or 1/rate from now if the queue is empty). Refill (listing 4.1)
//     removes the elements at the head whose time-of-death has passed;
//     listing 4.1 prints the comparison inverted, the text is followed.
//   - Merge (listing 4.2) is merge sort by time-of-birth; into the local
//     state, two elements of equal identity become one with the larger
//     time-of-death; every merged element's time-of-death becomes
//     max(its own, the previous element's + 1/rate) (listing 4.3). The new
//     and updated elements are merged into every neighbour's delta state,
//     and from the sender's the elements it sent are then removed (listing
//     4.7); removed elements received again are re-added. After a merge,
//     the local state and every delta state are refilled for the keys
//     received (listing 4.4); an empty queue drops its key.
//   - Flat gossip: every gossip interval (default 300 ms, Table 4.1) the
//     delta state of one neighbour chosen uniformly at random is sent and
//     cleared. The neighbours are every other member (Table 4.1: fully
//     connected) unless the topology parameter says otherwise (ours, §5.5
//     leaves it open; strategy/internal/gossipgraph): ring keeps the
//     predecessor and successor in NodeID order, random:d sends d
//     neighbours drawn at random their delta states each round (not with
//     linf); frequency analysis and LINF work on the topology's
//     neighbours, and catch-up reaches every newcomer. Delta states are not refilled before sending: elements past
//     their time-of-death are still propagated (§5.4).
//   - frequency_analysis (§4.2.3, listing 4.5): after admitting a request,
//     for each neighbour whose delta state holds at least window elements
//     (here tokens, see coalesce) of the key (window = capacity / number of
//     nodes, Table 4.2), if the mean interval of the last window (newest
//     time-of-birth minus the window-th newest, over window) is below
//     frequency_threshold (2400 ms, Table 4.2), that key's delta is sent
//     to the neighbour at once. Listing 4.5 prints ">"; the text ("average
//     frequency higher than the threshold") is followed.
//   - linf (§4.2.4-4.2.5, Least Informed Neighbour First): gossip goes to
//     the neighbour with the most elements queued in its delta state, ties
//     broken uniformly at random. The thesis keeps a priority map updated
//     by listings 4.6-4.8 that approximates this count (it is not lowered
//     when a refill drops elements); here the count is exact.
//
// Ours, not the thesis':
//   - coalesce (bool, default true): the requests a node admits for a key
//     at one instant are one element of their total tokens. The thesis
//     identifies an element by its time-of-birth and assumes equal births
//     stem from one request (§4.1, §4.2.2), yet queues one element per
//     request (§4.2.1), so a node that admits several requests in one
//     millisecond (or one second, in traces of 1 s resolution) holds
//     several elements of one identity, and copies of them are paired one
//     to one in order (listing 4.2 lines 7-14). Once a node has refilled
//     the first of such a group, a copy that still holds it pairs off by
//     one: the copy's first element pairs with the node's second, and so
//     on, and the copy's last, left unpaired, is added again and chained
//     1/rate after the tail (listing 4.3). Every gossip round that brings
//     an older copy back re-adds an element and pushes the group back: the
//     group never dies, nodes count tokens central refilled long ago, and
//     each push is an update gossiped again (TestSameInstantDiesOnTime: 3
//     requests at 0 s still count 3 tokens at 4.6 s). This is the thesis'
//     algorithm, and it made the queue reject far more than central on
//     real traces (10 nodes, rate 1, burst 10): wrccdc-2018-dns admitted
//     5,127 requests for central's 14,382 (gcounter 17,406) and sent
//     136 MB; zanbil-2019-http (1 s timestamps) 31,281 for 67,239 (gcounter
//     68,157), 977 MB. With 3 nodes the queue admitted about as many as
//     central only because this over-rejection cancelled the gossip lag's
//     over-admission (6.4% excess, 2,687 false rejections). Coalesced,
//     one element per node and instant is what §4.1 assumes, and the
//     queue admits like gcounter: 17,425 (13.5 MB) and 68,611 (39 MB) on
//     10 nodes, 16,338 (gcounter 16,312) on 3
//     (TestTenNodesSameInstantNotOverRejecting). A later request at the
//     instant grows the element by n tokens and its time-of-death by
//     n/rate; two copies of an element that differ in tokens (one sent
//     before it grew) become one with the larger tokens and the later
//     start, start being time-of-death minus tokens/rate, which keeps the
//     merge laws below. The frequency analysis window counts tokens, so a
//     coalesced request still counts as one; the LINF count counts
//     elements. coalesce=false restores one element per request, and the
//     over-rejection. With unique_ids every request has its own identity
//     and the groups cannot pair off (wrccdc on 10 nodes: 17,425 admitted
//     with coalesce or without); coalesce then only saves bytes.
//   - Equal elements collapse in delta states too. Listing 4.2 merges the
//     updates into delta states without collapsing elements of equal
//     time-of-birth (into_local_state false), assuming they are distinct
//     requests; but an update is often a new time-of-death of an element
//     the delta state already holds, which is then queued twice, and the
//     receiver (which pairs equal elements one to one) counts it twice.
//     The copies multiply with every round: 31 requests over 10 s on 4
//     nodes reach a 444 KB state (TestDeltaDuplicatesGrow), where the
//     collapsing merge peaks at 201 B. By default equal elements are paired
//     one to one in delta states as in the local state; delta_duplicates
//     (bool, default false) restores the listing for measurement.
//   - Exact times: time-of-death is kept to a fraction of a nanosecond (1/3 s
//     is not a whole number of ns), so queues never drift from a token
//     bucket, and an element dies at its time-of-death (a token refilled at t
//     is there at t): one node alone decides exactly as `central`.
//   - A request for n tokens is one element of n tokens that lives n/rate
//     longer; its tokens count until they come back one by one.
//   - unique_ids (bool, default false): element identity is (time-of-birth,
//     the admitting node, its sequence number), so two requests admitted at
//     the same instant by two nodes are no longer counted as one (§4.2.2,
//     scenario 2, which the thesis leaves open as unlikely; with ms
//     timestamps it is not: TestUniqueIDsSameMillisecond).
//   - Merge laws. With unique_ids, merging delta states is idempotent
//     (delivering one again changes nothing) and insensitive to delivery
//     order: the result is the union of the elements, each with its largest
//     tokens and latest start, chained by listing 4.3 (property test
//     TestMergeOrderInsensitiveAndIdempotent). This holds for merges with no
//     refill in between: an element refilled away before an earlier one
//     arrives can no longer be pushed back (what safe_margin addresses).
//     The thesis' merge does not satisfy these laws: it is not injective,
//     two requests born at the same instant on two nodes become one element
//     (TestScenario2SameBirth), and its merge into delta states is not
//     idempotent, merge(d, d) holds every element twice
//     (TestThesisDeltaMergeNotIdempotent, with delta_duplicates).
//   - safe_margin (duration, default 0): the fix for the data set D failure
//     (§5.4), the "safe margin" the thesis suggests as time rather than a
//     count: an element is removed only safe_margin after its
//     time-of-death. It no longer counts against the limit once dead, but
//     it keeps spreading and merging, so a request admitted before it died
//     on a node that did not know it still has its time-of-death pushed back
//     when they meet (listing 4.3), instead of starting the queue afresh.
//     Pushing back is never wrong: an element only raises the
//     time-of-death of elements born before it died. A margin of a few
//     gossip rounds lets an element reach most nodes; the cost is memory.
//     On data set D (30 nodes, gossip 900 ms, 300 s) the thesis' queue
//     admits 30 tokens beyond central, as many as local; with
//     safe_margin=2s, 2, for a mean state of 2.2 KB instead of 0.2 KB
//     (TestSafeMarginDataSetD).
//   - catch_up (bool, default false; §5.5, which the thesis leaves open):
//     when SetMembers shows a new member, the first established member
//     after it (sorted, wrapping) sends it the full local state. The
//     newcomer merges it but passes on only what changed in elements it
//     already had.
//   - Idle keys are swept: a key whose elements have all been gone (past
//     time-of-death plus safe_margin) for a whole sweep interval
//     (burst/rate, clamped to [1 s, 1 min]) is dropped from the local and
//     delta states. The thesis only refills a key on a request or a merge
//     for it, so an idle key keeps its last elements.
//   - An empty delta state sends nothing; with LINF, nothing is sent while
//     every neighbour's count is 0.
//   - The wire encoding (api/peer/v1/tbqueue.proto) sends each
//     time-of-birth as the difference from the previous element's and each
//     time-of-death as the difference from its time-of-birth.
//
// # Partitions (ours)
//
// Under `partition: available` (the thesis' behaviour) each side of a
// split admits from its own copy of every queue: up to the whole (r, b)
// per key per side. At the heal the queues merge (union, chained by
// listing 4.3): the merged queue holds both sides' live elements, at most
// the burst from each, so the debt (false rejections after the heal) is at
// most b per side, not the split's whole excess. Under `partition:
// conserve` (strategy.Conserver) a node that sees k of the last agreed N
// members weighs every token it admits as ceil(N/k) tokens (an element of
// n tokens is queued as ceil(n*N/k) tokens, so it also dies N/k times
// later): a side admits at most about k/N of the burst beyond the live
// tokens of the queue it shares with the other side at the split, and
// k/N of the rate afterwards; the sides together admit at most b + r*T
// over a split of T once every node has seen it (before that, a node
// admits at full weight for the failure detector's delay). The weighting
// rounds up, so a side may get less than k/N. At the heal k = N: weight
// 1; the weighted elements merge like others (their extra weight is at
// most the burst per side, as in available).
package tbqueue

import (
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/internal/buckets"
	"github.com/tokenmesh/tokenmesh/strategy/internal/buddy"
	"github.com/tokenmesh/tokenmesh/strategy/internal/gossipgraph"
	"github.com/tokenmesh/tokenmesh/strategy/internal/keyorder"
	"github.com/tokenmesh/tokenmesh/strategy/internal/peerbound"
)

// Name is the strategy's name in the registry and in errors.
const Name = "tbqueue"

// Defaults from the thesis' Tables 4.1 and 4.2.
const (
	// DefaultGossip is the gossip interval (the CRDT thesis Table 4.1).
	DefaultGossip = 300 * time.Millisecond
	// DefaultFrequencyThreshold is the frequency analysis threshold on the
	// mean interval between a window's times-of-birth (the CRDT thesis §4.2.3,
	// Table 4.2).
	DefaultFrequencyThreshold = 2400 * time.Millisecond
)

// TBQueue is one node of the tbqueue strategy: per key a token-bucket queue
// of (time-of-birth, time-of-death) elements and one delta state per
// neighbour (the CRDT thesis ch. 4). Not safe for concurrent use.
type TBQueue struct {
	self     strategy.NodeID
	clock    clock
	capacity int64 // tokens (Config.Burst)

	gossip     time.Duration
	freq       bool
	threshold  time.Duration
	window     int // 0: capacity / number of nodes
	linf       bool
	unique     bool
	margin     time.Duration
	catchUp    bool
	dupDeltas  bool // delta_duplicates: listing 4.2's into_local_state=false
	coalesce   bool // one element per key, node and instant (false: the thesis' one per request)
	sweepEvery time.Duration
	sweeper    keyorder.Sweeper // the sweeps of idle keys, in steps (sweepStep)
	order      keyorder.Order   // the local map's keys, for the sweep's steps
	passAt     time.Duration    // when the sweep's pass under way began
	rnd        *rand.Rand
	topo       gossipgraph.Topology // the topology parameter
	picks      []strategy.NodeID    // the peers of a gossip round (reused)

	members    []strategy.NodeID // sorted, self included
	neighbours []strategy.NodeID // the topology's neighbours among members, sorted
	local      map[string]entry  // a key's local queue; kept (empty) while a delta state holds the key
	delta      map[strategy.NodeID]map[string][]elem
	queued     map[strategy.NodeID]int // elements in each delta state (LINF)
	seq        uint64                  // unique_ids: last sequence number used

	conserve bool              // partition: conserve
	expected []strategy.NodeID // the last agreed members (strategy.Conserver)
	scaleK   int64             // live members, under conserve
	scaleN   int64             // live and expected members (== scaleK: weight 1)

	nextGossip time.Duration

	mem memory // heap accounting for MemoryBytes (memory.go)
}

// New builds a node with the parameters declared in Params (params.go:
// names, types, units and defaults; `tokenmesh strategies` lists them).
//
// Errors: an invalid Config, an unknown or invalid parameter, or a burst too
// large for the rate's tick arithmetic (as bucket.New).
func New(cfg strategy.Config) (*TBQueue, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	q := &TBQueue{self: cfg.Self, clock: newClock(cfg.Rate), capacity: cfg.Burst, rnd: cfg.Rand,
		local: map[string]entry{}, delta: map[strategy.NodeID]map[string][]elem{}, queued: map[strategy.NodeID]int{}}
	v, err := strategy.ReadParams(Name, Params, cfg.Params)
	if err != nil {
		return nil, err
	}
	if q.gossip = v.Duration("gossip"); q.gossip <= 0 {
		return nil, fmt.Errorf("%s: parameter gossip must be positive", Name)
	}
	q.freq = v.Bool("frequency_analysis")
	q.threshold = v.Duration("frequency_threshold")
	if q.window = v.IntOr("window", 0); q.window < 0 {
		return nil, fmt.Errorf("%s: parameter window=%d is negative", Name, q.window)
	}
	q.linf = v.Bool("linf")
	if q.topo, err = gossipgraph.Parse(v.String("topology")); err != nil {
		return nil, fmt.Errorf("%s: parameter %w", Name, err)
	}
	if q.linf && q.topo.Kind == gossipgraph.Random {
		return nil, fmt.Errorf("%s: linf picks the one least informed neighbour per round, topology %s picks %d at random: choose one", Name, q.topo, q.topo.D)
	}
	q.unique = v.Bool("unique_ids")
	q.margin = v.Duration("safe_margin")
	q.catchUp = v.Bool("catch_up")
	q.dupDeltas = v.Bool("delta_duplicates")
	q.coalesce = v.Bool("coalesce")
	if q.dupDeltas && q.unique {
		return nil, fmt.Errorf("%s: delta_duplicates needs unique_ids=false (unique identities always collapse)", Name)
	}
	if _, err := bucket.New(cfg.Rate, cfg.Burst, 0); err != nil {
		return nil, fmt.Errorf("%s: %w", Name, err)
	}
	q.sweepEvery = buckets.SweepInterval(cfg.Rate, cfg.Burst)
	q.conserve = cfg.Partition == strategy.PartitionConserve
	q.expected = slices.Clone(cfg.Members)
	q.setMembers(cfg.Members)
	return q, nil
}

// SetExpected records the last agreed members (strategy.Conserver; ours,
// see "Partitions" in the package documentation): under conserve, an
// admission of n tokens while this node sees k < N of them queues
// ceil(n*N/k) tokens (weight).
func (q *TBQueue) SetExpected(now time.Duration, expected []strategy.NodeID, fx *strategy.Effects) {
	q.expected = slices.Clone(expected)
	q.rescale()
}

// rescale sets k/N (see weight) from the live and expected members: 1/1
// under available, k = N (weight 1) while every expected member is in
// view.
func (q *TBQueue) rescale() {
	q.scaleK, q.scaleN = 1, 1
	if q.conserve {
		k, n, _ := strategy.ConserveScale(q.self, q.members, q.expected)
		q.scaleK, q.scaleN = int64(k), int64(n)
	}
}

// weight is the tokens an admission of n tokens queues: n, or under
// conserve with k of N members seen, ceil(n*N/k) (more than the burst when
// it cannot fit: the request is then refused).
func (q *TBQueue) weight(n int64) int64 {
	if q.scaleK >= q.scaleN || q.scaleK <= 0 {
		return n
	}
	if n > (q.capacity+1)*q.scaleK/q.scaleN+1 { // cannot fit; also keeps n*N from overflowing
		return q.capacity + 1
	}
	return (n*q.scaleN + q.scaleK - 1) / q.scaleK
}

var _ strategy.Conserver = (*TBQueue)(nil)

// Start arms the gossip and sweep timers. The first gossip round comes
// after a part of the gossip interval drawn uniformly from (0, gossip] with
// Config.Rand, as in gcounter (ours: live nodes never gossip in step, and
// the simulator must not make them; see gcounter's gossipPhase).
func (q *TBQueue) Start(now time.Duration, fx *strategy.Effects) {
	q.nextGossip = now + 1 + time.Duration(q.rnd.Int64N(int64(q.gossip)))
	fx.WakeAt(q.nextGossip)
	q.sweeper.Every = q.sweepEvery
	q.sweeper.Start(now, fx)
}

// Request decides at once from the local queue: refill it to req.Arrival,
// admit when its live tokens plus req.Tokens are at most the capacity, and
// add the element to the local state and every delta state (§4.2.1), or
// with coalesce grow the element this node admitted at req.Arrival.
// Tokens <= 0 is admitted and takes nothing; more than the burst is
// rejected.
func (q *TBQueue) Request(now time.Duration, req strategy.Request, fx *strategy.Effects) (strategy.Decision, bool) {
	d := strategy.Decision{RequestID: req.ID}
	n := req.Tokens
	if n <= 0 {
		d.Allowed = true
		return d, true
	}
	if n > q.capacity {
		return d, true
	}
	if n = q.weight(n); n > q.capacity { // conserve: k/N of the burst
		return d, true
	}
	at := req.Arrival
	lq := refill(q.local[req.Key].q, at, q.margin)
	if q.clock.tokensIn(lq, at)+n > q.capacity {
		q.setLocal(req.Key, lq)
		return d, true
	}
	d.Allowed = true
	var e elem
	i, grown := q.sameInstant(lq, at)
	if grown {
		// coalesce: the element this node admitted at this instant takes
		// the n tokens; its consumption starts where it did, so it dies
		// n/rate later.
		e = lq[i]
		e.tokens += n
		e.death = q.clock.after(e.death, n)
		lq[i] = e
	} else {
		lq, i, e = q.insertNew(lq, at, n)
	}
	// Elements after it have their time-of-death pushed back (listing 4.3).
	changed := []elem{e}
	for j := i + 1; j < len(lq); j++ {
		if dd := q.clock.after(lq[j-1].death, lq[j].tokens); cmpStamp(dd, lq[j].death) > 0 {
			lq[j].death = dd
			changed = append(changed, lq[j])
		}
	}
	q.setLocal(req.Key, lq)
	q.spread(req.Key, at, lq, i, e, changed, grown, fx)
	return d, true
}

// insertNew adds a new element of n tokens born at at to lq and returns
// the queue, the element's index and the element.
func (q *TBQueue) insertNew(lq []elem, at time.Duration, n int64) ([]elem, int, elem) {
	// Eq. (4.2): die 1/rate (here n/rate) after the last element, or after now.
	base := stamp{ns: int64(at)}
	if k := len(lq); k > 0 && cmpStamp(lq[k-1].death, base) > 0 {
		base = lq[k-1].death
	}
	e := elem{birth: at, death: q.clock.after(base, n), tokens: n}
	if q.unique {
		q.seq++
		e.origin, e.seq = q.self, q.seq
	}
	// The new element goes after every element not greater than it:
	// the tail, unless a peer's clock ran ahead.
	i, _ := slices.BinarySearchFunc(lq, e, func(a, b elem) int {
		if cmpID(&a, &b) <= 0 {
			return -1
		}
		return 1
	})
	return slices.Insert(lq, i, e), i, e
}

// spread adds the elements a request changed (changed: the admitted or
// grown element e at index i of the local queue lq, then those it pushed
// back) to every neighbour's delta state for key, and analyses the delta
// when freq is on.
func (q *TBQueue) spread(key string, at time.Duration, lq []elem, i int, e elem, changed []elem, grown bool, fx *strategy.Effects) {
	for _, nb := range q.neighbours {
		dq := q.delta[nb][key]
		if !grown && len(changed) == 1 && i == len(lq)-1 && (len(dq) == 0 || cmpID(&dq[len(dq)-1], &e) <= 0) {
			dq = append(dq, e) // §4.2.1: put on the tail of each delta state
		} else {
			dq = q.clock.merge(dq, changed, !q.dupDeltas, false).queue
		}
		q.setDelta(nb, key, dq)
		if q.freq {
			q.analyse(nb, key, at, fx)
		}
	}
}

// sameInstant returns the index of the element of lq that this node
// admitted at instant at, if coalesce is on and there is one: with
// unique_ids the one of origin self, in the thesis' identity any element
// born at at (it is the same element, §4.1).
func (q *TBQueue) sameInstant(lq []elem, at time.Duration) (int, bool) {
	if !q.coalesce {
		return 0, false
	}
	i, _ := slices.BinarySearchFunc(lq, at, func(e elem, t time.Duration) int {
		if e.birth <= t {
			return -1
		}
		return 1
	})
	for i--; i >= 0 && lq[i].birth == at; i-- {
		if !q.unique || lq[i].origin == q.self {
			return i, true
		}
	}
	return 0, false
}

// analyse is the frequency analysis of listing 4.5 for one neighbour's
// delta state of key, just after an element born at latest was added or
// grown. The window counts tokens, so that requests coalesced into one
// element count one each.
func (q *TBQueue) analyse(nb strategy.NodeID, key string, latest time.Duration, fx *strategy.Effects) {
	w := q.window
	if w == 0 {
		w = max(1, int(q.capacity)/len(q.members))
	}
	dq := q.delta[nb][key]
	k, sum := len(dq), int64(0)
	for k > 0 && sum < int64(w) {
		k--
		sum += dq[k].tokens
	}
	if sum < int64(w) {
		return
	}
	earliest := dq[k].birth
	// mean interval (latest - earliest) / w below the threshold
	if latest-earliest >= q.threshold*time.Duration(w) {
		return
	}
	fx.Send(nb, q.encode([]string{key}, q.delta[nb], false))
	q.setDelta(nb, key, nil)
}

// Receive merges a delta state into the local state and the delta states
// (listings 3.3, 4.2-4.4, 4.7). A full state (catch-up) is merged the same
// way, but only updates to elements this node already held are passed on.
// Errors: an undecodable payload, or a key that is empty or repeated, or
// an element with a negative time, a time-of-death before its
// time-of-birth, a fraction out of range, tokens above the burst, (with
// unique_ids) elements out of identity order, or (ours, peerbound) a
// time-of-birth after now + peerbound.ClockSkew: no node can have admitted
// a request in the future. Errors change no state.
//
// A time-of-death has no bound of this kind: merges push deaths back by
// design (listing 4.3), and after a partition of length T the merged queue
// legitimately holds deaths about (N-1)T ahead, so any cap would refuse
// real states; peer authentication (grpcpeer) is what keeps a forged
// queue out.
func (q *TBQueue) Receive(now time.Duration, from strategy.NodeID, payload []byte, fx *strategy.Effects) error {
	keys, queues, full, err := q.decode(payload)
	if err != nil {
		return fmt.Errorf("%s: message from %s: %w", Name, from, err)
	}
	for k, qu := range queues {
		// Births are sorted: the last is the latest.
		if n := len(qu); n > 0 && qu[n-1].birth > now+peerbound.ClockSkew {
			return fmt.Errorf("%s: message from %s: key %q: time-of-birth %v is after now %v", Name, from, keys[k], qu[n-1].birth, now)
		}
	}
	for k, key := range keys {
		in := queues[k]
		res := q.clock.merge(q.local[key].q, in, true, true)
		q.setLocal(key, refill(res.queue, now, q.margin))
		updates := res.updates
		if full {
			updates = updates[:0:0]
			for u, e := range res.updates {
				if res.old[u] {
					updates = append(updates, e)
				}
			}
		}
		for _, nb := range q.neighbours {
			dm := q.delta[nb]
			was := dm[key]
			dq := was
			if len(updates) > 0 {
				dq = q.clock.merge(dq, updates, !q.dupDeltas, false).queue
			}
			if nb == from {
				dq = removeDuplicates(dq, in)
			}
			dq = refill(dq, now, q.margin) // listing 4.4
			if sameQueue(dq, was) {
				continue // setDelta would change nothing (the hot path of 29 neighbours at 30 nodes)
			}
			q.setDelta(nb, key, dq)
		}
	}
	return nil
}

// Tick gossips when the gossip interval has come and sweeps idle keys when
// the sweep interval has (in steps: sweepStep).
func (q *TBQueue) Tick(now time.Duration, fx *strategy.Effects) {
	if now >= q.nextGossip {
		q.gossipOnce(fx)
		for q.nextGossip <= now {
			q.nextGossip += q.gossip
		}
		fx.WakeAt(q.nextGossip)
	}
	q.sweeper.Step(now, fx, 1, func() { q.passAt = now }, func(int) bool { return q.sweepStep(keyorder.Budget) })
}

// gossipOnce sends one neighbour its delta state: chosen uniformly at
// random (flat gossip), or with linf the one with the most queued elements.
func (q *TBQueue) gossipOnce(fx *strategy.Effects) {
	total := 0
	for _, nb := range q.neighbours {
		total += q.queued[nb]
	}
	if total == 0 {
		return
	}
	if q.linf {
		best, ties := -1, []strategy.NodeID(nil)
		for _, m := range q.neighbours {
			switch c := q.queued[m]; {
			case c > best:
				best, ties = c, append(ties[:0], m)
			case c == best:
				ties = append(ties, m)
			}
		}
		nb := ties[0]
		if len(ties) > 1 {
			nb = ties[q.rnd.IntN(len(ties))]
		}
		q.picks = append(q.picks[:0], nb)
	} else {
		q.picks = q.topo.Pick(q.rnd, q.neighbours, q.picks)
	}
	for _, nb := range q.picks {
		dm := q.delta[nb]
		if len(dm) == 0 {
			continue
		}
		fx.Send(nb, q.encode(slices.Sorted(maps.Keys(dm)), dm, false))
		clear(dm)
		q.queued[nb] = 0
	}
}

// sweep drops keys whose elements have all been gone for a sweep interval
// at now, all in one call (a pass under way starts over).
func (q *TBQueue) sweep(now time.Duration) {
	q.passAt = now
	q.order.Restart()
	q.sweepStep(math.MaxInt)
}

// sweepStep visits the next keys of the sweep's pass under way, at most
// budget (keyorder.Order: the pass goes on at the next call), and reports
// whether the pass is over (every key held at its start or added since
// visited; then the local map is rebuilt if it shrank under a quarter of
// its peak, and emptied delta states replaced). At a key's visit, each
// neighbour's delta state of it is dropped when its elements have all
// been gone for a sweep interval at the pass's beginning (passAt), and so
// is its local queue, and then the key when no delta state holds it.
// Ours (issue 28 item 5: a sweep of 1M keys in one go held the loop for
// 476 ms of CPU). Judged at passAt, as the sweep in one go at that time
// judged it: a queue touched since holds an element that is not gone
// then (Request and Receive refill, and a new element is alive), so a
// key is dropped at its visit only if that sweep dropped it too: later,
// never earlier. A delta state of a key the local state no longer holds
// keeps its key in the local map with an empty queue (setLocal, setDelta)
// so that its sweep still visits it.
func (q *TBQueue) sweepStep(budget int) bool {
	over := keyorder.Step(&q.order, &budget, func(k string) bool {
		for _, nb := range q.neighbours {
			if dq, ok := q.delta[nb][k]; ok && q.idle(dq) {
				q.setDelta(nb, k, nil)
			}
		}
		if e := q.local[k]; q.idle(e.q) && !q.inDelta(k) {
			q.dropLocal(k, e)
			return true
		}
		return false
	})
	if over {
		q.shrinkMaps()
	}
	return over
}

// idle reports whether every element of qu has been gone for a sweep
// interval at the pass's beginning (an empty queue is idle).
func (q *TBQueue) idle(qu []elem) bool {
	for i := range qu {
		if !gone(&qu[i], q.passAt-q.sweepEvery, q.margin) {
			return false
		}
	}
	return true
}

// inDelta reports whether some neighbour's delta state holds key.
// O(neighbours).
func (q *TBQueue) inDelta(key string) bool {
	for _, nb := range q.neighbours {
		if _, ok := q.delta[nb][key]; ok {
			return true
		}
	}
	return false
}

// SetMembers updates the neighbours: a member that left loses its delta
// state, a new one starts with an empty one. With catch_up, the first
// established member after each new member (sorted, wrapping) sends it the
// full local state (buddy.Of: a node counts itself as
// established even if its view leaves it out).
func (q *TBQueue) SetMembers(now time.Duration, members []strategy.NodeID, fx *strategy.Effects) {
	old := q.members
	q.setMembers(members)
	if !q.catchUp || len(q.local) == 0 {
		return
	}
	var keys []string
	var queues map[string][]elem
	for _, nb := range q.members { // every newcomer, a neighbour or not (topology)
		if nb != q.self && !slices.Contains(old, nb) && buddy.Of(q.self, nb, q.members, old) == q.self {
			if queues == nil {
				queues = q.localQueues()
				keys = slices.Sorted(maps.Keys(queues))
			}
			if len(keys) == 0 {
				return // only keys a delta state holds, with no local queue: nothing to send
			}
			fx.Send(nb, q.encode(keys, queues, true))
		}
	}
}

func (q *TBQueue) setMembers(members []strategy.NodeID) {
	q.members = slices.Clone(members)
	slices.Sort(q.members)
	q.members = slices.Compact(q.members)
	if !slices.Contains(q.members, q.self) {
		q.members = append(q.members, q.self) // for window = capacity / number of nodes
		slices.Sort(q.members)
	}
	q.neighbours = q.topo.Neighbours(q.self, q.members)
	for nb := range q.delta {
		if !slices.Contains(q.neighbours, nb) {
			delete(q.delta, nb)
			delete(q.queued, nb)
		}
	}
	for _, nb := range q.neighbours {
		if q.delta[nb] == nil {
			q.delta[nb] = map[string][]elem{}
		}
	}
	q.rescale()
}

// localQueues is the local state's non-empty queues by key (a new map).
func (q *TBQueue) localQueues() map[string][]elem {
	m := make(map[string][]elem, len(q.local))
	for k, e := range q.local {
		if len(e.q) > 0 {
			m[k] = e.q
		}
	}
	return m
}

// entry is a key's local state: its queue (sorted by identity; empty
// while only a delta state holds the key) and its place in the sweep's
// order.
type entry struct {
	q   []elem
	pos int
}

// setLocal replaces key's local queue with qu (empty: none). A key left
// with no queue is dropped unless a delta state holds it (kept with an
// empty queue, for the sweep to visit: sweepStep).
func (q *TBQueue) setLocal(key string, qu []elem) {
	e, had := q.local[key]
	if len(qu) == 0 && !had {
		return
	}
	q.mem.setQueue(e.q, qu)
	e.q = qu
	if len(qu) == 0 && !q.inDelta(key) {
		q.dropLocal(key, e)
		return
	}
	if !had {
		q.mem.keys.Add(key)
		e.pos = q.order.Add(key)
	}
	q.local[key] = e
}

// dropLocal deletes key, whose entry is e, from the local map, the order
// and the count.
func (q *TBQueue) dropLocal(key string, e entry) {
	q.mem.setQueue(e.q, nil)
	q.mem.keys.Remove(key)
	q.order.Remove(e.pos, q.movedKey)
	delete(q.local, key)
}

// movedKey records that key's place in the order is now pos.
func (q *TBQueue) movedKey(key string, pos int) {
	e := q.local[key]
	e.pos = pos
	q.local[key] = e
}

// sameQueue reports whether a and b are the same slice (same elements in
// the same memory, or both empty): replacing one by the other is a no-op.
func sameQueue(a, b []elem) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// setDelta replaces nb's delta state of key, keeping the LINF count exact.
func (q *TBQueue) setDelta(nb strategy.NodeID, key string, qu []elem) {
	dm := q.delta[nb]
	q.mem.setDelta(nb, len(dm) == 0, dm[key], qu)
	q.queued[nb] += len(qu) - len(dm[key])
	if len(qu) == 0 {
		delete(dm, key)
		if e, ok := q.local[key]; ok && len(e.q) == 0 && !q.inDelta(key) {
			q.dropLocal(key, e)
		}
		return
	}
	dm[key] = qu
	if _, ok := q.local[key]; !ok { // held by a delta state only: kept for the sweep (setLocal)
		q.mem.keys.Add(key)
		q.local[key] = entry{pos: q.order.Add(key)}
	}
}

// Remaining is the tokens key's local queue leaves free at now, as the
// admission rule computes them: capacity minus the live tokens of the
// elements in this node's queue (the capacity for a key it holds no
// queue of), clamped to [0, capacity]. Always known. It changes no state
// (strategy.Remainer): dead elements are skipped, not removed.
func (q *TBQueue) Remaining(now time.Duration, key string) (int64, bool) {
	return min(max(q.capacity-q.clock.tokensIn(q.local[key].q, now), 0), q.capacity), true
}

var _ strategy.Remainer = (*TBQueue)(nil)

// StateBytes is the exact size, in bytes of the wire encoding, of the
// node's local state as one TBQueueMessage plus the delta message it would
// send each neighbour now (computed field by field, equal to proto.Size of
// those messages; see TestStateBytesExact). The LINF counts are not
// counted.
func (q *TBQueue) StateBytes() int {
	n := 0
	for k, e := range q.local {
		if len(e.q) > 0 {
			n += keySize(k, e.q)
		}
	}
	for _, nb := range q.neighbours {
		for k, qu := range q.delta[nb] {
			n += keySize(k, qu)
		}
	}
	return n
}
