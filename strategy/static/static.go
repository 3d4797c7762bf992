// Package static implements the `static` strategy: every node enforces a
// fixed sub-token bucket (r/N, b/N) per key, with N the number of live
// members, and no messages at all.
//
// Sources: SRTM §1.2, the static split into sub-token buckets
// with sum r_l = r and sum b_l = b; Ramsden §1.2 and the throttling article, the per-server
// share R/N, whose flaw both name: unless the load balancer spreads each
// key's requests evenly, a node runs out while others sit on unused share.
//
// Ours: the rate split r/N is exact (bucket.Rate.Div), and the burst is split
// in whole tokens that sum to b exactly (bucket.SplitBurst; the first b mod N
// members in NodeID order get one more), so the cluster's envelope is exactly
// (r, b). When b < N some nodes get a burst of 0 and refuse everything: that
// is the cost of static splitting for small bursts, and the report shows it.
// N follows membership: when a node fails, the others re-split and take its
// share.
//
// # Partitions (ours)
//
// Under `partition: available` (the strategy's behaviour before the option)
// N is the live members a node sees: during a split each side of k nodes
// re-splits (r, b) over its k and admits the whole envelope, so the sides
// together admit up to (number of sides) x (r, b); the survivors of a crash
// take the crashed node's share. Under `partition: conserve`
// (strategy.Conserver) N is the last agreed members, live or failed and
// not yet past reconnect_timeout (a member that left with a leave intent
// stops counting at once): a side of k keeps (r/N, b_i) per node, k/N of
// the envelope, and the sides together admit at most (r, b); a crashed
// node's share is unused until it returns or reconnect_timeout passes. At
// the heal both modes re-split over the merged membership (SetMembers with
// the whole view: N is the same in both modes again), keeping each
// bucket's tokens (a re-split never creates tokens).
//
// # Overdraft (ours)
//
// Under a rule with overdraft (strategy.Overdraft) a charge
// (strategy.Request.Charge) is taken from the node's sub-token bucket
// whatever it holds, down to the node's share of max_debt (split over the
// members as the burst is, so the shares sum to max_debt): each node's
// debt is its own, and it refuses the key's checks until its share r/N
// has repaid it, while the other nodes' shares admit as before. A re-split
// keeps each bucket's level, debt included.
package static

import (
	"fmt"
	"slices"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/internal/buckets"
	"github.com/tokenmesh/tokenmesh/strategy/internal/keyorder"
)

// Static is one node holding sub-token buckets (r/N, b_i) per key.
type Static struct {
	self     strategy.NodeID
	rate     bucket.Rate
	burst    int64
	table    *buckets.Table
	members  int // N of the current split
	conserve bool
	live     []strategy.NodeID // SetMembers' view, sorted
	expected []strategy.NodeID // SetExpected's last agreed members
	sweep    keyorder.Sweeper  // the sweeps of full buckets, in steps
	lend     buckets.Lender    // tokens lent to the driver's fast path (allowance.go)
	// od is the rule's overdraft; debt this node's share of its max_debt
	// (split as the burst, bucket.SplitBurst), in tokens.
	od   strategy.Overdraft
	debt int64
	// reserved: RequestWait has reserved ahead (waiting mode), so a
	// negative level may be reservations still to proceed, and a
	// re-split keeps them due when they were promised
	// (bucket.Bucket.SetRateKeepingDue).
	reserved bool
}

// New builds a node. Errors: an invalid Config, Self not among Members, or
// a bad parameter (it takes the overdraft ones only: strategy.ReadOverdraft).
func New(cfg strategy.Config) (*Static, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	v, err := strategy.ReadParams("static", Params, cfg.Params)
	if err != nil {
		return nil, err
	}
	od, err := strategy.ReadOverdraft(v, cfg.Rate, cfg.Burst)
	if err != nil {
		return nil, err
	}
	s := &Static{od: od, self: cfg.Self, rate: cfg.Rate, burst: cfg.Burst, conserve: cfg.Partition == strategy.PartitionConserve,
		live: slices.Sorted(slices.Values(cfg.Members)), expected: slices.Clone(cfg.Members)}
	r, b, err := s.share(cfg.Members)
	if err != nil {
		return nil, err
	}
	if s.table, err = buckets.New(r, b); err != nil {
		return nil, err
	}
	s.table.SetSeed(cfg.Seed) // a new key's level (the live driver's derived rules)
	s.members = len(cfg.Members)
	s.debt = s.debtShare(cfg.Members)
	s.sweep.Every = buckets.SweepInterval(r, b)
	return s, nil
}

// share is this node's (r_l, b_l) among members.
func (s *Static) share(members []strategy.NodeID) (bucket.Rate, int64, error) {
	i := slices.Index(members, s.self)
	if i < 0 {
		return bucket.Rate{}, 0, fmt.Errorf("static: %s is not among the members %v", s.self, members)
	}
	r, err := s.rate.Div(int64(len(members)))
	if err != nil {
		return bucket.Rate{}, 0, err
	}
	b, err := bucket.SplitBurst(s.burst, len(members), i)
	return r, b, err
}

// debtShare is this node's share of the rule's max_debt among members
// (0 without overdraft): split in whole tokens as the burst, so that the
// shares sum to max_debt.
func (s *Static) debtShare(members []strategy.NodeID) int64 {
	if !s.od.On {
		return 0
	}
	d, err := bucket.SplitBurst(s.od.MaxDebt, len(members), max(slices.Index(members, s.self), 0))
	if err != nil {
		return 0
	}
	return d
}

// Start schedules the first sweep of idle (full) buckets.
func (s *Static) Start(now time.Duration, fx *strategy.Effects) {
	s.sweep.Start(now, fx)
}

// Request decides at once from this node's sub-token bucket (r/N, b_i) for
// req.Key, at req.Arrival. Under overdraft (strategy.Overdraft) a charge
// (req.Charge) is taken in any case, down to this node's share of
// max_debt (split over the members as the burst): each node's debt is its
// own, and a node refuses the key's checks until its share has repaid it.
func (s *Static) Request(now time.Duration, req strategy.Request, fx *strategy.Effects) (strategy.Decision, bool) {
	s.lend.Clamp(s.table, req.Arrival, req.Key)
	b := s.table.Get(req.Key, req.Arrival)
	var ok bool
	if s.od.On && req.Charge {
		ok, _ = b.ChargeN(req.Arrival, req.Tokens, s.debt)
	} else {
		ok = b.AllowN(req.Arrival, req.Tokens)
	}
	return strategy.Decision{RequestID: req.ID, Allowed: ok}, true
}

// RequestWait decides req in waiting mode (strategy.Waiter; SRTM §5.2,
// the shaping mode, and Appendix A eq. (2)): the tokens are reserved in
// this node's sub-token bucket (r/N, b_i) for req.Key, first come first
// served (bucket.ReserveN), when the wait until that bucket holds them
// is at most maxWait, and the decision carries that wait; otherwise the
// request is refused and nothing is reserved. This is the DRL penalty of
// SRTM §2.1 (Proposition 1) measured: a node's bucket refills at r/N, so
// a request that finds it empty waits N times longer than at one
// (r, b) bucket. The level goes below 0 by at most maxWait*r/N tokens
// (the reservations not yet due). A re-split keeps the reservations due
// when promised (bucket.Bucket.SetRateKeepingDue): a lower share keeps
// the debt in tokens, so the node admits nothing new until the new share
// has repaid it, and a higher one does not repay it before the last
// reservation is due. Under overdraft a charge is Request
// (taken at once, no wait).
//
// Membership changes (ours): a reservation's delay was computed at the
// rate r/N of its time. When a node joins, the other nodes' rates fall to
// r/(N+1) at once while their reservations are still due at the times
// promised, so the cluster may pass tokens beyond b + r*T by at most
// r*maxWait/(N+1) over the reservations due after the join; a crashed
// node's due reservations (its clients proceed) use refill its
// survivors take at once: at most r*maxWait/N. With a fixed membership
// the envelope holds exactly (TestWaitingEnvelope).
func (s *Static) RequestWait(now time.Duration, req strategy.Request, maxWait time.Duration, fx *strategy.Effects) (strategy.Decision, bool) {
	if s.od.On && req.Charge {
		return s.Request(now, req, fx)
	}
	s.lend.Clamp(s.table, req.Arrival, req.Key)
	delay, ok := strategy.ReserveWithin(s.table.Get(req.Key, req.Arrival), req.Arrival, req.Tokens, maxWait)
	s.reserved = s.reserved || delay > 0
	return strategy.Decision{RequestID: req.ID, Allowed: ok, Delay: delay}, true
}

// Refund gives back tokens of key to this node's sub-token bucket at now,
// capped at its share b_i less the tokens lent to the driver's fast path
// (strategy.Refunder).
func (s *Static) Refund(now time.Duration, id uint64, key string, tokens int64, fx *strategy.Effects) {
	b, ok := s.table.Lookup(key)
	if !ok {
		return // no bucket: a full one
	}
	b.Refund(now, tokens)
	s.lend.Clamp(s.table, now, key)
}

// Receive always fails: static sends no peer messages.
func (s *Static) Receive(now time.Duration, from strategy.NodeID, payload []byte, fx *strategy.Effects) error {
	return strategy.UnexpectedMessage("static", from)
}

// Tick drops the sub-token buckets that have refilled to their burst when a
// sweep is due: a step of keyorder.Budget keys per tick
// (keyorder.Sweeper), and schedules the next.
func (s *Static) Tick(now time.Duration, fx *strategy.Effects) {
	s.sweep.Step(now, fx, 1, func() {
		s.lend.ClampAll(s.table, now) // a bucket with tokens held is not full: not swept
	}, func(int) bool {
		return s.table.SweepStep(now, keyorder.Budget, s.lend.Keeper())
	})
}

// SetMembers re-splits (r, b) over the new member count: the live members
// (available), or the live and expected members (conserve). A view that
// does not include this node (it is being removed) keeps the old split.
func (s *Static) SetMembers(now time.Duration, members []strategy.NodeID, fx *strategy.Effects) {
	if !slices.Contains(members, s.self) {
		return
	}
	s.live = slices.Sorted(slices.Values(members))
	s.resplit(now)
}

// SetExpected records the last agreed members (strategy.Conserver; ours,
// see "Partitions" in the package documentation); under conserve it
// re-splits (r, b) over the union of them and the live members: (r/N, b_i)
// tokens per second and tokens, N that union's size.
func (s *Static) SetExpected(now time.Duration, expected []strategy.NodeID, fx *strategy.Effects) {
	s.expected = slices.Clone(expected)
	if s.conserve {
		s.resplit(now)
	}
}

// resplit sets every sub-token bucket to this node's share of the split
// set: the live members, or under conserve their union with the expected.
func (s *Static) resplit(now time.Duration) {
	split := s.live
	if s.conserve {
		_, _, split = strategy.ConserveScale(s.self, s.live, s.expected)
	}
	r, b, err := s.share(split)
	if err != nil {
		return
	}
	s.lend.ClampAll(s.table, now)
	if s.reserved {
		_ = s.table.SetRateKeepingDue(now, r, b) // a raise repays no reservation early
	} else {
		_ = s.table.SetRate(now, r, b) // r, b derive from a validated (rate, burst)
	}
	s.members = len(split)
	s.debt = s.debtShare(split)
	s.lend.ClampAll(s.table, now) // the new b_i less what is held (none when the driver returned first)
}

// StateBytes is the encoded size of the sub-token buckets held, in bytes.
func (s *Static) StateBytes() int { return s.table.StateBytes() }

// Remaining is the whole tokens this node's sub-token bucket (r/N, b_i) for
// key holds at now (b_i for a key it holds no bucket of). Always known. It
// changes no state (strategy.Remainer).
func (s *Static) Remaining(now time.Duration, key string) (int64, bool) {
	return s.lend.Remaining(s.table, now, key), true
}

// CapacityShares is 1/N for every key this node holds a sub-token bucket
// of (N the members of its current split), and the number of those keys
// (strategy.ShareReporter). Keys swept back to full hold the same 1/N
// but are not counted.
func (s *Static) CapacityShares() (sum float64, keys int) {
	n := s.table.Len()
	if n == 0 || s.members == 0 {
		return 0, n
	}
	return float64(n) / float64(s.members), n
}

var (
	_ strategy.Remainer      = (*Static)(nil)
	_ strategy.ShareReporter = (*Static)(nil)
	_ strategy.Conserver     = (*Static)(nil)
	_ strategy.Refunder      = (*Static)(nil)
	_ strategy.Waiter        = (*Static)(nil)
)
