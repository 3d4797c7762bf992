package gdrl

import (
	"time"

	"github.com/tokenmesh/tokenmesh/strategy"
)

// PayForTest is pay of capacity c and burst b of key to `to` (export for
// the waiting-mode tests): it reports how many transfers were queued.
func (g *GDRL) PayForTest(now time.Duration, to string, key string, c, b int64) int {
	before := len(g.outbox)
	g.pay(now, strategy.NodeID(to), 0, []item{{key: key, c: c, b: b}})
	return len(g.outbox) - before
}

// AddTokensForTest is addTokens (export for the waiting-mode tests).
func (g *GDRL) AddTokensForTest(key string, tokens int64, now time.Duration) {
	g.addTokens(key, tokens, now)
}

// UnitForTest is the bucket's unit (units per bucket token).
func (g *GDRL) UnitForTest() int64 { return g.unit }

// KnowsIncForTest reports whether this node knows an incarnation of
// member m (it has heard from it), as askDefault sees it.
func (g *GDRL) KnowsIncForTest(m string) bool {
	p := g.peers[strategy.NodeID(m)]
	return p != nil && p.inc != 0
}
