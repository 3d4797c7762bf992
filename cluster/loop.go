package cluster

import (
	"runtime"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/tokenmesh/tokenmesh/rule"
	"github.com/tokenmesh/tokenmesh/strategy"
)

type eventKind uint8

const (
	evRequest eventKind = iota
	evBatch
	evFrame
	evMembers
	evExpected
	evInspect
	evLeave
	evRules   // SetRules (reload.go)
	evHint    // SetLatencyHint (hint.go)
	evQuota   // QuotaUsage, QuotaDetach (quota.go)
	evRefund  // Refund (refund.go)
	evDerive  // EnsureDerived (derived.go)
	evRelease // Release (permit.go)
)

type event struct {
	kind    eventKind
	rule    *ruleState
	key     string
	tokens  int64
	maxWait time.Duration // CheckWait: waiting mode's max wait; 0 for Check
	created int64         // BatchItem.CreatedAtUnixNs of a Check; 0 for none
	charge  bool          // BatchItem.Charge
	reply   chan result
	batch   *batch
	frame   Frame
	members []strategy.NodeID
	inspect func(now time.Duration, rule rule.Rule, s strategy.Strategy)
	peek    bool  // evInspect: Peek (the lent buckets stay lent)
	left    *bool // evLeave's answer: every Leaver has left (set before done)
	done    chan struct{}
	rules   *rulesUpdate // evRules (reload.go)

	hint   time.Duration // evHint (hint.go)
	quota  *quotaCall    // evQuota (quota.go)
	derive *deriveCall   // evDerive (derived.go)
	permit uint64        // evRelease (permit.go)
}

// deliver is the transport's receive callback: it queues the frame for the
// loop, or drops it (counted) when the node is closed or its inbox is full.
func (n *Node) deliver(f Frame) {
	select {
	case <-n.done:
		return
	default:
	}
	if f.From == "" || !utf8.ValidString(string(f.From)) {
		// Not a node name (names are UTF-8: they travel in protobuf
		// strings); a strategy could not even encode a reply to it.
		n.badSender.Add(1)
		return
	}
	select {
	case n.events <- event{kind: evFrame, frame: f}:
	default:
		n.inboxDropped.Add(1)
	}
}

func (n *Node) signalWake() {
	select {
	case n.wake <- struct{}{}:
	default:
	}
}

// now is the time handed to strategies: monotonic, never decreasing.
func (n *Node) now() time.Duration {
	t := n.clock()
	if t < n.last {
		t = n.last
	}
	n.last = t
	return t
}

// clock is the node's time since its epoch, on the monotonic clock: now
// without the loop's bookkeeping, safe for concurrent use (the fast path's
// refills of lent buckets read it in the checks' goroutines).
func (n *Node) clock() time.Duration {
	if n.testClock != nil {
		return n.testClock()
	}
	return n.offset + time.Since(n.start)
}

// maxTurnEvents bounds the events one turn of the loop takes before it
// runs the wake-ups due and hands the turn's frames to the transport.
const maxTurnEvents = 64

// loop is the node's goroutine. A turn takes one event (or a timer
// expiry), then up to maxTurnEvents-1 more that are already queued, then
// runs the wake-ups due and sends the turn's frames (flushOut). Under load
// a turn thus decides the checks and frames that queued up meanwhile
// together: the owner's verdicts for a batch of forwards leave as one
// batch, and a forwarder's forwards likewise. Each event is still handled
// at its own time (n.now) and before the wake-ups due, as the Host's
// same-instant contract asks.
func (n *Node) loop() {
	defer n.shutdown()
	for {
		select {
		case <-n.done:
			return
		case ev := <-n.events:
			n.inTurn = true
			n.handle(ev)
			n.drain()
			if len(n.events) == 0 {
				// Let the goroutines that are ready to run (API calls,
				// peer receivers) queue their events first, then take
				// them in this turn: under load a turn then decides more
				// at once and its frames leave together. Gosched
				// returns at once when nothing else is ready.
				runtime.Gosched()
				n.drain()
			}
		case <-n.timer.C:
			n.inTurn = true
			n.armed = -1
		case <-n.wake:
			n.inTurn = true
		}
		n.runDue()
		n.fastTick()
		n.flushOut()
	}
}

// drain handles the events already queued, up to maxTurnEvents-1, without
// waiting (loop goroutine).
func (n *Node) drain() {
	for range maxTurnEvents - 1 {
		select {
		case ev := <-n.events:
			n.handle(ev)
		default:
			return
		}
	}
}

// flushOut ends a turn: the frames of the turn go to the transport, per
// peer in the order they were sent (loop goroutine).
func (n *Node) flushOut() {
	n.inTurn = false
	for _, to := range n.outPeer {
		frames := n.outbox[to]
		for i, o := range frames {
			if err := n.transport.Send(to, o.f); err != nil {
				o.rs.c.sendErrs.Add(1)
			}
			frames[i] = outFrame{} // let the payload go
		}
		n.outbox[to] = frames[:0]
	}
	n.outPeer = n.outPeer[:0]
}

// outFrame is a frame waiting in the outbox, with the rule it counts
// against.
type outFrame struct {
	rs *ruleState
	f  Frame
}

func (n *Node) handle(ev event) {
	now := n.now()
	switch ev.kind {
	case evRequest:
		n.request(now, ev.rule, ev.key, ev.tokens, ev.maxWait, ev.created, ev.charge, pendingCheck{reply: ev.reply})
	case evBatch:
		n.handleBatch(now, ev.batch)
	case evFrame:
		n.handleFrame(now, ev.frame)
	case evMembers:
		n.handleMembers(now, ev.members)
		close(ev.done)
	case evRules:
		now = n.fastCloseAll(now, true) // kept rules get their tokens back; the others' go with them
		n.setRulesDerived(now, ev.rules)
		close(ev.done)
	case evDerive:
		ev.derive.err = n.derive(now, ev.derive.d, true)
		close(ev.done)
	case evHint:
		n.setHint(now, ev.hint)
		close(ev.done)
	case evQuota:
		n.handleQuota(now, ev)
		close(ev.done)
	case evRefund:
		n.handleRefund(now, ev)
		close(ev.done)
	case evRelease:
		n.handleRelease(now, ev)
		close(ev.done)
	case evExpected:
		n.handleExpected(now, ev.members)
		close(ev.done)
	case evLeave, evInspect:
		n.handleLeaveInspect(now, ev)
		close(ev.done)
	}
}

// handleBatch decides a batch's items the fast path left (from its
// first on) at one instant (its items arrive together), unless an item
// closed a plain allowance, which moves the loop's time on
// (fastCloseEntry).
func (n *Node) handleBatch(now time.Duration, b *batch) {
	for i, it := range b.items {
		if i < b.first {
			continue // decided on the fast path
		}
		now = n.request(now, b.rules[i], it.Key, it.Tokens, it.MaxWait, it.CreatedAtUnixNs, it.Charge, pendingCheck{batch: b, idx: i})
	}
}

// handleFrame hands a peer frame to its rule's strategy; a frame of a
// derived rule this node does not have yet derives it first (derived.go),
// and one of no rule is counted and dropped.
func (n *Node) handleFrame(now time.Duration, f Frame) {
	rs, ok := n.rules[f.Rule]
	if !ok {
		if rs = n.deriveFrame(now, f.Rule); rs == nil {
			n.unknownRule.Add(1)
			return
		}
		now = n.last // deriving closed the allowances first, which may move the loop's time on (fastCloseEntry)
	}
	rs.c.msgsRecv.Add(1)
	rs.c.bytesRecv.Add(int64(len(f.Payload)))
	if err := n.h.Receive(now, rs.idx, f.From, f.Payload); err != nil {
		rs.c.recvErrs.Add(1)
		n.logRefused(f, err)
	}
}

// handleMembers gives every strategy the new live members, when they
// changed, after the allowances went back (before a re-split).
func (n *Node) handleMembers(now time.Duration, members []strategy.NodeID) {
	if slices.Equal(members, n.members) {
		return
	}
	now = n.fastCloseAll(now, true)
	n.members = members
	for _, rs := range n.order {
		n.h.SetMembers(now, rs.idx, members)
	}
}

// handleExpected gives every strategy the new expected members, when they
// changed, after the allowances went back.
func (n *Node) handleExpected(now time.Duration, members []strategy.NodeID) {
	if slices.Equal(members, n.expected) {
		return
	}
	now = n.fastCloseAll(now, true)
	n.expected = members
	for _, rs := range n.order {
		n.h.SetExpected(now, rs.idx, members)
	}
}

// handleLeaveInspect runs a Leave (the allowances go back and no new ones
// are granted, so every decision from now on is the strategy's own) or an
// Inspect (after the lent buckets came back, unless it only peeks, so
// that it reads exact levels) over every rule.
func (n *Node) handleLeaveInspect(now time.Duration, ev event) {
	leave := ev.kind == evLeave
	if leave {
		now = n.fastCloseAll(now, true)
		n.leaving = true
	}
	if ev.inspect != nil && !ev.peek {
		now = n.fastReclaimAll(now)
	}
	for _, rs := range n.order {
		if ev.inspect != nil {
			ev.inspect(now, rs.rule, rs.s)
		}
		if leave {
			n.h.Leave(now, rs.idx)
		}
	}
	if ev.left != nil {
		*ev.left = n.h.Left()
	}
}

// request hands one request to rs's strategy: a synchronous decision
// answers p at once, otherwise p waits in rs.pending. maxWait > 0 asks a
// strategy.Waiter for waiting mode (others decide a plain request);
// created (BatchItem.CreatedAtUnixNs, 0 for none) is its arrival for a
// strategy.ArrivalOrderer (arrivalAt); charge marks a cost already
// incurred (BatchItem.Charge). It returns the time the request was
// handed to the strategy at: now, or later when the key's allowance was
// closed first (fastCloseEntry); the loop's next calls are made at it.
func (n *Node) request(now time.Duration, rs *ruleState, key string, tokens int64, maxWait time.Duration, created int64, charge bool, p pendingCheck) time.Duration {
	if rs = n.current(rs); rs == nil { // the rule was removed since validate
		p.answer(result{d: CheckResult{Remaining: -1}, err: ErrRuleRemoved})
		return now
	}
	if rs.fast != nil {
		if maxWait == 0 && !charge {
			// A check that came to the loop while the key's allowance
			// was being opened again (by a check queued before it):
			// decided there, as the caller's goroutine would have.
			if d, ok := rs.fast.take(key, tokens); ok {
				p.answer(result{d: d})
				return now
			}
		}
		// The strategy decides on the exact level: the key's allowance
		// (empty, or too small for this request) goes back first.
		now = n.fastClose(now, rs, key, true)
	}
	id := n.h.NextRequestID()
	rs.c.requests.Add(1)
	req := strategy.Request{ID: id, Key: key, Tokens: tokens, Arrival: now, Charge: charge}
	if created != 0 && rs.ordered {
		req.Arrival = n.arrivalAt(created, now)
	}
	// The check is answered, or waits in pending, before the request's
	// effects are carried out: they may hold its own decision.
	n.h.RequestThen(now, rs.idx, req, maxWait, func(_ strategy.Strategy, d strategy.Decision, ok bool, fx *strategy.Effects) {
		if !ok {
			p.arrival = now
			rs.pending[id] = p
			rs.c.pending.Add(1)
			rs.c.deferred.Add(1)
			return
		}
		p.answer(result{d: n.answerNow(now, rs, key, d, maxWait == 0 && !charge, fx)})
	})
	return now
}

// answerNow is the answer to a check of key that rs's strategy decided
// at once at now (d; fx its call's effects): with the key's allowance or
// lent bucket opened after it (fastGrant), or, for a plain check (no
// wait, no charge) refused, the key's refusal window (fastRefuse), and
// the key's Remaining.
func (n *Node) answerNow(now time.Duration, rs *ruleState, key string, d strategy.Decision, plain bool, fx *strategy.Effects) CheckResult {
	var granted, left int64
	lent := false
	if rs.fast != nil && d.Delay == 0 && (d.Allowed || rs.fast.l != nil) {
		// A lent bucket serves refusals too (a key over its limit is
		// refused in the caller's goroutine); an allowance needs
		// tokens.
		granted, left, lent = n.fastGrant(now, rs, key, fx)
	}
	rem := int64(-1)
	if v, known := n.h.Remaining(now, rs.idx, key); known {
		rem = v + granted // the allowance's tokens are the caller's too
		if lent {
			rem = left + granted // the strategy holds none of the key's tokens: the lent bucket has them
		}
	}
	if plain && rs.fast != nil && rs.fast.r != nil && !d.Allowed && d.Delay == 0 {
		n.fastRefuse(now, rs, key, rem) // the key's next plain checks may be refused on the fast path
	}
	return withPermit(CheckResult{Allowed: d.Allowed, Remaining: rem, Delay: d.Delay}, now, d)
}

// loopDriver is the node's host.Driver: the wall clock, the transport and
// the pending checks around the Host (loop goroutine). The Host's
// same-instant contract holds because the loop handles each event (a
// frame) before it runs the wake-ups due (runDue).
type loopDriver struct{ n *Node }

// Decided answers a pending check; an id not pending (decided already,
// or not this node's) is ignored. The time is that of the Host call
// (n.last: every call is made at the time n.now last returned).
func (ld loopDriver) Decided(rule int, d strategy.Decision) {
	n := ld.n
	rs := n.order[rule]
	p, ok := rs.pending[d.RequestID]
	if !ok {
		return
	}
	now := n.last
	delete(rs.pending, d.RequestID)
	rs.c.pending.Add(-1)
	p.answer(result{d: withPermit(CheckResult{Allowed: d.Allowed, Async: true, Wait: now - p.arrival, Remaining: -1, Delay: max(d.Delay-(now-p.arrival), 0)}, now, d)})
}

// Send hands a frame of rule to the transport, counted: at the end of the
// loop's turn (flushOut), or at once outside a turn.
func (ld loopDriver) Send(rule int, to strategy.NodeID, payload []byte) {
	n := ld.n
	rs := n.order[rule]
	rs.c.msgsSent.Add(1)
	rs.c.bytesSent.Add(int64(len(payload)))
	f := Frame{Rule: rs.rule.Name, From: n.self, Payload: payload}
	if !n.inTurn {
		if err := n.transport.Send(to, f); err != nil {
			rs.c.sendErrs.Add(1)
		}
		return
	}
	if n.outbox == nil {
		n.outbox = map[strategy.NodeID][]outFrame{}
	}
	q := n.outbox[to]
	if len(q) == 0 {
		n.outPeer = append(n.outPeer, to)
	}
	n.outbox[to] = append(q, outFrame{rs: rs, f: f})
}

// Schedule queues a wake-up for runDue's timer.
func (ld loopDriver) Schedule(rule int, at time.Duration) {
	ld.n.wakes.Push(wakeEntry{at: at, rule: rule})
}

// runDue ticks every rule with a wake-up due (once per rule), then sets
// the timer for the earliest one left.
func (n *Node) runDue() {
	for n.wakes.Len() > 0 {
		now := n.now()
		if next := n.wakes.Peek().at; next > now {
			if next != n.armed {
				n.armed = next
				n.timer.Reset(next - now)
			}
			return
		}
		var due []int
		for n.wakes.Len() > 0 && n.wakes.Peek().at <= now {
			w := n.wakes.Pop()
			if !slices.Contains(due, w.rule) {
				due = append(due, w.rule)
			}
		}
		slices.Sort(due)
		for _, i := range due {
			n.h.Tick(now, i)
		}
	}
}

// shutdown runs when the loop exits: it fails every pending check.
func (n *Node) shutdown() {
	n.timer.Stop()
	n.fastTimer.Stop()
	n.fastCloseAll(n.last, false) // dropped: a Check from now on goes to the closed loop
	for _, rs := range n.order {
		for id, p := range rs.pending {
			p.answer(result{d: CheckResult{Remaining: -1}, err: ErrClosed})
			delete(rs.pending, id)
			rs.c.pending.Add(-1)
		}
	}
	close(n.stopped)
	// Checks queued but never taken: their callers see n.stopped.
}

type wakeEntry struct {
	at   time.Duration
	rule int
}

// wakeBefore orders wake-ups by time, then rule (so rules due together
// are ticked in configuration order).
func wakeBefore(a, b wakeEntry) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	return a.rule < b.rule
}
