package gdrl

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"time"

	"google.golang.org/protobuf/proto"

	peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/internal/peerbound"
)

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
// (004 §3.3). It announces its incarnation to every member and sends its
// first record to its buddy.
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
		if m != g.self {
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
	if sh.reqTokens < 1<<62-req.Tokens {
		sh.reqTokens += req.Tokens
	}
	sh.lastActive, sh.everActive = max(sh.lastActive, now), true
	g.seen[req.Key] = sh.lastActive
	d.Allowed = req.Tokens <= g.cfg.Burst && sh.bkt.AllowN(req.Arrival, req.Tokens*g.perToken)
	g.flush(now, fx)
	return d, true
}

// Tick closes an update interval when one is due (demand estimates, idle
// keys, one probe) and retransmits what has waited for `retransmit`.
func (g *GDRL) Tick(now time.Duration, fx *strategy.Effects) {
	if !g.started {
		return
	}
	if now >= g.nextTick {
		g.closeInterval(now)
		if !g.leaving {
			g.probe(now, fx)
			g.askDefault(fx)
		}
		for g.nextTick <= now {
			g.nextTick += g.interval
		}
	}
	for _, t := range slices.Clone(g.outbox) {
		if t.released && now-t.lastSent >= g.retransmit {
			g.sendTransfer(now, t, fx)
		}
	}
	if g.lazy {
		g.lazy, g.dirty = false, true
	}
	if !g.dirty && g.buddy != "" && g.acked < g.version && now-g.recordSent >= g.retransmit {
		g.sendRecord(now, fx)
	}
	for _, tb := range g.tombs {
		if !tb.fenceDone && tb.heirTarget == "" && g.inView(tb.node) && (!tb.fencing || now-tb.fenceSent >= g.retransmit) {
			g.sendFenced(now, tb, fx)
		}
	}
	g.drainFences(now, fx)
	g.heirFences(now, fx)
	if g.helloDue() && now-g.helloSent >= g.retransmit {
		g.sendHellos(now, fx)
	}
	g.flush(now, fx)
}

// SetMembers applies a new view: records of wards that left are inherited
// (best buddy, 001 §IV, 004 §3.2), the graph and, if it left, the buddy are
// chosen again, transfers to nodes that left go to their heirs, and
// tombstoned nodes that are back are fenced.
func (g *GDRL) SetMembers(now time.Duration, members []strategy.NodeID, fx *strategy.Effects) {
	view := slices.Clone(members)
	slices.Sort(view)
	view = slices.Compact(view)
	if i, ok := slices.BinarySearch(view, g.self); !ok {
		view = slices.Insert(view, i, g.self)
	}
	old := g.members
	if !slices.Equal(old, view) {
		g.viewAt = now
	}
	g.members = view
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
	for _, m := range g.members {
		// A member that was not in the view when this incarnation
		// started (across a netsplit, say) gets its hello when it comes
		// into view: it may hold the record of this node's previous
		// incarnation (under conserve it did not inherit it when that
		// incarnation failed), and nothing else may tell it of the restart.
		if g.conserve && m != g.self && !g.helloAcked[m] {
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
	g.resendToGone(now, fx)
	for _, tb := range g.tombs {
		if !tb.fenceDone && !tb.fencing && tb.heirTarget == "" && g.inView(tb.node) {
			g.sendFenced(now, tb, fx)
		}
		for n := range tb.heirAsked {
			if !g.inView(n) {
				delete(tb.heirAsked, n) // ask it again when it is back: it may have inherited meanwhile
			}
		}
	}
	g.drainFences(now, fx)
	g.heirFences(now, fx)
	g.flush(now, fx)
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
	var m peerv1.GdrlMessage
	if err := proto.Unmarshal(payload, &m); err != nil {
		return fmt.Errorf("gdrl: message from %s does not decode: %w", from, err)
	}
	if err := g.validate(from, &m); err != nil {
		return err
	}
	// An incarnation is its start time in ms above 20 random bits: one
	// from after now (plus the clock skew allowed) is not a real start, and
	// would make the sender's real later incarnations look dead (ours:
	// peer values are bounded).
	if limit := (uint64(max(now+peerbound.ClockSkew, 0)/time.Millisecond) + 1) << 20; m.Inc >= limit {
		return fmt.Errorf("gdrl: message from %s: incarnation %d starts after now %v", from, m.Inc, now)
	}
	if !g.started {
		return nil
	}
	dead := g.observe(now, from, m.Inc, strategy.NodeID(m.Buddy), fx)
	switch b := m.Body.(type) {
	case *peerv1.GdrlMessage_Probe:
		if !dead {
			g.onProbe(now, from, m.Inc, b.Probe, fx)
		}
	case *peerv1.GdrlMessage_Ask:
		if !dead {
			g.onAsk(now, from, m.Inc, b.Ask)
		}
	case *peerv1.GdrlMessage_Transfer:
		g.onTransfer(now, from, transferFrom(b.Transfer), b.Transfer.Resolve, b.Transfer.DstNewInc, fx)
	case *peerv1.GdrlMessage_TransferAck:
		g.onTransferAck(now, from, m.Inc, b.TransferAck, fx)
	case *peerv1.GdrlMessage_Record:
		if !dead {
			g.onRecord(now, from, m.Inc, b.Record, fx)
		}
	case *peerv1.GdrlMessage_RecordAck:
		if !dead {
			g.onRecordAck(now, from, m.Inc, b.RecordAck, fx)
		}
	case *peerv1.GdrlMessage_Fenced:
		g.onFenced(now, from, b.Fenced)
	case *peerv1.GdrlMessage_FenceAck:
		g.onFenceAck(now, from, b.FenceAck, fx)
	case *peerv1.GdrlMessage_Hello:
		if !dead {
			g.dropStale(from, m.Inc, strategy.NodeID(m.Buddy), b.Hello)
			g.onHello(from, m.Inc, b.Hello)
		}
	}
	g.flush(now, fx)
	return nil
}

// ---- Incarnations ----

// observe records what a message says about its sender. It reports whether
// the message comes from an incarnation older than one already seen (a
// dead one: only its transfers and acknowledgements still count).
func (g *GDRL) observe(now time.Duration, from strategy.NodeID, inc uint64, buddy strategy.NodeID, fx *strategy.Effects) bool {
	if from == g.self {
		return inc != g.inc
	}
	p := g.peers[from]
	switch {
	case p == nil:
		p = &peerInfo{inc: inc}
		g.peers[from] = p
		if rec := g.held[from]; rec != nil && rec.inc < inc {
			g.inherit(now, from, rec, fx)
		}
	case inc < p.inc:
		return true
	case inc > p.inc:
		g.noteNewInc(now, from, inc, fx)
	}
	if buddy != "" {
		p.buddy, p.buddyInc = buddy, g.incOf(buddy)
	}
	for _, tb := range g.tombs {
		if tb.node == from && tb.inc == inc && !tb.fenceDone && !tb.fencing && tb.heirTarget == "" {
			g.sendFenced(now, tb, fx)
		}
	}
	for _, tb := range g.draining {
		if tb.node == from && tb.inc == inc && !tb.fencing {
			g.sendDrain(now, tb, fx)
		}
	}
	return false
}

// sendHellos announces this incarnation to the members in view that have
// not acknowledged it. The hello is how a member learns of a restart that
// was faster than its failure detector: if the member holds the old
// incarnation's record (it was its buddy), it inherits it then, and if it
// had the node for its buddy, it replicates its own record afresh. The new
// incarnation need not otherwise ever talk to it (its old buddy is not
// necessarily its new one, and an idle node probes nobody), so a lost hello
// would leave the old incarnation's share without an heir: it is repeated
// every `retransmit` until acknowledged.
func (g *GDRL) sendHellos(now time.Duration, fx *strategy.Effects) {
	g.helloSent = now
	for _, m := range g.members {
		if g.helloTo[m] {
			fx.Send(m, g.encode(&peerv1.GdrlMessage{Body: &peerv1.GdrlMessage_Hello{Hello: &peerv1.GdrlHello{}}}))
		}
	}
}

// helloDue reports whether a member in view has not acknowledged this
// incarnation's hello.
func (g *GDRL) helloDue() bool {
	for m := range g.helloTo {
		if g.inView(m) {
			return true
		}
	}
	return false
}

// dropStale drops the record this node holds of incarnation inc of from
// when from's hello names another buddy (under conserve: from chose that
// buddy while this node was out of its view, and says hello when it is
// back, see SetMembers). That record is stale, and inheriting it at from's
// next restart would count what it held then beside what its new buddy
// inherits. Only a hello does this: other frames from before from chose
// its new buddy may arrive late and name this node's predecessor.
func (g *GDRL) dropStale(from strategy.NodeID, inc uint64, buddy strategy.NodeID, h *peerv1.GdrlHello) {
	if !g.conserve || h.Ack != 0 || buddy == "" || buddy == g.self {
		return
	}
	if rec := g.held[from]; rec != nil && rec.inc == inc {
		delete(g.held, from)
	}
}

// onHello answers a hello with an acknowledgement naming the incarnation
// heard of, once this node's buddy holds what the hello changed here (an
// inherited record), and takes an acknowledgement of this incarnation's
// hello.
func (g *GDRL) onHello(from strategy.NodeID, fromInc uint64, h *peerv1.GdrlHello) {
	if from == g.self {
		return
	}
	if h.Ack == 0 {
		g.sendGated(from, g.encode(&peerv1.GdrlMessage{Body: &peerv1.GdrlMessage_Hello{Hello: &peerv1.GdrlHello{Ack: fromInc}}}))
		return
	}
	if h.Ack == g.inc {
		delete(g.helloTo, from)
		g.helloAcked[from] = true
	}
}

// noteNewInc handles evidence that node runs incarnation inc, newer than
// any seen: its older incarnations are dead.
func (g *GDRL) noteNewInc(now time.Duration, node strategy.NodeID, inc uint64, fx *strategy.Effects) {
	p := g.peers[node]
	if p == nil {
		p = &peerInfo{}
		g.peers[node] = p
	}
	if inc <= p.inc {
		return
	}
	if p.inc != 0 && p.buddy != "" {
		if p.past == nil {
			p.past = map[uint64]strategy.NodeID{}
		}
		p.past[p.inc] = p.buddy
	}
	p.inc, p.buddy, p.buddyInc = inc, "", 0
	for k := range g.seqTo {
		if k.src == node && k.inc < inc {
			delete(g.seqTo, k) // no new transfer goes to a dead incarnation
		}
	}
	if rec := g.held[node]; rec != nil && rec.inc < inc {
		g.inherit(now, node, rec, fx)
	}
	if node == g.buddy && g.buddyInc != inc {
		// The buddy restarted and lost our record: replicate afresh.
		g.buddyInc = inc
		g.epoch++
		g.acked, g.sentVer = 0, 0
		g.dirty = true
	}
	for _, t := range slices.Clone(g.outbox) {
		if t.id.Dst == node && t.id.DstInc < inc {
			t.newInc = max(t.newInc, inc)
			if t.released {
				g.sendTransfer(now, t, fx)
			}
		}
	}
}

// ---- Exchanges ----

// probe sends this node's indicator inputs to the next neighbour: one
// message per interval, batching the keys whose inputs changed materially
// since they were last sent to that neighbour (shares, activity, a demand
// estimate or its noise off by a fifth), or were last sent `refresh` ago
// (lost probes). The probe is not complete, so the neighbour exchanges only
// the listed keys: a key whose inputs did not change at either end since
// the pair last evaluated it has nothing new to move, and a change at the
// other end travels in that node's own probe. Keys idle at the default
// share are never sent, so an idle cluster is silent.
func (g *GDRL) probe(now time.Duration, fx *strategy.Effects) {
	if len(g.neighbours) == 0 {
		return
	}
	nb := g.neighbours[g.nextNb%len(g.neighbours)]
	g.nextNb = (g.nextNb + 1) % len(g.neighbours)
	if g.sent == nil {
		g.sent = map[strategy.NodeID]map[string]sentKey{}
	}
	for n := range g.sent {
		if !slices.Contains(g.neighbours, n) {
			delete(g.sent, n)
		}
	}
	sent := g.sent[nb]
	if sent == nil {
		sent = map[string]sentKey{}
		g.sent[nb] = sent
	}
	for k := range sent {
		if g.shares[k] == nil {
			delete(sent, k)
		}
	}
	if len(g.shares) == 0 {
		return
	}
	var keys []string
	msgs := map[string]*peerv1.GdrlShare{} // per listed key: its inputs now
	for _, k := range g.sortedKeys() {
		s := g.shareMsg(k, now)
		if !s.Active && s.Capacity == g.dc && s.Burst == g.db {
			delete(sent, k)
			continue
		}
		if old, ok := sent[k]; ok && now-old.at < g.refresh && !old.differs(s) {
			continue
		}
		keys = append(keys, k)
		msgs[k] = s
	}
	if len(keys) == 0 {
		return // nothing new to exchange
	}
	if len(keys) > g.maxKeys {
		start := sort.SearchStrings(keys, g.cursor)
		keys = append(keys[start:], keys[:start]...)[:g.maxKeys]
		g.cursor = keys[len(keys)-1] + "\x00"
		sort.Strings(keys)
	}
	p := &peerv1.GdrlProbe{DefaultCapacity: g.dc, DefaultBurst: g.db}
	for _, k := range keys {
		s := msgs[k]
		sent[k] = sentKey{c: s.Capacity, b: s.Burst, demand: s.Demand, noise: s.Noise, recent: s.Recent, active: s.Active, seen: s.Seen, at: now}
		if s.Capacity == 0 && s.Burst == 0 && !s.Active {
			p.Empty = append(p.Empty, k)
		} else {
			p.Shares = append(p.Shares, s)
		}
	}
	fx.Send(nb, g.encode(&peerv1.GdrlMessage{Body: &peerv1.GdrlMessage_Probe{Probe: p}}))
}

// sentKey is a key's indicator inputs as last sent to a neighbour.
type sentKey struct {
	c, b          int64
	demand, noise float32
	recent        float32
	active, seen  bool
	at            time.Duration
}

// differs reports whether s is materially different from what was sent:
// other shares or activity, a demand estimate up by a fifth or down by
// half, a noise estimate doubled or halved. (A falling demand only makes
// the node give capacity away, which may wait.)
func (o sentKey) differs(s *peerv1.GdrlShare) bool {
	return o.c != s.Capacity || o.b != s.Burst || o.active != s.Active || o.seen != s.Seen ||
		s.Demand > 1.2*o.demand || s.Demand < 0.5*o.demand ||
		s.Noise > 2*o.noise || s.Noise < 0.5*o.noise ||
		s.Recent > 1.2*o.recent || s.Recent < 0.5*o.recent
}

// onProbe answers a neighbour's probe: per key, the pairwise update (001
// Appendix, Theorem 2) gives the flow; this node pays what it owes and, for
// the keys where the prober owes, sends back its own indicator inputs (an
// ask) so that the prober recomputes the flow with its current shares and
// pays. A leaving node answers no probe (it takes part in no exchange).
func (g *GDRL) onProbe(now time.Duration, from strategy.NodeID, fromInc uint64, p *peerv1.GdrlProbe, fx *strategy.Effects) {
	if !g.inView(from) || from == g.self || g.leaving {
		return
	}
	theirs := map[string]*peerv1.GdrlShare{}
	var keys []string
	for _, s := range p.Shares {
		theirs[s.Key] = s
		keys = append(keys, s.Key)
	}
	for _, k := range p.Empty {
		theirs[k] = &peerv1.GdrlShare{Key: k}
		keys = append(keys, k)
	}
	if p.Complete {
		for k := range g.shares {
			if theirs[k] == nil {
				keys = append(keys, k)
			}
		}
	}
	sort.Strings(keys)
	var pay []item
	ask := &peerv1.GdrlAsk{ToInc: fromInc, DefaultCapacity: g.dc, DefaultBurst: g.db}
	for _, k := range keys {
		c, b := g.flow(theirSide(from, p.DefaultCapacity, p.DefaultBurst, theirs[k]), g.mySide(k, now))
		if pc, pb := max(c, 0), max(b, 0); pc > 0 || pb > 0 {
			pay = append(pay, item{key: k, c: pc, b: pb})
		}
		if c < 0 || b < 0 {
			ask.Shares = append(ask.Shares, g.shareMsg(k, now))
		}
	}
	if len(pay) > 0 {
		g.pay(now, from, fromInc, pay)
	}
	if len(ask.Shares) > 0 {
		fx.Send(from, g.encode(&peerv1.GdrlMessage{Body: &peerv1.GdrlMessage_Ask{Ask: ask}}))
	}
}

// onAsk pays what the update owes the asker, recomputed with this node's
// current shares (so that concurrent exchanges do not overshoot). A
// leaving node pays nothing: everything it holds goes to its buddy.
func (g *GDRL) onAsk(now time.Duration, from strategy.NodeID, fromInc uint64, a *peerv1.GdrlAsk) {
	if a.ToInc != g.inc || !g.inView(from) || from == g.self || g.leaving {
		return
	}
	var pay []item
	for _, s := range a.Shares {
		c, b := g.flow(theirSide(from, a.DefaultCapacity, a.DefaultBurst, s), g.mySide(s.Key, now))
		if pc, pb := max(c, 0), max(b, 0); pc > 0 || pb > 0 {
			pay = append(pay, item{key: s.Key, c: pc, b: pb})
		}
	}
	g.pay(now, from, fromInc, pay)
	g.payDefault(now, from, fromInc, a.DefaultCapacity, a.DefaultBurst)
}

// mySide is this node's end of an exchange for key. An idle key's demand
// counts as none (the flow rules never use it).
func (g *GDRL) mySide(key string, now time.Duration) side {
	me := side{id: g.self, c: g.dc, b: g.db, dc: g.dc, db: g.db}
	if at, ok := g.seen[key]; ok && now-at < seenFactor*g.idle {
		me.seen = true
	}
	if sh := g.shares[key]; sh != nil {
		me.c, me.b, me.active = sh.c, sh.b, g.active(sh, now)
		if me.active {
			me.demand = float64(float32(sh.demand)) // as the peer sees it
			me.noise = float64(float32(g.noise(sh)))
			me.recent = float64(float32(g.recent(sh)))
		}
	}
	return me
}

// theirSide is a peer's end of an exchange for one key, from its message.
func theirSide(id strategy.NodeID, dc, db int64, s *peerv1.GdrlShare) side {
	them := side{id: id, c: dc, b: db, dc: dc, db: db}
	if s != nil {
		them.seen = s.Seen || s.Active
		them.c, them.b, them.active = s.Capacity, s.Burst, s.Active
		if s.Active {
			them.demand, them.noise, them.recent = float64(s.Demand), float64(s.Noise), float64(s.Recent)
		}
	}
	return them
}

// shareMsg is key's indicator inputs at this node.
func (g *GDRL) shareMsg(key string, now time.Duration) *peerv1.GdrlShare {
	me := g.mySide(key, now)
	return &peerv1.GdrlShare{Key: key, Capacity: me.c, Burst: me.b, Demand: float32(me.demand), Noise: float32(me.noise), Recent: float32(me.recent), Active: me.active, Seen: me.seen}
}

// ---- Transfers ----

// pay debits up to the given amounts (capped at what this node holds, and
// at the rule's (C, B) per key) and
// queues one transfer to (to, toInc), sent once the buddy holds a record
// with it. Nothing is paid while an earlier transfer to the same node is
// unacknowledged (stop and wait).
func (g *GDRL) pay(now time.Duration, to strategy.NodeID, toInc uint64, items []item) {
	if to == g.self {
		return
	}
	if g.outstandingTo(to) {
		// Stop and wait: send these keys again in the next probe to the
		// payee, so that the pair evaluates them again.
		for _, it := range items {
			delete(g.sent[to], it.key)
		}
		return
	}
	var out []item
	for _, it := range items {
		// At most (C, B) per key: what a peer accepts in a transfer. A
		// node may hold more than C during a split brain (see "Split
		// brain" in the package documentation); the rest moves later.
		c := min(it.c, max(g.CapacityShare(it.key), 0), g.totalC)
		b := min(it.b, max(g.BurstShare(it.key), 0), g.totalB)
		if c <= 0 && b <= 0 {
			continue
		}
		out = append(out, item{key: it.key, c: c, b: b, t: g.shrink(it.key, c, b, now)})
	}
	if len(out) == 0 {
		return
	}
	g.queueTransfer(to, toInc, out)
}

// queueTransfer puts a transfer of items to (to, toInc) in the outbox,
// numbered next on that link; it is released once the buddy holds a
// record that includes it (gate).
func (g *GDRL) queueTransfer(to strategy.NodeID, toInc uint64, items []item) {
	link := srcKey{to, toInc}
	g.seqTo[link]++
	g.outbox = append(g.outbox, &transfer{
		id:    TransferID{Src: g.self, SrcInc: g.inc, Dst: to, DstInc: toInc, Seq: g.seqTo[link]},
		items: items,
		gate:  g.version + 1,
	})
	g.mark(partOutbox)
}

func (g *GDRL) outstandingTo(dst strategy.NodeID) bool {
	for _, t := range g.outbox {
		if t.id.Dst == dst && t.id.Src == g.self && t.id.SrcInc == g.inc {
			return true
		}
	}
	return false
}

// sendTransfer sends (or re-sends) t: to its destination while that is in
// view with the incarnation t was meant for, otherwise to the
// destination's heir. A transfer this node can settle itself (to itself,
// or to an incarnation it inherited) is settled at once.
func (g *GDRL) sendTransfer(now time.Duration, t *transfer, fx *strategy.Effects) {
	t.lastSent = now
	newInc := t.newInc
	if p := g.peers[t.id.Dst]; p != nil && p.inc > t.id.DstInc {
		newInc = max(newInc, p.inc)
	}
	gone := newInc != 0 || g.gone(t.id.Dst)
	if t.id.Dst == g.self {
		if t.id.DstInc == g.inc {
			g.credit(now, g.applied, partApplied, t.id, t.items)
			g.removeTransfer(t)
			return
		}
		gone = true
	}
	msg := &peerv1.GdrlTransfer{Id: idMsg(t.id), Items: itemsMsg(t.items)}
	if !gone {
		fx.Send(t.id.Dst, g.encode(&peerv1.GdrlMessage{Body: &peerv1.GdrlMessage_Transfer{Transfer: msg}}))
		return
	}
	heirs := g.heirsOf(t)
	msg.Resolve, msg.DstNewInc = true, newInc
	for _, heir := range heirs {
		switch heir {
		case "":
		case g.self:
			g.settleAsHeir(now, t)
			if !g.hasTransfer(t.id) {
				return // settled here
			}
		default:
			fx.Send(heir, g.encode(&peerv1.GdrlMessage{Body: &peerv1.GdrlMessage_Transfer{Transfer: msg}}))
		}
	}
}

// heirsOf is the likely holders of the tombstone of t's destination
// incarnation, this node first if it is one. What this node knows of the
// destination's buddy may be out of date (see heirOf), so sendTransfer
// tries each; only the holder settles the transfer, the others ignore it.
func (g *GDRL) heirsOf(t *transfer) []strategy.NodeID {
	heirs := []strategy.NodeID{g.heirOf(t.id.Dst, t.id.DstInc, false), g.heirOf(t.id.Dst, t.id.DstInc, true)}
	if !g.inView(t.id.Dst) {
		// Its buddy left its view before it left: it chose its ring
		// successor, which inherited it.
		heirs = append(heirs, successor(g.members, t.id.Dst))
	}
	slices.Sort(heirs)
	heirs = slices.Compact(heirs)
	slices.SortStableFunc(heirs, func(a, b strategy.NodeID) int { // this node first
		return cmpBool(b == g.self, a == g.self)
	})
	return heirs
}

// settlesHere reports whether sending t now would settle it at this node
// and send nothing: it is meant for this incarnation, or its destination
// is gone and this node holds the tombstone that settles it.
func (g *GDRL) settlesHere(t *transfer) bool {
	if t.id.Dst == g.self && t.id.DstInc == g.inc {
		return true
	}
	newInc := t.newInc
	if p := g.peers[t.id.Dst]; p != nil && p.inc > t.id.DstInc {
		newInc = max(newInc, p.inc)
	}
	if t.id.Dst != g.self && newInc == 0 && !g.gone(t.id.Dst) {
		return false
	}
	if heirs := g.heirsOf(t); len(heirs) == 0 || heirs[0] != g.self {
		return false
	}
	tb := g.tombFor(t.id.Dst, t.id.DstInc)
	return tb != nil && !(tb.fencing && !tb.fenceDone) && tb.heirTarget == ""
}

// cmpBool orders false before true.
func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case !a:
		return -1
	}
	return 1
}

// settleAsHeir credits t, meant for an incarnation this node inherited,
// unless that incarnation had credited it, and drops it from the outbox.
func (g *GDRL) settleAsHeir(now time.Duration, t *transfer) {
	if g.creditAsHeir(now, g.tombFor(t.id.Dst, t.id.DstInc), t) {
		g.removeTransfer(t)
	}
}

// creditAsHeir credits t against tb, the tombstone of the incarnation t
// was meant for, unless that incarnation had credited it (then t is kept
// among the transfers settled on its behalf). It reports false, crediting
// nothing, when t is not (yet) this node's to settle: no tombstone, or one
// whose fence is in progress.
func (g *GDRL) creditAsHeir(now time.Duration, tb *tombstone, t *transfer) bool {
	if tb == nil || (tb.fencing && !tb.fenceDone) || tb.heirTarget != "" {
		return false
	}
	if g.credit(now, tb.applied, partTombs, t.id, t.items) {
		c := t.clone()
		c.creditedAt = g.version + 1
		tb.onBehalf = append(tb.onBehalf, c)
	}
	return true
}

// heirOf is the live node that holds, or will inherit, the record of
// node's incarnation inc: the buddy that incarnation last announced (the
// node's ring successor if unknown), followed through heirs that are gone
// themselves, or the ring successor of the last one if they lead back to
// one already followed. "" if none is known.
//
// A buddy that has restarted since the announcement (a newer incarnation
// of it is known) may not hold the record: if the node saw it leave its
// view before it came back, the node chose a new buddy, most likely the
// old incarnation's heir (both are the ring successor once the old
// incarnation left the node's view); if the restart was faster than the
// failure detector, the node replicated afresh to the new incarnation.
// Which one, a payer whose last news of the node predates the restart
// cannot tell: with restarted, the old incarnation's heir is followed
// (the first case), otherwise the new incarnation is taken (the second),
// and sendTransfer tries both (and the ring successor).
func (g *GDRL) heirOf(node strategy.NodeID, inc uint64, restarted bool) strategy.NodeID {
	seen := map[strategy.NodeID]bool{}
	for cur := node; !seen[cur]; {
		seen[cur] = true
		var b strategy.NodeID
		var bInc uint64 // b's incarnation when announced, if known
		p := g.peers[cur]
		switch {
		case p != nil && inc != 0 && inc != p.inc && p.past[inc] != "":
			b = p.past[inc]
		case p != nil && (inc == 0 || inc == p.inc) && p.buddy != "":
			b, bInc = p.buddy, p.buddyInc
		default:
			b = successor(g.members, cur)
		}
		if restarted && bInc != 0 && g.incOf(b) > bInc && !seen[b] {
			cur, inc = b, bInc // restarted since: its old incarnation's heir
			continue
		}
		if b != "" && b != g.self && seen[b] && !g.inView(b) {
			// A cycle of gone buddies (two nodes that chose each other,
			// as a founder that started alone and its first joiner do,
			// of which this node has not heard the last choice): the
			// one gone last chose its ring successor.
			b = successor(g.members, cur)
		}
		if b == g.self || (b != "" && g.inView(b)) {
			return b
		}
		if b == "" {
			return ""
		}
		cur, inc = b, 0
	}
	return ""
}

// incOf is node's incarnation as far as this node knows (0 if unknown).
func (g *GDRL) incOf(node strategy.NodeID) uint64 {
	if node == g.self {
		return g.inc
	}
	if p := g.peers[node]; p != nil {
		return p.inc
	}
	return 0
}

// onTransfer credits a transfer meant for this incarnation once and
// acknowledges every copy (after the buddy holds the credit). A transfer for
// an earlier incarnation is answered stale; one sent to this node as heir
// (resolve) is settled against the tombstone.
func (g *GDRL) onTransfer(now time.Duration, from strategy.NodeID, t *transfer, resolve bool, dstNewInc uint64, fx *strategy.Effects) {
	ack := &peerv1.GdrlMessage{Body: &peerv1.GdrlMessage_TransferAck{TransferAck: &peerv1.GdrlTransferAck{Id: idMsg(t.id)}}}
	if t.id.Dst == g.self && t.id.DstInc == g.inc {
		g.credit(now, g.applied, partApplied, t.id, t.items)
		g.sendGated(from, g.encode(ack))
		return
	}
	if !resolve {
		ack.GetTransferAck().Stale = true
		g.sendNow(from, g.encode(ack))
		return
	}
	tb := g.tombFor(t.id.Dst, t.id.DstInc)
	if tb == nil && dstNewInc > t.id.DstInc {
		if rec := g.held[t.id.Dst]; rec != nil && rec.inc == t.id.DstInc {
			g.noteNewInc(now, t.id.Dst, dstNewInc, fx)
			tb = g.tombFor(t.id.Dst, t.id.DstInc)
		}
	}
	if !g.creditAsHeir(now, tb, t) {
		return // not (yet) this node's to settle; the payer retries
	}
	g.sendGated(from, g.encode(ack))
}

// credit adds t's items once per transfer id, using the duplicate filter
// table (which is part of the record), and reports whether it did.
func (g *GDRL) credit(now time.Duration, table filters, part int, id TransferID, items []item) bool {
	if !table.accept(id) {
		return false
	}
	g.addItems(items, 1, now)
	g.mark(part)
	return true
}

func (g *GDRL) onTransferAck(now time.Duration, from strategy.NodeID, fromInc uint64, a *peerv1.GdrlTransferAck, fx *strategy.Effects) {
	id := idFrom(a.Id)
	i := slices.IndexFunc(g.outbox, func(t *transfer) bool { return t.id == id })
	if i < 0 {
		return
	}
	t := g.outbox[i]
	if a.Stale {
		if from == t.id.Dst && fromInc > t.id.DstInc {
			t.newInc = max(t.newInc, fromInc)
			if t.released {
				g.sendTransfer(now, t, fx)
			}
		}
		return
	}
	g.removeTransfer(t)
}

// removeTransfer drops a settled transfer. Replicating that may wait: an
// heir that adopts a settled transfer only retransmits it, and the
// destination (or its heir) acknowledges it as a duplicate. A leaving
// node replicates it at once: it waits for its buddy to hold its final
// record before it reports Left.
func (g *GDRL) removeTransfer(t *transfer) {
	g.outbox = slices.DeleteFunc(g.outbox, func(x *transfer) bool { return x == t })
	g.partAt[partOutbox] = g.version + 1
	if g.leaving {
		g.dirty = true
	} else {
		g.lazy = true
	}
}

func (g *GDRL) hasTransfer(id TransferID) bool {
	return slices.ContainsFunc(g.outbox, func(t *transfer) bool { return t.id == id })
}

func (t *transfer) clone() *transfer {
	c := *t
	c.items = slices.Clone(t.items)
	return &c
}

// ---- Replication (write-ahead, to the buddy) ----

// setBuddy makes b the buddy; a new buddy gets the full record (a new
// epoch, so that acknowledgements meant for an earlier choice are not taken
// for this one).
func (g *GDRL) setBuddy(b strategy.NodeID) {
	if b == g.buddy {
		return
	}
	g.buddy, g.buddyInc = b, 0
	if p := g.peers[b]; p != nil {
		g.buddyInc = p.inc
	}
	g.epoch++
	g.acked, g.sentVer = 0, 0
	g.dirty = true
}

// sendGated queues a message that may go out only once the buddy holds the
// state as of now.
func (g *GDRL) sendGated(to strategy.NodeID, payload []byte) {
	gate := g.version
	if g.dirty {
		gate++
	}
	g.gated = append(g.gated, gatedMsg{gate: gate, to: to, payload: payload})
}

// sendNow queues a message that depends on no state.
func (g *GDRL) sendNow(to strategy.NodeID, payload []byte) {
	g.gated = append(g.gated, gatedMsg{gate: 0, to: to, payload: payload})
}

// flush ends an event: a changed state becomes a new record version, sent
// to the buddy, and whatever the buddy already holds is released.
func (g *GDRL) flush(now time.Duration, fx *strategy.Effects) {
	if g.leaving {
		g.handOver(now)
	}
	for range 4 {
		if g.dirty {
			g.version++
			g.dirty = false
			if g.buddy != "" && g.sentVer <= g.acked {
				g.sendRecord(now, fx) // else when the record in flight is acknowledged
			}
		}
		for _, t := range slices.Clone(g.outbox) {
			// A node without a buddy (alone in its view) releases
			// nothing that leaves it: cut off by a netsplit, it would
			// otherwise pay with no replica of its record anywhere, and
			// a crash then leaves its earlier record (at a former buddy
			// across the cut) holding what it paid: capacity created
			// (found by TestConserveSplitNeverAboveC). What it settles
			// itself moves nothing between nodes.
			if !t.released && (t.gate <= g.acked || (g.buddy == "" && g.settlesHere(t))) {
				t.released = true
				g.sendTransfer(now, t, fx)
			}
		}
		n := 0
		for _, m := range g.gated {
			if m.gate <= g.acked {
				fx.Send(m.to, m.payload)
			} else {
				g.gated[n] = m
				n++
			}
		}
		clear(g.gated[n:])
		g.gated = g.gated[:n]
		if !g.dirty {
			break
		}
	}
	g.wake(now, fx)
}

// wake asks to be ticked at the next interval tick, and earlier if a
// retransmission is due before it, each time once only.
func (g *GDRL) wake(now time.Duration, fx *strategy.Effects) {
	if g.tickReq != g.nextTick {
		g.tickReq = g.nextTick
		fx.WakeAt(g.nextTick)
	}
	if at := g.nextRetransmit(now); at < g.nextTick && (g.wakeReq <= now || at < g.wakeReq) {
		g.wakeReq = at
		fx.WakeAt(at)
	}
}

// nextRetransmit is the earliest retransmission Tick will make after now
// (g.nextTick if none comes before it).
func (g *GDRL) nextRetransmit(now time.Duration) time.Duration {
	at := g.nextTick
	due := func(d time.Duration) {
		if d > now {
			at = min(at, d)
		}
	}
	for _, t := range g.outbox {
		if t.released {
			due(t.lastSent + g.retransmit)
		}
	}
	if g.buddy != "" && g.acked < g.version {
		due(g.recordSent + g.retransmit)
	}
	for _, tb := range g.tombs {
		if tb.fencing && !tb.fenceDone && g.inView(tb.node) {
			due(tb.fenceSent + g.retransmit)
		}
		if at := g.heirDue(now, tb); at != 0 {
			due(at)
		}
	}
	for _, tb := range g.draining {
		if tb.fencing && g.inView(tb.node) {
			due(tb.fenceSent + g.retransmit)
		}
	}
	if g.helloDue() {
		due(g.helloSent + g.retransmit)
	}
	return at
}

func (g *GDRL) sendRecord(now time.Duration, fx *strategy.Effects) {
	g.recordSent, g.sentVer = now, g.version
	fx.Send(g.buddy, g.encode(&peerv1.GdrlMessage{Body: &peerv1.GdrlMessage_Record{Record: g.recordMsg(g.acked)}}))
}

// recordMsg is this node's record as a delta from version base (0: full).
func (g *GDRL) recordMsg(base uint64) *peerv1.GdrlRecord {
	r := &peerv1.GdrlRecord{Epoch: g.epoch, Base: base, Version: g.version, DefaultCapacity: g.dc, DefaultBurst: g.db}
	if base == 0 {
		for _, k := range g.sortedKeys() {
			sh := g.shares[k]
			r.Shares = append(r.Shares, &peerv1.GdrlShare{Key: k, Capacity: sh.c, Burst: sh.b})
		}
	} else {
		keys := make([]string, 0, len(g.changed))
		for k, v := range g.changed {
			if v > base {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		for _, k := range keys {
			if sh := g.shares[k]; sh != nil {
				r.Shares = append(r.Shares, &peerv1.GdrlShare{Key: k, Capacity: sh.c, Burst: sh.b})
			} else {
				r.Shares = append(r.Shares, &peerv1.GdrlShare{Key: k, Removed: true})
			}
		}
	}
	for p := range numParts {
		if base == 0 || g.partAt[p] > base {
			r.Parts |= 1 << p
		}
	}
	if r.Parts&(1<<partOutbox) != 0 {
		r.Outbox = transfersMsg(g.outbox)
	}
	if r.Parts&(1<<partApplied) != 0 {
		r.Applied = appliedMsg(g.applied)
	}
	if r.Parts&(1<<partTombs) != 0 {
		for _, tb := range g.tombs {
			r.Tombstones = append(r.Tombstones, tb.msg())
		}
	}
	return r
}

func (g *GDRL) onRecordAck(now time.Duration, from strategy.NodeID, fromInc uint64, a *peerv1.GdrlRecordAck, fx *strategy.Effects) {
	if from != g.buddy || a.WardInc != g.inc || a.Epoch != g.epoch {
		return
	}
	if g.buddyInc == 0 {
		g.buddyInc = fromInc
	} else if fromInc != g.buddyInc {
		return
	}
	if a.NeedFull {
		g.acked = 0
		g.sendRecord(now, fx)
		return
	}
	if a.Version > g.acked && a.Version <= g.version {
		g.acked = a.Version
		for k, v := range g.changed {
			if v <= g.acked {
				delete(g.changed, k)
			}
		}
		if g.acked < g.version && g.acked >= g.sentVer {
			g.sendRecord(now, fx) // what accumulated while the last one was in flight
		}
	}
}

// onRecord stores a ward's record (this node is its buddy) and acknowledges
// the version it holds.
func (g *GDRL) onRecord(now time.Duration, from strategy.NodeID, fromInc uint64, r *peerv1.GdrlRecord, fx *strategy.Effects) {
	reply := func(version uint64, full bool) {
		fx.Send(from, g.encode(&peerv1.GdrlMessage{Body: &peerv1.GdrlMessage_RecordAck{RecordAck: &peerv1.GdrlRecordAck{
			WardInc: fromInc, Epoch: r.Epoch, Version: version, NeedFull: full}}}))
	}
	if from == g.self {
		return
	}
	if tb := g.tombFor(from, fromInc); tb != nil && r.Version <= tb.version {
		return // a record this node already inherited, delayed
	}
	rec := g.held[from]
	if rec != nil && rec.inc != fromInc {
		if rec.inc > fromInc {
			return
		}
		g.inherit(now, from, rec, fx) // (observe has done it already)
		rec = nil
	}
	if rec == nil || rec.epoch != r.Epoch {
		if r.Base != 0 {
			reply(0, true)
			return
		}
		rec = &heldRecord{inc: fromInc, epoch: r.Epoch, shares: map[string][2]int64{}, applied: filters{}}
		g.held[from] = rec
	}
	rec.inView = rec.inView || g.inView(from)
	if r.Version <= rec.version {
		reply(rec.version, false)
		return
	}
	if r.Base > rec.version {
		reply(rec.version, true)
		return
	}
	if r.Base == 0 {
		clear(rec.shares)
	}
	for _, s := range r.Shares {
		if s.Removed {
			delete(rec.shares, s.Key)
		} else {
			rec.shares[s.Key] = [2]int64{s.Capacity, s.Burst}
		}
	}
	rec.version = r.Version
	if r.Parts&(1<<partDefaults) != 0 {
		rec.dc, rec.db = r.DefaultCapacity, r.DefaultBurst
	}
	if r.Parts&(1<<partOutbox) != 0 {
		rec.outbox = transfersFrom(r.Outbox)
	}
	if r.Parts&(1<<partApplied) != 0 {
		rec.applied = appliedFrom(r.Applied)
	}
	if r.Parts&(1<<partTombs) != 0 {
		rec.tombs = rec.tombs[:0]
		for _, t := range r.Tombstones {
			rec.tombs = append(rec.tombs, tombFrom(t))
		}
	}
	reply(rec.version, false)
}

func (g *GDRL) heldNodes() []strategy.NodeID {
	out := make([]strategy.NodeID, 0, len(g.held))
	for n := range g.held {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// ---- Inheritance and fences ----

// inherit takes over a ward's record: its shares are added to this node's
// (key by key, its default share to every other key), its outbox is
// adopted, and a tombstone keeps its duplicate filter and what was
// inherited.
func (g *GDRL) inherit(now time.Duration, node strategy.NodeID, rec *heldRecord, fx *strategy.Effects) {
	delete(g.held, node)
	for _, k := range g.sortedKeys() {
		if _, ok := rec.shares[k]; !ok {
			g.adjust(k, rec.dc, rec.db, now)
		}
	}
	recKeys := make([]string, 0, len(rec.shares))
	for k := range rec.shares {
		recKeys = append(recKeys, k)
	}
	sort.Strings(recKeys)
	items := make([]item, 0, len(recKeys))
	for _, k := range recKeys {
		v := rec.shares[k]
		g.pin(k, now)
		g.adjust(k, v[0], v[1], now)
		items = append(items, item{key: k, c: v[0], b: v[1]})
	}
	g.dc += rec.dc
	g.db += rec.db
	g.mark(partDefaults)
	g.mark(partOutbox)
	g.mark(partTombs)
	for _, t := range rec.outbox {
		if !g.hasTransfer(t.id) {
			c := t.clone()
			c.released, c.lastSent = true, now-g.retransmit
			g.outbox = append(g.outbox, c)
		}
	}
	at := g.version + 1 // the first version of this node's record that holds the tombstones
	tb := &tombstone{node: node, inc: rec.inc, version: rec.version, dc: rec.dc, db: rec.db, items: items, applied: rec.applied, at: at}
	if tb.applied == nil {
		tb.applied = filters{}
	}
	g.tombs = append(g.tombs, tb)
	for _, t := range rec.tombs {
		if g.tombForV(t.node, t.inc, t.version) == nil {
			t.at = at
			g.tombs = append(g.tombs, t)
		}
	}
	if fx == nil {
		return
	}
	for _, t := range slices.Clone(g.outbox) {
		if t.released && now-t.lastSent >= g.retransmit {
			g.sendTransfer(now, t, fx)
		}
	}
}

// tombFor is this node's tombstone of node's incarnation inc taken at the
// latest record version (a node may hold two of one incarnation: its own
// inheritance and a copy that came with a ward's record; see heir.go).
func (g *GDRL) tombFor(node strategy.NodeID, inc uint64) *tombstone {
	var out *tombstone
	for _, t := range g.tombs {
		if t.node == node && t.inc == inc && (out == nil || t.version > out.version) {
			out = t
		}
	}
	return out
}

// tombForV is this node's tombstone of node's incarnation inc taken at
// record version version.
func (g *GDRL) tombForV(node strategy.NodeID, inc, version uint64) *tombstone {
	for _, t := range g.tombs {
		if t.node == node && t.inc == inc && t.version == version {
			return t
		}
	}
	return nil
}

// sendFenced tells a tombstoned node that is heard of again what was
// inherited from it.
func (g *GDRL) sendFenced(now time.Duration, tb *tombstone, fx *strategy.Effects) {
	tb.fencing, tb.fenceSent = true, now
	f := &peerv1.GdrlFenced{Inc: tb.inc, Version: tb.version, DefaultCapacity: tb.dc, DefaultBurst: tb.db,
		Items: itemsMsg(tb.items), OnBehalf: transfersMsg(g.fenceOnBehalf(tb))}
	fx.Send(tb.node, g.encode(&peerv1.GdrlMessage{Body: &peerv1.GdrlMessage_Fenced{Fenced: f}}))
}

// drainFences sends the fence of every draining tombstone (see onFenced)
// whose incarnation is in view, at once the first time and then every
// `retransmit` until answered.
func (g *GDRL) drainFences(now time.Duration, fx *strategy.Effects) {
	for _, tb := range g.draining {
		if g.inView(tb.node) && (!tb.fencing || now-tb.fenceSent >= g.retransmit) {
			g.sendDrain(now, tb, fx)
		}
	}
}

// sendDrain sends a draining tombstone's fence: the inheritance it names
// (given up once per inheritance, whichever copy fences first) and what
// it credited on the incarnation's behalf.
func (g *GDRL) sendDrain(now time.Duration, tb *tombstone, fx *strategy.Effects) {
	tb.fencing, tb.fenceSent = true, now
	f := &peerv1.GdrlFenced{Inc: tb.inc, Version: tb.version, DefaultCapacity: tb.dc, DefaultBurst: tb.db,
		Items: itemsMsg(tb.items), OnBehalf: transfersMsg(tb.onBehalf)}
	fx.Send(tb.node, g.encode(&peerv1.GdrlMessage{Body: &peerv1.GdrlMessage_Fenced{Fenced: f}}))
}

// redeliver takes back credits that a tombstone of a dead incarnation,
// dropped here because an heir's copy of it took over, made after the
// version the heir took: the copy does not know of them and would credit
// them again. Each is given up and queued again under its own name (no
// tokens travel with it), so that whoever settles the incarnation's
// transfers now credits it once: its duplicate filter drops a copy the
// payer still retransmits.
func (g *GDRL) redeliver(now time.Duration, credits []*transfer) {
	for _, t := range credits {
		g.addItems(t.items, -1, now)
		if g.hasTransfer(t.id) {
			continue // pending here already
		}
		c := &transfer{id: t.id, items: slices.Clone(t.items), gate: g.version + 1}
		for i := range c.items {
			c.items[i].t = 0
		}
		if p := g.peers[t.id.Dst]; p != nil && p.inc > t.id.DstInc {
			c.newInc = p.inc
		}
		g.outbox = append(g.outbox, c)
	}
	if len(credits) > 0 {
		g.mark(partOutbox)
	}
}

// fenceOnBehalf is what a fence of tb names as credited on the fenced
// incarnation's behalf: the transfers to it that tb credited, and those
// that the copies of tombstones that came with tb's record (tombstones the
// fenced node held, at the same at) credited to other incarnations. The
// fenced node held those tombstones too and may have credited the same
// transfers after the version inherited (one it paid, still in the outbox
// the heir adopted, settled by both); it subtracts what it credited twice.
func (g *GDRL) fenceOnBehalf(tb *tombstone) []*transfer {
	out := slices.Clone(tb.onBehalf)
	if tb.at == 0 {
		return out
	}
	// Also the copies whose incarnation answered alive since (retired)
	// or that left the record still fencing theirs (draining): what they
	// credited stays counted here (found by TestConserveSplitNeverAboveC,
	// seed 9 at 300 checks: a copy answered alive before the fence of
	// the record it came with was sent, and a transfer it credited, which
	// the fenced node's own tombstone had credited too, stayed counted
	// twice).
	for _, xs := range [][]*tombstone{g.tombs, g.retired, g.draining} {
		for _, x := range xs {
			if x != tb && x.at == tb.at && x.node != tb.node {
				out = append(out, x.onBehalf...)
			}
		}
	}
	return out
}

// creditedAfter reports whether one of this node's tombstones that its
// record held at version (live, or retired when its incarnation answered
// alive) credited transfer id on that incarnation's behalf after that
// version.
func (g *GDRL) creditedAfter(id TransferID, version uint64) bool {
	for _, tbs := range [][]*tombstone{g.tombs, g.retired, g.draining} {
		for _, tb := range tbs {
			if tb.node != id.Dst || tb.inc != id.DstInc || tb.at == 0 || tb.at > version {
				continue
			}
			for _, t := range tb.onBehalf {
				if t.id == id && t.creditedAt > version {
					return true
				}
			}
		}
	}
	return false
}

// onFenced: this incarnation was declared dead and inherited by from, but
// is alive. It gives up what was inherited, and the transfers the heir
// credited on its behalf that it credited too, once per fence.
func (g *GDRL) onFenced(now time.Duration, from strategy.NodeID, f *peerv1.GdrlFenced) {
	if f.Node != "" && (strategy.NodeID(f.Node) != g.self || f.Inc != g.inc) {
		// Between heirs (this node may hold a tombstone of its own
		// earlier incarnation, inherited with a ward's record).
		g.onHeirFence(now, from, f)
		return
	}
	ack := &peerv1.GdrlFenceAck{Inc: f.Inc, Version: f.Version}
	if f.Inc != g.inc {
		g.sendNow(from, g.encode(&peerv1.GdrlMessage{Body: &peerv1.GdrlMessage_FenceAck{FenceAck: ack}}))
		return
	}
	ack.Alive = true
	k := fenceKey{inc: f.Inc, version: f.Version}
	onBehalf := transfersFrom(f.OnBehalf)
	slices.SortFunc(onBehalf, func(a, b *transfer) int { return cmpID(a.id, b.id) })
	onBehalf = slices.CompactFunc(onBehalf, func(a, b *transfer) bool { return a.id == b.id })
	if !g.fencesApplied[k] {
		g.fencesApplied[k] = true
		g.giveUp(now, f.DefaultCapacity, f.DefaultBurst, itemsFrom(f.Items))
		// Transfers to other incarnations that the heir's copies of this
		// node's tombstones credited: if this node's own tombstone (one
		// the heir copied, about to be dropped) credited one too, after
		// the version inherited, it was counted twice: give it up here.
		listed := map[TransferID]bool{}
		for _, t := range onBehalf {
			listed[t.id] = true
			if t.id.Dst == g.self && t.id.DstInc == g.inc {
				continue
			}
			if g.creditedAfter(t.id, f.Version) {
				g.addItems(t.items, -1, now)
			}
		}
		g.retired = slices.DeleteFunc(g.retired, func(t *tombstone) bool { return t.at <= f.Version })
		// The tombstones in the record the heir inherited went with it:
		// the heir's copies fence (or settle) them from now on, and what
		// they hold was in the amounts just given up. But what one of
		// them credited after that version (a transfer its incarnation,
		// alive across a cut, may have credited too) no copy knows of:
		// a tombstone whose incarnation is not known dead and that did
		// so keeps fencing that incarnation (draining) for those
		// credits, which the incarnation reconciles once per credit.
		for _, tb := range g.tombs {
			if tb.at == 0 || tb.at > f.Version {
				continue
			}
			after := slices.DeleteFunc(slices.Clone(tb.onBehalf), func(t *transfer) bool { return t.creditedAt <= f.Version || listed[t.id] })
			switch {
			case len(after) == 0:
			case tb.fenceDone:
				// The incarnation is dead and the heir's copy settles
				// its transfers: these go to it again (or to whoever
				// settles them now), under their own names.
				g.redeliver(now, after)
			default:
				c := *tb
				c.onBehalf, c.fencing, c.heirTarget = after, false, ""
				g.draining = append(g.draining, &c)
			}
		}
		g.tombs = slices.DeleteFunc(g.tombs, func(t *tombstone) bool { return t.at <= f.Version })
		g.mark(partTombs)
		g.mark(partDefaults)
	}
	// What the fence's tombstone credited on this incarnation's behalf:
	// given up if credited here too or named by the fence of another
	// inheritance before (two heirs, one per side of two cuts, may each
	// have credited it: found by TestConserveSplitNeverAboveC, seed 18
	// at 300 checks), else never credited here; once per inheritance and
	// transfer, whichever copy of the tombstone names it (a copy that
	// fences after another was applied may name credits of its own).
	done := g.fenceCredits[k]
	for _, t := range onBehalf {
		if t.id.Dst != g.self || t.id.DstInc != g.inc || done[t.id] {
			continue
		}
		if done == nil {
			done = map[TransferID]bool{}
			g.fenceCredits[k] = done
		}
		done[t.id] = true
		if g.applied.credited(t.id) || g.fenceReported[t.id] {
			// Credited here too, or by another inheritance of this
			// incarnation that a fence named before: one credit
			// too many.
			g.addItems(t.items, -1, now)
		} else {
			g.applied.settleElsewhere(t.id) // never credit it here
		}
		g.fenceReported[t.id] = true
		g.mark(partApplied)
	}
	g.sendGated(from, g.encode(&peerv1.GdrlMessage{Body: &peerv1.GdrlMessage_FenceAck{FenceAck: ack}}))
}

func (g *GDRL) onFenceAck(now time.Duration, from strategy.NodeID, a *peerv1.GdrlFenceAck, fx *strategy.Effects) {
	if a.Node != "" {
		g.onHeirFenceAck(now, from, a, fx)
		return
	}
	if i := slices.IndexFunc(g.draining, func(x *tombstone) bool {
		return x.node == from && x.inc == a.Inc && x.version == a.Version && x.fencing
	}); i >= 0 {
		tb := g.draining[i]
		g.draining = slices.Delete(g.draining, i, i+1)
		if a.Alive {
			g.retired = append(g.retired, tb) // see onFenced
		} else {
			g.redeliver(now, tb.onBehalf) // dead: as in onFenced
		}
		return
	}
	tb := g.tombForV(from, a.Inc, a.Version)
	if tb == nil || tb.fenceDone {
		return
	}
	if a.Alive {
		g.tombs = slices.DeleteFunc(g.tombs, func(x *tombstone) bool { return x == tb })
		if tb.at != 0 && slices.ContainsFunc(tb.onBehalf, func(t *transfer) bool { return t.creditedAt > 0 }) {
			g.retired = append(g.retired, tb) // see onFenced
		}
	} else {
		// The incarnation is dead: this tombstone settles its transfers
		// from now on, and keeps what it inherited for a fence into a
		// later heir of the same incarnation (see heir.go).
		tb.fenceDone, tb.fencing = true, false
	}
	g.mark(partTombs)
	for _, t := range slices.Clone(g.outbox) {
		if t.released && t.id.Dst == from {
			g.sendTransfer(now, t, fx)
		}
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
