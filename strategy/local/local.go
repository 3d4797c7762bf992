// Package local implements the `local` strategy (every node enforces the
// full (r, b) alone, with no coordination: the "no DRL" baseline of the throttling article,
// which admits up to N times the limit) and, on a single node, `central`: one
// bucket per key for the whole cluster, the ground truth every other strategy
// is measured against (the CRDT thesis §4.3.1: "a centralized system ... will take
// the correct decision").
//
// Partitions: local has no coordination to lose, so a partition changes
// nothing (each node enforces (r, b) before, during and after it; the
// cluster admits up to N x (r, b) always), and the rule option
// `partition: conserve` does not apply: it is refused for local and
// central (strategy.CheckPartition: they do not implement
// strategy.Conserver). central runs on one node.
//
// Overdraft (strategy.Overdraft; ours): a charge (strategy.Request.Charge)
// is taken from the node's bucket whatever it holds, down to a debt of
// max_debt (bucket.Bucket.ChargeN); checks are refused until the refill
// repays it. Refund (strategy.Refunder) credits the bucket, capped at b.
package local

import (
	"time"

	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/internal/buckets"
	"github.com/tokenmesh/tokenmesh/strategy/internal/keyorder"
)

// Local is one node enforcing the whole (r, b) per key from its own memory.
type Local struct {
	name  string
	table *buckets.Table
	sweep keyorder.Sweeper // the sweeps of full buckets, in steps
	lend  buckets.Lender   // tokens lent to the driver's fast path (allowance.go)
	od    strategy.Overdraft
}

// New builds a node. name is "local" or "central" (for error messages).
// Errors: an invalid Config, or a bad parameter (it takes the overdraft
// ones only: strategy.ReadOverdraft).
func New(name string, cfg strategy.Config) (*Local, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	v, err := strategy.ReadParams(name, Params, cfg.Params)
	if err != nil {
		return nil, err
	}
	od, err := strategy.ReadOverdraft(v, cfg.Rate, cfg.Burst)
	if err != nil {
		return nil, err
	}
	t, err := buckets.New(cfg.Rate, cfg.Burst)
	if err != nil {
		return nil, err
	}
	t.SetSeed(cfg.Seed) // a new key's level (the live driver's derived rules)
	return &Local{name: name, table: t, sweep: keyorder.Sweeper{Every: buckets.SweepInterval(cfg.Rate, cfg.Burst)}, od: od}, nil
}

// Start schedules the first sweep of idle (full) buckets.
func (l *Local) Start(now time.Duration, fx *strategy.Effects) {
	l.sweep.Start(now, fx)
}

// Request decides at once from this node's bucket for req.Key, at req.Arrival:
// allowed when req.Tokens tokens are there (a request above the burst never is).
// Under overdraft (strategy.Overdraft) a charge (req.Charge) is taken in
// any case, down to the rule's max_debt (bucket.Bucket.ChargeN).
func (l *Local) Request(now time.Duration, req strategy.Request, fx *strategy.Effects) (strategy.Decision, bool) {
	l.lend.Clamp(l.table, req.Arrival, req.Key)
	b := l.table.Get(req.Key, req.Arrival)
	var ok bool
	if l.od.On && req.Charge {
		ok, _ = b.ChargeN(req.Arrival, req.Tokens, l.od.MaxDebt)
	} else {
		ok = b.AllowN(req.Arrival, req.Tokens)
	}
	return strategy.Decision{RequestID: req.ID, Allowed: ok}, true
}

// Refund gives back tokens of key at now, capped at the burst less the
// tokens lent to the driver's fast path (strategy.Refunder).
func (l *Local) Refund(now time.Duration, id uint64, key string, tokens int64, fx *strategy.Effects) {
	b, ok := l.table.Lookup(key)
	if !ok {
		return // no bucket: a full one, where a refund adds nothing
	}
	b.Refund(now, tokens)
	l.lend.Clamp(l.table, now, key)
}

// RequestWait decides req in waiting mode (strategy.Waiter, SRTM
// §5.2): the tokens are reserved in this node's bucket for req.Key when the
// wait is at most maxWait, and the decision carries that wait. Under
// overdraft a charge is Request (taken at once, no wait).
func (l *Local) RequestWait(now time.Duration, req strategy.Request, maxWait time.Duration, fx *strategy.Effects) (strategy.Decision, bool) {
	if l.od.On && req.Charge {
		return l.Request(now, req, fx)
	}
	l.lend.Clamp(l.table, req.Arrival, req.Key)
	delay, ok := strategy.ReserveWithin(l.table.Get(req.Key, req.Arrival), req.Arrival, req.Tokens, maxWait)
	return strategy.Decision{RequestID: req.ID, Allowed: ok, Delay: delay}, true
}

// Receive always fails: local sends no peer messages.
func (l *Local) Receive(now time.Duration, from strategy.NodeID, payload []byte, fx *strategy.Effects) error {
	return strategy.UnexpectedMessage(l.name, from)
}

// Tick drops the buckets that have refilled to their burst (they equal new
// ones) when a sweep is due: a step of keyorder.Budget keys per tick
// (keyorder.Sweeper), and schedules the next.
func (l *Local) Tick(now time.Duration, fx *strategy.Effects) {
	l.sweep.Step(now, fx, 1, func() {
		l.lend.ClampAll(l.table, now) // a bucket with tokens held is not full: not swept
	}, func(int) bool {
		return l.table.SweepStep(now, keyorder.Budget, l.lend.Keeper())
	})
}

// SetMembers does nothing: each node enforces the whole (r, b) whatever the membership.
func (l *Local) SetMembers(now time.Duration, members []strategy.NodeID, fx *strategy.Effects) {}

// StateBytes is the encoded size of the buckets held, in bytes.
func (l *Local) StateBytes() int { return l.table.StateBytes() }

// Remaining is the whole tokens this node's bucket for key holds at now
// (the burst for a key it holds no bucket of: a new one is full). Always
// known: for `local` it is this node's own (r, b) bucket, for `central`
// the cluster's only one. It changes no state (strategy.Remainer).
func (l *Local) Remaining(now time.Duration, key string) (int64, bool) {
	return l.lend.Remaining(l.table, now, key), true
}

var (
	_ strategy.Remainer = (*Local)(nil)
	_ strategy.Refunder = (*Local)(nil)
)
