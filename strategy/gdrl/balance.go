package gdrl

import (
	"slices"
	"time"

	peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// Default-share balancing (ours, see the package documentation): the
// default shares follow the membership. A node whose default share is
// below its fair split over its view (a joiner, a restarted node, every
// node once an heir holds a dead member's default) asks one other member
// per interval, round robin, with an ask that lists no key and carries its
// default share; a member whose default share is above its own fair split
// pays the asker the smaller of its excess and the asker's deficit, as a
// default-share transfer. Only nodes below their split ask, so a cluster
// of founding members (all at their split) never sends one; a leaving or
// dead node asks nothing (what it is paid for an ask it sent before is
// credited and handed over like any transfer), and a leaving node pays
// nothing. A stale or duplicated ask may make a payer pay a deficit twice:
// the asker is then above its split and pays the excess back when asked,
// and nothing is created either way.

// fairDefault is member's 1/N split of the rule's capacity and burst over
// this node's current view (splitUnits at its index in NodeID order; whole
// tokens of burst): what a founding member of that view starts with.
func (g *GDRL) fairDefault(member strategy.NodeID) (c, b int64) {
	i, _ := slices.BinarySearch(g.members, member)
	n := max(len(g.members), 1)
	return splitUnits(g.totalC, n, i), splitUnits(g.cfg.Burst, n, i) * UnitsPerToken
}

// askDefault sends, once per interval, an ask for default share to the
// next other member (round robin) while this node's default share is
// below its fair split. The ask lists no key: the member answers it only
// with a default-share transfer (onAsk, payDefault).
func (g *GDRL) askDefault(fx *strategy.Effects) {
	if g.leaving || len(g.members) < 2 {
		return
	}
	fc, fb := g.fairDefault(g.self)
	if g.dc >= fc && g.db >= fb {
		return
	}
	others := slices.DeleteFunc(slices.Clone(g.members), func(m strategy.NodeID) bool { return m == g.self })
	for range others {
		m := others[g.askNext%len(others)]
		g.askNext = (g.askNext + 1) % len(others)
		if p := g.peers[m]; p != nil && p.inc != 0 {
			fx.Send(m, g.encode(&peerv1.GdrlMessage{Body: &peerv1.GdrlMessage_Ask{Ask: &peerv1.GdrlAsk{
				ToInc: p.inc, DefaultCapacity: g.dc, DefaultBurst: g.db}}}))
			return
		}
	}
}

// offerRounds is how many rounds over the other members (in intervals:
// offerRounds times their number) a node stays above its split, its
// default share not falling and its view not changing, before it makes
// itself known to every other member (offerDefault; ours).
const offerRounds = 8

// offerDefault makes a node that holds more than its split, unasked, known
// to the members that might be short of theirs (ours). A node asks only
// the members whose incarnation it knows (askDefault): those it has heard
// from, its ring neighbours, its buddy and wards, joiners and restarted
// nodes (which say hello to every member). Founding members never say
// hello to each other, so a founder short of its split may know none of
// the members with an excess (found by TestLeaveConservesProperty at
// 1,000 checks: a joiner left before it was paid, the split rose from
// 1/6 to 1/5, and the asks that followed left a founder 1/60 of the rule
// short and its opposite on the ring 1/60 above, for good). So once a node
// has stayed above its split for offerRounds rounds, its default share
// not falling and its view not changing, it sends every other member in
// turn, one per interval, an ask that lists no key, carries its default
// share and has to_inc 0: it matches no incarnation, so a member answers
// nothing and only takes note of the sender's incarnation (observe, as of
// any message); a member short of its split then asks it in its own round
// robin, and it pays. After one round it waits offerRounds rounds again.
// Only a node above its split offers, and an excess that the asks pay off
// within offerRounds rounds (an heir's inheritance, a leaver's hand-over)
// is never offered: asking the unknown members instead, from the first
// interval or after rounds of asks that were not paid (a node short of
// its split for good, after two failures lost shares, or in a netsplit),
// or saying hello to them, paid other members first and moved the
// simulator's results (see testdata/unfixed/README.md).
func (g *GDRL) offerDefault(fx *strategy.Effects) {
	if g.leaving || len(g.members) < 2 {
		g.offerWait = 0
		return
	}
	fc, fb := g.fairDefault(g.self)
	if g.dc <= fc && g.db <= fb || g.dc < g.offerDC || g.db < g.offerDB {
		g.offerWait = 0 // at or below the split, or paid something since
	}
	g.offerDC, g.offerDB = g.dc, g.db
	if g.dc <= fc && g.db <= fb {
		return
	}
	others := len(g.members) - 1
	g.offerWait++
	if g.offerWait <= offerRounds*others {
		return
	}
	m := g.members[g.offerNext%len(g.members)]
	g.offerNext = (g.offerNext + 1) % len(g.members)
	if m == g.self {
		m = g.members[g.offerNext%len(g.members)]
		g.offerNext = (g.offerNext + 1) % len(g.members)
	}
	if g.offerWait >= (offerRounds+1)*others {
		g.offerWait = 0 // one round sent: wait again
	}
	fx.Send(m, g.encode(&peerv1.GdrlMessage{Body: &peerv1.GdrlMessage_Ask{Ask: &peerv1.GdrlAsk{
		DefaultCapacity: g.dc, DefaultBurst: g.db}}}))
}

// payDefault pays (to, toInc), whose default share is (dc, db), the
// smaller of this node's excess over its fair split and to's deficit
// under its own, in one acknowledged transfer with a default item
// (defaultKey) that lists every key this node holds an explicit share of
// at zero: those keys do not follow the default share here, so they must
// not follow it at the receiver either (addItems adds the default item
// to every key a transfer does not list). Nothing is paid while a
// transfer to `to` is unacknowledged (stop and wait); to asks again.
func (g *GDRL) payDefault(now time.Duration, to strategy.NodeID, toInc uint64, dc, db int64) {
	if to == g.self || g.leaving || g.outstandingTo(to) {
		return
	}
	fc, fb := g.fairDefault(g.self)
	tc, tb := g.fairDefault(to)
	xc := min(max(g.dc-fc, 0), max(tc-dc, 0), g.totalC)
	xb := min(max(g.db-fb, 0), max(tb-db, 0), g.totalB)
	xb -= xb % UnitsPerToken // whole tokens of burst
	if xc <= 0 && xb <= 0 {
		return
	}
	out := []item{{key: defaultKey, c: xc, b: xb}} // "" sorts first
	for _, k := range g.sortedKeys() {
		// Listed at zero: the key keeps its amount here and at the
		// receiver. Pinned, so that the buddy's record holds it at its
		// amount and not at the new default.
		g.pin(k, now)
		out = append(out, item{key: k})
	}
	g.dc -= xc
	g.db -= xb
	g.mark(partDefaults)
	g.queueTransfer(to, toInc, out)
}
