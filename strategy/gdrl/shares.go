package gdrl

import (
	"math"
	"slices"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// rateOf is the bucket rate that enforces a capacity share of c units,
// rounded down to the bucket's resolution; zero for a debt.
func (g *GDRL) rateOf(c int64) bucket.Rate {
	if c <= 0 || c/g.unit == 0 {
		return bucket.Rate{}
	}
	return bucket.Rate{Tokens: c / g.unit, Per: time.Second}
}

// burstOf is the bucket burst (in bucket tokens) for a burst share of b
// units, rounded down and capped at the rule's burst.
func (g *GDRL) burstOf(b int64) int64 {
	if b <= 0 {
		return 0
	}
	return min(b, g.totalB) / g.unit
}

// newBucket is a full bucket for shares (c, b). The parameters cannot be
// invalid: the unit was chosen so that the rule's whole burst fits.
func (g *GDRL) newBucket(c, b int64, now time.Duration) bucket.Bucket {
	return bucket.MustNew(g.rateOf(c), g.burstOf(b), now)
}

// materialize returns key's explicit share, creating it from the default
// share with a full bucket (an implicit key's bucket is full: it has never
// been used here, or it was dropped full).
func (g *GDRL) materialize(key string, now time.Duration) *share {
	if sh := g.shares[key]; sh != nil {
		return sh
	}
	sh := &share{c: g.dc, b: g.db, bkt: g.newBucket(g.dc, g.db, now)}
	g.shares[key] = sh
	g.shareAdded(key, sh)
	return sh
}

// pin makes key explicit (from the default share as it is) and marks it
// for replication. Whoever changes the default share while a key keeps its
// own amount (an inherited record's keys, a transfer's listed keys, a
// fence's items, even when that amount is zero) must pin the key first:
// the buddy's record holds a key it was never sent at the default share,
// so it would take the key for the new default, and an heir inheriting
// that record would add the wrong amount.
func (g *GDRL) pin(key string, now time.Duration) {
	g.materialize(key, now)
	g.touch(key)
}

// adjust adds (dc, db) to key's share, re-rates its bucket (keeping its
// level, capped at the new burst: moving burst never creates tokens) and
// marks the key for replication.
func (g *GDRL) adjust(key string, dc, db int64, now time.Duration) {
	if dc == 0 && db == 0 {
		return
	}
	sh := g.materialize(key, now)
	g.clamp(sh, now)
	sh.c += dc
	g.mem.sumC += dc
	sh.b += db
	// Valid by construction; a raise keeps waiting mode's reservations
	// due when promised (a level >= 0 re-rates as SetRate).
	_ = sh.bkt.SetRateKeepingDue(now, g.rateOf(sh.c), g.burstOf(sh.b))
	g.clamp(sh, now) // the new burst less what the driver holds: in debt below it
	if dc > 0 || db > 0 {
		g.endRefusal(key, sh)
	}
	g.touch(key)
}

// level is the tokens in sh's bucket at now, in units, rounded down (a
// unit below the exact level, so that a float rounding up never counts a
// token that is not there).
func (g *GDRL) level(sh *share, now time.Duration) int64 {
	g.clamp(sh, now)
	t := sh.bkt.Tokens(now)
	if t <= 1 {
		return 0
	}
	return int64(math.Floor(t-1)) * g.unit
}

// shrink takes (c, b) from key's share, as a payer does, and returns the
// tokens its bucket held above the reduced burst: they travel with the
// burst. Tokens the live driver holds (allowance.go) are not in the
// bucket (clamp) and never travel; a bucket left in debt (its reduced
// burst below them, or waiting mode's reservations) sends what it held
// and no more.
func (g *GDRL) shrink(key string, c, b int64, now time.Duration) (tokens int64) {
	sh := g.materialize(key, now)
	before := g.level(sh, now)
	g.adjust(key, -c, -b, now)
	after := max(sh.bkt.Tokens(now), 0)
	return min(max(before-int64(math.Ceil(after))*g.unit, 0), b)
}

// addTokens puts tokens (units, rounded down to the bucket's resolution)
// into key's bucket, up to its burst. A bucket in debt (waiting mode's
// reservations, RequestWait) takes none: its level is back at 0 when its
// last reservation is due, and tokens added would let it admit new
// requests at once while earlier ones are still to proceed (more than its
// burst when counted at proceed times). The tokens are dropped: never
// created, as a payer's tokens above a reduced burst are.
func (g *GDRL) addTokens(key string, tokens int64, now time.Duration) {
	sh := g.shares[key]
	if sh == nil || tokens <= 0 {
		return
	}
	if g.clamp(sh, now); sh.bkt.Tokens(now) < 0 {
		return
	}
	burst := g.burstOf(sh.b)
	old := g.level(sh, now) / g.unit
	lvl := min(old+tokens/g.unit, burst)
	nb := g.newBucket(sh.c, sh.b, now)
	if take := burst - lvl; take > 0 {
		nb.AllowN(now, take)
	}
	sh.bkt = nb
	g.clamp(sh, now) // tokens above the burst less what the driver holds are dropped
	if lvl > old {
		g.endRefusal(key, sh)
	}
}

// mark marks a part of the record as changed in the version being built.
func (g *GDRL) mark(part int) {
	g.partAt[part] = g.version + 1
	g.dirty = true
}

// touch marks key as changed in the record version being built.
func (g *GDRL) touch(key string) {
	if sh := g.shares[key]; sh != nil {
		sh.inRecord = true
	}
	if _, ok := g.changed[key]; !ok {
		g.mem.changed.Add(key)
	}
	g.changed[key] = g.version + 1
	g.dirty = true
}

// closeInterval updates every explicit key's demand estimate with the
// tokens requested in the interval that ends now (001 §III-A's low-pass
// filter: lambda <- (1-alpha) lambda + alpha * sample, started at the first
// interval with requests), and drops the shares that are idle and back at the default.
func (g *GDRL) closeInterval(now time.Duration) {
	for k, at := range g.seen {
		if now-at >= seenFactor*g.idle {
			delete(g.seen, k)
			g.seenDropped(k)
		}
	}
	secs := g.interval.Seconds()
	for _, k := range g.sortedKeys() {
		sh := g.shares[k]
		sample := float64(sh.reqTokens) * UnitsPerToken / secs
		refused := float64(sh.refTokens) * UnitsPerToken / secs
		sh.reqTokens, sh.refTokens = 0, 0
		if sh.hasDemand || sample > 0 {
			// Started from zero, not from the first sample: a sparse key's
			// first request is not a rate of one token per interval.
			sh.demand = (1-g.alpha)*sh.demand + g.alpha*sample
			sh.demandSq = (1-g.alpha)*sh.demandSq + g.alpha*sample*sample
			sh.refused = (1-g.alpha)*sh.refused + g.alpha*refused
			sh.admitted = (1-g.alpha)*sh.admitted + g.alpha*(sample-refused)
			g.closeWait(sh)
			sh.hasDemand = true
			sh.intervals++
			ev := 0.0
			if sample > 0 {
				ev = 1
			}
			sh.events = (1-g.eventAlpha())*sh.events + g.eventAlpha()*ev
		}
		if !g.active(sh, now) && sh.c == g.dc && sh.b == g.db && sh.held == 0 && sh.bkt.Full(now) { // tokens held: not full
			g.endRefusal(k, sh) // a window is over by then (full); none is left behind
			delete(g.shares, k)
			g.shareDropped(k, sh)
			if sh.inRecord {
				g.touch(k) // replicated as removed
			}
		}
	}
	g.shrinkMaps()
}

// active reports whether sh was requested within the idle window.
func (g *GDRL) active(sh *share, now time.Duration) bool {
	return sh != nil && sh.everActive && now-sh.lastActive < g.idle
}

// side is one end of a pairwise exchange for one key.
type side struct {
	id     strategy.NodeID
	c, b   int64   // shares
	dc, db int64   // the node's default shares
	demand float64 // units per second
	noise  float64 // standard error of demand
	recent float64 // intervals with requests within the idle window
	ind    float64 // the measured indicator (discard, utilisation, response), for active keys
	active bool
	seen   bool // requested within seenFactor idle windows
}

// noise is the standard error of sh's demand estimate: the filter's
// variance factor alpha/(2-alpha) times the variance of the interval
// samples (estimated by the same filter over squared samples).
func (g *GDRL) noise(sh *share) float64 {
	v := sh.demandSq - sh.demand*sh.demand
	if v <= 0 {
		return 0
	}
	return math.Sqrt(g.alpha / (2 - g.alpha) * v)
}

// indicatorOf is the modelled indicator (fill or spare) of a share c with
// demand estimate demand; the measured ones are measured.
func (g *GDRL) indicatorOf(c int64, demand float64) float64 {
	if g.indicator == IndicatorFill {
		return -float64(c) / math.Max(demand, g.demandFloor)
	}
	return demand - float64(c)
}

// seenFactor is how many idle windows a node remembers that it has seen a
// key (side.seen).
const seenFactor = 10

// flow returns the capacity and burst the pair's update moves from j to i
// for one key (negative: from i to j). See the package documentation.
func (g *GDRL) flow(i, j side) (c, b int64) {
	if c, b := debtFlow(i.c, j.c), debtFlow(i.b, j.b); c != 0 || b != 0 {
		return c, b
	}
	if !i.active && !j.active {
		return g.relax(i, j)
	}
	var f, sigma float64
	eta := g.Gain()
	if g.indicator == IndicatorFill {
		if !g.skewed(i, j, g.evidence) {
			if (i.seen || i.active) && (j.seen || j.active) {
				// The key's demand reaches both ends: the 1/N split
				// is the right one.
				return g.relaxSeen(i, j)
			}
			return 0, 0 // too little evidence either way
		}
		di, dj := math.Max(i.demand, g.demandFloor), math.Max(j.demand, g.demandFloor)
		f = eta * math.Min(di, dj) * (float64(j.c)/dj - float64(i.c)/di)
		sigma = eta * math.Min(di, dj) * math.Hypot(float64(i.c)*i.noise/(di*di), float64(j.c)*j.noise/(dj*dj))
	} else if g.measuredIndicator() {
		f, sigma = g.measuredFlow(i, j, eta)
	} else {
		f = eta * (g.indicatorOf(i.c, i.demand) - g.indicatorOf(j.c, j.demand))
		sigma = eta * math.Hypot(i.noise, j.noise)
	}
	return g.boundFlow(i, j, f, sigma)
}

// boundFlow turns the update's capacity flow f from j to i (sigma: its
// noise) into the capacity and burst that move: nothing within the noise
// band, at most C either way, towards zero, and nothing to an end where the
// key is not active.
func (g *GDRL) boundFlow(i, j side, f, sigma float64) (c, b int64) {
	if math.Abs(f) < g.noiseBand*sigma {
		return 0, 0 // within the noise of the demand estimates
	}
	lim := float64(g.totalC)
	f = math.Max(-lim, math.Min(lim, f))
	if math.IsNaN(f) {
		return 0, 0
	}
	c = int64(f) // towards zero
	if c > 0 && !i.active || c < 0 && !j.active {
		return 0, 0 // nothing flows to a node without demand but by relaxation
	}
	b = g.burstFlow(i, j, c)
	if b > 0 && !i.active || b < 0 && !j.active {
		b = 0
	}
	return c, b
}

// debtFlow is what moves from j to i to pay back a debt (ours): when one
// end's share is negative (a fence or another heir's inheritance was given
// up there, see "Split brain" in the package documentation) and the other
// end's positive, the other end pays the debt, up to what it holds,
// whatever the key's demand at either end. The debt is capacity that the
// rest of the cluster holds beyond C, and the indicators alone never move
// a share into a node where the key is idle (found by the conformance
// swarm, seed 66: a debt left on an idle key kept the active node at
// C + 11% for good). Shares are never negative without faults, so this
// changes nothing in a run without them.
func debtFlow(i, j int64) int64 {
	switch {
	case i < 0 && j > 0:
		return min(-i, j)
	case j < 0 && i > 0:
		return -min(-j, i)
	}
	return 0
}

// skewed reports whether one end of the pair has seen the key requested in
// so many intervals that the other end's silence is significant at z
// standard errors (one-sided): the other end has not seen the key for
// seenFactor idle windows, and if the requests were spread evenly over the
// nodes (as by hash), all n of them would have missed it with probability
// 2^-n. Intervals are counted, not tokens, so that a burst of requests in
// one instant is one piece of evidence. A node that joined or restarted
// holds no default share, so any demand it sees is skewed towards it,
// whatever the other end's default share: two joiners must not relax
// towards their zero default shares, where relax's ring rule takes the
// predecessor's whole share (all of it is "surplus") every time their
// shares come within two grains.
func (g *GDRL) skewed(i, j side, z float64) bool {
	tail := math.Log(0.5 * math.Erfc(z/math.Sqrt2))
	one := func(a, b side) bool {
		if a.active && a.dc <= 0 {
			return true // a joined with no share: its demand is news
		}
		return a.active && !b.seen && a.recent*math.Ln2 > -tail
	}
	return one(i, j) || one(j, i)
}

// capGrain is the grain of relaxation for capacity: 1% of the 1/N share.
func (g *GDRL) capGrain() int64 {
	return max(1, g.totalC/int64(100*max(len(g.members), 1)))
}

// recent is the number of intervals in which sh's key was requested at
// this node within the last idle window (at most): the slow filter over
// 1 per interval with requests, corrected for its start from zero (over t
// intervals it has summed only 1-(1-a)^t of its weight), times the window
// in intervals.
func (g *GDRL) recent(sh *share) float64 {
	if sh.intervals == 0 {
		return 0
	}
	a := g.eventAlpha()
	w := 1 - math.Pow(1-a, float64(sh.intervals))
	return sh.events / w * min(1/a, float64(sh.intervals))
}

// eventAlpha is the gain of the filter behind recent: a window of `idle`.
func (g *GDRL) eventAlpha() float64 {
	return min(1, max(g.interval.Seconds()/g.idle.Seconds(), 1e-6))
}

// relax moves the pair's shares towards the default shares: the pair
// halves the difference of its deviations (in whole grains: 1% of the 1/N
// capacity share, whole tokens of burst), and below two grains deviations
// of opposite signs cancel (the smaller one entirely) while along the
// member ring a surplus moves forward whole, from a node to its successor,
// and a deficit backward, so that they meet and cancel. The deviations of a
// key sum to zero, so an idle key settles at its default shares everywhere
// in a few exchanges per node, each moving a whole remainder, not a unit at
// a time. Between ring neighbours the halving moves units backward only
// from a surplus into a deficit (againstRing).
func (g *GDRL) relax(i, j side) (c, b int64) {
	return g.relaxOne(i.id, j.id, i.c-i.dc, j.c-j.dc, g.capGrain()), g.relaxOne(i.id, j.id, i.b-i.db, j.b-j.db, UnitsPerToken)
}

// relaxSeen is relax for a pair where both ends see the key (fill, no
// evidence of skew between them), except that an end with evidence of its
// own (active, with enough intervals with requests: evidenced) gives of a
// surplus over its default share only what cancels the other end's
// deficit (ours). Its surplus came from a neighbour that does not see the
// key (skewed), and its evidence stands against that neighbour: spread
// to the other side's nodes at or above their default share, it was
// taken again from the unseen side, and capacity circulated around the
// ring for as long as the evidence held, one transfer per pair and
// interval (found on sprayed traffic: zanbil, 10 nodes, round robin).
func (g *GDRL) relaxSeen(i, j side) (c, b int64) {
	c, b = g.relax(i, j)
	keep := func(giver, taker side, x, dx, dtaker int64) int64 {
		if dx <= 0 || !giver.active || !g.evidenced(giver.recent) {
			return x
		}
		return min(x, max(-dtaker, 0))
	}
	if c > 0 {
		c = keep(j, i, c, j.c-j.dc, i.c-i.dc)
	} else if c < 0 {
		c = -keep(i, j, -c, i.c-i.dc, j.c-j.dc)
	}
	if b > 0 {
		b = keep(j, i, b, j.b-j.db, i.b-i.db)
	} else if b < 0 {
		b = -keep(i, j, -b, i.b-i.db, j.b-j.db)
	}
	return c, b
}

// relaxOne is relax for one amount with deviations di at i and dj at j:
// what moves from j to i.
func (g *GDRL) relaxOne(i, j strategy.NodeID, di, dj, grain int64) int64 {
	if d := dj - di; d >= 2*grain || d <= -2*grain {
		if x := d / 2 / grain * grain; !g.againstRing(i, j, di, dj, x) {
			return x // diffusion: half the difference, in whole grains
		}
	}
	switch {
	case di < 0 && dj > 0:
		return min(dj, -di)
	case di > 0 && dj < 0:
		return -min(di, -dj)
	case di == 0 && dj == 0:
		return 0
	}
	return g.relaxWhole(i, j, di, dj)
}

// relaxWhole is relaxOne for deviations di and dj that neither halve nor
// cancel: along the member ring a surplus moves forward whole and a
// deficit backward whole; what moves from j to i.
func (g *GDRL) relaxWhole(i, j strategy.NodeID, di, dj int64) int64 {
	if successor(g.members, j) == i { // j -> i is forward
		if dj > 0 {
			return dj // (di >= 0) the surplus moves on
		}
		if di < 0 {
			return -di // (dj <= 0) the deficit moves back
		}
	}
	if successor(g.members, i) == j { // i -> j is forward
		if di > 0 {
			return -di
		}
		if dj < 0 {
			return dj
		}
	}
	return 0
}

// againstRing reports whether diffusion moving x from j to i (negative:
// from i to j) between ring neighbours moves units backward along the
// member ring, from a node to its predecessor, other than from a surplus
// into a deficit (ours). relaxOne moves a surplus forward whole and a
// deficit backward whole (units forward), so diffusion backward into a
// node at or above its default share, or out of one at or below it,
// undoes that move and the pair passes the same units back and forth:
// found on sprayed traffic (zanbil, 10 nodes, round robin), where a key's
// surplus at a node whose successor's deficit cannot be relaxed (the key
// active at one end and unseen at the other moves nothing) circulated
// between that node and its predecessor, about five transfers a second
// for as long as the key stayed active (152 transfers for one key).
func (g *GDRL) againstRing(i, j strategy.NodeID, di, dj, x int64) bool {
	fwdJI, fwdIJ := successor(g.members, j) == i, successor(g.members, i) == j
	switch {
	case x > 0 && fwdIJ && !fwdJI: // j -> i is backward
		return !(dj > 0 && di < 0)
	case x < 0 && fwdJI && !fwdIJ: // i -> j is backward
		return !(di > 0 && dj < 0)
	}
	return false
}

// burstFlow is the burst that moves from j to i with a capacity flow c: the
// pair re-splits its combined burst in proportion to its capacity shares
// after the flow, in whole tokens (so that a node's bucket never holds a
// burst a hair below the one token a request needs), and only when the
// split is off by at least 3/4 of a token (a dead band, so that demand
// noise does not move burst back and forth: every move costs the giver the
// tokens above its new burst).
func (g *GDRL) burstFlow(i, j side, c int64) int64 {
	ci, cj := max(i.c+c, 0), max(j.c-c, 0)
	bp := max(i.b, 0) + max(j.b, 0)
	if ci+cj <= 0 || bp <= 0 {
		return 0
	}
	target := float64(bp) * float64(ci) / float64(ci+cj)
	// A node that is active or has seen the key never gives away burst
	// below what its own recent demand needs (at least a whole token:
	// without one its bucket refuses every request, whatever its rate).
	if i.active || i.seen {
		target = math.Max(target, float64(min(max(i.b, 0), g.burstNeed(i))))
	}
	if j.active || j.seen {
		target = math.Min(target, float64(bp-min(max(j.b, 0), g.burstNeed(j))))
	}
	d := (target - float64(i.b)) / UnitsPerToken
	if math.Abs(d) < 0.75 || math.IsNaN(d) {
		return 0
	}
	return int64(math.Round(d)) * UnitsPerToken
}

// burstNeed is the burst a node keeps for its own demand: the
// tokens its demand estimate (plus its noise) asks for over the time the
// rule takes to refill its burst, B/C, at least a whole token and at most
// the node's 1/N split of the burst over the current view (the static
// split, which a node whose demand is spread like everyone else's should
// not fall below). Not the node's default burst share: that is the 1/N
// split only among founding members that all started together; a founder
// that started alone holds the whole burst as its default (and an heir
// adds its ward's), and capped there it kept every token it held from
// the joiners, whose buckets then refused everything whatever their rate.
func (g *GDRL) burstNeed(s side) int64 {
	need := float64(UnitsPerToken)
	if g.totalC > 0 {
		need = math.Max(need, (s.demand+s.noise)*float64(g.totalB)/float64(g.totalC))
	}
	need = math.Ceil(need/UnitsPerToken) * UnitsPerToken
	i, _ := slices.BinarySearch(g.members, s.id)
	split := splitUnits(g.cfg.Burst, len(g.members), i) * UnitsPerToken
	return max(UnitsPerToken, min(int64(math.Min(need, float64(g.totalB))), split))
}
