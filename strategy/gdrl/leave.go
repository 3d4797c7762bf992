package gdrl

import (
	"time"

	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/internal/buckets"
)

// defaultKey is the key of the item of a transfer that moves the payer's
// default share: it applies to every key the transfer does not list. A
// leaver's hand-over and a default-share payment (payDefault) have one,
// and list every key the payer holds an explicit share of. No real key is
// empty (the runtime and the trace reader refuse empty keys), so it cannot
// be confused with one.
const defaultKey = ""

// itemFor is what t moves for key: its item for key, or its default item
// when it does not list key; false when it moves nothing for key.
func (t *transfer) itemFor(key string) (item, bool) {
	var def *item
	for i := range t.items {
		switch t.items[i].key {
		case key:
			return t.items[i], true
		case defaultKey:
			def = &t.items[i]
		}
	}
	if def != nil {
		return item{key: key, c: def.c, b: def.b}, true
	}
	return item{}, false
}

// addItems adds sign times the amounts of a transfer's items to this
// node's shares (sign -1 undoes a credit), with the tokens that travel
// with the burst when crediting. A default item (defaultKey) adds to the
// default share and to every explicit share the transfer does not list,
// as inherit does with a record's default share; the listed keys are
// made explicit first, from the default share as it was.
func (g *GDRL) addItems(items []item, sign int64, now time.Duration) {
	var def *item
	listed := map[string]bool{}
	for i := range items {
		it := &items[i]
		if it.key == defaultKey {
			def = it
			continue
		}
		listed[it.key] = true
		g.adjust(it.key, sign*it.c, sign*it.b, now)
		if sign > 0 {
			g.addTokens(it.key, it.t, now)
		}
	}
	if def == nil || (def.c == 0 && def.b == 0) {
		return
	}
	for i := range items {
		if items[i].key != defaultKey {
			g.pin(items[i].key, now) // keeps its amount, not the new default
		}
	}
	for _, k := range g.sortedKeys() {
		if !listed[k] {
			g.adjust(k, sign*def.c, sign*def.b, now)
		}
	}
	g.dc += sign * def.c
	g.db += sign * def.b
	g.mark(partDefaults)
}

// Leave starts a graceful hand-over (strategy.Leaver): this node gives
// everything it holds to its buddy, in acknowledged transfers (so lost,
// duplicated and reordered messages are handled as for any transfer),
// and takes part in no exchange from now on (it sends no probes and
// answers none, so no new flow starts towards it).
//
// One hand-over transfer carries the node's default share (an item that
// applies to every key it does not list, see defaultKey) and every
// explicit share, each with the tokens its bucket holds; the node debits
// them before the transfer is released, so the buddy's replicated record
// of it shows the shares gone and the transfer in its outbox. When the
// buddy later inherits that record (the node leaves its view), it adds
// the record's shares, which are zero, and adopts the transfer, which its
// duplicate filter shows already credited: nothing is counted twice.
//
// Shares that still reach the node afterwards (a transfer paid to it
// before it left, an inheritance) are credited and acknowledged as usual
// and then forwarded: while leaving, the node hands over whatever
// positive share it holds again, one transfer at a time (stop and wait),
// after every event. That is simpler than refusing transfers (a refused
// transfer would stay in its payer's outbox until the node leaves the
// payer's view and then go to the heir anyway). A debt (a negative share,
// after a fence) cannot be handed over; it stays in the record, which the
// buddy inherits. The node's own requests are refused once it holds no
// share: it is leaving.
func (g *GDRL) Leave(now time.Duration, fx *strategy.Effects) {
	if !g.started || g.leaving {
		return
	}
	g.leaving = true
	// A new record version, even when there is nothing to hand over (a
	// joiner whose first payments are still in flight): Left waits for
	// the buddy to acknowledge it, which only a buddy alive after the
	// leave began can do. Otherwise a leaver holding nothing whose buddy
	// had acknowledged its latest record and then crashed, before the
	// failure detector said so, reported Left at once, with its record
	// (its duplicate filter, the tombstone its heir settles later
	// payments with) at a dead node only: a transfer paid to it stayed
	// in flight for good (TestLeaveConservesProperty, fail file of
	// 2026-12-06; TestLeaveWaitsForLiveBuddy).
	g.dirty = true
	g.flush(now, fx) // hands over (flush calls handOver while leaving)
}

// Left reports whether the hand-over is complete (strategy.Leaver): Leave
// was called, the node holds no positive share, has no unacknowledged
// transfer (its hand-over transfers, and any other it owes, are settled),
// and its current buddy has acknowledged its latest record, a version
// made after Leave was called (so the heir of this node, should anyone
// still pay it, holds its duplicate filter and was alive after the leave
// began: also after a change of buddy during the leave, and when the
// buddy crashed before the leave and the view still holds it, when the
// node waits for the view to drop it and for its new buddy). A node alone
// has no one to hand over to and has left at once.
func (g *GDRL) Left() bool {
	if !g.leaving {
		return false
	}
	if g.buddy == "" {
		return true
	}
	return !g.holdsShare() && len(g.outbox) == 0 && !g.dirty && !g.lazy && g.acked == g.version
}

// Leaving reports whether Leave has been called.
func (g *GDRL) Leaving() bool { return g.leaving }

// holdsShare reports whether this node holds any positive share.
func (g *GDRL) holdsShare() bool {
	if g.dc > 0 || g.db > 0 {
		return true
	}
	for _, sh := range g.shares {
		if sh.c > 0 || sh.b > 0 {
			return true
		}
	}
	return false
}

// handOver pays everything this leaving node holds to its buddy, in one
// transfer, unless one to the buddy is unacknowledged (stop and wait) or
// the buddy's incarnation is not known yet (both end with an event that
// flushes, and so calls handOver again).
func (g *GDRL) handOver(now time.Duration) {
	if g.buddy == "" || g.outstandingTo(g.buddy) || !g.holdsShare() {
		return
	}
	toInc := g.buddyInc
	if p := g.peers[g.buddy]; toInc == 0 && p != nil {
		toInc = p.inc
	}
	if toInc == 0 {
		return
	}
	clampC := func(v int64) int64 { return min(max(v, 0), g.totalC) }
	clampB := func(v int64) int64 { return min(max(v, 0), g.totalB) }
	def := item{key: defaultKey, c: clampC(g.dc), b: clampB(g.db)}
	withDef := def.c > 0 || def.b > 0
	var out []item
	if withDef {
		out = append(out, def) // "" sorts first
	}
	for _, k := range g.sortedKeys() {
		sh := g.shares[k]
		c, b := clampC(sh.c), clampB(sh.b)
		if c == 0 && b == 0 && !withDef {
			continue
		}
		// Listed even when it moves nothing, so that the default item
		// does not apply to it.
		out = append(out, item{key: k, c: c, b: b, t: g.shrink(k, c, b, now)})
	}
	if withDef {
		g.dc -= def.c
		g.db -= def.b
		g.mark(partDefaults)
	}
	g.queueTransfer(g.buddy, toInc, out)
}

// Remaining is the whole tokens of this node's bucket (C_i, B_i) for key
// at now, in request tokens (the full burst share of a key it holds no
// explicit share of: its bucket would be new and full), at most the
// rule's burst (strategy.Remainer). Always known. It changes no state.
func (g *GDRL) Remaining(now time.Duration, key string) (int64, bool) {
	if sh := g.shares[key]; sh != nil {
		cp := sh.bkt
		g.clampBucket(&cp, sh.held, now) // on a copy: the tokens an allowance holds are not the bucket's
		return min(buckets.Whole(cp, now)/g.perToken, g.cfg.Burst), true
	}
	return min(g.burstOf(g.db)/g.perToken, g.cfg.Burst), true
}

// CapacityShares is the sum over the keys this node holds an explicit
// share of of C_i/C, and the number of those keys
// (strategy.ShareReporter). Keys at the default share are not counted
// (there are as many as there are keys); a debt counts negative.
func (g *GDRL) CapacityShares() (sum float64, keys int) {
	if g.totalC <= 0 {
		return 0, len(g.shares)
	}
	return float64(g.mem.sumC) / float64(g.totalC), len(g.shares) // kept as shares change (memory.go): no walk
}

var (
	_ strategy.Leaver        = (*GDRL)(nil)
	_ strategy.Remainer      = (*GDRL)(nil)
	_ strategy.ShareReporter = (*GDRL)(nil)
	_ strategy.Conserver     = (*GDRL)(nil)
)
