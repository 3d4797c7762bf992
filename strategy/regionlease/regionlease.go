package regionlease

import (
	"cmp"
	"fmt"
	"maps"
	"math/bits"
	"slices"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/internal/minheap"
	"github.com/tokenmesh/tokenmesh/rendezvous"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/internal/buckets"
	"github.com/tokenmesh/tokenmesh/strategy/internal/dedupe"
	"github.com/tokenmesh/tokenmesh/strategy/internal/forwarding"
	"github.com/tokenmesh/tokenmesh/strategy/internal/keyorder"
	"github.com/tokenmesh/tokenmesh/topology"
)

// RegionLease is one node's regionlease state machine for one rule.
type RegionLease struct {
	self   strategy.NodeID
	region string
	live   []strategy.NodeID // the live members (SetMembers)
	expect []strategy.NodeID // the last agreed members (SetExpected; conserve)
	// conserve: the global owner is chosen over live ∪ expected, and a key
	// whose global owner so chosen is not live is not coordinated (cuts).
	conserve bool
	sh       shape

	period, ttl, rperiod, rttl time.Duration
	window, timeout, takeover  time.Duration
	maxSkew, retryEvery        time.Duration
	lanRetry                   time.Duration // retransmission interval inside the region (4*lan_latency, at most retryEvery)
	lead, rlead                time.Duration // how long before a lease's end a holder stops using it: node tier, region tier
	split                      regionSplit   // region_split: first, share or demand (split.go)
	rtt                        time.Duration // a WAN round trip (2*latency_hint): how far ahead a regional owner asks
	wanRTTLow                  time.Duration // measured: the shortest of the recent asks' round trips (a low-biased filter: a new low at once, a rise by 1/32); from rtt/2
	wanRTT                     time.Duration // measured: a moving average (1/8) of the time a region's ask took to be granted, from rtt
	idle                       time.Duration // a holder returns its leases of a key unused for this long
	minLease                   int64
	allowCap                   int64 // the most tokens one allowance holds (strategy.AllowanceCap of the rule; allowance.go)
	admitOnTimeout             bool
	fillTime, sweepLag         time.Duration
	sweepEvery                 time.Duration
	sweeper                    keyorder.Sweeper // the sweep's passes, in steps (sweep.go)
	passAt                     time.Duration    // when the pass under way began
	sweepAt                    int              // the table it is at (sweepSome)
	order                      sweepOrders      // the swept maps' keys (sweep.go)

	// global owner
	pools  map[string]*pool
	grants map[grantID]*grantRec // leases this node granted (from a pool or from its stock)
	gexp   *minheap.Heap[grantExp]
	gseen  *dedupe.Table[fwdID, *verdict] // forwards decided here (or waiting in the ordering buffer)
	// the ordering buffer of cold keys (order.go): requests wait until
	// arrival + hold and are decided in arrival order
	hold     time.Duration
	queue    *minheap.Heap[queued]
	queueSeq uint64
	// stocks: a region may hold a stock of a key (ask its global owner
	// for leases): the key's refill over a WAN round trip, r*rtt, is at
	// least min_lease tokens (or no latency hint is known, or hold = 0:
	// the cold rule off). Below it a stock of min_lease tokens holds more
	// than the whole refill of the time one region's ask takes, and the
	// key is decided at its global owner, in arrival order (order.go).
	// Ours.
	stocks bool
	// replicas (replica.go): the fences this node's replicas acknowledged,
	// per key it owns globally; the fences it holds from other owners
	replicas int
	ahead    time.Duration // a fence reaches region_ttl + 2*ahead from its shipping; renewed below region_ttl + ahead
	gfences  map[string]map[strategy.NodeID]*fenceHolder
	fences   map[string]map[strategy.NodeID]time.Duration
	nfences  int
	// pushed grants (push.go): per key it owns globally, the demands its
	// askers reported and whether it is contended
	pushes    map[string]*pushState
	pushEvery time.Duration // 0: no pushes
	pushAhead time.Duration // 0: no dated pushes (dated.go)
	// clockUncertainty > 0: the most this node's clock may differ from a
	// global owner's, trusted; a dated push is usable at its usable_at
	// plus at most this (dated.go, usableAfter).
	clockUncertainty time.Duration
	// outlast > 0: while a key's pushes are dated, a region whose reserve
	// outlasts G's region's by more than this gets no part of the refill
	// (outlast.go).
	outlast   time.Duration
	hotPeriod time.Duration // while a key is contended, the global owner lends a node of its region at most hot_period of its demand (0: off)
	quantum   time.Duration // parameter quantum: the time a node's share of a contended pool or stock is sized for (share.go; 0: off)
	rate      bucket.Rate   // the rule's refill rate (share.go)
	pushSeq   uint64

	// every node: its holding of each key (leases from its upstream; at a
	// regional owner, the region's stock), its forwarded requests, its
	// relays (a regional owner's forwards to the global owner), returns
	// being resent
	keys     map[string]*holding
	pending  map[uint64]*forwarding.Pending
	relays   map[uint64]*relay
	rseen    *dedupe.Table[fwdID, *verdict] // forwards relayed or decided from the stock
	relaySeq uint64
	returns  map[grantID]*returning
	timers   *minheap.Heap[timer]

	changes   []change
	restarted bool
	restartAt time.Duration
	seqBase   uint64

	mem memory // heap accounting (memory.go)

	wu warmups // the global owner's warm-up (warmup.go)
}

type change struct {
	at   time.Duration
	prev []strategy.NodeID // the global owner's candidates before it
}

// grantID names one lease: holder (at the granter) or granter (at the
// holder), key, seq.
type grantID struct {
	node strategy.NodeID
	key  string
	seq  uint64
}

type fwdID struct {
	origin strategy.NodeID
	id     uint64
	relay  bool
}

type verdict struct {
	decided, allowed bool
	emptyFor         uint64 // µs after arrival
}

// New builds a node. Parameters are listed in Params. Errors: an invalid
// Config or parameter (named).
func New(cfg strategy.Config) (*RegionLease, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if _, err := bucket.New(cfg.Rate, cfg.Burst, 0); err != nil {
		return nil, fmt.Errorf("regionlease: %w", err)
	}
	v, err := strategy.ReadParams("regionlease", Params, cfg.Params)
	if err != nil {
		return nil, err
	}
	hint := cfg.LatencyHint
	l := &RegionLease{self: cfg.Self, region: topology.Of(cfg.Self), live: slices.Clone(cfg.Members), expect: slices.Clone(cfg.Members),
		conserve: cfg.Partition == strategy.PartitionConserve,
		sh:       shape{TokensPerNs: cfg.Rate.Tokens, Per: int64(cfg.Rate.Per), Burst: cfg.Burst},
		pools:    map[string]*pool{}, grants: map[grantID]*grantRec{}, gexp: minheap.New(grantExpLess),
		keys: map[string]*holding{}, pending: map[uint64]*forwarding.Pending{}, relays: map[uint64]*relay{},
		returns: map[grantID]*returning{}, timers: minheap.New(timerLess), queue: minheap.New(queuedLess),
		gfences: map[string]map[strategy.NodeID]*fenceHolder{}, pushes: map[string]*pushState{}, fences: map[string]map[strategy.NodeID]time.Duration{},
	}
	if err := l.readParams(v, hint); err != nil {
		return nil, err
	}
	l.allowCap = strategy.AllowanceCap(cfg.Rate, cfg.Burst)
	l.rate = cfg.Rate
	if hint <= 0 {
		l.lead, l.rlead = l.ttl/4, l.rttl/4
	}
	l.stocks = hint <= 0 || l.hold == 0 || refillAtLeast(cfg.Rate, l.rtt, l.minLease)
	if cfg.Rate.Tokens > 0 {
		l.fillTime = buckets.FillTime(cfg.Rate, cfg.Burst)
	}
	l.sweepEvery = buckets.SweepInterval(cfg.Rate, cfg.Burst)
	l.sweepLag = l.timeout + 3*hint + l.maxSkew
	l.gseen = dedupe.New[fwdID, *verdict](2*l.timeout + 4*hint)
	l.rseen = dedupe.New[fwdID, *verdict](2*l.timeout + 4*hint)
	return l, nil
}

// readParams reads and checks the parameters (their defaults from the
// latency hint) and sets the times derived from them.
func (l *RegionLease) readParams(v *strategy.Values, hint time.Duration) error {
	l.period = v.Duration("period")
	l.ttl = v.DurationOr("ttl", 2*l.period)
	l.rperiod = v.Duration("region_period")
	l.rttl = v.DurationOr("region_ttl", 3*l.rperiod)
	lan := v.DurationOr("lan_latency", min(hint, 5*time.Millisecond))
	l.timeout = v.DurationOr("timeout", strategy.HintTimeout(hint))
	l.window = v.Duration("window")
	l.takeover = v.DurationOr("takeover", l.rttl+time.Second)
	l.maxSkew = v.Duration("max_skew")
	l.admitOnTimeout = v.Enum("on_timeout") == "admit"
	retries, minLease := v.Int("retries"), v.Int("min_lease")
	l.replicas = v.Int("replicas")
	switch {
	case l.period <= 0, l.rperiod <= 0, l.window <= 0, l.timeout <= 0:
		return fmt.Errorf("regionlease: parameters period, region_period, window and timeout must be positive")
	case l.ttl < l.period:
		return fmt.Errorf("regionlease: parameter ttl=%s must be at least period=%s", l.ttl, l.period)
	case l.rttl < l.rperiod || l.rttl < l.ttl:
		return fmt.Errorf("regionlease: parameter region_ttl=%s must be at least region_period=%s and ttl=%s", l.rttl, l.rperiod, l.ttl)
	case l.takeover < l.rttl:
		return fmt.Errorf("regionlease: parameter takeover=%s must be at least region_ttl=%s (the old owner's leases must have ended)", l.takeover, l.rttl)
	case lan < 0 || l.maxSkew < 0:
		return fmt.Errorf("regionlease: parameters lan_latency and max_skew must not be negative")
	case retries < 0:
		return fmt.Errorf("regionlease: parameter retries=%d is negative", retries)
	case minLease < 1:
		return fmt.Errorf("regionlease: parameter min_lease=%d must be at least 1", minLease)
	case l.replicas < 0 || l.replicas > maxReplicas:
		return fmt.Errorf("regionlease: parameter replicas=%d outside [0, %d]", l.replicas, maxReplicas)
	}
	l.minLease = int64(minLease)
	l.retryEvery = l.timeout / time.Duration(retries+1)
	l.lanRetry = min(l.retryEvery, max(4*lan, time.Millisecond))
	l.lead = min(2*lan, l.ttl/4)
	l.rlead = min(2*hint, l.rttl/4)
	l.rtt = 2 * hint
	l.wanRTT = l.rtt
	l.wanRTTLow = l.rtt / 2
	l.ahead = max(l.takeover-l.rttl, l.timeout)
	return l.readTuning(v, hint, lan)
}

// readTuning reads and checks push_every, region_split,
// clock_uncertainty, push_ahead, outlast, hot_period, quantum, hold and
// idle (their defaults from the latency hint, lan_latency, period and
// timeout, which readParams set first).
func (l *RegionLease) readTuning(v *strategy.Values, hint, lan time.Duration) error {
	l.pushEvery = v.DurationOr("push_every", hint/8)
	if l.pushEvery < 0 {
		return fmt.Errorf("regionlease: parameter push_every must not be negative")
	}
	l.split = regionSplit(v.Enum("region_split"))
	l.clockUncertainty = v.Duration("clock_uncertainty")
	if l.clockUncertainty < 0 || l.clockUncertainty > l.maxSkew {
		return fmt.Errorf("regionlease: parameter clock_uncertainty=%s outside [0, max_skew=%s]", l.clockUncertainty, l.maxSkew)
	}
	ahead := min(hint/2, l.rlead)
	if l.clockUncertainty > 0 {
		// A chunk is used at its time plus at most clock_uncertainty, so
		// its push should come before that: the hint is the crossing's
		// 99th percentile (docs/EVALUATION.md, "regionlease: trusting
		// the clocks").
		ahead = min(hint, l.rlead)
	}
	l.pushAhead = v.DurationOr("push_ahead", ahead)
	if l.pushAhead < 0 || l.pushAhead > l.rlead {
		// At most rlead: a holder stops using a lease rlead before its
		// end, so a dated one (ending region_ttl after its usable_at) is
		// used no later than region_ttl after its sending, as any lease.
		return fmt.Errorf("regionlease: parameter push_ahead=%s outside [0, min(2*latency_hint, region_ttl/4) = %s]", l.pushAhead, l.rlead)
	}
	l.outlast = v.DurationOr("outlast", l.rtt+l.pushAhead)
	if l.outlast < 0 {
		return fmt.Errorf("regionlease: parameter outlast must not be negative")
	}
	l.hotPeriod = v.DurationOr("hot_period", 2*lan)
	if l.hotPeriod < 0 {
		return fmt.Errorf("regionlease: parameter hot_period must not be negative")
	}
	l.quantum = v.DurationOr("quantum", 2*l.period/5)
	if l.quantum < 0 {
		return fmt.Errorf("regionlease: parameter quantum must not be negative")
	}
	l.hold = v.DurationOr("hold", min(hint+2*lan, l.timeout/2))
	if l.hold < 0 || l.hold > l.timeout {
		return fmt.Errorf("regionlease: parameter hold=%s outside [0, timeout=%s]", l.hold, l.timeout)
	}
	l.idle = v.Duration("idle")
	if l.idle <= 0 {
		return fmt.Errorf("regionlease: parameter idle must be positive")
	}
	return nil
}

// Start schedules the first sweep. A start after time 0 is a restart: a
// key whose global owner this node is starts with an empty bucket,
// refilling from now + takeover (every lease of its previous incarnation
// has ended by then).
func (l *RegionLease) Start(now time.Duration, fx *strategy.Effects) {
	if now > 0 {
		l.restarted, l.restartAt = true, now
	}
	l.seqBase = uint64(now)
	l.relaySeq = uint64(now)
	l.pushSeq = uint64(now)
	l.sweeper.Every = l.sweepEvery
	l.sweeper.Start(now, fx)
}

// candidates is the set the global owner is chosen from: the live members,
// and under conserve the last agreed ones too.
func (l *RegionLease) candidates() []strategy.NodeID {
	if !l.conserve {
		return l.live
	}
	_, _, union := strategy.ConserveScale(l.self, l.live, l.expect)
	return union
}

// global is key's global owner, and whether it is live (under conserve it
// may be on the other side of a cut: the key is then not coordinated).
func (l *RegionLease) global(key string) (strategy.NodeID, bool) {
	o := rendezvous.Owner(key, l.candidates())
	if o == "" {
		return l.self, true
	}
	return o, o == l.self || slices.Contains(l.live, o)
}

// regional is key's regional owner in this node's region: rendezvous over
// the region's live members (this node when it sees none).
func (l *RegionLease) regional(key string) strategy.NodeID {
	var in []strategy.NodeID
	for _, m := range l.live {
		if topology.Of(m) == l.region {
			in = append(in, m)
		}
	}
	if o := rendezvous.Owner(key, in); o != "" {
		return o
	}
	return l.self
}

// upstream is where this node asks for key's leases and forwards its
// requests: its regional owner, or the global owner when this node is the
// regional owner; "" when this node is the global owner (it decides from
// the pool), or when the global owner is cut off (conserve).
func (l *RegionLease) upstream(key string) (to strategy.NodeID, regionTier bool) {
	g, ok := l.global(key)
	if g == l.self {
		return "", false
	}
	if r := l.regional(key); r != l.self {
		return r, false
	}
	if !ok {
		return "", true
	}
	return g, true
}

// Receive handles a peer's message. Errors (no state change): see
// decodeMessage and validate (wire.go).
func (l *RegionLease) Receive(now time.Duration, from strategy.NodeID, payload []byte, fx *strategy.Effects) error {
	m, err := decodeMessage(from, payload)
	if err != nil {
		return err
	}
	if err := l.validate(now, from, m); err != nil {
		return err
	}
	if handled, err := l.warmReceive(now, from, m, fx); handled {
		return err
	}
	return l.dispatch(now, from, m, fx)
}

// Tick does what is due: resends and deadlines of forwards, relays, asks
// and returns; the end of leases held and granted; the sweep.
func (l *RegionLease) Tick(now time.Duration, fx *strategy.Effects) {
	for l.timers.Len() > 0 && l.timers.Peek().at <= now {
		t := l.popTimer()
		switch t.kind {
		case timerForward:
			l.forwardTimer(now, t, fx)
		case timerRelay:
			l.relayTimer(now, t, fx)
		case timerAsk:
			l.askTimer(now, t, fx)
		case timerLease:
			l.leaseTimer(now, t, fx)
		case timerRenew:
			l.renewTimer(now, t, fx)
		case timerReturn:
			l.returnTimer(now, t, fx)
		case timerIdle:
			l.idleTimer(now, t, fx)
		case timerPush:
			l.onPushTimer(now, t, fx)
		case timerWarm:
			l.warmTimer(now, t, fx)
		case timerGave:
			l.gaveTimer(now, t)
		case timerQueue:
			l.drainQueue(now, fx)
		case timerDated:
			l.datedTimer(now, t, fx)
		}
	}
	l.expireGrants(now, fx)
	l.gseen.Expire(now, fx)
	l.rseen.Expire(now, fx)
	l.sweeper.Step(now, fx, 1, func() { l.passAt, l.sweepAt = now, 0 }, func(int) bool { return l.sweepSome(keyorder.Budget) })
}

// SetMembers takes the new view: pools of keys this node no longer owns
// globally are dropped (a key that comes back starts conservatively), the
// change is remembered for the conservative start of keys that moved
// here, and forwards and asks to nodes that left are sent again.
func (l *RegionLease) SetMembers(now time.Duration, members []strategy.NodeID, fx *strategy.Effects) {
	prev := slices.Clone(l.candidates())
	l.live = append(l.live[:0], members...)
	l.changed(now, prev, fx)
}

// SetExpected takes the last agreed members (strategy.Conserver); under
// available it only keeps them.
func (l *RegionLease) SetExpected(now time.Duration, expected []strategy.NodeID, fx *strategy.Effects) {
	prev := slices.Clone(l.candidates())
	l.expect = append(l.expect[:0], expected...)
	if l.conserve {
		l.changed(now, prev, fx)
	}
}

func (l *RegionLease) changed(now time.Duration, prev []strategy.NodeID, fx *strategy.Effects) {
	l.changes = slices.DeleteFunc(l.changes, func(c change) bool { return c.at+l.takeover+l.fillTime < now })
	l.changes = append(l.changes, change{at: now, prev: prev})
	for _, key := range sortedKeys(l.pools) {
		if g, _ := l.global(key); g != l.self {
			l.gaveUp(now, key, fx) // kept for a warm-up's query (warmup.go)
			l.dropPool(key)        // its grants stay counted nowhere: they end by themselves
		}
	}
	l.dropFences()
	for _, id := range forwarding.Orphaned(l.pending, l.live) {
		p := l.pending[id]
		if to, _ := l.upstream(p.Req.Key); to != "" {
			l.forward(now, p, to, fx)
		}
	}
	for _, h := range l.keys {
		if h.asking && !slices.Contains(l.live, h.askTo) {
			h.asking = false
		}
	}
	l.warmMembersChanged(now, fx)
}

// moveOf reports whether key's global ownership came to this node lately
// (a restart, a change, or a peer that sends it the key while its own view
// says otherwise), and from when its pool, empty, refills: the move +
// takeover, or, for a change that moved the key from an owner whose fence
// of the key this node holds (replica.go), the later of the change and
// the fence.
func (l *RegionLease) moveOf(key string, now time.Duration) (time.Duration, bool) {
	var from time.Duration
	moved := false
	if l.restarted {
		moved, from = true, l.restartAt+l.takeover
	}
	for _, c := range l.changes {
		o := rendezvous.Owner(key, c.prev)
		if o == l.self {
			continue
		}
		moved = true
		if f, ok := l.fenceOf(key, o); ok && o != "" {
			from = max(from, c.at, f)
		} else {
			from = max(from, c.at+l.takeover)
		}
	}
	if at, ok := l.answeredAt(key); ok { // it handed the key over then (warmup.go)
		moved, from = true, max(from, at+l.takeover)
	}
	if g, _ := l.global(key); g != l.self {
		moved, from = true, max(from, now+l.takeover)
	}
	return from, moved
}

// pool returns key's bucket at this node as global owner, creating it:
// full, or, when the key moved here, empty and refilling from moveOf.
func (l *RegionLease) pool(key string, now time.Duration) *pool {
	if p := l.pools[key]; p != nil {
		return p
	}
	p := &pool{Level: l.sh.Burst * l.sh.Per}
	if from, moved := l.moveOf(key, now); moved {
		p = &pool{Level: 0, Last: from}
	}
	l.setPool(key, p)
	return p
}

// StateBytes counts pools, lease records, holdings, relays and pending
// forwards.
func (l *RegionLease) StateBytes() int {
	const perPool, perGrant, perHolding, perLease, perRequest, perSeen, perFence = 24, 40, 64, 48, 40, 16, 40
	n := 0
	for k := range l.pools {
		n += perPool + len(k)
	}
	for id := range l.grants {
		n += perGrant + len(id.key)
	}
	for k, h := range l.keys {
		n += perHolding + len(k) + len(h.leases)*perLease + len(h.reports)*24
	}
	for _, p := range l.pending {
		n += perRequest + len(p.Req.Key)
	}
	for _, r := range l.relays {
		n += perRequest + len(r.key)
	}
	for _, q := range l.queue.Items() {
		n += perRequest + len(q.key)
	}
	for k, ps := range l.pushes {
		n += perPool + len(k) + len(ps.askers)*perSeen
	}
	for k, fs := range l.gfences {
		n += len(k) + len(fs)*perFence
	}
	for k, fs := range l.fences {
		n += len(k) + len(fs)*perFence
	}
	return n + (l.gseen.Len()+l.rseen.Len())*perSeen + len(l.returns)*perGrant
}

// retryFor is how long this node waits before sending an ask or a return
// to peer again: lanRetry inside its region, retryEvery across the WAN.
// Ours: with the WAN's interval inside the region (185 ms on
// exp:60ms+20ms), a lost ask or grant left a node without a lease, and a
// lost grant's tokens unused until the lease ended at its granter (a
// node's lease lasts ttl, 200 ms by default): those tokens were lost.
// Forwards keep retryEvery (a regional owner may relay them across the
// WAN; a retry every lanRetry multiplied the messages on zanbil by two).
func (l *RegionLease) retryFor(peer strategy.NodeID) time.Duration {
	if topology.Of(peer) == l.region {
		return l.lanRetry
	}
	return l.retryEvery
}

// refillAtLeast reports whether rate refills at least n tokens in d:
// Tokens*d >= n*Per, exactly (128-bit products: no rounding at the
// boundary, 50/s over 80 ms is 4 tokens).
func refillAtLeast(rate bucket.Rate, d time.Duration, n int64) bool {
	if rate.Tokens <= 0 || d <= 0 || rate.Per <= 0 || n <= 0 {
		return rate.Tokens > 0 && d > 0 && n <= 0
	}
	hi1, lo1 := bits.Mul64(uint64(rate.Tokens), uint64(d))
	hi2, lo2 := bits.Mul64(uint64(n), uint64(rate.Per))
	return hi1 > hi2 || (hi1 == hi2 && lo1 >= lo2)
}

// sortedKeys is m's keys in order: a walk whose output must not depend on
// map order (node ids or keys).
func sortedKeys[K cmp.Ordered, V any](m map[K]V) []K { return slices.Sorted(maps.Keys(m)) }
