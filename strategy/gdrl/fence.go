package gdrl

import (
	"slices"
	"sort"
	"time"

	peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// Inheritance, tombstones and fences: a ward's record taken over by its
// heir, and given up again when the ward turns out alive (see "Split
// brain" in the package documentation; heir.go has the fences between
// heirs).

// inherit takes over a ward's record: its shares are added to this node's
// (key by key, its default share to every other key), its outbox is
// adopted, and a tombstone keeps its duplicate filter and what was
// inherited. What the ward held of its own wards out of its view is
// learnt (learnHeld) once the ward's incarnation is known dead: now, or
// when it answers the tombstone's fence so.
func (g *GDRL) inherit(now time.Duration, node strategy.NodeID, rec *heldRecord, fx *strategy.Effects) {
	if g.held[node] == rec {
		delete(g.held, node)
		if !g.inView(node) {
			g.mark(partHeld)
		}
	}
	items := g.inheritShares(now, rec)
	g.dc += rec.dc
	g.db += rec.db
	g.mark(partDefaults)
	g.mark(partOutbox)
	g.mark(partTombs)
	g.adoptOutbox(now, rec.outbox)
	at := g.version + 1 // the first version of this node's record that holds the tombstones
	tb := &tombstone{node: node, inc: rec.inc, version: rec.version, dc: rec.dc, db: rec.db, items: items, applied: rec.applied, at: at,
		givenUp: rec.givenUp}
	if tb.applied == nil {
		tb.applied = filters{}
	}
	g.tombs = append(g.tombs, tb)
	if g.incOf(node) > rec.inc {
		defer g.learnHeld(rec.held)
	} else {
		tb.held = rec.held
	}
	g.adoptTombs(rec, at)
	if fx == nil {
		return
	}
	g.retransmitTransfers(now, fx)
}

// inheritShares adds a ward's shares to this node's: its default share to
// every key the record does not list, and each share it lists (pinned) to
// that key's. It returns the shares listed, sorted by key.
func (g *GDRL) inheritShares(now time.Duration, rec *heldRecord) []item {
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
	return items
}

// adoptOutbox adds to this node's outbox, released and due for sending, a
// copy of each of a ward's transfers it does not hold.
func (g *GDRL) adoptOutbox(now time.Duration, outbox []*transfer) {
	for _, t := range outbox {
		if !g.hasTransfer(t.id) {
			c := t.clone()
			c.released, c.lastSent = true, now-g.retransmit
			g.outbox = append(g.outbox, c)
		}
	}
}

// adoptTombs takes over a ward's tombstones (those not held here already),
// retired and draining tombstones, as held from record version at.
func (g *GDRL) adoptTombs(rec *heldRecord, at uint64) {
	for _, t := range rec.tombs {
		if g.tombForV(t.node, t.inc, t.version) == nil {
			t.at = at
			for _, a := range t.absorbed {
				a.at = at
			}
			g.tombs = append(g.tombs, t)
		}
	}
	// The ward's retired and draining tombstones: what they credited is in
	// its shares, now here, and a fence of one the ward held must name it
	// (fenceOnBehalf), or their incarnation must still weigh it (drained
	// from here).
	for _, t := range rec.retired {
		t.at = at
		g.retired = append(g.retired, t)
	}
	for _, t := range rec.draining {
		t.at, t.fencing = at, false
		g.draining = append(g.draining, t)
	}
	if len(rec.retired)+len(rec.draining) > 0 {
		g.mark(partLocal)
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
	tb.fencing, tb.fenceSent, tb.fencedAway = true, now, !g.inView(tb.node)
	f := &peerv1.GdrlFenced{Inc: tb.inc, Version: tb.version, DefaultCapacity: tb.dc, DefaultBurst: tb.db,
		Items: itemsMsg(tb.items), OnBehalf: transfersMsg(g.fenceOnBehalf(tb)), Absorbed: absorbedMsg(tb.absorbed)}
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
		Items: itemsMsg(tb.items), OnBehalf: transfersMsg(tb.onBehalf), Absorbed: absorbedMsg(tb.absorbed)}
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
func (g *GDRL) onFenced(now time.Duration, from strategy.NodeID, f *peerv1.GdrlFenced, fx *strategy.Effects) {
	if f.Node != "" && (strategy.NodeID(f.Node) != g.self || f.Inc != g.inc) {
		// Between heirs (this node may hold a tombstone of its own
		// earlier incarnation, inherited with a ward's record).
		g.onHeirFence(now, from, f, fx)
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
		g.applyFence(now, f, onBehalf)
	}
	// What the fence's tombstone credited on this incarnation's behalf
	// (reconcileCredit), and the give-ups of other inheritances of it
	// that the tombstone made or took over (reconcileProxy).
	entries := absorbedFrom(f.Absorbed)
	passed := map[TransferID]bool{}
	for _, x := range entries {
		for _, t := range x.passed {
			passed[t.id] = true
		}
	}
	for _, t := range onBehalf {
		if !passed[t.id] {
			g.reconcileCredit(now, k, t)
		}
	}
	for _, x := range entries {
		g.reconcileProxy(now, f.Inc, x)
	}
	g.sendGated(from, g.encode(&peerv1.GdrlMessage{Body: &peerv1.GdrlMessage_FenceAck{FenceAck: ack}}))
}

// applyFence gives up, once per fence f of this incarnation, what its heir
// inherited (f's amounts, and the transfers the heir credited on its behalf
// (onBehalf, sorted) that it credited too), and the tombstones and retired
// tombstones that went with the record the heir inherited.
func (g *GDRL) applyFence(now time.Duration, f *peerv1.GdrlFenced, onBehalf []*transfer) {
	g.mark(partGivenUp)
	g.giveUp(now, f.DefaultCapacity, f.DefaultBurst, itemsFrom(f.Items))
	listed := map[TransferID]bool{}
	g.giveUpTwice(now, f.Version, onBehalf, listed)
	g.retired = slices.DeleteFunc(g.retired, func(t *tombstone) bool { return t.at <= f.Version })
	g.mark(partLocal)
	g.drainInherited(now, f.Version, listed)
	g.tombs = slices.DeleteFunc(g.tombs, func(t *tombstone) bool { return t.at <= f.Version })
	g.mark(partTombs)
	g.mark(partDefaults)
}

// giveUpTwice gives up the transfers to other incarnations in onBehalf that
// this node's own tombstones credited after record version too, and notes
// in listed the ids onBehalf lists.
func (g *GDRL) giveUpTwice(now time.Duration, version uint64, onBehalf []*transfer, listed map[TransferID]bool) {
	// Transfers to other incarnations that the heir's copies of this
	// node's tombstones credited: if this node's own tombstone (one
	// the heir copied, about to be dropped) credited one too, after
	// the version inherited, it was counted twice: give it up here.
	for _, t := range onBehalf {
		listed[t.id] = true
		if t.id.Dst == g.self && t.id.DstInc == g.inc {
			continue
		}
		if g.creditedAfter(t.id, version) {
			g.addItems(t.items, -1, now)
		}
	}
}

// drainInherited handles the credits and give-ups that the tombstones
// inherited with record version made after it (listed: the credits the
// fence names): redelivered for a tombstone whose incarnation is dead,
// else kept fencing in a draining copy.
func (g *GDRL) drainInherited(now time.Duration, version uint64, listed map[TransferID]bool) {
	// The tombstones in the record the heir inherited went with it:
	// the heir's copies fence (or settle) them from now on, and what
	// they hold was in the amounts just given up. But what one of
	// them credited after that version (a transfer its incarnation,
	// alive across a cut, may have credited too) no copy knows of:
	// a tombstone whose incarnation is not known dead and that did
	// so keeps fencing that incarnation (draining) for those
	// credits, which the incarnation reconciles once per credit.
	for _, tb := range g.tombs {
		if tb.at == 0 || tb.at > version {
			continue
		}
		after := slices.DeleteFunc(slices.Clone(tb.onBehalf), func(t *transfer) bool { return t.creditedAt <= version || listed[t.id] })
		// Likewise the give-ups it made after that version, which
		// the heir's copy does not carry (see absorb).
		gaveUp := slices.DeleteFunc(slices.Clone(tb.absorbed), func(a *absorbedInh) bool { return a.at <= version })
		switch {
		case len(after) == 0 && len(gaveUp) == 0:
		case tb.fenceDone:
			// The incarnation is dead and the heir's copy settles
			// its transfers: these go to it again (or to whoever
			// settles them now), under their own names.
			g.redeliver(now, after)
		default:
			c := *tb
			c.onBehalf, c.absorbed, c.fencing, c.heirTarget = after, gaveUp, false, ""
			g.draining = append(g.draining, &c)
			g.mark(partLocal)
		}
	}
}

// reconcileCredit reconciles t, a transfer to this incarnation that a
// fence of inheritance k names as credited on its behalf: given up if
// credited here too or named by the fence of another inheritance before
// (two heirs, one per side of two cuts, may each have credited it: found
// by TestConserveSplitNeverAboveC, seed 18 at 300 checks), else never
// credited here; once per inheritance and transfer, whichever copy of the
// tombstone names it (a copy that fences after another was applied may
// name credits of its own).
func (g *GDRL) reconcileCredit(now time.Duration, k fenceKey, t *transfer) {
	done := g.fenceCredits[k]
	if t.id.Dst != g.self || t.id.DstInc != g.inc || done[t.id] {
		return
	}
	if done == nil {
		done = map[TransferID]bool{}
		g.fenceCredits[k] = done
	}
	done[t.id] = true
	if g.applied.credited(t.id) || g.fenceReported[t.id] {
		// Credited here too, or by another inheritance of this
		// incarnation that a fence named before: one credit too many.
		g.addItems(t.items, -1, now)
	} else {
		g.applied.settleElsewhere(t.id) // never credit it here
	}
	g.fenceReported[t.id] = true
	g.mark(partApplied)
}

// reconcileProxy takes x, a give-up of this incarnation's inheritance at
// x.version by a later heir (which took it for dead, see absorb), named in
// a fence, once per give-up. If the inheritance was given up here already
// (a copy of its tombstone fenced this incarnation itself, or another
// give-up was named before), x is one too many and is undone: its amounts
// added back, and each credit it gave up that was reconciled here already
// added back too. Otherwise x stands, as if the inheritance's own fence
// had been applied here: it is never given up again, nor are the credits
// x gave up reconciled again. The credits x passed on are reconciled as
// the inheritance's own fence would (reconcileCredit).
func (g *GDRL) reconcileProxy(now time.Duration, inc uint64, x *absorbedInh) {
	if g.proxiesDone[x.key()] {
		return
	}
	g.proxiesDone[x.key()] = true
	k := fenceKey{inc: inc, version: x.version}
	if !x.creditsOnly {
		if g.fencesApplied[k] {
			undo := *x
			undo.gaveUp = nil
			g.undoAbsorbed(now, &undo)
		} else {
			g.fencesApplied[k] = true
			g.mark(partGivenUp)
		}
	}
	done := g.fenceCredits[k]
	if done == nil {
		done = map[TransferID]bool{}
		g.fenceCredits[k] = done
	}
	for _, t := range x.gaveUp {
		if t.id.Dst != g.self || t.id.DstInc != g.inc {
			continue
		}
		if done[t.id] {
			g.addItems(t.items, 1, now)
		}
		done[t.id] = true
	}
	for _, t := range x.passed {
		g.reconcileCredit(now, k, t)
	}
	g.mark(partDefaults)
	g.mark(partApplied)
}

func (g *GDRL) onFenceAck(now time.Duration, from strategy.NodeID, a *peerv1.GdrlFenceAck, fx *strategy.Effects) {
	if a.Node != "" {
		g.onHeirFenceAck(now, from, a, fx)
		return
	}
	if g.ackDraining(now, from, a) {
		return
	}
	tb := g.tombForV(from, a.Inc, a.Version)
	if tb == nil || tb.fenceDone || (a.Alive && !tb.fencing) {
		return // alive, to a fence withdrawn since (retransmitFences): the next one is answered afresh
	}
	if a.Alive {
		g.tombs = slices.DeleteFunc(g.tombs, func(x *tombstone) bool { return x == tb })
		if tb.at != 0 && slices.ContainsFunc(tb.onBehalf, func(t *transfer) bool { return t.creditedAt > 0 }) {
			g.retired = append(g.retired, tb) // see onFenced
			g.mark(partLocal)
		}
	} else {
		// The incarnation is dead: this tombstone settles its transfers
		// from now on, and keeps what it inherited for a fence into a
		// later heir of the same incarnation (see heir.go); what it held
		// of its wards is learnt.
		tb.fenceDone, tb.fencing = true, false
		held := tb.held
		tb.held = nil
		g.learnHeld(held)
	}
	g.mark(partTombs)
	for _, t := range slices.Clone(g.outbox) {
		if t.released && t.id.Dst == from {
			g.sendTransfer(now, t, fx)
		}
	}
}

// ackDraining takes a's acknowledgement of the fence of a draining
// tombstone of from (its incarnation and version, fence in flight), if
// there is one, and reports whether there was: the tombstone leaves
// draining, retired when from says alive, its transfers redelivered when
// dead (as onFenced does).
func (g *GDRL) ackDraining(now time.Duration, from strategy.NodeID, a *peerv1.GdrlFenceAck) bool {
	i := slices.IndexFunc(g.draining, func(x *tombstone) bool {
		return x.node == from && x.inc == a.Inc && x.version == a.Version && x.fencing
	})
	if i < 0 {
		return false
	}
	tb := g.draining[i]
	g.draining = slices.Delete(g.draining, i, i+1)
	g.mark(partLocal)
	if a.Alive {
		g.retired = append(g.retired, tb) // see onFenced
	} else {
		g.redeliver(now, tb.onBehalf) // dead: as in onFenced
	}
	return true
}

// learnHeld learns what a ward that is dead, and that this node inherited,
// held of its own wards out of its view (ours; see "Split brain" in the
// package documentation): under `partition: conserve` a node keeps a
// failed ward's record frozen, and that ward's earlier buddy (across a cut
// when the ward chose the holder) may still hold an earlier record of it.
// With the holder dead, the later record is lost (a loss: the ward and its
// holder both failed), and the earlier one, inherited at the ward's
// restart, would count again what the ward paid since (found by
// TestConserveSplitNeverAboveC, seed 90 at 300 checks). So per ward
// incarnation: an earlier record of it held here is dropped, never to be
// inherited, and a lost tombstone of the later version is kept (unless
// this node has a tombstone of it at that version or later), into which
// an earlier buddy elsewhere that inherited a stale record of it fences,
// giving that record up. Nothing is inherited here: the holder may have
// inherited the record itself before it died, and a second inheritance of
// one version would never be reconciled (found by the same test, seed 79
// at 3,000 checks, when this took the holder's copy of the record over).
func (g *GDRL) learnHeld(held map[strategy.NodeID]heldRef) {
	nodes := make([]strategy.NodeID, 0, len(held))
	for n := range held {
		nodes = append(nodes, n)
	}
	slices.Sort(nodes)
	for _, w := range nodes {
		h := held[w]
		if w == g.self {
			continue
		}
		if tb := g.tombFor(w, h.inc); tb != nil && tb.version >= h.version {
			continue
		}
		if cur := g.held[w]; cur != nil && cur.inc == h.inc {
			if cur.version >= h.version {
				continue
			}
			delete(g.held, w)
			g.mark(partHeld)
		}
		g.tombs = append(g.tombs, &tombstone{node: w, inc: h.inc, version: h.version, applied: filters{}, lost: true, at: g.version + 1})
		g.mark(partTombs)
	}
}
