// Package adaptive implements the `adaptive` strategy: per-node sub-token
// buckets per key, as `static`, re-split periodically by a TB Adaptor in
// proportion to where each key's traffic is.
//
// Source: SRTM §5.4, the TB Adaptor: "every broker periodically
// reports to the TB Adaptor the rate and burst statistics of its topics ...
// a per-topic 10s history window that tracks the average message rate and
// maximum backlog over that window in 1s increments. The TB Adaptor adjusts
// token rates in proportion to average message rates, and token bucket
// sizes in proportion to maximum backlogs."
//
// How it works here:
//   - A node starts as static: (r/N, b_i) per key, exactly (bucket.Rate.Div,
//     bucket.SplitBurst).
//   - Every node keeps, per active key, a ring of window/step slots with the
//     tokens offered (admitted + rejected) in each step and the peak backlog
//     in each step.
//   - Backlog (ours: SRTM's brokers queue messages, ours drop them): the
//     virtual queue a shaping (waiting-mode) sub-bucket with this node's
//     rate r_l would hold: every request adds its tokens, the queue drains
//     at r_l, and it is capped at the global burst b (a backlog beyond b
//     can never be served by a burst anyway). A node whose traffic stays
//     below its rate shows a backlog of about one request's tokens; a node
//     that is over its rate reaches the cap. Unlike "tokens refused in a
//     step" it is non-zero for every active node and measures how much
//     burst the node's traffic would use.
//   - Every step each node sends the adaptor (the live member with the
//     smallest NodeID) one report: for every key active in its window, the
//     tokens offered in the window (proportional to the average rate) and
//     the largest per-step peak backlog, rounded up to whole tokens.
//   - The adaptor, once it holds a report from every live member, re-splits
//     a reported key only when its offered tokens are unevenly spread over
//     the nodes beyond chance: Pearson's chi-squared statistic against an
//     even spread exceeds its mean N-1 by `significance` standard deviations
//     (sqrt(2(N-1))), and the key offered at least `min_mean` tokens per
//     node in the window (the test is not to be trusted on a handful of
//     requests: the textbook rule of thumb wants 5). Other keys keep the
//     static split. This gate is ours: with hash assignment a key's
//     requests are spread evenly in expectation, and splitting in
//     proportion to sampling noise puts the key's share (and its small
//     burst) where its last requests happened to land, so the next ones
//     find a sub-bucket with no tokens; the gate keeps such keys static.
//     A key sticky to one node passes it once it has offered N*min_mean
//     tokens in the window.
//   - A re-split key's rate is split in `units` units of r/units and its
//     burst in whole tokens, so that sum r_l = r and sum b_l = b exactly: a
//     floor is split evenly, and the rest in proportion to offered tokens
//     (rate) and peak backlog (burst), both by the largest remainder
//     method (apportion). The floor is `floor` (default 0.1) of the rate
//     and of the burst, plus, when the burst left allows, one token of
//     burst for every node that saw the key in the window. It is our
//     choice: a node with a sub-bucket of burst 0 refuses everything, and
//     one with rate ~0 refills nothing, so traffic that moves to a node
//     that saw none of the key in the window would be refused outright
//     until the next epochs; the floor costs the hot node about
//     floor*(N-1)/N of its share.
//   - The adaptor sends every node its shares (keys not listed take the
//     static split), numbered with an epoch above every epoch it has seen,
//     and a hash of the membership they are for. A node applies only an
//     epoch newer than its own, from the adaptor of its own view, for its
//     own membership.
//
// Transient over-commit: nodes receive an epoch at different times. A node
// applies the decreases of a new epoch at once (per key and component:
// min(current, new)) and the increases only `raise_after` later (default
// max(4*LatencyHint, 10ms)). As long as the spread of one-way latencies
// from the adaptor is below raise_after, every node has lowered its shares
// before any node raises, so sum r_l <= r and sum b_l <= b at every
// instant; beyond that the over-commit lasts at most the excess latency.
// A lost epoch message is not retransmitted: the node keeps its older
// shares, which may over-commit against the others' new ones, until a
// later epoch reaches it (the next step's, unless that is lost too).
// A bucket that is raised keeps its tokens (bucket.Bucket.SetRate), so a
// re-split never creates tokens; nor does the raise of a key the node
// dropped (idle for a window with a full bucket): it gets a bucket full
// at its old share first, raised as a held one. The sim tests measure the envelope
// violation (eval.EnvelopeViolation).
//
// Membership: when the adaptor leaves, the next smallest NodeID takes over
// and numbers its epochs above every epoch reported to it. When members
// only leave, nodes keep their current shares (their sum is at most r and
// b) until the new adaptor's first epoch; keys without a share re-split
// statically over the survivors. When a member joins, every node falls back
// to the static split over the new membership until the next epoch (old
// shares plus a newcomer's static share could exceed (r, b)).
//
// # Partitions (ours)
//
// Under `partition: available` a side of a split behaves as the membership
// rules above say: its nodes keep their shares, keys without one re-split
// statically over the side's k nodes, and the side's adaptor (its smallest
// NodeID) re-splits the whole (r, b) over the side: each side may admit up
// to the envelope. Under `partition: conserve` (strategy.Conserver) the
// static split is over the last agreed members N (live, or failed and not
// yet past reconnect_timeout), an adaptor that does not see all N members
// sends no epoch, and a node that sees fewer than N lowers every share it
// holds to at most the static split (r/N, b_i) and drops a pending epoch:
// whatever epoch each node holds (one sent just before the cut may have
// reached only some), the shares sum to at most (r, b) over all N nodes,
// so the sides together admit at most the envelope once each node has
// seen the split (the cost: a key re-split towards a node loses its extra
// share for the split). At the heal (a join, in both modes)
// every node falls back to the static split over the merged membership
// until the adaptor's next epoch.
package adaptive

import (
	"fmt"
	"hash/fnv"
	"maps"
	"math"
	"math/bits"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"

	peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"
	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/internal/buckets"
)

// Adaptive is one node of the adaptive strategy (SRTM 000 §5.4): a sub-token
// bucket per key and, on the live member with the smallest NodeID, the TB
// Adaptor. Not safe for concurrent use.
type Adaptive struct {
	self    strategy.NodeID
	members []strategy.NodeID // sorted by NodeID (strategy.Config, SetMembers), self included
	memHash uint64
	// conserve: the static split is over the live members and the last
	// agreed ones (expected), and while some of those are out of view
	// (missing) the adaptor sends no epoch and shares are capped at the
	// static split (conserveCap). Otherwise missing is false.
	conserve bool
	expected []strategy.NodeID
	missing  bool
	rate     bucket.Rate
	burst    int64

	step         time.Duration
	slots        int // window / step
	floor        float64
	significance float64
	minMean      float64
	raiseAfter   time.Duration
	units        int64       // the rate is split in units of unitRate; 0: no adaptation possible
	unitRate     bucket.Rate // rate / units

	raiseAfterSet bool // by the raise_after parameter: SetLatencyHint (hint.go) leaves it
	// maxWait is the parameter max_wait: the longest wait RequestWait
	// grants (0: waiting mode off), added to every epoch's raise_after.
	maxWait time.Duration

	defRate  bucket.Rate // the static split
	defBurst int64

	keys map[string]*keyState
	// lent is the tokens of each key's bucket the live driver holds in
	// an allowance (allowance.go): every use of a bucket clamps it first
	// (level + held <= its burst).
	lent    strategy.AllowanceLedger
	shares  map[string]share // applied shares (keys without one take the static split)
	pending map[string]share // the newest epoch's targets, applied at pendAt; nil: none pending
	pendAt  time.Duration
	epoch   uint64 // newest epoch applied (or pending)

	nextStep time.Duration

	// adaptor state
	reports  map[strategy.NodeID]*peerv1.AdaptiveReport
	lastSent uint64

	mem memory // heap and share accounting for MemoryBytes and CapacityShares (memory.go)
}

type share struct {
	rate  bucket.Rate
	burst int64
}

type slot struct {
	idx     int64 // step index the slot holds; -1 when empty
	offered int64
	peak    float64
}

type keyState struct {
	b     bucket.Bucket
	ring  []slot
	q     float64 // virtual backlog, tokens
	qAt   time.Duration
	rPerS float64 // the bucket's rate, tokens/s (drains q)
}

// Per-key state size besides the key: the bucket's level and time (two
// varints of up to 9 bytes plus tags), the backlog (fixed64 plus tag), and
// per slot two varints (offered, peak) of up to 5 bytes plus tags.
func (a *Adaptive) keyStateBytes() int { return 2*(1+9) + 9 + 2 + a.slots*2*(1+5) }

// New builds a node with the parameters declared in Params (params.go:
// names, types, units and defaults; `tokenmesh strategies` lists them).
//
// Errors: an invalid Config, Self not among Members, a bad or unknown
// parameter.
func New(cfg strategy.Config) (*Adaptive, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	a := &Adaptive{self: cfg.Self, rate: cfg.Rate, burst: cfg.Burst,
		conserve: cfg.Partition == strategy.PartitionConserve, expected: slices.Clone(cfg.Members),
		keys: map[string]*keyState{}, shares: map[string]share{}, reports: map[strategy.NodeID]*peerv1.AdaptiveReport{}}
	v, err := strategy.ReadParams("adaptive", Params, cfg.Params)
	if err != nil {
		return nil, err
	}
	units, err := a.readParams(v, cfg)
	if err != nil {
		return nil, err
	}
	if _, err := bucket.New(cfg.Rate, cfg.Burst, 0); err != nil {
		return nil, fmt.Errorf("adaptive: %w", err)
	}
	if !slices.Contains(cfg.Members, cfg.Self) {
		return nil, fmt.Errorf("adaptive: %s is not among the members %v", cfg.Self, cfg.Members)
	}
	a.units, a.unitRate = finestUnits(cfg, units)
	if err := a.setMembers(cfg.Members); err != nil {
		return nil, err
	}
	return a, nil
}

// readParams reads and checks window and step, floor, significance,
// min_mean and raise_after, and returns the units parameter (checked to be
// in [1, 1000000]).
func (a *Adaptive) readParams(v *strategy.Values, cfg strategy.Config) (int, error) {
	window := v.Duration("window")
	a.step = v.Duration("step")
	if a.step <= 0 || window < a.step || window%a.step != 0 || window/a.step > 1000 {
		return 0, fmt.Errorf("adaptive: window=%v must be a multiple (1 to 1000 times) of step=%v > 0", window, a.step)
	}
	a.slots = int(window / a.step)
	if a.floor = v.Float("floor"); !(a.floor >= 0 && a.floor <= 1) {
		return 0, fmt.Errorf("adaptive: parameter floor=%v must be in [0, 1]", a.floor)
	}
	if a.significance = v.Float("significance"); !(a.significance >= 0) || math.IsInf(a.significance, 0) {
		return 0, fmt.Errorf("adaptive: parameter significance=%v must be a finite number >= 0", a.significance)
	}
	if a.minMean = v.Float("min_mean"); !(a.minMean >= 0) || math.IsInf(a.minMean, 0) {
		return 0, fmt.Errorf("adaptive: parameter min_mean=%v must be a finite number >= 0", a.minMean)
	}
	a.raiseAfter = v.DurationOr("raise_after", max(4*cfg.LatencyHint, 10*time.Millisecond))
	a.raiseAfterSet = v.Has("raise_after")
	if a.maxWait = v.Duration("max_wait"); a.maxWait < 0 || a.maxWait > time.Hour {
		return 0, fmt.Errorf("adaptive: parameter max_wait=%v must be in [0, 1h]", a.maxWait)
	}
	units := v.Int("units")
	if units < 1 || units > 1_000_000 {
		return 0, fmt.Errorf("adaptive: parameter units=%d must be in [1, 1000000]", units)
	}
	return units, nil
}

// finestUnits is the finest unit count, at most units, whose unit rate a
// bucket of cfg's burst supports, and that unit rate (0 and the zero rate
// if none does).
func finestUnits(cfg strategy.Config, units int) (int64, bucket.Rate) {
	for u := int64(units); u >= 1; u /= 2 {
		ur, err := cfg.Rate.Div(u)
		if err != nil {
			continue
		}
		if _, err := bucket.New(ur, cfg.Burst, 0); err != nil {
			continue
		}
		return u, ur
	}
	return 0, bucket.Rate{}
}

// setMembers recomputes the static split (over the live members, or under
// conserve over them and the expected ones) and the membership hash.
func (a *Adaptive) setMembers(members []strategy.NodeID) error {
	if !slices.Contains(members, a.self) {
		return fmt.Errorf("adaptive: %s is not among the members %v", a.self, members)
	}
	split := members
	if a.conserve {
		_, _, split = strategy.ConserveScale(a.self, members, a.expected)
	}
	i := slices.Index(split, a.self)
	r, err := a.rate.Div(int64(len(split)))
	if err != nil {
		return fmt.Errorf("adaptive: %w", err)
	}
	b, err := bucket.SplitBurst(a.burst, len(split), i)
	if err != nil {
		return fmt.Errorf("adaptive: %w", err)
	}
	if _, err := bucket.New(r, b, 0); err != nil {
		return fmt.Errorf("adaptive: %w", err)
	}
	a.members = slices.Clone(members)
	a.missing = len(split) != len(members)
	a.defRate, a.defBurst = r, b
	h := fnv.New64a()
	for _, m := range members {
		h.Write([]byte(m))
		h.Write([]byte{0})
	}
	a.memHash = h.Sum64()
	return nil
}

func (a *Adaptive) adaptor() strategy.NodeID { return a.members[0] }

// shareOf is key's applied (rate, burst).
func (a *Adaptive) shareOf(key string) (bucket.Rate, int64) {
	if s, ok := a.shares[key]; ok {
		return s.rate, s.burst
	}
	return a.defRate, a.defBurst
}

func (a *Adaptive) unitsRate(u int64) bucket.Rate {
	if u == 0 || a.unitRate.Tokens == 0 {
		return bucket.Rate{}
	}
	return bucket.Rate{Tokens: a.unitRate.Tokens * u, Per: a.unitRate.Per}
}

// Start arms the step timer (reports and re-splits every step).
func (a *Adaptive) Start(now time.Duration, fx *strategy.Effects) {
	a.nextStep = now + a.step
	fx.WakeAt(a.nextStep)
}

func (a *Adaptive) get(key string, now time.Duration) *keyState {
	if ks, ok := a.keys[key]; ok {
		return ks
	}
	r, b := a.shareOf(key)
	ks := &keyState{b: bucket.MustNew(r, b, now), ring: make([]slot, a.slots), qAt: now, rPerS: r.PerSec()}
	for i := range ks.ring {
		ks.ring[i].idx = -1
	}
	a.keys[key] = ks
	a.keyAdded(key)
	return ks
}

// Request decides at once from key's sub-token bucket (the applied share,
// or the static split (r/N, b_i)) at req.Arrival, and counts req.Tokens
// (when positive) in the key's history window: tokens offered in the
// current step and the virtual backlog's peak (see the package
// documentation).
func (a *Adaptive) Request(now time.Duration, req strategy.Request, fx *strategy.Effects) (strategy.Decision, bool) {
	ks := a.offer(req)
	a.lent.Clamp(&ks.b, req.Arrival, req.Key)
	ok := ks.b.AllowN(req.Arrival, req.Tokens)
	return strategy.Decision{RequestID: req.ID, Allowed: ok}, true
}

// RequestWait decides req in waiting mode (strategy.Waiter; SRTM §5.2,
// the shaping mode, Appendix A eq. (2)): req.Tokens are reserved in the
// key's sub-token bucket (r_l, b_l), first come first served
// (bucket.ReserveN), when the wait until it holds them is at most the
// smaller of maxWait and the parameter max_wait, and the decision
// carries that wait; otherwise the request is refused and nothing is
// reserved. The request is counted in the history window as Request
// counts it (offered tokens and virtual backlog). The wait is the DRL
// penalty of SRTM §2.1 (Proposition 1) measured at this node's share.
// With max_wait 0 (the default) it is Request.
//
// Re-splits with reservations (ours): a reservation's delay counts on
// refill at the share the node held when it reserved; the level goes
// below 0 by at most max_wait's worth of it. Every re-split keeps the
// reservations due when promised (bucket.Bucket.SetRateKeepingDue): a
// decrease keeps the debt in tokens, so the node admits nothing new until
// its new share has repaid it, and a raise does not repay it before the
// last reservation is due. An epoch's decreases apply at once and its
// increases raise_after + max_wait later: every reservation a node made
// before lowering its share is due before any node raises its own (as
// long as the spread of the epoch's latencies is below raise_after, the
// condition without waiting mode too), so sum r_l stays within r over the
// refill the reservations count on. Membership changes re-split at once
// (see the package documentation), and there a node's reservations due
// after the change may pass up to (r_l - r_l')*max_wait tokens beyond its
// new share r_l'.
func (a *Adaptive) RequestWait(now time.Duration, req strategy.Request, maxWait time.Duration, fx *strategy.Effects) (strategy.Decision, bool) {
	if maxWait = min(maxWait, a.maxWait); maxWait <= 0 {
		return a.Request(now, req, fx)
	}
	ks := a.offer(req)
	a.lent.Clamp(&ks.b, req.Arrival, req.Key)
	delay, ok := strategy.ReserveWithin(&ks.b, req.Arrival, req.Tokens, maxWait)
	return strategy.Decision{RequestID: req.ID, Allowed: ok, Delay: delay}, true
}

// offer returns req.Key's state, counting req.Tokens (when positive) in
// its history window: tokens offered in the current step and the virtual
// backlog's peak.
func (a *Adaptive) offer(req strategy.Request) *keyState {
	ks := a.get(req.Key, req.Arrival)
	if req.Tokens > 0 {
		t := max(req.Arrival, ks.qAt)
		ks.q = max(0, ks.q-ks.rPerS*(t-ks.qAt).Seconds())
		ks.q = min(ks.q+float64(req.Tokens), float64(a.burst))
		ks.qAt = t
		idx := int64(t / a.step)
		s := &ks.ring[idx%int64(a.slots)]
		if s.idx != idx {
			*s = slot{idx: idx}
		}
		s.offered += req.Tokens
		s.peak = max(s.peak, ks.q)
	}
	return ks
}

// stat is key's window statistics at now; ok is false when it saw no traffic.
func (a *Adaptive) stat(ks *keyState, now time.Duration) (offered, peak int64, ok bool) {
	cur := int64(now / a.step)
	var p float64
	for _, s := range ks.ring {
		if s.idx >= 0 && s.idx > cur-int64(a.slots) && s.idx <= cur {
			offered += s.offered
			p = max(p, s.peak)
		}
	}
	return offered, int64(math.Ceil(p)), offered > 0
}

// Tick applies a pending epoch's increases once raise_after has passed and,
// every step, drops keys idle for a whole window whose bucket is full and
// reports the window statistics of the active keys to the TB Adaptor (or,
// on the adaptor, re-splits).
func (a *Adaptive) Tick(now time.Duration, fx *strategy.Effects) {
	if a.pending != nil && now >= a.pendAt {
		a.applyPending(now, fx)
	}
	if now < a.nextStep {
		return
	}
	for a.nextStep <= now {
		a.nextStep += a.step
	}
	fx.WakeAt(a.nextStep)

	rep := &peerv1.AdaptiveReport{Epoch: a.epoch}
	for _, k := range slices.Sorted(maps.Keys(a.keys)) {
		ks := a.keys[k]
		off, peak, ok := a.stat(ks, now)
		if ok {
			rep.Stats = append(rep.Stats, &peerv1.AdaptiveStat{Key: k, Offered: off, PeakBacklog: peak})
			continue
		}
		// Idle for a whole window: drop the key once its bucket is full
		// (a new full bucket is the same). Its virtual backlog is not
		// checked: a new key starts with none.
		if a.lent.Held(k) == 0 && ks.b.Full(now) { // tokens in an allowance: not full
			a.keyDropped(k)
			delete(a.keys, k)
		}
	}
	a.shrinkKeys()
	if a.units == 0 {
		return // the rate cannot be split finer than static: no adaptation
	}
	if a.adaptor() == a.self {
		a.reports[a.self] = rep
		a.mem.holdReport(a.self, rep, false)
		a.resplit(now, fx)
		return
	}
	fx.Send(a.adaptor(), mustMarshal(&peerv1.AdaptiveMessage{Body: &peerv1.AdaptiveMessage_Report{Report: rep}}))
}

// resplit is the TB Adaptor: with a report from every member, it splits
// every reported key and sends each member its shares.
func (a *Adaptive) resplit(now time.Duration, fx *strategy.Effects) {
	if a.missing {
		return // conserve, and members are missing: no epoch until they are back
	}
	epoch := max(a.lastSent, a.epoch)
	for _, m := range a.members {
		r, ok := a.reports[m]
		if !ok {
			return
		}
		epoch = max(epoch, r.Epoch)
	}
	epoch++
	a.lastSent = epoch
	out := a.split(epoch)
	for i, m := range a.members {
		if m == a.self {
			a.apply(now, out[i], fx)
			continue
		}
		fx.Send(m, mustMarshal(&peerv1.AdaptiveMessage{Body: &peerv1.AdaptiveMessage_Shares{Shares: out[i]}}))
	}
}

// reportRow is one key's reported stats, per member (in members order).
type reportRow struct{ offered, peak []int64 }

// reportRows is the members' reports by key.
func (a *Adaptive) reportRows() map[string]*reportRow {
	n := len(a.members)
	rows := map[string]*reportRow{}
	for i, m := range a.members {
		for _, s := range a.reports[m].Stats {
			r := rows[s.Key]
			if r == nil {
				r = &reportRow{offered: make([]int64, n), peak: make([]int64, n)}
				rows[s.Key] = r
			}
			r.offered[i], r.peak[i] = s.Offered, s.PeakBacklog
		}
	}
	return rows
}

// split computes epoch's shares of every member (in members order): for
// every reported key whose offered tokens are skewed, the floor evenly and
// the rest by offered tokens (rate) and peak backlog (burst).
func (a *Adaptive) split(epoch uint64) []*peerv1.AdaptiveShares {
	n := len(a.members)
	rows := a.reportRows()
	keys := slices.Sorted(maps.Keys(rows))
	// Weights in milli-tokens.
	floorU := int64(a.floor * float64(a.units))
	floorB := int64(a.floor * float64(a.burst))
	zero := make([]uint64, n)
	evenU, evenB := apportion(floorU, zero), apportion(floorB, zero)
	out := make([]*peerv1.AdaptiveShares, n)
	for i := range out {
		out[i] = &peerv1.AdaptiveShares{Epoch: epoch, Members: a.memHash, Units: a.units}
	}
	wr, wb := make([]uint64, n), make([]uint64, n)
	for _, k := range keys {
		r := rows[k]
		if !a.skewed(r.offered) {
			continue // the static split it is
		}
		for i := range n {
			wr[i] = uint64(max(r.offered[i], 0))
			wb[i] = uint64(max(r.peak[i], 0))
		}
		active, restB := activeBurst(r.offered, a.burst-floorB)
		ru, bu := apportion(a.units-floorU, wr), apportion(restB, wb)
		for i := range n {
			out[i].Shares = append(out[i].Shares, &peerv1.AdaptiveShare{Key: k, RateUnits: evenU[i] + ru[i], Burst: evenB[i] + active[i] + bu[i]})
		}
	}
	return out
}

// activeBurst gives one token of burst to every node that saw the key
// (offered > 0), when restB, the burst left after the floor, allows, and
// returns those tokens per node and the burst left after them.
func activeBurst(offered []int64, restB int64) ([]int64, int64) {
	n := len(offered)
	active := make([]int64, n)
	nActive := int64(0)
	for i := range n {
		if offered[i] > 0 {
			nActive++
		}
	}
	if nActive <= restB {
		for i := range n {
			if offered[i] > 0 {
				active[i] = 1
			}
		}
		restB -= nActive
	}
	return active, restB
}

// skewed reports whether offered tokens per node are too uneven to come
// from an even spread: their mean is at least min_mean, and Pearson's
// chi-squared statistic against the even split exceeds its mean (N-1) by
// more than significance standard deviations (sqrt(2(N-1))).
func (a *Adaptive) skewed(offered []int64) bool {
	n := len(offered)
	if n < 2 {
		return false
	}
	var total float64
	for _, o := range offered {
		total += float64(o)
	}
	if total <= 0 {
		return false
	}
	e := total / float64(n)
	if e < a.minMean {
		return false
	}
	var chi2 float64
	for _, o := range offered {
		d := float64(o) - e
		chi2 += d * d / e
	}
	return chi2 > float64(n-1)+a.significance*math.Sqrt(2*float64(n-1))
}

// apply takes an epoch for this node: decreases now, increases raise_after
// later. An epoch not newer than the applied one, or for another
// membership, is ignored.
func (a *Adaptive) apply(now time.Duration, m *peerv1.AdaptiveShares, fx *strategy.Effects) {
	if m.Epoch <= a.epoch || m.Members != a.memHash {
		return
	}
	a.epoch = m.Epoch
	target := make(map[string]share, len(m.Shares))
	for _, s := range m.Shares {
		target[s.Key] = share{rate: a.unitsRate(s.RateUnits), burst: s.Burst}
	}
	immediate := make(map[string]share, len(target))
	for _, src := range []map[string]share{a.shares, target} {
		for k := range src {
			if _, done := immediate[k]; done {
				continue
			}
			curR, curB := a.shareOf(k)
			tgt, ok := target[k]
			if !ok {
				tgt = share{rate: a.defRate, burst: a.defBurst}
			}
			r := curR
			if rateLess(tgt.rate, curR) {
				r = tgt.rate
			}
			immediate[k] = share{rate: r, burst: min(curB, tgt.burst)}
		}
	}
	a.shares = immediate
	for k := range immediate {
		a.refresh(now, k, fx)
	}
	a.recountShares()
	// max_wait: reservations made at the shares just lowered are due
	// before any node raises (RequestWait).
	a.pending, a.pendAt = target, now+a.raiseAfter+a.maxWait
	fx.WakeAt(a.pendAt)
}

// applyPending applies the newest epoch's targets.
//
// A key this node holds no bucket of stands for a full bucket at its
// applied share (Tick drops only full buckets, and a decrease keeps a
// full bucket full), but a new bucket made at a raised burst would be
// full at that burst: the raise would create the tokens between the two
// bursts, which a held bucket, raised by SetRate, has to refill. So a key
// whose burst rises (to the epoch's target, or to the static split for a
// key the epoch leaves out) and that has no bucket gets one first, full
// at its applied share, and is raised as a held bucket is. (A raise of
// the rate alone leaves a full bucket full: nothing to do.)
func (a *Adaptive) applyPending(now time.Duration, fx *strategy.Effects) {
	for _, src := range []map[string]share{a.shares, a.pending} {
		for _, k := range slices.Sorted(maps.Keys(src)) {
			if _, held := a.keys[k]; held {
				continue
			}
			tgt, ok := a.pending[k]
			if !ok {
				tgt.burst = a.defBurst // back to the static split
			}
			if _, b := a.shareOf(k); tgt.burst > b {
				a.get(k, now)
			}
		}
	}
	old := a.shares
	a.shares, a.pending = a.pending, nil
	for k := range old {
		a.refresh(now, k, fx)
	}
	for k := range a.shares {
		a.refresh(now, k, fx)
	}
	a.recountShares()
}

// refresh sets key's bucket (if any) to its applied share; a raise of its
// rate or burst ends the key's refusal window (refusal.go) in fx.
func (a *Adaptive) refresh(now time.Duration, k string, fx *strategy.Effects) {
	r, b := a.shareOf(k)
	if a.setBucket(now, k, r, b) {
		fx.EndRefusal(k)
	}
}

// setBucket sets key k's bucket (if any) to (r, b) and reports whether
// that raised its rate or its burst.
func (a *Adaptive) setBucket(now time.Duration, k string, r bucket.Rate, b int64) (raised bool) {
	ks, ok := a.keys[k]
	if !ok {
		return false
	}
	if ks.b.Rate() == r && ks.b.Burst() == b {
		return false
	}
	raised = rateLess(ks.b.Rate(), r) || b > ks.b.Burst()
	a.lent.Clamp(&ks.b, now, k)
	defer a.lent.Clamp(&ks.b, now, k) // the new burst less what the driver holds
	// A raise keeps waiting mode's reservations due when promised (a
	// level >= 0 re-rates as SetRate).
	if ks.b.SetRateKeepingDue(now, r, b) == nil {
		// Drain the virtual backlog at the old rate up to now first.
		t := max(now, ks.qAt)
		ks.q = max(0, ks.q-ks.rPerS*(t-ks.qAt).Seconds())
		ks.qAt = t
		ks.rPerS = r.PerSec()
	}
	return raised
}

// Remaining is the whole tokens key's sub-token bucket holds at now (the
// burst of its applied share, or of the static split, for a key this node
// holds no bucket of: a new one is full). Always known. It changes no
// state (strategy.Remainer).
func (a *Adaptive) Remaining(now time.Duration, key string) (int64, bool) {
	if ks, ok := a.keys[key]; ok {
		cp := ks.b
		a.lent.Clamp(&cp, now, key) // the tokens an allowance holds are not the bucket's
		return buckets.Whole(cp, now), true
	}
	_, b := a.shareOf(key)
	return b, true
}

// CapacityShares is the sum, over the keys this node holds a sub-token
// bucket of, of its applied rate share as a fraction of the rule's rate
// (r/N for keys on the static split), and the number of those keys
// (strategy.ShareReporter). A pending epoch's increases count once
// applied. With a zero rate the burst share is reported instead.
//
// Kept as keys and shares change (memory.go), so it walks no key.
func (a *Adaptive) CapacityShares() (sum float64, keys int) {
	return a.mem.shareSum, len(a.keys)
}

var (
	_ strategy.Remainer      = (*Adaptive)(nil)
	_ strategy.ShareReporter = (*Adaptive)(nil)
	_ strategy.Conserver     = (*Adaptive)(nil)
	_ strategy.Waiter        = (*Adaptive)(nil)
)

// SetExpected records the last agreed members (strategy.Conserver; ours,
// see "Partitions" in the package documentation). Under
// conserve, when they change the static split is recomputed over them and
// the live members; applied shares are kept (a member that stopped being
// expected frees its share only at the next epoch, as a leave does), and
// the keys on the static split take the new one.
func (a *Adaptive) SetExpected(now time.Duration, expected []strategy.NodeID, fx *strategy.Effects) {
	a.expected = slices.Clone(expected)
	if !a.conserve {
		return
	}
	if err := a.setMembers(a.members); err != nil {
		return
	}
	a.conserveCap()
	for k := range a.keys {
		a.refresh(now, k, fx)
	}
	a.recountShares()
}

// rateLess reports x < y for non-negative rates.
func rateLess(x, y bucket.Rate) bool {
	if x.Tokens == 0 || y.Tokens == 0 {
		return x.Tokens == 0 && y.Tokens != 0
	}
	h1, l1 := bits.Mul64(uint64(x.Tokens), uint64(y.Per))
	h2, l2 := bits.Mul64(uint64(y.Tokens), uint64(x.Per))
	return h1 < h2 || (h1 == h2 && l1 < l2)
}

func mustMarshal(m proto.Message) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		panic(err) // our messages always marshal
	}
	return b
}
