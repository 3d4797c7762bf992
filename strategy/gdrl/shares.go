package gdrl

import (
	"math"
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
	return sh
}

// adjust adds (dc, db) to key's share, re-rates its bucket (keeping its
// level, capped at the new burst: moving burst never creates tokens) and
// marks the key for replication.
func (g *GDRL) adjust(key string, dc, db int64, now time.Duration) {
	if dc == 0 && db == 0 {
		return
	}
	sh := g.materialize(key, now)
	sh.c += dc
	sh.b += db
	_ = sh.bkt.SetRate(now, g.rateOf(sh.c), g.burstOf(sh.b)) // valid by construction
	g.touch(key)
}

// level is the tokens in sh's bucket at now, in units, rounded down (a
// unit below the exact level, so that a float rounding up never counts a
// token that is not there).
func (g *GDRL) level(sh *share, now time.Duration) int64 {
	t := sh.bkt.Tokens(now)
	if t <= 1 {
		return 0
	}
	return int64(math.Floor(t-1)) * g.unit
}

// shrink takes (c, b) from key's share, as a payer does, and returns the
// tokens its bucket held above the reduced burst: they travel with the
// burst.
func (g *GDRL) shrink(key string, c, b int64, now time.Duration) (tokens int64) {
	sh := g.materialize(key, now)
	before := g.level(sh, now)
	g.adjust(key, -c, -b, now)
	after := sh.bkt.Tokens(now)
	return min(max(before-int64(math.Ceil(after))*g.unit, 0), b)
}

// addTokens puts tokens (units, rounded down to the bucket's resolution)
// into key's bucket, up to its burst.
func (g *GDRL) addTokens(key string, tokens int64, now time.Duration) {
	sh := g.shares[key]
	if sh == nil || tokens <= 0 {
		return
	}
	burst := g.burstOf(sh.b)
	lvl := min(g.level(sh, now)/g.unit+tokens/g.unit, burst)
	nb := g.newBucket(sh.c, sh.b, now)
	if take := burst - lvl; take > 0 {
		nb.AllowN(now, take)
	}
	sh.bkt = nb
}

// adjustAll adds (dc, db) to every key: to the default share and to every
// explicit share (inheritance and fences).
func (g *GDRL) adjustAll(dc, db int64, now time.Duration) {
	if dc == 0 && db == 0 {
		return
	}
	for _, k := range g.sortedKeys() {
		g.adjust(k, dc, db, now)
	}
	g.dc += dc
	g.db += db
	g.mark(partDefaults)
}

// mark marks a part of the record as changed in the version being built.
func (g *GDRL) mark(part int) {
	g.partAt[part] = g.version + 1
	g.dirty = true
}

// touch marks key as changed in the record version being built.
func (g *GDRL) touch(key string) {
	g.changed[key] = g.version + 1
	g.dirty = true
}

// closeInterval updates every explicit key's demand estimate with the
// tokens requested in the interval that ends now (001 §III-A's low-pass
// filter: lambda <- (1-alpha) lambda + alpha * sample, started at the first
// interval with requests), and drops the shares that are idle and back at the default.
func (g *GDRL) closeInterval(now time.Duration) {
	secs := g.interval.Seconds()
	for _, k := range g.sortedKeys() {
		sh := g.shares[k]
		sample := float64(sh.reqTokens) * UnitsPerToken / secs
		sh.reqTokens = 0
		switch {
		case sh.hasDemand:
			sh.demand = (1-g.alpha)*sh.demand + g.alpha*sample
			sh.demandSq = (1-g.alpha)*sh.demandSq + g.alpha*sample*sample
		case sample > 0:
			sh.demand, sh.demandSq, sh.hasDemand = sample, sample*sample, true
		}
		if !g.active(sh, now) && sh.c == g.dc && sh.b == g.db && sh.bkt.Full(now) {
			delete(g.shares, k)
			g.touch(k) // replicated as removed
		}
	}
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
	active bool
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

func (g *GDRL) indicatorOf(c int64, demand float64) float64 {
	if g.indicator == IndicatorFill {
		return -float64(c) / math.Max(demand, g.demandFloor)
	}
	return demand - float64(c)
}

// flow returns the capacity and burst the pair's update moves from j to i
// for one key (negative: from i to j). See the package documentation.
func (g *GDRL) flow(i, j side) (c, b int64) {
	if !i.active && !j.active {
		c = g.forwardOnly(halfAway((j.c-j.dc)-(i.c-i.dc)), i.id, j.id)
		b = g.forwardOnly(halfAway(((j.b-j.db)-(i.b-i.db))/UnitsPerToken), i.id, j.id)
		return c, b * UnitsPerToken
	}
	var f, sigma float64
	eta := g.Gain()
	if g.indicator == IndicatorFill {
		di, dj := math.Max(i.demand, g.demandFloor), math.Max(j.demand, g.demandFloor)
		f = eta * math.Min(di, dj) * (float64(j.c)/dj - float64(i.c)/di)
		sigma = eta * math.Min(di, dj) * math.Hypot(float64(i.c)*i.noise/(di*di), float64(j.c)*j.noise/(dj*dj))
	} else {
		f = eta * (g.indicatorOf(i.c, i.demand) - g.indicatorOf(j.c, j.demand))
		sigma = eta * math.Hypot(i.noise, j.noise)
	}
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
	if bp >= 2*UnitsPerToken {
		// An active node keeps a whole token: without one its bucket
		// refuses every request, whatever its rate.
		if i.active {
			target = math.Max(target, UnitsPerToken)
		}
		if j.active {
			target = math.Min(target, float64(bp-UnitsPerToken))
		}
	}
	d := (target - float64(i.b)) / UnitsPerToken
	if math.Abs(d) < 0.75 || math.IsNaN(d) {
		return 0
	}
	return int64(math.Round(d)) * UnitsPerToken
}

// forwardOnly lets a relaxation move of a single unit (a capacity unit or a
// burst token) from j to i (x > 0) or from i to j (x < 0) only along the
// member ring, from a node to its successor: surplus units then travel
// forward and deficits backward until they meet and cancel, so an idle key
// settles at its default shares instead of passing units around for ever.
func (g *GDRL) forwardOnly(x int64, i, j strategy.NodeID) int64 {
	switch {
	case x == 1 && successor(g.members, j) != i:
		return 0
	case x == -1 && successor(g.members, i) != j:
		return 0
	}
	return x
}

// halfAway is d/2 rounded away from zero, so that a difference of one unit
// still moves (the unit then wanders until it meets its opposite).
func halfAway(d int64) int64 {
	if d >= 0 {
		return d/2 + d%2
	}
	return -((-d)/2 + (-d)%2)
}
