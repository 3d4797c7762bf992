package gdrl

import (
	"slices"
	"sort"
	"time"

	peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// Replication: the write-ahead share record kept at the buddy (001 §IV,
// 004 §3.2; see "Best buddy" in the package documentation), and the
// messages held back until the buddy holds it.

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
	g.endedRefusals(fx)
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

// sendRecord sends the buddy this node's record as a delta from the
// version it acknowledged, and marks every explicit share the record
// carries as replicated (share.inRecord): a full record carries every
// one, a delta the keys changed since that version, among them a key
// whose removal is still to be acknowledged and that requests made
// explicit again meanwhile (ours). Marking only the shares of full
// records let such a key, sent explicit at the default share of the
// moment, be dropped again without a removal: the buddy's copy kept it
// at that amount after the default share changed, and an heir added it
// (found by TestConservationProperty at 1,000 checks, seed 4172839587:
// n3 dropped b at 3.97 s, requests made it explicit again before the
// removal went out, so record 34 sent b at 117,000,000; n3 dropped it
// again at 5.47 s without a removal, paid 19,500,000 of its default share
// to the joiner n2 at 5.94 s, and crashed at 7.49 s; its buddy n4
// inherited b at 117,000,000 rather than 97,500,000, C + 19,500,000).
func (g *GDRL) sendRecord(now time.Duration, fx *strategy.Effects) {
	g.recordSent, g.sentVer = now, g.version
	r := g.recordMsg(g.acked)
	for _, s := range r.Shares {
		if sh := g.shares[s.Key]; sh != nil && !s.Removed {
			sh.inRecord = true
		}
	}
	fx.Send(g.buddy, g.encode(&peerv1.GdrlMessage{Body: &peerv1.GdrlMessage_Record{Record: r}}))
}

// recordMsg is this node's record as a delta from version base (0: full).
func (g *GDRL) recordMsg(base uint64) *peerv1.GdrlRecord {
	r := &peerv1.GdrlRecord{Epoch: g.epoch, Base: base, Version: g.version, DefaultCapacity: g.dc, DefaultBurst: g.db}
	r.Shares = g.recordShares(base)
	for p := range numParts {
		if base == 0 || g.partAt[p] > base {
			r.Parts |= 1 << p
		}
	}
	g.fillRecordParts(r)
	return r
}

// recordShares is the shares of a record from version base (0: every
// share, sorted by key; else the keys changed since base, sorted, a key
// without an explicit share any more as removed).
func (g *GDRL) recordShares(base uint64) []*peerv1.GdrlShare {
	var out []*peerv1.GdrlShare
	if base == 0 {
		for _, k := range g.sortedKeys() {
			sh := g.shares[k]
			out = append(out, &peerv1.GdrlShare{Key: k, Capacity: sh.c, Burst: sh.b})
		}
		return out
	}
	keys := make([]string, 0, len(g.changed))
	for k, v := range g.changed {
		if v > base {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		if sh := g.shares[k]; sh != nil {
			out = append(out, &peerv1.GdrlShare{Key: k, Capacity: sh.c, Burst: sh.b})
		} else {
			out = append(out, &peerv1.GdrlShare{Key: k, Removed: true})
		}
	}
	return out
}

// fillRecordParts fills in the parts of record r that r.Parts lists.
func (g *GDRL) fillRecordParts(r *peerv1.GdrlRecord) {
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
	if r.Parts&(1<<partGivenUp) != 0 {
		r.GivenUp = g.givenUp()
	}
	if r.Parts&(1<<partLocal) != 0 {
		for _, tb := range g.retired {
			r.Retired = append(r.Retired, tb.localMsg())
		}
		for _, tb := range g.draining {
			r.Draining = append(r.Draining, tb.localMsg())
		}
	}
	if r.Parts&(1<<partHeld) != 0 {
		for _, n := range g.heldNodes() {
			if rec := g.held[n]; !g.inView(n) {
				r.Held = append(r.Held, &peerv1.GdrlHeldRecord{Node: string(n), Inc: rec.inc, Version: rec.version})
			}
		}
	}
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
				g.mem.changed.Remove(k)
			}
		}
		g.shrinkChanged()
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
	rec.apply(r)
	if !g.inView(from) {
		g.mark(partHeld) // a record this node's own record carries (recordMsg)
	}
	reply(rec.version, false)
}

// apply updates a held record with record m, a delta from a version it
// holds (or full): its shares, its version and the parts m carries.
func (r *heldRecord) apply(m *peerv1.GdrlRecord) {
	if m.Base == 0 {
		clear(r.shares)
	}
	for _, s := range m.Shares {
		if s.Removed {
			delete(r.shares, s.Key)
		} else {
			r.shares[s.Key] = [2]int64{s.Capacity, s.Burst}
		}
	}
	r.version = m.Version
	if m.Parts&(1<<partDefaults) != 0 {
		r.dc, r.db = m.DefaultCapacity, m.DefaultBurst
	}
	if m.Parts&(1<<partOutbox) != 0 {
		r.outbox = transfersFrom(m.Outbox)
	}
	if m.Parts&(1<<partApplied) != 0 {
		r.applied = appliedFrom(m.Applied)
	}
	if m.Parts&(1<<partTombs) != 0 {
		r.tombs = r.tombs[:0]
		for _, t := range m.Tombstones {
			r.tombs = append(r.tombs, tombFrom(t))
		}
	}
	if m.Parts&(1<<partHeld) != 0 {
		r.held = heldFrom(m.Held)
	}
	if m.Parts&(1<<partGivenUp) != 0 {
		r.givenUp = slices.Clone(m.GivenUp)
	}
	if m.Parts&(1<<partLocal) != 0 {
		r.retired, r.draining = tombsFrom(m.Retired), tombsFrom(m.Draining)
	}
}

func (g *GDRL) heldNodes() []strategy.NodeID {
	out := make([]strategy.NodeID, 0, len(g.held))
	for n := range g.held {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// givenUp is the record versions of this incarnation at which an heir
// inherited it and that it has given up since (GdrlRecord.given_up),
// sorted.
func (g *GDRL) givenUp() []uint64 {
	var out []uint64
	for k := range g.fencesApplied {
		if k.inc == g.inc {
			out = append(out, k.version)
		}
	}
	slices.Sort(out)
	return out
}
