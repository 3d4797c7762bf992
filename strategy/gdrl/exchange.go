package gdrl

import (
	"slices"
	"sort"
	"time"

	peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// Exchanges: probes, asks and the pairwise update per key (001 Appendix,
// Theorem 2; see "Exchanges" in the package documentation).

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
	sent := g.sentTo(nb, now)
	if len(g.shares) == 0 {
		return
	}
	var keys []string
	msgs := map[string]*peerv1.GdrlShare{} // per listed key: its inputs now
	for _, k := range g.sortedKeys() {
		s := g.shareMsg(k, now)
		if !g.toProbe(now, nb, k, s, sent) {
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
		sent[k] = sentKey{c: s.Capacity, b: s.Burst, demand: s.Demand, noise: s.Noise, recent: s.Recent, ind: s.Indicator, active: s.Active, seen: s.Seen, at: now,
			wait: g.resendWait(g.mySide(k, now), sent[k])}
		if s.Capacity == 0 && s.Burst == 0 && !s.Active {
			p.Empty = append(p.Empty, k)
		} else {
			p.Shares = append(p.Shares, s)
		}
	}
	fx.Send(nb, g.encode(&peerv1.GdrlMessage{Body: &peerv1.GdrlMessage_Probe{Probe: p}}))
}

// sentTo returns what was last sent to neighbour nb per key, after
// forgetting what was sent to nodes that are no longer neighbours and to
// nb of keys this node holds no explicit share of any more.
func (g *GDRL) sentTo(nb strategy.NodeID, now time.Duration) map[string]sentKey {
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
	g.forgetHeard(now)
	return sent
}

// toProbe reports whether a probe to neighbour nb lists key k, whose
// inputs are s now (see probe): always when a payment held back asked for
// it (sentKey.again); not when this end is not live (see quiet.go: then
// forgotten from sent), nor when this end could move the key only by its
// own evidence and nb is known to see the key, nor when what was sent of
// it is recent and not materially different.
func (g *GDRL) toProbe(now time.Duration, nb strategy.NodeID, k string, s *peerv1.GdrlShare, sent map[string]sentKey) bool {
	old, ok := sent[k]
	if ok && old.again {
		return true
	}
	me := g.mySide(k, now)
	if !g.live(me) {
		delete(sent, k)
		return false
	}
	if g.evidenceOnly(me) {
		if g.sees(nb, k, now) {
			return false // only skewed could move it, and nb sees the key
		}
		return !ok || now-old.at >= old.wait
	}
	if ok && now-old.at < g.refresh && !old.differs(s) {
		return false
	}
	return true
}

// sentKey is a key's indicator inputs as last sent to a neighbour.
type sentKey struct {
	c, b          int64
	demand, noise float32
	recent        float32
	ind           float32 // the measured indicator (discard, utilisation)
	active, seen  bool
	at            time.Duration
	again         bool          // probe the key again whatever its inputs (probeAgain)
	wait          time.Duration // resend after this long without a change (resendWait)
}

// differs reports whether s is materially different from what was sent:
// other shares or activity, a demand estimate up by a fifth or down by
// half, a noise estimate doubled or halved, a measured indicator off by
// 0.05. (A falling demand only makes
// the node give capacity away, which may wait.)
func (o sentKey) differs(s *peerv1.GdrlShare) bool {
	return o.c != s.Capacity || o.b != s.Burst || o.active != s.Active || o.seen != s.Seen ||
		s.Demand > 1.2*o.demand || s.Demand < 0.5*o.demand ||
		s.Noise > 2*o.noise || s.Noise < 0.5*o.noise ||
		s.Recent > 1.2*o.recent || s.Recent < 0.5*o.recent ||
		s.Indicator > o.ind+0.05 || s.Indicator < o.ind-0.05
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
	g.hear(now, from, fromInc, p.Shares)
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
	g.answerProbe(now, from, fromInc, p, theirs, keys, fx)
}

// answerProbe runs the pairwise update for each of keys (sorted) with the
// prober's inputs theirs: it pays what it owes and asks for what the
// prober owes (onProbe).
func (g *GDRL) answerProbe(now time.Duration, from strategy.NodeID, fromInc uint64, p *peerv1.GdrlProbe, theirs map[string]*peerv1.GdrlShare, keys []string, fx *strategy.Effects) {
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
		g.capacityMoved() // the prober owes: it pays on the ask
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
	g.hear(now, from, fromInc, a.Shares)
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
			me.ind = float64(float32(g.measured(sh)))
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
			them.ind = float64(s.Indicator)
		}
	}
	return them
}

// shareMsg is key's indicator inputs at this node.
func (g *GDRL) shareMsg(key string, now time.Duration) *peerv1.GdrlShare {
	me := g.mySide(key, now)
	return &peerv1.GdrlShare{Key: key, Capacity: me.c, Burst: me.b, Demand: float32(me.demand), Noise: float32(me.noise), Recent: float32(me.recent), Active: me.active, Seen: me.seen,
		Indicator: float32(me.ind)}
}
