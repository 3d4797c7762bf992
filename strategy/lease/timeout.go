package lease

import (
	"fmt"
	"slices"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// localShare is this node's fallback bucket shape for the members:
// rate r/N and its exact share of the burst (bucket.SplitBurst).
func localShare(rate bucket.Rate, burst int64, self strategy.NodeID, members []strategy.NodeID) (bucket.Rate, int64, error) {
	n := max(len(members), 1)
	r, err := rate.Div(int64(n))
	if err != nil {
		return bucket.Rate{}, 0, fmt.Errorf("lease: local fallback: %w", err)
	}
	b, err := bucket.SplitBurst(burst, n, max(slices.Index(members, self), 0))
	if err != nil {
		return bucket.Rate{}, 0, fmt.Errorf("lease: local fallback: %w", err)
	}
	return r, b, nil
}

// timedOut answers a forwarded request whose owner did not answer in
// time, by on_timeout (strategy.OnTimeout, read by strategy.ReadOnTimeout;
// the local fallback's bucket is empty at the arrival of the first request
// it decides and refills at r/N, so the forwarders to an unreachable owner
// admit together at most one more envelope: r*T, plus r*timeout for the
// time the first request waited).
func (l *Lease) timedOut(now time.Duration, req strategy.Request) bool {
	switch l.onTimeout {
	case strategy.TimeoutAdmit:
		return true
	case strategy.TimeoutReject:
		return false
	}
	b, ok := l.local.Lookup(req.Key)
	if !ok {
		// Empty at the first fallback's arrival: the owner may have
		// drained the key just before it stopped answering, which is
		// before the request came (see strategy.FallbackStart).
		b = l.local.Get(req.Key, now)
		_ = b.MergeLevel(0, strategy.FallbackStart(now, req)) // 0 is within bounds, the start >= 0
	}
	if l.od.On && req.Charge {
		// Charged here, refused or not (the owner does not see it).
		ok, _ := b.ChargeN(now, req.Tokens, max(l.od.MaxDebt/int64(max(len(l.members), 1)), 1))
		return ok
	}
	return b.AllowN(now, req.Tokens)
}

// resplitLocal gives the fallback buckets the share of the new view.
func (l *Lease) resplitLocal(now time.Duration) {
	if r, b, err := localShare(l.rate, l.sh.burst, l.self, l.members); err == nil {
		_ = l.local.SetRate(now, r, b) // validated by localShare
	}
}
