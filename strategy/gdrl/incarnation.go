package gdrl

import (
	"slices"
	"time"

	peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// Incarnations: a node's incarnation numbers, hellos and the evidence that an
// older incarnation is dead (see "Incarnations" in the package documentation).

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
	g.fenceLive(now, from, inc, fx)
	return false
}

// fenceLive sends the fences and drains not yet under way to incarnation
// inc of node, which a message just showed alive.
func (g *GDRL) fenceLive(now time.Duration, node strategy.NodeID, inc uint64, fx *strategy.Effects) {
	for _, tb := range g.tombs {
		if tb.node == node && tb.inc == inc && !tb.lost && !tb.fenceDone && !tb.fencing && tb.heirTarget == "" {
			g.sendFenced(now, tb, fx)
		}
	}
	for _, tb := range g.draining {
		if tb.node == node && tb.inc == inc && !tb.fencing {
			g.sendDrain(now, tb, fx)
		}
	}
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
		g.mark(partHeld)
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
	g.redirectTransfers(now, node, inc, fx)
}

// redirectTransfers marks the transfers to older incarnations of node as
// for incarnation inc (or newer) and sends the released ones again.
func (g *GDRL) redirectTransfers(now time.Duration, node strategy.NodeID, inc uint64, fx *strategy.Effects) {
	for _, t := range slices.Clone(g.outbox) {
		if t.id.Dst == node && t.id.DstInc < inc {
			t.newInc = max(t.newInc, inc)
			if t.released {
				g.sendTransfer(now, t, fx)
			}
		}
	}
}
