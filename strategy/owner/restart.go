package owner

import (
	"slices"
	"time"

	peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// Restart (see "Restart" in the package doc; ours): a node that starts
// after time 0 (a restart, a joiner) sees the live members at once, but
// they see it only when their failure detectors report the join, up to
// one detection later. Until then each of them still decides the keys it
// owns without this node, and this node, deciding the keys it owns in
// its own view, would be a second bucket beside theirs: measured, r = 5/s,
// b = 1, 2 nodes, n1 down from 0.1 s to 1.4 s, detection 1.2 s, both n0
// and n1 admitted key u0001 from 1.4 s to 2.6 s, 1.63 tokens over
// b + r*T with one crash (TestRestartShrunkCases, case 1). So a started
// node defers each key to the key's owner among the other members (the
// owner in their views; TestRestartDefersToOldOwner), forwarding its
// requests there, until that node shows it sees this node: it forwards
// or charges a request to it, or ships it levels that are not the answer
// to this node's warm-up query (a replica sync or a hand-over, sent only
// to members of its view). A node that sees the started node and gets
// its forward anyway (the started node deferred to a peer that saw it
// all along: a restart within one detection) decides it and ships the
// key's level to the sender at once (shipToDeferring), which ends the
// deferral one round trip later. A forward a third node sends the
// started node while it defers the key is decided here and charged to
// the node it defers to (chargeNotOwned). Left: with failure detectors
// that see the join at different times (jitter), a node that sees the
// started node may route to it while the one it defers to does not, and
// for that spread both decide (charged, but after the fact). A rule added
// to a running node (strategy.Config.Added: a reload, a derived rule) is
// not deferred: its node's peers see it already (a derived rule made
// within one detection of a restart is the exception, not handled).

// restartState is a started node's view of which peers see it: seenBy
// nil means every member does (a node started at time 0, or once every
// member showed it).
type restartState struct {
	startedAt time.Duration // when this node started
	seenBy    map[strategy.NodeID]bool
}

// deferTo is the node key is deferred to, or "" when key goes to its
// owner in this node's view: key's owner among the other members (the
// owner in their views while they do not see this node), while that node
// has not shown it sees this node. Every key is deferred so, not only
// those this node owns: under split_placement=distinct a sub-bucket's
// owner shifts when a node joins the rendezvous order.
func (o *Owner) deferTo(key string) strategy.NodeID {
	if o.rs.seenBy == nil {
		return ""
	}
	alt := o.ownerIn(key, o.others())
	if alt == "" || o.rs.seenBy[alt] {
		return ""
	}
	return alt
}

// sawUs notes that from sees this node (m is from's message, not yet
// handled): a forward or a charge routed here of a request that arrived
// after this node started, or levels other than the answer to this
// node's warm-up query. A forward of an earlier request proves nothing:
// measured, r = 43/s, b = 2, 4 nodes, detection 1.8 s, n1 down 6.9-7.1 s:
// n2's view dropped n1 at 7.1 s (the detection of n0's earlier restart
// found n1 down), while n2's forward sent just before reached the new n1
// at 7.1007 s, which then decided u0001 beside n2 until n2 saw it again
// at 8.9 s: 34.652 tokens over b + r*T, bound 6 (the same at b805607;
// TestRestartShrunkCases, case 7). The first sign from a peer starts
// a warm-up (the keys deferred to it are decided here from now on, from
// the levels their holders have).
func (o *Owner) sawUs(now time.Duration, from strategy.NodeID, m *peerv1.OwnerMessage) {
	if o.rs.seenBy == nil || o.rs.seenBy[from] {
		return
	}
	switch b := m.Body.(type) {
	case *peerv1.OwnerMessage_Forward:
		if time.Duration(b.Forward.ArrivalNs) <= o.rs.startedAt {
			return // routed (or charged) before this node started: stale
		}
	case *peerv1.OwnerMessage_Levels:
		if o.answersQuery(from, b.Levels) {
			return
		}
	default:
		return
	}
	o.rs.seenBy[from] = true
	o.changedAt = now // keys deferred to from: fetch their levels first
	o.prevMembers = o.others()
	o.restartSeenAll()
}

// answersQuery reports whether every level of ls is for a key whose
// warm-up awaits from (the answer to this node's query).
func (o *Owner) answersQuery(from strategy.NodeID, ls *peerv1.OwnerLevels) bool {
	for _, l := range ls.Levels {
		f := o.fetching[l.Key]
		if f == nil || !slices.Contains(f.await, from) {
			return false
		}
	}
	return len(ls.Levels) > 0
}

// restartSeenAll ends the deferrals once every other member showed it
// sees this node.
func (o *Owner) restartSeenAll() {
	for _, m := range o.members {
		if m != o.self && !o.rs.seenBy[m] {
			return
		}
	}
	o.rs.seenBy = nil
}

// restartMembers updates, on a membership change from prev, the peers
// known to see this node: one that left this node's view is forgotten,
// one that joined it (a joiner sees the live members when it starts) is
// taken as seeing it.
func (o *Owner) restartMembers(prev []strategy.NodeID) {
	if o.rs.seenBy == nil {
		return
	}
	for m := range o.rs.seenBy {
		if !slices.Contains(o.members, m) {
			delete(o.rs.seenBy, m)
		}
	}
	for _, m := range o.members {
		if !slices.Contains(prev, m) {
			o.rs.seenBy[m] = true
		}
	}
	o.restartSeenAll()
}

// shipToDeferring ships, after this node decided q, a forward of a key
// this node owns only in its view less the sender (the sender, a member
// of its view, routed q as a started node that defers does, restart.go),
// the key's level to the sender: the shipment shows the sender that this
// node sees it, and carries this node's decisions.
func (o *Owner) shipToDeferring(q queued, fx *strategy.Effects) {
	if !slices.Contains(o.members, q.origin) || o.ownerIn(q.key, o.members) == o.self {
		return
	}
	without := slices.DeleteFunc(slices.Clone(o.members), func(m strategy.NodeID) bool { return m == q.origin })
	if o.ownerIn(q.key, without) != o.self {
		return // not routed here as by a node that counts itself out
	}
	o.shipLevels([]string{q.key}, func(string) []strategy.NodeID { return []strategy.NodeID{q.origin} }, false, fx)
}

// claim is a peer that asked this node for a key's level as the key's
// owner in its view (a warm-up's query) while another node owns the key
// in this node's view: the views disagree, and that peer decides the key.
type claim struct {
	node  strategy.NodeID
	until time.Duration
}

// maxClaims bounds the claims remembered; beyond it new ones are not.
const maxClaims = 4096

// noteClaim remembers, for a warm-up query from `from` for key, that from
// decides key while this node's view names another owner (a node that
// restarted after that owner crashed: it sees the crash, this node does
// not yet). The claim lasts until this node's view changes, or chargeTTL.
func (o *Owner) noteClaim(now time.Duration, from strategy.NodeID, key string) {
	if o.primary(key) == from || from == o.self {
		return
	}
	if o.claims == nil {
		o.claims = map[string]claim{}
	}
	if _, ok := o.claims[key]; ok || len(o.claims) < maxClaims {
		o.claims[key] = claim{node: from, until: now + o.chargeTTL}
	}
}

// chargeClaimant sends charge c, a fallback admission for owner, to the
// node that claimed its key too (noteClaim): that node decides the key
// meanwhile, and the owner this node names may be dead (the fallback's
// reason) and its replacement in this node's view not known for one
// detection. Measured: r = 34/s, b = 2, 3 nodes, n1 and n2 (key u0001's
// two replicas) down at 0.1 s, n2 back at 0.2 s, detection 0.9 s: n2
// (seeing n1 dead) decided u0001 from 0.2 s while n0 (still routing it to
// n1) admitted it by on_timeout, charged to n1 only, 4.178 tokens over
// the 2 bursts of the bound (TestDoubleCrashEnvelopeProperty).
func (o *Owner) chargeClaimant(now time.Duration, c *charge, owner strategy.NodeID, fx *strategy.Effects) {
	cl, ok := o.claims[c.req.Key]
	if !ok || now >= cl.until {
		delete(o.claims, c.req.Key)
		return
	}
	if cl.node == owner || !slices.Contains(o.members, cl.node) {
		return
	}
	if !slices.Contains(c.sentTo, cl.node) {
		c.sentTo = append(c.sentTo, cl.node) // its acknowledgement drops c too
	}
	fx.Send(cl.node, chargeMessage(c))
}

// noteActing remembers that this node decided a forward for key, which
// another node owns in its view (chargeNotOwned): its senders route key
// here, so this node's bucket of key is in use as the key's, for one
// suspicion.
func (o *Owner) noteActing(now time.Duration, key string) {
	if o.acting == nil {
		o.acting = map[string]time.Duration{}
	}
	if _, ok := o.acting[key]; ok || len(o.acting) < maxClaims {
		o.acting[key] = now + max(o.suspectFor, o.timeout)
	}
}

// fallbackActing answers req by on_timeout=local from key's own bucket,
// not from the (r/N, b/N) fallback bucket, while this node decides the
// key's forwards for its suspected owner (noteActing: peers that do not
// see that owner route the key here), and charges it to the owner (taken
// here already); ok is false otherwise. Two buckets here would admit
// r + r/N. Measured: r = 50/s, b = 3, 3 nodes, n0 and n1 down at 0.1 s,
// n0 back at 0.2 s (seeing n1 dead), n1 at 0.9 s, detection 1.8 s: n2
// decided n0's forwards of u0001 (owner n1) from its replica bucket and
// its own requests for u0001 from its fallback bucket, 7.5 tokens over
// b + r*T, bound 6 (TestRestartShrunkCases, case 6).
func (o *Owner) fallbackActing(now time.Duration, req strategy.Request, owner strategy.NodeID, fx *strategy.Effects) (allowed, ok bool) {
	until, acting := o.acting[req.Key]
	if !acting || now >= until || o.auto != nil || (o.od.On && req.Charge) {
		return false, false
	}
	b, held := o.tab(req.Key).Lookup(req.Key)
	if !held {
		return false, false
	}
	if allowed = b.AllowN(now, req.Tokens); allowed {
		o.addCharge(now, req, owner, fx)
		o.charges[req.ID].taken = true
	}
	return allowed, true
}
