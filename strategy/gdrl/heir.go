package gdrl

import (
	"slices"
	"time"

	peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// ---- Split brain: one heir per incarnation (ours; see the package
// documentation, "Split brain") ----
//
// A netsplit can give one incarnation two heirs: node X's buddy across the
// cut inherits X's record as it was at the split (version v1), while X goes
// on on its side, replicates to a new buddy there, and crashes; that buddy
// inherits X's later record (v2). Both hold X's share, and X is not alive to
// be fenced. The later record is X's continuation (it contains everything X
// did after v1), so the earlier tombstone is the duplicate: its holder sends
// its fence to the other heirs, and the one whose tombstone ranks higher
// (a later record version) absorbs it as X would have: it
// gives up the inherited amounts, and the transfers credited on X's behalf
// that X's later record shows credited too. The lower heir then drops its
// tombstone. A fence is in flight to one heir at a time and sent again to
// the same heir until answered, so it is absorbed at most once; an heir
// that absorbed a fence and is itself outranked forwards its own fence (and
// the transfers it did not undo) the same way, so a chain of three heirs
// nets out to the highest one's record.

// heirRanks reports whether a tombstone taken at record version va ranks
// below one taken at vb. Two tombstones of one incarnation at the same
// version are copies of one inheritance, not two: a tombstone travels in
// its heir's record (and is inherited with it), and a node that chooses a
// new buddy always sends it a new version (setBuddy marks the record
// dirty), so two buddies never inherit the same version.
func heirRanks(va, vb uint64) bool { return va < vb }

// heirSettles reports whether tb looks for the other heirs of its
// incarnation (heirFences) and may absorb their fences: once the
// incarnation is known dead (a newer incarnation of the node answered its
// fence), and also once it has been out of this node's view for
// heirGrace since the view last changed, with no fence of tb in flight to
// it. The second case is a node that crashed during a netsplit on the side
// away from its old heir and never comes back : its buddy across
// the cut took its record at the split, its new buddy on its own side took
// a later version when it crashed, and nothing else would ever tell the
// two heirs of each other, so its share stayed counted twice. The grace
// lets an incarnation that is alive come back into the view after a heal
// (failure detectors see it at different times; found by
// TestSplitBrainDroppedTombstoneCredit without it): it is then fenced
// itself, once per inheritance. An incarnation that is alive but stays
// cut off from this node for longer than the grace after the other heir
// absorbed this tombstone's fence gives up this inheritance again when a
// copy of the tombstone fences it: capacity lost, never created (see
// "Limits" in the package documentation). A tombstone whose fence is in
// flight to its incarnation does not look: the fence may have been
// applied.
func (g *GDRL) heirSettles(now time.Duration, tb *tombstone) bool {
	if tb.lost {
		// It fences no incarnation: known dead by a newer one heard of.
		return tb.fenceDone || g.incOf(tb.node) > tb.inc || (!g.inView(tb.node) && now-g.viewAt >= g.heirGrace())
	}
	return tb.fenceDone || (!tb.fencing && !g.inView(tb.node) && now-g.viewAt >= g.heirGrace())
}

// heirGrace is how long after a view change an heir waits before it takes
// an incarnation out of its view for dead (heirSettles): 20 retransmit
// intervals (2 s by default), several times a failure detector's spread
// between nodes.
func (g *GDRL) heirGrace() time.Duration { return 20 * g.retransmit }

// heirFences looks, for every tombstone that heirSettles, for a later
// tombstone of its incarnation: it asks the members in view that have not
// answered (a query, which absorbs nothing), and sends its fence to one
// that holds a later one, retransmitting either until answered.
func (g *GDRL) heirFences(now time.Duration, fx *strategy.Effects) {
	g.absorbLocal(now)
	for _, tb := range g.tombs {
		if tb.heirTarget == "" && !g.heirSettles(now, tb) {
			continue // the incarnation is in view: it is fenced itself
		}
		if tb.heirTarget != "" {
			if now-tb.heirSent >= g.retransmit {
				tb.heirSent = now
				fx.Send(tb.heirTarget, g.encode(g.heirFence(tb, false)))
			}
			continue
		}
		if g.fenceIntoLater(now, tb, fx) {
			continue
		}
		if tb.heirQueried != 0 && now-tb.heirQueried < g.retransmit {
			continue
		}
		var q []byte
		for _, m := range g.members {
			if m == g.self || tb.heirAsked[m] {
				continue
			}
			if q == nil {
				q = g.encode(g.heirFence(tb, true))
				tb.heirQueried = max(now, 1)
			}
			fx.Send(m, q)
		}
	}
}

// heirDue reports when heirFences next has something to send (0: nothing).
func (g *GDRL) heirDue(now time.Duration, tb *tombstone) time.Duration {
	switch {
	case tb.heirTarget != "":
		return tb.heirSent + g.retransmit
	case !g.heirSettles(now, tb):
		return 0
	}
	for _, m := range g.members {
		if m != g.self && !tb.heirAsked[m] {
			return tb.heirQueried + g.retransmit
		}
	}
	return 0
}

func (g *GDRL) heirFence(tb *tombstone, query bool) *peerv1.GdrlMessage {
	f := &peerv1.GdrlFenced{Inc: tb.inc, Version: tb.version, Node: string(tb.node), Query: query}
	if !query {
		f.DefaultCapacity, f.DefaultBurst = tb.dc, tb.db
		f.Items, f.OnBehalf = itemsMsg(tb.items), transfersMsg(tb.onBehalf)
		f.Absorbed = absorbedMsg(tb.absorbed)
	}
	return &peerv1.GdrlMessage{Body: &peerv1.GdrlMessage_Fenced{Fenced: f}}
}

// onHeirFence: from holds a tombstone of f.Node's incarnation f.Inc taken
// at f.Version. If this node holds one that ranks higher, it absorbs the
// fence (once); if its own ranks lower, it refuses and fences into from:
// at once if its tombstone looks for other heirs already (heirSettles),
// else once it does (heirLater).
func (g *GDRL) onHeirFence(now time.Duration, from strategy.NodeID, f *peerv1.GdrlFenced, fx *strategy.Effects) {
	ack := &peerv1.GdrlFenceAck{Inc: f.Inc, Version: f.Version, Node: f.Node}
	reply := func() {
		g.sendGated(from, g.encode(&peerv1.GdrlMessage{Body: &peerv1.GdrlMessage_FenceAck{FenceAck: ack}}))
	}
	k := fenceKey{inc: f.Inc, version: f.Version}
	if g.fencesApplied[k] {
		ack.Absorbed = true
		reply()
		return
	}
	tb := g.tombFor(strategy.NodeID(f.Node), f.Inc)
	switch {
	case tb == nil || from == g.self:
	case tb.version == f.Version:
		// The same inheritance (a copy of the tombstone): nothing to absorb.
	case heirRanks(tb.version, f.Version):
		tb.laterHeirAt(from) // from ranks higher: fence into it
		defer g.fenceIntoLater(now, tb, fx)
	case f.Query:
		ack.Later = true
	case !g.heirSettles(now, tb) || tb.heirTarget != "":
		ack.Busy = true // this tombstone's own fence is in flight, or its incarnation is in view
	default:
		g.fencesApplied[k] = true
		g.absorb(now, tb, f.Version, f.DefaultCapacity, f.DefaultBurst, itemsFrom(f.Items), transfersFrom(f.OnBehalf), absorbedFrom(f.Absorbed))
		ack.Absorbed = true
	}
	reply()
}

// absorb gives up what another heir inherited of tb's incarnation at an
// earlier version (dc, db, items), as the incarnation would: and the
// transfers that heir credited on its behalf (onBehalf) that tb's record
// shows credited too; the others are never credited here, and are passed
// on for the incarnation to reconcile. Given up here, once per inheritance
// (fencesApplied), not by the other heir: two nodes may count one
// inheritance (an heir and a ward whose record holds a copy of its
// tombstone), and only one of them is fenced out of it later. A key idle
// here takes the amount as a debt, which debtFlow pays back.
//
// The give-up is kept on tb (absorbedInh), with what the absorbed
// tombstone had absorbed in turn (entries), and named in tb's fences: the
// incarnation may be alive after all (out of this node's view for
// heirGrace only) and may have given up the same inheritance itself, when
// a copy of the earlier tombstone fenced it, which tb's record, taken
// before, cannot show. It then undoes this give-up (see onFenced; found by
// TestConserveSplitNeverAboveC, seed 79 at 300 checks).
func (g *GDRL) absorb(now time.Duration, tb *tombstone, version uint64, dc, db int64, items []item, onBehalf []*transfer, entries []*absorbedInh) {
	if tb.absorbedAt(version) == nil && !slices.Contains(tb.givenUp, version) {
		g.giveUp(now, dc, db, items)
		e := &absorbedInh{version: version, by: g.self, byInc: g.inc, dc: dc, db: db, items: slices.Clone(items), at: g.version + 1}
		g.absorbCredits(now, tb, e, onBehalf)
		tb.absorbed = append(tb.absorbed, e)
	} else {
		// Given up already (by a give-up this tombstone carries, or by
		// the incarnation itself before the record tb holds): the
		// credits only.
		g.absorbCredits(now, tb, g.creditsEntry(tb, version), onBehalf)
	}
	for _, x := range entries {
		g.adoptAbsorbed(now, tb, x)
	}
	g.mark(partDefaults)
	g.mark(partTombs)
}

// creditsEntry is tb's give-up by this node of the credits only of its
// incarnation's inheritance at version (made when the amounts were given
// up already), added if there is none.
func (g *GDRL) creditsEntry(tb *tombstone, version uint64) *absorbedInh {
	k := proxyKey{version: version, by: g.self, byInc: g.inc, creditsOnly: true}
	for _, a := range tb.absorbed {
		if a.key() == k {
			return a
		}
	}
	e := &absorbedInh{version: version, by: g.self, byInc: g.inc, creditsOnly: true, at: g.version + 1}
	tb.absorbed = append(tb.absorbed, e)
	return e
}

// absorbCredits reconciles credits on tb's incarnation's behalf made by the
// heir of an earlier inheritance (e) against tb's record: one tb shows
// credited too is given up here (e.gaveUp), one it does not is settled
// elsewhere, never credited here, and passed on (e.passed). One that tb
// names already (reconciled by another give-up of that inheritance) is
// left alone.
func (g *GDRL) absorbCredits(now time.Duration, tb *tombstone, e *absorbedInh, ts []*transfer) {
	slices.SortFunc(ts, func(a, b *transfer) int { return cmpID(a.id, b.id) })
	for _, t := range ts {
		if tb.reconciled(e.version, t.id) {
			continue
		}
		if tb.applied.credited(t.id) {
			g.addItems(t.items, -1, now) // the incarnation credited it too
			e.gaveUp = append(e.gaveUp, t)
		} else if !tb.applied.settled(t.id) {
			tb.applied.settleElsewhere(t.id)
			e.passed = append(e.passed, t)
		}
	}
}

// reconciled reports whether a give-up tb carries of the inheritance at
// version names transfer id.
func (tb *tombstone) reconciled(version uint64, id TransferID) bool {
	is := func(x *transfer) bool { return x.id == id }
	for _, a := range tb.absorbed {
		if a.version == version && (slices.ContainsFunc(a.gaveUp, is) || slices.ContainsFunc(a.passed, is)) {
			return true
		}
	}
	return false
}

// adoptAbsorbed takes over x, a give-up that a tombstone absorbed into tb
// had made (or carried): tb names it from now on. If tb carries a give-up
// of the same inheritance already, x is a second one: its amounts and the
// credits it gave up are added back here, and its credits are reconciled
// against tb's record as if they came with the fence (credits only).
func (g *GDRL) adoptAbsorbed(now time.Duration, tb *tombstone, x *absorbedInh) {
	if slices.ContainsFunc(tb.absorbed, func(y *absorbedInh) bool { return y.key() == x.key() }) {
		return
	}
	if tb.absorbedAt(x.version) != nil && !x.creditsOnly {
		g.undoAbsorbed(now, x)
		g.absorbCredits(now, tb, g.creditsEntry(tb, x.version), append(slices.Clone(x.gaveUp), x.passed...))
		return
	}
	c := *x
	c.at = g.version + 1
	c.gaveUp, c.passed = slices.Clone(x.gaveUp), nil
	g.absorbCredits(now, tb, &c, slices.Clone(x.passed))
	tb.absorbed = append(tb.absorbed, &c)
}

// undoAbsorbed adds back what give-up x took: its inherited amounts and
// the credits it gave up.
func (g *GDRL) undoAbsorbed(now time.Duration, x *absorbedInh) {
	neg := make([]item, len(x.items))
	for i, it := range x.items {
		neg[i] = item{key: it.key, c: -it.c, b: -it.b}
	}
	g.giveUp(now, -x.dc, -x.db, neg)
	for _, t := range x.gaveUp {
		g.addItems(t.items, 1, now)
	}
	g.mark(partDefaults)
}

// absorbedAt is tb's give-up of the amounts of its incarnation's
// inheritance at record version version (nil if none).
func (tb *tombstone) absorbedAt(version uint64) *absorbedInh {
	for _, a := range tb.absorbed {
		if a.version == version && !a.creditsOnly {
			return a
		}
	}
	return nil
}

// names reports whether tb lists transfer id as credited on its
// incarnation's behalf: by its holder as heir, or by the heir of an
// earlier inheritance it absorbed.
func (tb *tombstone) names(id TransferID) bool {
	is := func(x *transfer) bool { return x.id == id }
	if slices.ContainsFunc(tb.onBehalf, is) {
		return true
	}
	for _, a := range tb.absorbed {
		if slices.ContainsFunc(a.gaveUp, is) || slices.ContainsFunc(a.passed, is) {
			return true
		}
	}
	return false
}

// absorbLocal: this node may hold two tombstones of one dead incarnation
// at different versions (its own inheritance, and a copy that came with a
// ward's record, or the other way round); the later one absorbs the
// earlier one here, as another heir would.
func (g *GDRL) absorbLocal(now time.Duration) {
	for {
		var lo, hi *tombstone
		for _, a := range g.tombs {
			if !g.heirSettles(now, a) || a.heirTarget != "" {
				continue
			}
			for _, b := range g.tombs {
				if b != a && b.node == a.node && b.inc == a.inc && b.version > a.version && g.heirSettles(now, b) && b.heirTarget == "" {
					lo, hi = a, b
				}
			}
		}
		if lo == nil {
			return
		}
		k := fenceKey{inc: lo.inc, version: lo.version}
		if !g.fencesApplied[k] {
			g.fencesApplied[k] = true
			g.absorb(now, hi, lo.version, lo.dc, lo.db, lo.items, slices.Clone(lo.onBehalf), lo.absorbed)
		}
		g.tombs = slices.DeleteFunc(g.tombs, func(x *tombstone) bool { return x == lo })
		g.mark(partTombs)
	}
}

func (g *GDRL) onHeirFenceAck(now time.Duration, from strategy.NodeID, a *peerv1.GdrlFenceAck, fx *strategy.Effects) {
	tb := g.tombForV(strategy.NodeID(a.Node), a.Inc, a.Version)
	if tb == nil {
		return
	}
	if tb.heirTarget != from {
		g.onHeirQueryAck(now, from, tb, a, fx)
		return
	}
	switch {
	case a.Absorbed:
		g.dropTomb(tb)
		return
	case a.Busy || a.Later:
		return // sent again after retransmit; or a late answer to a query
	}
	// Nothing to absorb into at from. The answer may be a late one to a
	// query made before from inherited (an answer does not say which
	// message it answers), so from is asked again (heirFences), rather
	// than taken to hold no later tombstone.
	tb.heirTarget = ""
	delete(tb.heirLater, from)
	delete(tb.heirAsked, from)
	g.heirFences(now, fx)
}

// onHeirQueryAck takes an answer from a member that tb's fence is not in
// flight to: the answer to a query (or a late one to a fence), which
// counts only while tb looks for other heirs and its fence is in flight
// nowhere. Later: from holds a later tombstone, tb fences into it.
// Absorbed: from gave up this inheritance already (the fence of a copy of
// tb, or tb's own fence whose answer came late), so tb is dropped, as on
// that answer to its fence. Otherwise from holds no later tombstone,
// unless its own query showed one since (heirLater): an answer made
// before from inherited can arrive after that query (held back until
// from's buddy held its record, or reordered), and taken at its word it
// left tb never fencing into from, the incarnation counted by two heirs
// for good (found by TestConserveSplitNeverAboveC at 1,000 checks, under
// `partition: conserve`: C + C/6).
func (g *GDRL) onHeirQueryAck(now time.Duration, from strategy.NodeID, tb *tombstone, a *peerv1.GdrlFenceAck, fx *strategy.Effects) {
	if tb.heirTarget != "" || !g.heirSettles(now, tb) || a.Busy {
		return
	}
	switch {
	case a.Absorbed:
		g.dropTomb(tb)
	case a.Later:
		tb.laterHeirAt(from)
		g.fenceIntoLater(now, tb, fx)
	case !tb.heirLater[from]:
		tb.noLaterHeirAt(from)
	}
}

// dropTomb drops tb, whose inheritance another heir absorbed.
func (g *GDRL) dropTomb(tb *tombstone) {
	g.tombs = slices.DeleteFunc(g.tombs, func(x *tombstone) bool { return x == tb })
	g.mark(partTombs)
}

// noLaterHeirAt records that member n answered it holds no later
// tombstone of tb's incarnation (heirFences asks it no more while it is in
// view).
func (tb *tombstone) noLaterHeirAt(n strategy.NodeID) {
	if tb.heirAsked == nil {
		tb.heirAsked = map[strategy.NodeID]bool{}
	}
	tb.heirAsked[n] = true
}

// laterHeirAt records that member n holds a later tombstone of tb's
// incarnation (its query, or its answer to tb's, said so).
func (tb *tombstone) laterHeirAt(n strategy.NodeID) {
	delete(tb.heirAsked, n)
	if tb.heirLater == nil {
		tb.heirLater = map[strategy.NodeID]bool{}
	}
	tb.heirLater[n] = true
}

// fenceIntoLater sends tb's fence to a member in view known to hold a
// later tombstone of its incarnation (heirLater; the first in NodeID
// order), when tb looks for other heirs and its fence is in flight
// nowhere. It reports whether it did.
func (g *GDRL) fenceIntoLater(now time.Duration, tb *tombstone, fx *strategy.Effects) bool {
	if tb.heirTarget != "" || !g.heirSettles(now, tb) {
		return false
	}
	for _, m := range g.members {
		if m != g.self && tb.heirLater[m] {
			tb.heirTarget, tb.heirSent = m, now
			fx.Send(m, g.encode(g.heirFence(tb, false)))
			return true
		}
	}
	return false
}

// giveUp subtracts amounts inherited elsewhere from this node's shares: dc,
// db from every key items does not list (and the default share), each
// item's amount from its key.
func (g *GDRL) giveUp(now time.Duration, dc, db int64, items []item) {
	inItems := map[string]bool{}
	for _, it := range items {
		inItems[it.key] = true
	}
	for _, key := range g.sortedKeys() {
		if !inItems[key] {
			g.adjust(key, -dc, -db, now)
		}
	}
	for _, it := range items {
		g.pin(it.key, now)
		g.adjust(it.key, -it.c, -it.b, now)
	}
	g.dc -= dc
	g.db -= db
}
