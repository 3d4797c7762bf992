package regionlease

import (
	"math"
	"slices"
	"time"

	peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/internal/forwarding"
	"github.com/tokenmesh/tokenmesh/strategy/internal/wire"
)

// The holder side, on both tiers: a node holds leases from its regional
// owner; a regional owner holds the region's stock, leases from the global
// owner. Both count their demand, ask their upstream for leases, decide
// from them, forward what they cannot serve, and return what they did not
// use (lease's holder, strategy/lease/holder.go, with the tier's period
// and ttl).

// holding is what a node knows of one key as a holder.
type holding struct {
	winStart      time.Duration
	cur, prev     int64 // tokens requested in the current and the previous window
	curInst       int64 // distinct arrival instants in the current window
	prevInst      int64
	lastArrival   time.Duration
	lastRequestAt time.Duration
	idleSet       bool // an idle check is scheduled (idleTimer)
	// hintUntil is, at a regional owner, the latest end of a dry hint it
	// gave its nodes (they refuse on the node and do not come back
	// until then): the key is not idle before it (idleAt).
	hintUntil time.Duration

	leases      []held
	seq         uint64 // last ask's seq
	asking      bool
	askTo       strategy.NodeID
	askRegion   bool // the current ask is a region's (to the global owner)
	askAt       time.Duration
	askTokens   int64
	askDemand   uint64 // milli-tokens per second
	askSpent    []uint64
	askNext     time.Duration
	askDeadline time.Duration
	sentTo      map[uint64]strategy.NodeID // recent asks: who may answer
	accepted    map[uint64]time.Duration   // seqs whose grant was taken, until their end
	emptyUntil  time.Duration              // upstream's last dry hint
	nextAskAt   time.Duration
	// dryAt is when the global owner last said its bucket was dry (a
	// grant short of the ask, or a refused relay): within region_ttl of
	// it, a regional owner whose stock is empty refuses rather than relay
	// each request across the WAN (hot).
	dryAt time.Duration
	dry   bool
	// pushAt is when the last pushed grant came (push.go), pushGap a
	// moving average (1/8) of the time between pushes.
	pushAt, pushGap time.Duration
	// dated are the dated pushes held until usable; gapCur and gapPrev
	// the smallest gap between a dated push's sending and its receipt
	// in the current gapPeriod (from gapAt) and the last (dated.go).
	dated                  []datedHold
	gapCur, gapPrev, gapAt time.Duration
	gapSet                 bool
	// inRate is, at a regional owner, the tokens per second its stock
	// took (grants of its asks and pushes), a moving rate decayed with
	// the demand window from inAt (inflow; share.go).
	inRate float64
	inAt   time.Duration

	// reports are the demands the region's nodes reported in their asks
	// (at a regional owner): the region's demand is their sum plus what
	// this node sees itself.
	reports map[strategy.NodeID]report

	// spentTok is the tokens taken here out of leases of the key that
	// were dropped (used up and reported spent at an ask, or returned at
	// idle) before their end, spentUntil their latest end (ours). A
	// warm-up's answer counts them with the leases still held (heldOf):
	// tokens of a lease a restarted owner's previous incarnation granted
	// and this node took after that restart are consumption the asker's
	// bucket, empty at its start, must count (TestEnvelopeUnderFaults
	// found 0.045 tokens over b + r*T from a lease taken whole after the
	// restart and dropped before the answer; its fail file replays it).
	spentTok   int64
	spentUntil time.Duration

	// allow is the live driver's open allowance of the key at a node
	// (allowance.go; ours); tokens 0: none.
	allow allowance

	// heap accounting (memory.go): the bytes counted for the maps and
	// slices above, and the most entries each map held (its slots)
	mem                        int32
	sentPeak, accPeak, repPeak uint16
}

type report struct {
	mtps uint64
	at   time.Duration
}

// held is one lease a holder took. At a regional owner, lent tokens of it
// are out in its nodes' leases (subs of them), until returned or ended.
type held struct {
	seq       uint64
	from      strategy.NodeID
	tokens    int64 // usable here
	expires   time.Duration
	since     time.Duration // received
	lent      int64
	subs      int
	spentSent bool
	// region-tier leases (a regional owner's stock) report their use
	// as it goes (RegionLeaseUsed): granted is the lease's tokens, used
	// those taken here or by its nodes' leases (ended or returned), and
	// usedSent the last count reported.
	region   bool
	granted  int64
	used     int64
	usedSent int64
}

type returning struct {
	unused   int64
	next     time.Duration
	deadline time.Duration
}

// maxSpent bounds the spent leases an ask reports.
const maxSpent = 16

// Request decides req on the node when it can: from the pool at the key's
// global owner, from a leased token, or refused by the upstream's dry
// hint; otherwise it forwards it to the regional owner (the global owner
// when this node is the regional owner).
func (l *RegionLease) Request(now time.Duration, req strategy.Request, fx *strategy.Effects) (strategy.Decision, bool) {
	refuse := strategy.Decision{RequestID: req.ID}
	if req.Tokens <= 0 || req.Tokens > l.sh.Burst {
		return refuse, true // never within one bucket
	}
	to, region := l.upstream(req.Key)
	if g, _ := l.global(req.Key); g == l.self {
		if wait, full := l.warmRequest(now, req, fx); wait || full {
			return refuse, full // waits for the key's warm-up (warmup.go), or refused: it holds too many
		}
		p := l.ownPool(now, req.Key, fx)
		l.noteOwn(req.Key, req)
		if l.cold(p) {
			if l.enqueue(now, queued{arr: req.Arrival, key: req.Key, n: req.Tokens, id: req.ID, tie: req.ID}, fx) {
				return strategy.Decision{}, false // decided at its turn (order.go)
			}
			ok, _ := l.decideAt(p, req.Arrival, req.Tokens)
			return strategy.Decision{RequestID: req.ID, Allowed: ok}, true
		}
		l.advanceG(now, req.Key, p)
		ok := l.takeOwn(now, req.Arrival, req.Key, p, req.Tokens)
		if !ok {
			l.noteDry(now, req.Key, fx)
		}
		return strategy.Decision{RequestID: req.ID, Allowed: ok}, true
	}
	h := l.holding(req.Key)
	h.count(req.Arrival, req.Tokens, h.cur+h.prev == 0 || req.Arrival != h.lastArrival, l.window)
	h.lastArrival = req.Arrival
	l.used(now, req.Key, h, fx)
	defer l.maybeAsk(now, req.Key, h, fx)
	if l.takeLeased(now, req.Key, h, req.Arrival, req.Tokens, fx) {
		return strategy.Decision{RequestID: req.ID, Allowed: true}, true
	}
	if req.Arrival < h.emptyUntil || to == "" || (region && l.hot(now, h)) {
		return refuse, true
	}
	p := &forwarding.Pending{Req: req, Deadline: now + l.timeout}
	putID(l.pending, &l.mem.pending, req.ID, "", p)
	l.forward(now, p, to, fx)
	return strategy.Decision{}, false
}

// takeLeased takes n tokens for a request that arrived at `at` out of one
// of h's unexpired leases received by then (the token was in the leases
// since the arrival: nothing refilled later is used for it), oldest first.
func (l *RegionLease) takeLeased(now time.Duration, key string, h *holding, at time.Duration, n int64, fx *strategy.Effects) bool {
	for i := range h.leases {
		ls := &h.leases[i]
		if ls.expires > now && ls.since <= at && ls.tokens >= n {
			ls.tokens -= n
			ls.used += n
			l.noteUsed(key, ls, fx)
			return true
		}
	}
	return false
}

// maybeSpent tells a lease's granter once that it is used up (none here,
// none lent out), so that its room in the bucket (or stock) comes back
// before its end; the next ask reports it again in case this is lost.
func (l *RegionLease) maybeSpent(key string, ls *held, fx *strategy.Effects) {
	if ls.tokens == 0 && ls.lent == 0 && ls.subs == 0 && !ls.spentSent && ls.from != l.self {
		ls.spentSent = true
		fx.Send(ls.from, wire.MustMarshal(&peerv1.RegionLeaseMessage{Body: &peerv1.RegionLeaseMessage_Return{Return: &peerv1.RegionLeaseReturn{
			Key: key, Seq: ls.seq, Unused: 0}}}))
	}
}

// noteUsed reports a stock lease spent (maybeSpent), or its use so far
// when it grew by an eighth of the lease (at least min_lease) since the
// last report: the global owner's bucket gets the room of used tokens
// back while the lease goes on (their capacity is otherwise counted as
// lent until the lease is spent or ends, and a bucket whose room is lent
// loses its refill).
func (l *RegionLease) noteUsed(key string, ls *held, fx *strategy.Effects) {
	l.maybeSpent(key, ls, fx)
	if ls.spentSent || !ls.region || ls.from == l.self {
		return
	}
	if ls.used-ls.usedSent >= max(l.minLease, ls.granted/8) {
		ls.usedSent = ls.used
		fx.Send(ls.from, wire.MustMarshal(&peerv1.RegionLeaseMessage{Body: &peerv1.RegionLeaseMessage_Used{Used: &peerv1.RegionLeaseUsed{
			Key: key, Seq: ls.seq, Used: ls.used}}}))
	}
}

func (l *RegionLease) holding(key string) *holding {
	h := l.keys[key]
	if h == nil {
		h = &holding{seq: l.seqBase, sentTo: map[uint64]strategy.NodeID{}, accepted: map[uint64]time.Duration{}, reports: map[strategy.NodeID]report{}}
		l.keys[key] = h
		l.mem.holdings.Add(key)
		l.order.keys.Add(key)
		l.holdingChanged(h)
	}
	return h
}

// count and demand are lease's (strategy/lease/holder.go): tokens
// requested over a sliding window, 0 until minLease distinct arrival
// instants were seen; but a window after a quiet spell starts at its
// first request.
func (h *holding) count(t time.Duration, tokens int64, newInstant bool, window time.Duration) {
	if t >= h.winStart+window {
		if t >= h.winStart+2*window {
			// Demand after a quiet spell (a tenant's load arriving in
			// this region): the window starts at this request, so that
			// the first estimate is not diluted by the quiet part of an
			// aligned window (ours; lease aligns).
			h.prev, h.prevInst = 0, 0
			h.winStart = t
		} else {
			h.prev, h.prevInst = h.cur, h.curInst
			h.winStart = t - (t-h.winStart)%window
		}
		h.cur, h.curInst = 0, 0
	}
	h.cur += tokens
	if newInstant {
		h.curInst++
	}
}

func (h *holding) demand(now, window time.Duration, minLease int64) float64 {
	if now >= h.winStart+2*window || h.curInst+h.prevInst < minLease {
		return 0
	}
	if h.prev == 0 && now < h.winStart+window {
		return float64(h.cur) / max(now-h.winStart, window/16).Seconds()
	}
	prev, cur := float64(h.prev), float64(h.cur)
	if now >= h.winStart+window {
		prev, cur = cur, 0
		now -= window
	}
	frac := 1 - float64(now-h.winStart)/float64(window)
	return (prev*frac + cur) / window.Seconds()
}

// hot reports whether, at a regional owner, key's region lives on what it
// holds: the global owner said its bucket was dry within region_ttl (its
// refill is then spoken for by the regions' next asks) while the region
// holds or asks for a stock (stocked). Otherwise an empty stock means the
// region asked too little (a cold key, a first ask sized on little demand)
// or holds none (below min_lease, or a rate too low for a stock: stocks),
// and its requests are relayed to the global owner, which decides them in
// arrival order (order.go; ours: before, a dry verdict on a relay made
// such a region refuse every request for region_ttl while the global
// bucket refilled, 1,314 of 8,976 false rejections on zanbil across 3
// regions).
func (l *RegionLease) hot(now time.Duration, h *holding) bool {
	return h.dry && now < h.dryAt+l.rttl && l.stocked(now, h)
}

// stocked reports whether a regional owner lives on a stock of h's key:
// it asked the global owner for one, or was pushed one, within
// region_ttl.
func (l *RegionLease) stocked(now time.Duration, h *holding) bool {
	return (h.askRegion && now < h.askAt+l.rttl) || (h.pushAt > 0 && now < h.pushAt+l.rttl)
}

// stockDue is, at a regional owner whose stock is empty while the global
// owner's bucket is dry (hot), when its stock is next expected to hold
// tokens: its ask in flight's time, or its next ask's, plus the measured
// round trip (wanRTT); at least lanRetry from now. Its nodes are told to
// refuse until then on the node, and to ask again then, rather than
// forward each request here to be refused (ours).
func (l *RegionLease) stockDue(now time.Duration, h *holding) time.Duration {
	at := max(h.nextAskAt, now)
	if h.asking {
		at = h.askAt
	}
	due := at + l.wanRTTLow
	if p := l.pushDue(now, h); p > 0 {
		due = min(due, p)
	}
	return max(due, now+l.lanRetry)
}

// available is the tokens h's unexpired leases hold at now (not lent out).
func (h *holding) available(now time.Duration) int64 {
	var n int64
	for _, ls := range h.leases {
		if ls.expires > now {
			n += ls.tokens
		}
	}
	return n
}

// regionDemand is, at a regional owner, the tokens per second its region
// asks for: its own count (its requests and the forwards of nodes that
// report none) plus the demands its nodes reported within the window.
func (l *RegionLease) regionDemand(now time.Duration, h *holding) float64 {
	d := h.demand(now, l.window, l.minLease)
	for _, n := range sortedKeys(h.reports) { // in order: the same sum on every run
		if r := h.reports[n]; r.at+l.window > now {
			d += float64(r.mtps) / 1000
		}
	}
	return d
}

// maybeAsk asks key's upstream for a lease when the demand warrants one
// and the leases run low: ceil(d*period) tokens at a node,
// ceil(D*region_period) at a regional owner (D its region's demand).
func (l *RegionLease) maybeAsk(now time.Duration, key string, h *holding, fx *strategy.Effects) {
	if h.asking || now < h.nextAskAt {
		return
	}
	to, region := l.upstream(key)
	if to == "" {
		return
	}
	d, per := h.demand(now, l.window, l.minLease), l.period
	if region {
		d, per = l.regionDemand(now, h), l.rperiod
	}
	want := math.Ceil(d * per.Seconds())
	if want < float64(l.minLease) {
		return
	}
	if region && !l.stocks {
		return // the rate is too low for a region to hold a stock: relayed
	}
	n := min(int64(want), l.sh.Burst)
	// A node asks when its leases would run out within a few round trips
	// to its regional owner (4*lead = 8*lan_latency; one token at least),
	// not at half its lease: what it holds beyond that is float, tokens
	// parked on the node while others refuse.
	low := max(1, d*(4*l.lead).Seconds())
	if region {
		// Ask a round trip ahead at least: the stock must not run out
		// while the ask crosses the WAN.
		low = max(float64(n)/2, d*l.rtt.Seconds())
	}
	if float64(h.available(now)) >= low {
		return
	}
	h.seq++
	h.asking, h.askTo, h.askRegion, h.askAt, h.askTokens = true, to, region, now, n
	h.askDemand = uint64(min(d, maxDemand) * 1000)
	l.takeSpent(now, h, to)
	h.askDeadline = now + l.timeout
	h.sentTo[h.seq] = to
	delete(h.sentTo, h.seq-8)
	l.holdingChanged(h)
	l.sendAsk(now, key, h, fx)
}

// takeSpent moves h's leases from to that are used up (no token left,
// none lent on, none behind the driver's open allowance) into the ask's
// spent list (at most maxSpent), noting them spent.
func (l *RegionLease) takeSpent(now time.Duration, h *holding, to strategy.NodeID) {
	h.askSpent = h.askSpent[:0]
	h.leases = slices.DeleteFunc(h.leases, func(ls held) bool {
		if ls.tokens == 0 && ls.lent == 0 && ls.subs == 0 && ls.from == to && len(h.askSpent) < maxSpent && !h.allowFrom(ls) {
			h.askSpent = append(h.askSpent, ls.seq)
			l.noteSpent(now, h, ls)
			return true
		}
		return false
	})
}

func (l *RegionLease) sendAsk(now time.Duration, key string, h *holding, fx *strategy.Effects) {
	h.askNext = min(now+l.retryFor(h.askTo), h.askDeadline)
	l.pushTimer(timer{at: h.askNext, kind: timerAsk, key: key, seq: h.seq})
	fx.WakeAt(h.askNext)
	fx.Send(h.askTo, wire.MustMarshal(&peerv1.RegionLeaseMessage{Body: &peerv1.RegionLeaseMessage_Ask{Ask: &peerv1.RegionLeaseAsk{
		Key: key, Seq: h.seq, Tokens: h.askTokens, AskedAtNs: int64(h.askAt), DemandMtps: h.askDemand, Spent: h.askSpent, TakesPush: h.askRegion, TakesDated: h.askRegion && l.pushAhead > 0}}}))
}

func (l *RegionLease) forward(now time.Duration, p *forwarding.Pending, to strategy.NodeID, fx *strategy.Effects) {
	// The WAN's interval even inside the region: a regional owner may
	// relay the request across the WAN, and a forward has no acknowledgement.
	next := p.SendTo(now, to, l.retryEvery)
	l.pushTimer(timer{at: next, kind: timerForward, id: p.Req.ID})
	fx.WakeAt(next)
	fx.Send(to, wire.MustMarshal(&peerv1.RegionLeaseMessage{Body: &peerv1.RegionLeaseMessage_Forward{Forward: &peerv1.RegionLeaseForward{
		RequestId: p.Req.ID, Key: p.Req.Key, ExtraTokens: p.Req.Tokens - 1, ArrivalNs: int64(p.Req.Arrival)}}}))
}

// onGrant takes a grant's lease and dry hint, once per (key, seq). Errors
// (no state change): a grant from a node other than the one the ask went
// to. A grant for no recent ask is ignored.
func (l *RegionLease) onGrant(now time.Duration, from strategy.NodeID, g *peerv1.RegionLeaseGrant, fx *strategy.Effects) error {
	expires, until := time.Duration(g.ExpiresNs), time.Duration(g.EmptyUntilNs)
	h := l.keys[g.Key]
	if h == nil || h.sentTo[g.Seq] == "" {
		return nil
	}
	if h.sentTo[g.Seq] != from {
		return errorf("grant for %q seq %d from %s, but the ask went to %s", g.Key, g.Seq, from, h.sentTo[g.Seq])
	}
	if _, dup := h.accepted[g.Seq]; dup {
		return nil
	}
	ttl, lead := l.ttl, l.lead
	if h.askRegion {
		ttl, lead = l.rttl, l.rlead
	}
	// Never use a lease past its granter's release: asked_at + ttl by this
	// node's own record for the current ask; stop lead earlier, so that
	// the return reaches the granter before it.
	if g.Seq == h.seq && h.askAt+ttl < expires {
		expires = h.askAt + ttl
	}
	expires -= lead
	h.accepted[g.Seq] = expires
	// A grant brings tokens, or changes the dry hint and when the next
	// ask goes out: a refusal window of the key ends (refusal.go).
	fx.EndRefusal(g.Key)
	if g.Seq == h.seq {
		h.asking = false
		if h.askRegion {
			l.measureAsk(now - h.askAt)
		}
	}
	l.scheduleAsk(now, h, g, lead, fx)
	if h.askRegion && g.Tokens < h.askTokens && until > now {
		h.dry, h.dryAt = true, now
	}
	if g.Tokens > 0 && expires > now {
		l.takeGrant(now, from, g, h, expires, fx)
	}
	l.holdingChanged(h)
	return nil
}

// measureAsk records the round trip rt of a region's ask to the global
// owner: wanRTT, a moving average (1/8), and wanRTTLow, a low-biased
// filter (a new low at once, a rise by 1/32).
func (l *RegionLease) measureAsk(rt time.Duration) {
	l.wanRTT += (rt - l.wanRTT) / 8
	if rt < l.wanRTTLow {
		l.wanRTTLow = rt
	} else {
		l.wanRTTLow += (rt - l.wanRTTLow) / 32
	}
}

// takeGrant takes grant g's tokens, valid until expires, into key's
// holding h as a lease, or, when the key went idle here while the ask was
// out, gives them back as they come (as a push does: takePush).
func (l *RegionLease) takeGrant(now time.Duration, from strategy.NodeID, g *peerv1.RegionLeaseGrant, h *holding, expires time.Duration, fx *strategy.Effects) {
	if l.isIdle(now, h) {
		l.giveBack(now, g.Key, held{seq: g.Seq, from: from, tokens: g.Tokens, expires: expires}, fx)
		return
	}
	h.leases = append(h.leases, held{seq: g.Seq, from: from, tokens: g.Tokens, expires: expires, since: now, region: h.askRegion, granted: g.Tokens})
	if h.askRegion {
		h.noteIn(now, g.Tokens, l.window)
	}
	l.pushTimer(timer{at: expires, kind: timerLease, key: g.Key, seq: g.Seq, node: from})
	fx.WakeAt(expires)
}

// scheduleAsk sets when key's holding h asks next after grant g: lead
// before the end of the empty spell g announces, a little later when g
// brought nothing and no word of when, and arms the renew timer.
func (l *RegionLease) scheduleAsk(now time.Duration, h *holding, g *peerv1.RegionLeaseGrant, lead time.Duration, fx *strategy.Effects) {
	if until := time.Duration(g.EmptyUntilNs); until > now {
		h.emptyUntil = max(h.emptyUntil, until)
		h.nextAskAt = until - lead
	} else if g.Tokens == 0 {
		// Nothing, and no word of when: ask again a little later rather
		// than at every request.
		h.nextAskAt = now + l.retryEvery/2
	}
	if h.nextAskAt > now {
		l.pushTimer(timer{at: h.nextAskAt, kind: timerRenew, key: g.Key})
		fx.WakeAt(h.nextAskAt)
	}
}

// onVerdict decides the forwarded request a verdict answers (or relays it
// to the node it came from) and keeps a refusal's dry hint.
func (l *RegionLease) onVerdict(now time.Duration, from strategy.NodeID, v *peerv1.RegionLeaseVerdict, fx *strategy.Effects) error {
	if v.Relay {
		return l.onRelayVerdict(now, from, v, fx)
	}
	p, ok := l.pending[v.RequestId]
	if !ok {
		return nil // a duplicate, or the answer after a timeout
	}
	if err := p.CheckFrom(from); err != nil {
		return errorf("%v", err)
	}
	dropID(l.pending, &l.mem.pending, v.RequestId, "")
	fx.Decide(v.RequestId, v.Allowed)
	if !v.Allowed && v.EmptyForUs > 0 {
		h := l.holding(p.Req.Key)
		h.emptyUntil = max(h.emptyUntil, p.Req.Arrival+time.Duration(v.EmptyForUs)*time.Microsecond)
	}
	return nil
}

func (l *RegionLease) forwardTimer(now time.Duration, t timer, fx *strategy.Effects) {
	p, ok := l.pending[t.id]
	if !ok || p.Next != t.at {
		return
	}
	if now < p.Deadline {
		l.forward(now, p, p.Owner, fx)
		return
	}
	dropID(l.pending, &l.mem.pending, t.id, "")
	fx.Decide(t.id, l.admitOnTimeout)
}

func (l *RegionLease) askTimer(now time.Duration, t timer, fx *strategy.Effects) {
	h := l.keys[t.key]
	if h == nil || !h.asking || h.seq != t.seq || h.askNext != t.at {
		return
	}
	if now < h.askDeadline {
		l.sendAsk(now, t.key, h, fx)
		return
	}
	h.asking = false
}

// leaseTimer ends a lease at its (holder's) end and returns its unused
// tokens to its granter. At a regional owner, what its nodes hold of it
// has ended by then (their leases end no later).
func (l *RegionLease) leaseTimer(now time.Duration, t timer, fx *strategy.Effects) {
	h := l.keys[t.key]
	if h == nil {
		return
	}
	h.leases = slices.DeleteFunc(h.leases, func(ls held) bool {
		if ls.seq != t.seq || ls.from != t.node || ls.expires > now {
			return false
		}
		l.giveBack(now, t.key, ls, fx)
		return true
	})
}

func (l *RegionLease) giveBack(now time.Duration, key string, ls held, fx *strategy.Effects) {
	if ls.tokens > 0 && ls.from != l.self {
		id := grantID{ls.from, key, ls.seq}
		putID(l.returns, &l.mem.returns, id, "", &returning{unused: ls.tokens, deadline: now + l.timeout})
		l.sendReturn(now, id, fx)
	}
}

// noteSpent counts, before ls is dropped from h ahead of its end, the
// tokens taken out of it in h.spentTok until its end (capped at the
// burst; a warm-up's answer reports them, heldOf).
func (l *RegionLease) noteSpent(now time.Duration, h *holding, ls held) {
	if ls.expires <= now || ls.used <= 0 {
		return
	}
	if h.spentUntil <= now {
		h.spentTok = 0
	}
	h.spentTok = min(h.spentTok+ls.used, l.sh.Burst)
	h.spentUntil = max(h.spentUntil, ls.expires)
}

// used notes that key is in use at this node (a request, or at a regional
// owner a forward or a node's ask) and schedules the idle check.
func (l *RegionLease) used(now time.Duration, key string, h *holding, fx *strategy.Effects) {
	h.lastRequestAt = now
	l.scheduleIdle(now, key, h, fx)
}

// scheduleIdle schedules key's idle check (idleTimer) at its idleAt, no
// earlier than now, unless one is scheduled already.
func (l *RegionLease) scheduleIdle(now time.Duration, key string, h *holding, fx *strategy.Effects) {
	if !h.idleSet {
		h.idleSet = true
		at := max(l.idleAt(now, h), now)
		l.pushTimer(timer{at: at, kind: timerIdle, key: key})
		fx.WakeAt(at)
	}
}

// idleArrivals is how many of its measured arrivals a holder misses
// before it counts a key as idle (idleAt).
const idleArrivals = 20

// idleAt is when key's holding h counts as idle (its leases go back:
// idleTimer): idle after its last use, or sooner for a key in demand,
// after the time idleArrivals of its requests take at its measured
// demand (at a regional owner its region's), at least 4*lead; never
// before the end of a dry hint it gave its nodes (hintUntil) (ours: when
// a tenant's load leaves a region, what the region holds goes back after
// about 100 ms at 200 requests/s per node instead of idle).
func (l *RegionLease) idleAt(now time.Duration, h *holding) time.Duration {
	wait := l.idle
	if d := l.holderDemand(now, h); d > 0 {
		wait = min(wait, max(4*l.lead, time.Duration(idleArrivals/d*float64(time.Second))))
	}
	return max(h.lastRequestAt+wait, h.hintUntil)
}

// holderDemand is h's demand in tokens per second: at a regional owner
// (it asked the global owner, or its nodes reported theirs) its region's
// (regionDemand), else its own.
func (l *RegionLease) holderDemand(now time.Duration, h *holding) float64 {
	if h.askRegion || len(h.reports) > 0 {
		return l.regionDemand(now, h)
	}
	return h.demand(now, l.window, l.minLease)
}

// quiet reports whether h's key has missed renewArrivals of its arrivals
// at its measured demand (holderDemand) since its last use, lead
// included: a renew timer (the end of a dry hint) then asks no more (ours:
// when a tenant's load left a region, its nodes still asked as their dry
// hints ended, for as long as their demand estimates, over a 1 s window,
// stayed up, and took period-sized leases of a stock no one would use).
// The next use asks as before.
func (l *RegionLease) quiet(now time.Duration, h *holding) bool {
	d := l.holderDemand(now, h)
	return d <= 0 || now-h.lastRequestAt > l.lead+time.Duration(renewArrivals/d*float64(time.Second))
}

// renewTimer is the end of a dry hint for t.key: an ask if the key is
// still in use here (quiet) and its demand warrants one (maybeAsk).
func (l *RegionLease) renewTimer(now time.Duration, t timer, fx *strategy.Effects) {
	if h := l.keys[t.key]; h != nil && !l.quiet(now, h) {
		l.maybeAsk(now, t.key, h, fx)
	}
}

// renewArrivals is how many of its measured arrivals a holder misses
// before its renew timer stops asking (quiet).
const renewArrivals = 3

// isIdle reports whether key's holding h is idle at now (idleAt).
func (l *RegionLease) isIdle(now time.Duration, h *holding) bool {
	return h.lastRequestAt > 0 && now >= l.idleAt(now, h)
}

// idleTimer returns, when key saw no use for idle, every lease of it this
// node holds that is not lent out (ours: when a tenant's load moves to
// another region, what the old region holds would otherwise sit unused
// until its leases end, while the new region refuses); else it checks
// again idle after the last use.
func (l *RegionLease) idleTimer(now time.Duration, t timer, fx *strategy.Effects) {
	h := l.keys[t.key]
	if h == nil {
		return
	}
	if at := l.idleAt(now, h); at > now {
		l.pushTimer(timer{at: at, kind: timerIdle, key: t.key})
		fx.WakeAt(at)
		return
	}
	h.idleSet = false
	h.leases = slices.DeleteFunc(h.leases, func(ls held) bool {
		if ls.lent > 0 || ls.subs > 0 {
			return false // its nodes' leases are out: it ends at its end
		}
		if h.allowFrom(ls) {
			return false // the driver's allowance is out of it: kept until Return (allowance.go)
		}
		l.noteSpent(now, h, ls)
		l.giveBack(now, t.key, ls, fx)
		return true
	})
}

func (l *RegionLease) returnTimer(now time.Duration, t timer, fx *strategy.Effects) {
	id := grantID{t.node, t.key, t.seq}
	r := l.returns[id]
	if r == nil || r.next != t.at {
		return
	}
	if now >= r.deadline || !slices.Contains(l.live, t.node) {
		dropID(l.returns, &l.mem.returns, id, "")
		return
	}
	l.sendReturn(now, id, fx)
}

func (l *RegionLease) sendReturn(now time.Duration, id grantID, fx *strategy.Effects) {
	r := l.returns[id]
	r.next = min(now+l.retryFor(id.node), r.deadline)
	l.pushTimer(timer{at: r.next, kind: timerReturn, key: id.key, seq: id.seq, node: id.node})
	fx.WakeAt(r.next)
	fx.Send(id.node, wire.MustMarshal(&peerv1.RegionLeaseMessage{Body: &peerv1.RegionLeaseMessage_Return{Return: &peerv1.RegionLeaseReturn{
		Key: id.key, Seq: id.seq, Unused: r.unused}}}))
}

func (l *RegionLease) onReturnAck(from strategy.NodeID, a *peerv1.RegionLeaseReturnAck) {
	dropID(l.returns, &l.mem.returns, grantID{from, a.Key, a.Seq}, "")
}

// timer kinds
const (
	timerForward = iota
	timerRelay
	timerAsk
	timerLease
	timerRenew
	timerReturn
	timerIdle
	timerPush
	timerQueue // the ordering buffer's next turn (order.go)
	timerDated // a held dated push becomes usable (dated.go)
)

type timer struct {
	at   time.Duration
	kind int8
	id   uint64
	key  string
	seq  uint64
	node strategy.NodeID
}

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

// noteIn counts n tokens taken into the stock at now in its moving
// inflow rate (window: the decay's time constant).
func (h *holding) noteIn(now time.Duration, n int64, window time.Duration) {
	h.inRate = h.inflow(now, window) + float64(n)/window.Seconds()
	h.inAt = now
}

// inflow is the stock's moving inflow rate at now, tokens per second: each
// token taken counts 1/window, decayed by exp(-age/window).
func (h *holding) inflow(now, window time.Duration) float64 {
	if h.inRate == 0 || now <= h.inAt {
		return h.inRate
	}
	return h.inRate * math.Exp(-(now-h.inAt).Seconds()/window.Seconds())
}
