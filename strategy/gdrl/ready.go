package gdrl

import (
	"time"

	"github.com/tokenmesh/tokenmesh/strategy"
)

// ReadyWait bounds how long a joining node reports not ready while it
// waits for its default share (Ready; ours): a node that no
// member pays (alone in its view, or every member below its split) is
// ready after it and refuses what its zero share cannot admit, as before.
const ReadyWait = 5 * time.Second

// Ready reports whether this node can decide with a share of the rule
// (strategy.Readier; ours). A founding member (started at time
// 0) holds its 1/N split from Start. A node that joins starts with a zero
// default share (004 §3.3) and gets its split only when a member answers
// its ask (default-share balancing, see the package comment), a moment
// later: every check it decided before then would be refused for lack of
// a share the cluster is about to give it. So it is ready once it holds a
// default share of both capacity and burst (or its fair split, when that
// is zero), or ReadyWait after it started. The live runtime reports the
// node ready only then; the simulator's decisions do not change.
func (g *GDRL) Ready(now time.Duration) bool {
	switch {
	case !g.started:
		return false
	case g.startAt == 0:
		return true
	case g.dc > 0 && g.db > 0:
		return true
	}
	fc, fb := g.fairDefault(g.self)
	return (g.dc >= fc && g.db >= fb) || now-g.startAt >= ReadyWait
}

var _ strategy.Readier = (*GDRL)(nil)
