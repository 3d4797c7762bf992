package gdrl

import (
	"math"
	"time"

	peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// Quiet when balanced (ours; see "Exchanges" in the package
// documentation). The pairwise update C_i <- C_i + eta (q_i - q_j) (001
// Appendix, Theorem 2) moves nothing when the pair's indicators are
// equal; with the fill indicator, a key's flow between two nodes is not
// zero only when one end holds other than its default share (a flow or
// relaxation to undo, a debt), or when one end has evidence that the
// key's demand is skewed towards it (skewed), which needs that end to be
// active with enough intervals with requests, and the other end not to
// have seen the key. So a node lists a key in its probe to a neighbour
// only when its own end is live (live) and, if its end could move the key
// only by its own evidence, only while it does not know that the
// neighbour sees the key (sees): the responder computes the update from
// both ends' inputs, so whichever end is live sends, and a pair whose
// ends are both quiet has nothing to move. Under requests sprayed over the
// nodes (every node sees every key) that leaves almost nothing to probe.

// live reports whether this node's end of key could make the pair's
// update move something, whatever the other end holds (fill indicator;
// the other indicators move capacity whenever the demands differ, so
// every key that is active or away from the default share is live): a
// share other than the default share or negative (relaxation, a debt),
// or an active key with evidence of its own (skewed: enough intervals
// with requests, or no default share at all, as a joiner's).
func (g *GDRL) live(me side) bool {
	if me.c != me.dc || me.b != me.db || me.c < 0 || me.b < 0 {
		return true
	}
	if g.indicator != IndicatorFill {
		return me.active
	}
	return me.active && (me.dc <= 0 || g.evidenced(me.recent))
}

// evidenced reports whether requests in `recent` intervals at one end of a
// pair, none of which reached the other end, are significant at the
// evidence parameter's standard errors (one-sided; see skewed): all of
// them missing the other end has probability 2^-recent when the demand is
// spread evenly.
func (g *GDRL) evidenced(recent float64) bool {
	tail := math.Log(0.5 * math.Erfc(g.evidence/math.Sqrt2))
	return recent*math.Ln2 > -tail
}

// evidenceOnly reports whether this end of a key could move it only by its
// own evidence (fill; live, at its default share and with one): then the
// pair's update moves nothing unless the other end has not seen the key,
// which neither the demand estimate nor its noise changes.
func (g *GDRL) evidenceOnly(me side) bool {
	return g.indicator == IndicatorFill && me.c == me.dc && me.b == me.db && me.dc > 0 && g.live(me)
}

// maxResendWait is the longest a key probed for its evidence alone waits
// before it is probed again to the same neighbour (resendWait): the time
// a neighbour that listed the key as active certainly sees it (hear).
func (g *GDRL) maxResendWait() time.Duration { return (seenFactor - 2) * g.idle }

// resendWait is how long after now a key probed with inputs me waits
// before it is probed again without a change (old: what was last sent of
// it): `refresh`, and for a key probed for its evidence alone (evidenceOnly)
// twice the previous wait, from `refresh` up to maxResendWait. A probe of
// such a key that moved nothing leaves the key at the default share, and
// the next one is a retry against a lost probe or a neighbour that
// stopped seeing the key since (exponential backoff, ours).
func (g *GDRL) resendWait(me side, old sentKey) time.Duration {
	if !g.evidenceOnly(me) || old.wait <= 0 || old.again {
		return g.refresh
	}
	return min(max(2*old.wait, g.refresh), max(g.maxResendWait(), g.refresh))
}

// heardFrom is what a neighbour's incarnation told this node of the keys
// it sees: per key, until when it certainly sees it (side.seen), from the
// probes and asks in which it listed the key as active.
type heardFrom struct {
	inc   uint64
	until map[string]time.Duration
}

// hear records that neighbour (from, inc) listed shares at now: a key it
// listed as active was requested there within `idle`, so it sees the key
// (requested within seenFactor idle windows) for seenFactor-1 idle windows
// more; we count seenFactor-2, leaving an idle window for the message's
// delay. A new incarnation forgets what the previous one said (a restart
// forgets the keys it saw).
func (g *GDRL) hear(now time.Duration, from strategy.NodeID, inc uint64, shares []*peerv1.GdrlShare) {
	if g.heard == nil {
		g.heard = map[strategy.NodeID]*heardFrom{}
	}
	h := g.heard[from]
	if h == nil || h.inc != inc {
		h = &heardFrom{inc: inc, until: map[string]time.Duration{}}
		g.heard[from] = h
	}
	for _, s := range shares {
		if s.Active && g.shares[s.Key] != nil {
			h.until[s.Key] = max(h.until[s.Key], now+(seenFactor-2)*g.idle)
		}
	}
}

// sees reports whether neighbour nb (its current incarnation) certainly
// sees key at now (see hear).
func (g *GDRL) sees(nb strategy.NodeID, key string, now time.Duration) bool {
	h := g.heard[nb]
	if h == nil {
		return false
	}
	if p := g.peers[nb]; p == nil || p.inc != h.inc {
		return false
	}
	return now < h.until[key]
}

// forgetHeard drops what was heard from nodes that are no longer
// neighbours, and of keys this node holds no explicit share of (they are
// not live here, and hear records them again).
func (g *GDRL) forgetHeard(now time.Duration) {
	for n, h := range g.heard {
		if !g.isNeighbour(n) {
			delete(g.heard, n)
			continue
		}
		for k, until := range h.until {
			if g.shares[k] == nil || now >= until {
				delete(h.until, k)
			}
		}
	}
}

func (g *GDRL) isNeighbour(n strategy.NodeID) bool {
	for _, nb := range g.neighbours {
		if nb == n {
			return true
		}
	}
	return false
}

// probeAgain makes the next probe to `to` list key whatever its inputs
// (a payment held back: the pair evaluates the key again).
func (g *GDRL) probeAgain(to strategy.NodeID, key string) {
	if g.sent == nil {
		g.sent = map[strategy.NodeID]map[string]sentKey{}
	}
	if g.sent[to] == nil {
		g.sent[to] = map[string]sentKey{}
	}
	g.sent[to][key] = sentKey{again: true}
	g.capacityMoved()
}

// probeDue reports whether this interval's probe is due, and schedules
// the next one (ours, see "Exchanges" in the package documentation):
// every interval after capacity moved here (a transfer paid or credited,
// an ask sent, a payment held back), and while nothing moves, after twice
// as many intervals as the previous gap, up to maxProbeGap intervals.
func (g *GDRL) probeDue() bool {
	if g.moved {
		g.moved, g.probeGap, g.probeWait = false, 0, 0
	}
	if g.probeWait > 0 {
		g.probeWait--
		return false
	}
	g.probeGap = min(max(2*g.probeGap, 1), g.maxGap)
	g.probeWait = g.probeGap - 1
	return true
}

// capacityMoved notes that capacity moved at this node (or is about to):
// the next interval probes again (probeDue).
func (g *GDRL) capacityMoved() {
	g.moved, g.probeWait = true, 0
}
