package gdrl

import (
	"slices"
	"time"

	peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// Transfers and the outbox: capacity moved in acknowledged transfers that
// are never lost or counted twice (001 §IV, 004 §2.3; see "Transfers" in
// the package documentation), and their settlement by heirs.

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
			g.probeAgain(to, it.key)
		}
		return
	}
	var out []item
	for _, it := range items {
		if g.inDebt(it.key, now) {
			// Waiting mode: its reservations count on this share's refill
			// until they are due (RequestWait). Evaluated again next probe.
			g.probeAgain(to, it.key)
			continue
		}
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
	g.capacityMoved()
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
	return tb != nil && !tb.lost && !(tb.fencing && !tb.fenceDone) && tb.heirTarget == ""
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
	if tb == nil || tb.lost || (tb.fencing && !tb.fenceDone) || tb.heirTarget != "" {
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
		b, bInc := g.announcedBuddy(cur, inc)
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

// announcedBuddy is the buddy that node's incarnation inc (0: the latest
// known) last announced and that buddy's incarnation when announced (0 if
// unknown), or node's ring successor if no buddy is known.
func (g *GDRL) announcedBuddy(node strategy.NodeID, inc uint64) (b strategy.NodeID, bInc uint64) {
	p := g.peers[node]
	switch {
	case p != nil && inc != 0 && inc != p.inc && p.past[inc] != "":
		b = p.past[inc]
	case p != nil && (inc == 0 || inc == p.inc) && p.buddy != "":
		b, bInc = p.buddy, p.buddyInc
	default:
		b = successor(g.members, node)
	}
	return b, bInc
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
	g.capacityMoved()
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
