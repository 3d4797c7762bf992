package gdrl

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"

	peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/internal/peerbound"
)

// The strategy.Strategy calls (Start, Request, Tick, SetMembers,
// SetExpected, Receive) and the dispatch of peer messages to the files
// named for their concept: incarnation.go, exchange.go, transfer.go,
// replication.go, fence.go and heir.go.

// newInc draws an incarnation number: the start time in whole milliseconds
// in the high bits, so that a node's later incarnations are larger, and 20
// random bits (never all zero) below.
func newInc(now time.Duration, rnd *rand.Rand) uint64 {
	ms := uint64(max(now, 0) / time.Millisecond)
	return ms<<20 | (rnd.Uint64N(1<<20-1) + 1)
}

// splitUnits is member i's share of total under the 1/N rule in whole
// units: total/n, plus one for the first total mod n members.
func splitUnits(total int64, n, i int) int64 {
	s := total / int64(n)
	if int64(i) < total%int64(n) {
		s++
	}
	return s
}

// Start starts the node. A node started at time 0 is a founding member and
// takes its 1/N share of every key; a node started later joins with none
// (004 §3.3). A node started later announces its incarnation to every
// member (a hello, see sendHellos: a member may hold the record of its
// previous incarnation); a founding member has no previous incarnation
// (founding members are started at time 0 and nothing else, see
// "Keys and the 1/N rule"), so it sends none (ours: 180 of wrccdc's 852
// messages at 10 nodes were the founders' hellos and their
// acknowledgements). Every node sends its first record to its buddy.
func (g *GDRL) Start(now time.Duration, fx *strategy.Effects) {
	if g.started {
		return
	}
	g.started, g.startAt = true, now
	g.inc = newInc(now, g.rnd)
	if now == 0 {
		i, _ := slices.BinarySearch(g.members, g.self)
		g.dc = splitUnits(g.totalC, len(g.members), i)
		g.db = splitUnits(g.cfg.Burst, len(g.members), i) * UnitsPerToken
	}
	g.neighbours, _ = Neighbours(g.graph, g.degree, g.members, g.self) // checked in New
	if len(g.neighbours) > 0 {
		g.nextNb = g.rnd.IntN(len(g.neighbours))
	}
	g.setBuddy(successor(g.members, g.self))
	for _, m := range g.members {
		if m != g.self && now != 0 {
			g.helloTo[m] = true
		}
	}
	g.sendHellos(now, fx)
	g.nextTick = now + 1 + time.Duration(g.rnd.Int64N(int64(g.interval)))
	g.mark(partDefaults)
	g.flush(now, fx)
}

// Request decides req with the key's local token bucket (C_i, B_i) and
// counts its tokens as demand.
func (g *GDRL) Request(now time.Duration, req strategy.Request, fx *strategy.Effects) (strategy.Decision, bool) {
	d := strategy.Decision{RequestID: req.ID, Allowed: true}
	if req.Tokens <= 0 {
		return d, true
	}
	sh := g.materialize(req.Key, now)
	g.arrived(req.Key, sh, req.Tokens, now)
	g.clamp(sh, req.Arrival) // the tokens an allowance holds are not the bucket's
	if g.indicator == IndicatorResponse {
		wait, ok := sh.bkt.DelayN(req.Arrival, req.Tokens*g.perToken)
		g.countWait(sh, wait, ok && req.Tokens <= g.cfg.Burst)
	}
	d.Allowed = req.Tokens <= g.cfg.Burst && sh.bkt.AllowN(req.Arrival, req.Tokens*g.perToken)
	g.countRefused(sh, req.Tokens, d.Allowed)
	g.flush(now, fx)
	return d, true
}

// RequestWait decides req in waiting mode (strategy.Waiter; SRTM §5.2,
// the shaping mode, Appendix A eq. (2)): req.Tokens are reserved in the
// key's local token bucket (C_i, B_i), first come first served
// (bucket.ReserveN), when the wait until it holds them is at most
// maxWait, and the decision carries that wait; otherwise the request is
// refused and nothing is reserved. The tokens count as demand as in
// Request. The wait is the DRL penalty of SRTM §2.1 (Proposition 1) at
// this node's capacity share C_i.
//
// Transfers with reservations (ours): the level goes below 0 by at most
// C_i*maxWait (the reservations not yet due), and those reservations
// count on refill at C_i until they are due. So a node whose bucket for a
// key is in debt pays none of that key's capacity or burst in a transfer
// (pay) until the refill has repaid the debt (at most maxWait later): it
// never gives away tokens it does not have nor the rate its reservations
// count on, and sum C_i = C holds as before. A node receiving tokens
// while in debt drops them (addTokens), and capacity it receives does
// not repay the debt before its last reservation is due
// (bucket.Bucket.SetRateKeepingDue). A crash or a leave
// hands a node's shares to its heir at once: the reservations it made
// that are due after that (its clients proceed) pass up to C_i*maxWait
// tokens beyond the envelope.
func (g *GDRL) RequestWait(now time.Duration, req strategy.Request, maxWait time.Duration, fx *strategy.Effects) (strategy.Decision, bool) {
	if maxWait <= 0 {
		return g.Request(now, req, fx)
	}
	d := strategy.Decision{RequestID: req.ID, Allowed: true}
	if req.Tokens <= 0 {
		return d, true
	}
	sh := g.materialize(req.Key, now)
	g.arrived(req.Key, sh, req.Tokens, now) // counted in MemoryBytes' seen too (it was not)
	d.Allowed = false
	g.clamp(sh, req.Arrival)
	if req.Tokens <= g.cfg.Burst {
		d.Delay, d.Allowed = strategy.ReserveWithin(&sh.bkt, req.Arrival, req.Tokens*g.perToken, maxWait)
	}
	g.countReserved(sh, req, d)
	g.countRefused(sh, req.Tokens, d.Allowed)
	g.flush(now, fx)
	return d, true
}

// inDebt reports whether key's bucket holds reservations not yet due
// (its level is below 0 at now: RequestWait).
func (g *GDRL) inDebt(key string, now time.Duration) bool {
	sh := g.shares[key]
	if sh == nil {
		return false
	}
	g.clamp(sh, now)
	return sh.bkt.Tokens(now) < 0
}

// Tick closes an update interval when one is due (demand estimates, idle
// keys, one probe) and retransmits what has waited for `retransmit`.
func (g *GDRL) Tick(now time.Duration, fx *strategy.Effects) {
	if !g.started {
		return
	}
	if now >= g.nextTick {
		g.closeTick(now, fx)
	}
	g.retransmitTransfers(now, fx)
	if g.lazy {
		g.lazy, g.dirty = false, true
	}
	if !g.dirty && g.buddy != "" && g.acked < g.version && now-g.recordSent >= g.retransmit {
		g.sendRecord(now, fx)
	}
	g.retransmitFences(now, fx)
	g.drainFences(now, fx)
	g.heirFences(now, fx)
	if g.helloDue() && now-g.helloSent >= g.retransmit {
		g.sendHellos(now, fx)
	}
	g.flush(now, fx)
}

// closeTick closes the update interval that is due (demand estimates, idle
// keys and, unless leaving, one probe and an ask for the default share) and
// schedules the next one.
func (g *GDRL) closeTick(now time.Duration, fx *strategy.Effects) {
	g.closeInterval(now)
	if !g.leaving {
		if g.probeDue() {
			g.probe(now, fx)
		}
		g.askDefault(fx)
		g.offerDefault(fx)
	}
	for g.nextTick <= now {
		g.nextTick += g.interval
	}
}

// retransmitTransfers sends again every released transfer that has waited
// for `retransmit`.
func (g *GDRL) retransmitTransfers(now time.Duration, fx *strategy.Effects) {
	for _, t := range slices.Clone(g.outbox) {
		if t.released && now-t.lastSent >= g.retransmit {
			g.sendTransfer(now, t, fx)
		}
	}
}

// retransmitFences sends (again) the fence of every tombstone whose node is
// in view and that is neither lost, done nor left to an heir, when it was
// not sent yet or has waited for `retransmit`.
//
// A fence sent while its incarnation was out of view (on a frame of it,
// fenceLive) that is still unanswered after heirGrace, with the
// incarnation still out of view and the view unchanged for as long, is
// withdrawn (ours): the tombstone settles that incarnation's transfers
// again, as before the frame, and fences again when the incarnation is
// back in view or another frame of it arrives, naming every credit made
// meanwhile (an incarnation gives up an inheritance's amounts once and
// reconciles each credit once, however many fences name them). Such a
// fence is not retransmitted, and a dead incarnation never answers: a
// late frame of a node that had left or crashed, delivered after its heir
// inherited it (reordered), made the heir fence it, and the tombstone
// then settled nothing for good, so a transfer paid to the node stayed in
// flight (found by TestLeaveConservesProperty at 1,000 checks, no loss:
// an ask the leaver sent 50 ms before its leave reached its heir 6 ms
// after the heir inherited it; TestLateFrameAfterInheritance). A late
// answer to a withdrawn fence is ignored if it says alive (onFenceAck):
// the next fence is answered afresh. A fence sent while the incarnation
// was in view is kept as before (see "Limits" in the package
// documentation).
func (g *GDRL) retransmitFences(now time.Duration, fx *strategy.Effects) {
	for _, tb := range g.tombs {
		if !tb.lost && !tb.fenceDone && tb.heirTarget == "" && g.inView(tb.node) && (!tb.fencing || now-tb.fenceSent >= g.retransmit) {
			g.sendFenced(now, tb, fx)
		}
		if tb.fencing && tb.fencedAway && !tb.fenceDone && !g.inView(tb.node) && now-tb.fenceSent >= g.heirGrace() && now-g.viewAt >= g.heirGrace() {
			tb.fencing, tb.fencedAway = false, false
		}
	}
}

// SetMembers applies a new view: records of wards that left are inherited
// (best buddy, 001 §IV, 004 §3.2), the graph and, if it left, the buddy are
// chosen again, transfers to nodes that left go to their heirs, and
// tombstoned nodes that are back are fenced.
func (g *GDRL) SetMembers(now time.Duration, members []strategy.NodeID, fx *strategy.Effects) {
	old := g.setView(now, members)
	for n := range g.held {
		// The records of wards out of view travel in this node's own
		// record (recordMsg): a ward that left or came back changes it.
		if _, was := slices.BinarySearch(old, n); was != g.inView(n) {
			g.mark(partHeld)
		}
	}
	for _, n := range old {
		if rec := g.held[n]; rec != nil && rec.inView && g.gone(n) {
			g.inherit(now, n, rec, fx)
		}
	}
	for _, n := range g.heldNodes() {
		if g.inView(n) {
			g.held[n].inView = true
		}
	}
	g.neighbours, _ = Neighbours(g.graph, g.degree, g.members, g.self)
	if g.buddy == "" || !g.inView(g.buddy) {
		if g.conserve && g.buddy != "" && g.buddy != g.self {
			g.exBuddies[g.buddy] = true
		}
		g.setBuddy(successor(g.members, g.self))
	}
	g.helloNewcomers()
	g.resendToGone(now, fx)
	g.fenceReturned(now, fx)
	g.drainFences(now, fx)
	g.heirFences(now, fx)
	g.flush(now, fx)
}

// setView makes members (sorted, without duplicates, with this node) the
// view, noting when it changed, and returns the view before.
func (g *GDRL) setView(now time.Duration, members []strategy.NodeID) []strategy.NodeID {
	view := slices.Clone(members)
	slices.Sort(view)
	view = slices.Compact(view)
	if i, ok := slices.BinarySearch(view, g.self); !ok {
		view = slices.Insert(view, i, g.self)
	}
	old := g.members
	if !slices.Equal(old, view) {
		g.viewAt = now
		g.offerWait = 0 // every split changed
	}
	g.members = view
	return old
}

// helloNewcomers marks for a hello, under conserve, the members that have
// not acknowledged one of this incarnation and the former buddies back in
// view.
func (g *GDRL) helloNewcomers() {
	for _, m := range g.members {
		// A member that was not in the view when this incarnation
		// started (across a netsplit, say) gets its hello when it comes
		// into view: it may hold the record of this node's previous
		// incarnation (under conserve it did not inherit it when that
		// incarnation failed), and nothing else may tell it of the restart.
		// A founding member (started at 0) has no previous incarnation.
		if g.conserve && g.startAt != 0 && m != g.self && !g.helloAcked[m] {
			g.helloTo[m] = true
		}
	}
	for n := range g.exBuddies {
		// A former buddy back in view still holds this incarnation's
		// record as it was when it left (under conserve it did not
		// inherit it): a hello, which names the new buddy, makes it drop
		// that stale copy (see observe), which it would otherwise inherit
		// at this incarnation's next restart, beside the new buddy.
		if g.inView(n) {
			if n != g.buddy {
				g.helloTo[n] = true
			}
			delete(g.exBuddies, n)
		}
	}
}

// fenceReturned fences the tombstoned nodes that are back in view (unless
// their fence is lost, done, under way or left to an heir) and forgets
// which heirs out of view were asked.
func (g *GDRL) fenceReturned(now time.Duration, fx *strategy.Effects) {
	for _, tb := range g.tombs {
		if !tb.lost && !tb.fenceDone && !tb.fencing && tb.heirTarget == "" && g.inView(tb.node) {
			g.sendFenced(now, tb, fx)
		}
		for n := range tb.heirAsked {
			if !g.inView(n) {
				delete(tb.heirAsked, n) // ask it again when it is back: it may have inherited meanwhile
			}
		}
		for n := range tb.heirLater {
			if !g.inView(n) {
				delete(tb.heirLater, n) // likewise: it may have been fenced out of it meanwhile
			}
		}
	}
}

// SetExpected records the last agreed members (strategy.Conserver; ours,
// see "Split brain" in the package documentation). Under
// conserve, a ward that is out of the view and no longer expected (it
// left, or reconnect_timeout passed) is inherited now, and transfers to
// such a member go to its heirs; under available it changes nothing.
func (g *GDRL) SetExpected(now time.Duration, expected []strategy.NodeID, fx *strategy.Effects) {
	g.expected = slices.Sorted(slices.Values(expected))
	g.expected = slices.Compact(g.expected)
	if !g.conserve {
		return
	}
	for _, n := range g.heldNodes() {
		if rec := g.held[n]; rec != nil && rec.inView && g.gone(n) {
			g.inherit(now, n, rec, fx)
		}
	}
	g.resendToGone(now, fx)
	g.flush(now, fx)
}

// resendToGone sends again every released transfer whose destination is
// gone (see gone) at once, rather than at its retransmit time: to the
// destination's heir, or settled here when this node is that heir
// (sendTransfer).
func (g *GDRL) resendToGone(now time.Duration, fx *strategy.Effects) {
	for _, t := range slices.Clone(g.outbox) {
		if t.released && g.gone(t.id.Dst) {
			g.sendTransfer(now, t, fx)
		}
	}
}

// StateBytes is the size of this node's state in bytes: its full share
// record in its wire encoding, plus the records it holds for its wards,
// plus the messages held back until its buddy holds a record version, plus
// per explicit key the bucket and demand estimate (30 bytes), plus per key
// seen within seenFactor (10) idle windows its name and time (8 bytes).
func (g *GDRL) StateBytes() int {
	n := proto.Size(g.recordMsg(0))
	for _, w := range g.heldNodes() {
		n += proto.Size(g.held[w].msg())
	}
	for _, m := range g.gated {
		n += len(m.payload)
	}
	for k := range g.seen {
		n += len(k) + 8
	}
	return n + 30*len(g.shares)
}

// Receive handles a peer message. Errors: a payload that does not decode or
// fails validation (see validate); errors change no state.
func (g *GDRL) Receive(now time.Duration, from strategy.NodeID, payload []byte, fx *strategy.Effects) error {
	m, err := g.decode(now, from, payload)
	if err != nil {
		return err
	}
	if !g.started {
		return nil
	}
	dead := g.observe(now, from, m.Inc, strategy.NodeID(m.Buddy), fx)
	switch b := m.Body.(type) {
	case *peerv1.GdrlMessage_Transfer:
		g.onTransfer(now, from, transferFrom(b.Transfer), b.Transfer.Resolve, b.Transfer.DstNewInc, fx)
	case *peerv1.GdrlMessage_TransferAck:
		g.onTransferAck(now, from, m.Inc, b.TransferAck, fx)
	case *peerv1.GdrlMessage_Fenced:
		g.onFenced(now, from, b.Fenced, fx)
	case *peerv1.GdrlMessage_FenceAck:
		g.onFenceAck(now, from, b.FenceAck, fx)
	default:
		if !dead {
			g.receiveLive(now, from, m, fx)
		}
	}
	g.flush(now, fx)
	return nil
}

// decode decodes and validates a peer message (see Receive's errors).
func (g *GDRL) decode(now time.Duration, from strategy.NodeID, payload []byte) (*peerv1.GdrlMessage, error) {
	var m peerv1.GdrlMessage
	if err := proto.Unmarshal(payload, &m); err != nil {
		return nil, fmt.Errorf("gdrl: message from %s does not decode: %w", from, err)
	}
	if err := g.validate(from, &m); err != nil {
		return nil, err
	}
	// An incarnation is its start time in ms above 20 random bits: one
	// from after now (plus the clock skew allowed) is not a real start, and
	// would make the sender's real later incarnations look dead (ours:
	// peer values are bounded).
	if limit := (uint64(max(now+peerbound.ClockSkew, 0)/time.Millisecond) + 1) << 20; m.Inc >= limit {
		return nil, fmt.Errorf("gdrl: message from %s: incarnation %d starts after now %v", from, m.Inc, now)
	}
	return &m, nil
}

// receiveLive handles the messages that count only from a live
// incarnation of the sender (not one observe found dead): probes, asks,
// records, record acks and hellos.
func (g *GDRL) receiveLive(now time.Duration, from strategy.NodeID, m *peerv1.GdrlMessage, fx *strategy.Effects) {
	switch b := m.Body.(type) {
	case *peerv1.GdrlMessage_Probe:
		g.onProbe(now, from, m.Inc, b.Probe, fx)
	case *peerv1.GdrlMessage_Ask:
		g.onAsk(now, from, m.Inc, b.Ask)
	case *peerv1.GdrlMessage_Record:
		g.onRecord(now, from, m.Inc, b.Record, fx)
	case *peerv1.GdrlMessage_RecordAck:
		g.onRecordAck(now, from, m.Inc, b.RecordAck, fx)
	case *peerv1.GdrlMessage_Hello:
		g.dropStale(from, m.Inc, strategy.NodeID(m.Buddy), b.Hello)
		g.onHello(from, m.Inc, b.Hello)
	}
}

func (g *GDRL) encode(m *peerv1.GdrlMessage) []byte {
	m.Inc, m.Buddy = g.inc, string(g.buddy)
	b, err := proto.Marshal(m)
	if err != nil {
		panic(fmt.Sprintf("gdrl: marshal: %v", err)) // cannot fail for these message types
	}
	return b
}
