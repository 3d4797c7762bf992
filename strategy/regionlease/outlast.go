package regionlease

import (
	"time"

	"github.com/tokenmesh/tokenmesh/strategy"
)

// Balancing the regions' reserves when a key runs dry (outlast.go; ours;
// issue 24; docs/EVALUATION.md, "regionlease: regions that outlast G's").
// Until a key is contended, each region lives on what it was lent: the
// other regions on the stocks of their asks (the first one at least
// their share of the burst, burstShare), G's own region on the bucket's
// level. Once it is contended every region gets its part of the refill,
// and each runs down its reserve at its demand less that part. The
// reserves are not in proportion to those rates: on issue 24's tenant
// workload (seed 1) G's region ran dry at about 0.8 s while the other
// regions still held 67 tokens per key in stocks and 68 in node leases,
// which they spent until about 1.1 s while G's region admitted about half
// its load; central, with one bucket, admits everything until 1 s. The
// 63 they still held at 1 s were shortfall in the first window, beyond
// the steady float.
//
// So while the pushes of a key are dated, G gives no part of the refill
// (no dated lend, no push of made tokens) to a region whose reserve,
// spent at its demand less its part of the refill, would last longer
// than G's own region's by more than outlast (default the round trip
// 2*latency_hint plus push_ahead: what a region holds by G's count
// includes what G lent it within that time and it has not reported
// used, or cannot use yet). Its part stays in the bucket, where G's
// region's budget takes it (split.go, setOwnBudget), until the reserves
// last about as long. A region's reserve is G's count of the tokens it
// was lent and did not report used (outstanding); G's region's is the
// bucket's whole tokens. Only fewer tokens lent: nothing is created.
// outlast=0 turns the rule off.

// outlasting returns the push-taking askers of key whose reserve outlasts
// G's region's by more than outlast at now (nil when none does, or the
// rule is off): total is the key's demand, tokens per second. Reading the
// reserves (outstanding) drops the ended leases from ps.out.
func (l *RegionLease) outlasting(now time.Duration, key string, ps *pushState, p *pool, total float64) map[strategy.NodeID]bool {
	if l.outlast <= 0 || total <= 0 {
		return nil
	}
	keep := 1 - l.rate.PerSec()/total // of a demand, the part its share of the refill does not cover
	if keep <= 0 {
		return nil // the refill covers every region's demand: nothing runs dry
	}
	own := l.ownDemand(now, ps) * keep
	if own <= 0 {
		return nil // G's region has no demand beyond its part: no region outlasts it
	}
	lastG := float64(l.wholeG(now, key, p)) / own
	var out map[strategy.NodeID]bool
	for _, n := range sortedKeys(ps.askers) {
		a := ps.askers[n]
		if !l.pushTaker(now, a) {
			continue
		}
		d := float64(a.mtps) / 1000 * keep
		if d <= 0 {
			continue
		}
		if last := float64(l.outstanding(now, key, n, ps)) / d; last > lastG+l.outlast.Seconds() {
			if out == nil {
				out = map[strategy.NodeID]bool{}
			}
			out[n] = true
		}
	}
	return out
}
