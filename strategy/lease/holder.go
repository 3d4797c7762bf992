package lease

import (
	"fmt"
	"math"
	"slices"
	"time"

	peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/internal/forwarding"
	"github.com/tokenmesh/tokenmesh/strategy/internal/wire"
)

// The holder side (see "# Protocol" in the package doc): a node that does
// not own a key counts its demand, asks the owner for leases and decides
// from them, forwards the requests no leased token can serve, returns what
// its leases did not use, and keeps the owner's dry hint.

// holding is what a holder knows of one key.
type holding struct {
	swept         // its place in the sweep's order (sweep.go)
	winStart      time.Duration
	cur, prev     int64 // tokens requested in the current and the previous window
	curInst       int64 // distinct arrival instants in the current window
	prevInst      int64 // and in the previous one
	leases        []held
	seq           uint64 // last ask's seq
	asking        bool
	accPeak       uint16 // the most entries accepted has held (memory.go: its slots)
	memBytes      int32  // the heap of its maps and slices counted in Lease.mem (memory.go), bytes
	askTo         strategy.NodeID
	askAt         time.Duration // when the current ask was first sent
	askTokens     int64
	askSpent      []uint64      // spent leases reported with the current ask
	askUsed       []usedRec     // partly used leases reported with the current ask
	askNext       time.Duration // next resend
	askDeadline   time.Duration
	sentTo        map[uint64]strategy.NodeID // recent asks: who may answer
	accepted      map[uint64]time.Duration   // seqs whose grant was taken, until their expiry
	emptyUntil    time.Duration              // the owner's last dry hint
	nextAskAt     time.Duration
	lastRequestAt time.Duration
	lastArrival   time.Duration // of the last request counted in the demand
	allow         allowance     // the driver's open allowance of the key (allowance.go); tokens 0: none
}

type held struct {
	seq     uint64
	from    strategy.NodeID
	tokens  int64 // left
	granted int64 // tokens the grant held
	expires time.Duration
}

// usedRec is a partly used lease reported with an ask: its seq and the
// tokens used of it so far (LeaseAsk.used).
type usedRec struct {
	seq    uint64
	tokens int64
}

type returning struct {
	unused   int64
	next     time.Duration
	deadline time.Duration
}

// Request decides req locally (a leased token, or the owner's dry hint),
// or queues it here as the key's owner, or forwards it to the owner.
func (l *Lease) Request(now time.Duration, req strategy.Request, fx *strategy.Effects) (strategy.Decision, bool) {
	return l.RequestWait(now, req, 0, fx)
}

// RequestWait is Request in waiting mode (strategy.Waiter, SRTM §5.2;
// ours for leases): a leased token admits at once (delay 0); the owner's
// dry hint refuses locally only when it lasts beyond arrival + maxWait (no
// wait within maxWait could be enough without a return); any other request
// goes to the owner (LeaseForward.max_wait_ns), which reserves its tokens
// in its pool in (arrival, ID) order, the pool's level going negative
// while reservations wait (shape.reserve), and answers with the wait
// (LeaseVerdict.delay_ns). While the level is negative the owner grants no
// lease, so tokens in leases plus the level still never exceed the burst.
// maxWait 0 is Request. maxWait is capped at the parameter max_wait
// (default 0: no waiting mode), which also lengthens takeover: a node that
// takes a key over keeps its bucket empty until the old owner's
// reservations have passed too.
func (l *Lease) RequestWait(now time.Duration, req strategy.Request, maxWait time.Duration, fx *strategy.Effects) (strategy.Decision, bool) {
	maxWait = min(max(maxWait, 0), l.maxWait)
	if l.od.On && req.Charge {
		maxWait = 0 // overdraft: a charge is taken at once, it does not wait
	}
	if l.owner(req.Key) == l.self {
		l.queue.Push(queued{arrival: req.Arrival, id: req.ID, key: req.Key, tokens: req.Tokens, maxWait: maxWait, charge: req.Charge})
		if l.hold > 0 {
			fx.WakeAt(max(req.Arrival+l.hold, now))
			return strategy.Decision{}, false
		}
		l.decideDue(now, fx)
		return fx.TakeDecision(req.ID)
	}
	h := l.holding(req.Key)
	h.count(req.Arrival, req.Tokens, h.cur+h.prev == 0 || req.Arrival != h.lastArrival, l.window)
	h.lastArrival = req.Arrival
	h.lastRequestAt = now
	defer l.maybeAsk(now, req.Key, h, fx)
	for i := range h.leases {
		ls := &h.leases[i]
		if ls.expires > now && ls.tokens >= req.Tokens {
			ls.tokens -= req.Tokens
			if ls.tokens == 0 && ls.from != l.self {
				// Spent: tell the owner at once, so that the lease's room in
				// the bucket comes back now rather than at the next ask or
				// at expiry (until then the owner's bucket counts the spent
				// tokens as lent, and a bucket whose burst is all lent
				// refills nothing). The lease stays listed, so that the
				// next ask reports it again if this message is lost.
				l.sendSpent(ls.from, req.Key, ls.seq, fx)
			}
			return strategy.Decision{RequestID: req.ID, Allowed: true}, true
		}
	}
	if req.Arrival+maxWait < h.emptyUntil && !(l.od.On && req.Charge) {
		// (Under overdraft a charge is taken even when refused: it goes
		// to the owner, whose pool takes its tokens.)
		return strategy.Decision{RequestID: req.ID, Allowed: false}, true
	}
	p := &forwarding.Pending{Req: req, Deadline: now + l.timeout, MaxWait: maxWait}
	l.pending[req.ID] = p
	l.forward(now, p, l.owner(req.Key), fx)
	return strategy.Decision{}, false
}

// allowFrom reports whether ls backs the driver's open allowance of h's
// key (its tokens are out, not used: the lease is not spent yet).
func (h *holding) allowFrom(ls held) bool {
	return h.allow.tokens > 0 && h.allow.seq == ls.seq && h.allow.from == ls.from
}

func (l *Lease) holding(key string) *holding {
	h := l.keys[key]
	if h == nil {
		h = &holding{seq: l.seqBase, sentTo: map[uint64]strategy.NodeID{}, accepted: map[uint64]time.Duration{}}
		l.keys[key] = h
		l.newHolding(key, h)
	}
	return h
}

// count adds a request of tokens at t to the demand windows; newInstant
// is false when it arrived at the same instant as the previous one.
func (h *holding) count(t time.Duration, tokens int64, newInstant bool, window time.Duration) {
	if t >= h.winStart+window {
		if t >= h.winStart+2*window {
			h.prev, h.prevInst = 0, 0
		} else {
			h.prev, h.prevInst = h.cur, h.curInst
		}
		h.cur, h.curInst = 0, 0
		h.winStart = t - (t-h.winStart)%window
	}
	h.cur += tokens
	if newInstant {
		h.curInst++
	}
}

// demand is the tokens per second requested over the last window at now
// (the previous window weighted by its part still inside the sliding
// window), or 0 while fewer than minLease distinct arrival instants were
// seen in the two windows: requests that arrive together (a burst at one
// instant, as in traces of 1 s resolution) are one, because a lease asked
// for during a burst comes back after it. In a key's first window it is
// the tokens seen over the time since the window began, at least
// window/16: a busy key asks for a lease within its first few requests.
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

// leased is the tokens h's unexpired leases hold at now.
func (h *holding) leased(now time.Duration) int64 {
	var n int64
	for _, ls := range h.leases {
		if ls.expires > now {
			n += ls.tokens
		}
	}
	return n
}

// maybeAsk sends a lease ask for key when the demand warrants one and the
// leases run low.
func (l *Lease) maybeAsk(now time.Duration, key string, h *holding, fx *strategy.Effects) {
	if h.asking || now < h.nextAskAt {
		return
	}
	want := math.Ceil(h.demand(now, l.window, l.minLease) * l.period.Seconds())
	if want < float64(l.minLease) {
		return
	}
	n := min(int64(want), l.sh.burst)
	if 2*h.leased(now) >= n {
		return
	}
	owner := l.owner(key)
	if owner == l.self {
		return
	}
	h.seq++
	h.asking, h.askTo, h.askAt, h.askTokens = true, owner, now, n
	// Report the leases from this owner whose tokens are all used (and
	// forget them: nothing is left to return).
	h.askSpent = h.askSpent[:0]
	h.leases = slices.DeleteFunc(h.leases, func(ls held) bool {
		if ls.tokens == 0 && ls.from == owner && len(h.askSpent) < maxSpent && !h.allowFrom(ls) {
			h.askSpent = append(h.askSpent, ls.seq)
			return true
		}
		return false
	})
	h.askUsed = h.used(now, owner, h.askUsed[:0])
	h.askDeadline = now + l.timeout
	delete(h.sentTo, h.seq-8) // before the insert: the map never holds more than 8 (one group)
	h.sentTo[h.seq] = owner
	l.holdingChanged(h)
	l.sendAsk(now, key, h, fx)
}

func (l *Lease) sendAsk(now time.Duration, key string, h *holding, fx *strategy.Effects) {
	h.askNext = min(now+l.retryEvery, h.askDeadline)
	l.pushTimer(timer{at: h.askNext, kind: timerAsk, key: key, seq: h.seq})
	fx.WakeAt(h.askNext)
	fx.Send(h.askTo, wire.MustMarshal(&peerv1.LeaseMessage{Body: &peerv1.LeaseMessage_Ask{Ask: &peerv1.LeaseAsk{
		Key: key, Seq: h.seq, Tokens: h.askTokens, AskedAtNs: int64(h.askAt), Spent: h.askSpent, Used: usedMsgs(h.askUsed)}}}))
}

// usedMsgs is us on the wire (nil for none).
func usedMsgs(us []usedRec) []*peerv1.LeaseUsed {
	if len(us) == 0 {
		return nil
	}
	m := make([]*peerv1.LeaseUsed, len(us))
	for i, u := range us {
		m[i] = &peerv1.LeaseUsed{Seq: u.seq, Tokens: u.tokens}
	}
	return m
}

// used appends to dst, for an ask to owner at now, the leases from owner
// of which some tokens are used and some are left (at most maxSpent): the
// tokens used so far of each, those of the driver's open allowance not
// counted (they are out, not used). The owner gives their room back
// before the lease ends ("Partly used leases" in the package doc).
func (h *holding) used(now time.Duration, owner strategy.NodeID, dst []usedRec) []usedRec {
	for _, ls := range h.leases {
		if len(dst) == maxSpent {
			break
		}
		out := ls.tokens
		if h.allowFrom(ls) {
			out += h.allow.tokens
		}
		if ls.from == owner && ls.expires > now && ls.tokens > 0 && out < ls.granted {
			dst = append(dst, usedRec{seq: ls.seq, tokens: ls.granted - out})
		}
	}
	return dst
}

// sendSpent tells owner that the lease seq of key is used up: a return of
// 0 unused tokens, sent once (not acknowledged nor resent: if it is lost,
// the owner releases the lease at its expiry, as without it).
func (l *Lease) sendSpent(owner strategy.NodeID, key string, seq uint64, fx *strategy.Effects) {
	fx.Send(owner, wire.MustMarshal(&peerv1.LeaseMessage{Body: &peerv1.LeaseMessage_Return{Return: &peerv1.LeaseReturn{
		Key: key, Seq: seq, Unused: 0}}}))
}

func (l *Lease) forward(now time.Duration, p *forwarding.Pending, owner strategy.NodeID, fx *strategy.Effects) {
	next := p.SendTo(now, owner, l.retryEvery)
	l.pushTimer(timer{at: next, kind: timerForward, id: p.Req.ID})
	fx.WakeAt(next)
	fx.Send(owner, wire.MustMarshal(&peerv1.LeaseMessage{Body: &peerv1.LeaseMessage_Forward{Forward: &peerv1.LeaseForward{
		RequestId: p.Req.ID, Key: p.Req.Key, ExtraTokens: p.Req.Tokens - 1, ArrivalNs: int64(p.Req.Arrival), MaxWaitNs: int64(p.MaxWait), PostHoc: p.Req.Charge}}}))
}

// onReturnAck stops resending the return it acknowledges.
func (l *Lease) onReturnAck(from strategy.NodeID, a *peerv1.LeaseReturnAck) {
	delete(l.returns, grantID{from, a.Key, a.Seq})
}

// onVerdict decides the forwarded request a verdict answers and keeps the
// owner's dry hint of a refusal. Errors (no state change): a verdict that
// fails checkVerdict. A verdict for no pending request (a duplicate, or
// the answer after a timeout) is ignored.
func (l *Lease) onVerdict(now time.Duration, from strategy.NodeID, v *peerv1.LeaseVerdict, fx *strategy.Effects) error {
	p, ok := l.pending[v.RequestId]
	if !ok {
		return nil // a duplicate, or the answer after a timeout
	}
	if err := l.checkVerdict(now, from, p, v); err != nil {
		return err
	}
	until := p.Req.Arrival + time.Duration(v.EmptyForUs)*time.Microsecond
	delete(l.pending, v.RequestId)
	fx.DecideAfter(v.RequestId, v.Allowed, time.Duration(v.DelayNs))
	if !v.Allowed && v.EmptyForUs > 0 {
		h := l.holding(p.Req.Key)
		h.emptyUntil = max(h.emptyUntil, until)
	}
	return nil
}

// onGrant (validated: checkGrant) takes a grant's lease and dry hint, once
// per (key, seq). Errors (no state change): a grant from a node other than
// the one the ask went to. A grant for no recent ask is ignored.
func (l *Lease) onGrant(now time.Duration, from strategy.NodeID, g *peerv1.LeaseGrant, fx *strategy.Effects) error {
	expires, until := time.Duration(g.ExpiresNs), time.Duration(g.EmptyUntilNs)
	h := l.keys[g.Key]
	if h == nil || h.sentTo[g.Seq] == "" {
		return nil // not asked (any more): a stale or duplicated grant
	}
	if h.sentTo[g.Seq] != from {
		return fmt.Errorf("lease: grant for %q seq %d from %s, but the ask went to %s", g.Key, g.Seq, from, h.sentTo[g.Seq])
	}
	if _, dup := h.accepted[g.Seq]; dup {
		return nil
	}
	// Never use a lease past the owner's release: asked_at + ttl by
	// this node's own record when it is the current ask. Stop using it
	// (and return what is left) returnLead earlier, so that the return
	// reaches the owner before the release.
	if g.Seq == h.seq && h.askAt+l.ttl < expires {
		expires = h.askAt + l.ttl
	}
	expires -= l.returnLead
	h.accepted[g.Seq] = expires
	if g.Seq == h.seq {
		h.asking = false
	}
	if until > now {
		h.emptyUntil = max(h.emptyUntil, until)
		h.nextAskAt = until - l.lead
		// Ask again then, before the hint ends, without waiting for a
		// request to come after it.
		l.pushTimer(timer{at: max(h.nextAskAt, now), kind: timerRenew, key: g.Key})
		fx.WakeAt(max(h.nextAskAt, now))
	}
	if g.Tokens > 0 && expires > now {
		fx.EndRefusal(g.Key) // its requests may be admitted again (refusal.go)
		h.leases = append(h.leases, held{seq: g.Seq, from: from, tokens: g.Tokens, granted: g.Tokens, expires: expires})
		l.pushTimer(timer{at: expires, kind: timerLease, key: g.Key, seq: g.Seq})
		fx.WakeAt(expires)
	}
	l.holdingChanged(h)
	return nil
}

// forwardTimer resends a forward that got no verdict yet or, at its
// deadline, decides it by on_timeout.
func (l *Lease) forwardTimer(now time.Duration, t timer, fx *strategy.Effects) {
	p, ok := l.pending[t.id]
	if !ok || p.Next != t.at {
		return
	}
	if now < p.Deadline {
		l.forward(now, p, p.Owner, fx)
		return
	}
	delete(l.pending, t.id)
	fx.Decide(t.id, l.timedOut(now, p.Req))
}

// askTimer resends the current ask of t.key that got no grant yet or, at
// its deadline, gives it up.
func (l *Lease) askTimer(now time.Duration, t timer, fx *strategy.Effects) {
	h := l.keys[t.key]
	if h == nil || !h.asking || h.seq != t.seq || h.askNext != t.at {
		return
	}
	if now < h.askDeadline {
		l.sendAsk(now, t.key, h, fx)
		return
	}
	h.asking = false // give up; a later request asks again
}

// leaseTimer ends the lease t.seq of t.key at its (holder's) expiry and
// returns its unused tokens to the owner that granted it.
func (l *Lease) leaseTimer(now time.Duration, t timer, fx *strategy.Effects) {
	h := l.keys[t.key]
	if h == nil {
		return
	}
	h.leases = slices.DeleteFunc(h.leases, func(ls held) bool {
		if ls.seq != t.seq || ls.expires > now {
			return false
		}
		if ls.tokens > 0 && ls.from != l.self {
			id := grantID{ls.from, t.key, ls.seq}
			l.returns[id] = &returning{unused: ls.tokens, deadline: now + l.timeout}
			l.sendReturn(now, id, fx)
		}
		return true
	})
}

// returnTimer resends an unacknowledged return, until its deadline or its
// owner's leaving.
func (l *Lease) returnTimer(now time.Duration, t timer, fx *strategy.Effects) {
	id := grantID{t.node, t.key, t.seq}
	r := l.returns[id]
	if r == nil || r.next != t.at {
		return
	}
	if now >= r.deadline || !slices.Contains(l.members, t.node) {
		delete(l.returns, id)
		return
	}
	l.sendReturn(now, id, fx)
}

func (l *Lease) sendReturn(now time.Duration, id grantID, fx *strategy.Effects) {
	r := l.returns[id]
	r.next = min(now+l.retryEvery, r.deadline)
	l.pushTimer(timer{at: r.next, kind: timerReturn, key: id.key, seq: id.seq, node: id.node})
	fx.WakeAt(r.next)
	fx.Send(id.node, wire.MustMarshal(&peerv1.LeaseMessage{Body: &peerv1.LeaseMessage_Return{Return: &peerv1.LeaseReturn{
		Key: id.key, Seq: id.seq, Unused: r.unused}}}))
}
