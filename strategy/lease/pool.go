package lease

import (
	"time"

	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/internal/leasepool"
)

// pool is the owner's bucket of one key, with the tokens it has leased out
// counted against its capacity (leasepool.Pool, shared with regionlease:
// its level, refill time, leased and inherited tokens), and what only lease
// keeps of it.
type pool struct {
	leasepool.Pool
	swept              // its place in the sweep's order (sweep.go)
	conservative bool  // made empty for a takeover (pool, owner.go)
	askMem       int32 // the heap of askers counted in Lease.mem (memory.go), bytes
	// askers is each holder's latest ask within ttl (share, owner.go):
	// the demand the pool is asked for; not shipped to replicas.
	askers map[strategy.NodeID]askRec
	// own is the tokens of the driver's allowance at this node, the key's
	// owner, lent out of the pool (allowance.go); 0: none open.
	own int64
}

// askRec is a holder's latest ask of a pool: its tokens and time, and
// out, the tokens of the holder's unreleased leases of the pool less those
// it reported used (what it may still hold; untilDry).
type askRec struct {
	tokens int64
	at     time.Duration
	out    int64
}

// shape is the rate and burst every pool of a node shares. Its methods are
// leasepool.Shape's on the pool's leasepool.Pool (lease keeps its own
// shape and these names so that its call sites read as before), plus
// lease's waiting mode (reserve), overdraft (charge) and refunds (credit).
type shape struct {
	tokensPerNs int64 // ticks refilled per nanosecond (bucket.Rate.Tokens)
	per         int64 // ticks per token (bucket.Rate.Per in ns)
	burst       int64 // tokens
}

// lp is s as a leasepool.Shape.
func (s shape) lp() leasepool.Shape {
	return leasepool.Shape{TokensPerNs: s.tokensPerNs, Per: s.per, Burst: s.burst}
}

// capacity is leasepool.Shape.Capacity.
func (s shape) capacity(p *pool) int64 { return s.lp().Capacity(&p.Pool) }

// advance is leasepool.Shape.Advance.
func (s shape) advance(p *pool, now time.Duration) { s.lp().Advance(&p.Pool, now) }

// whole is leasepool.Shape.Whole.
func (s shape) whole(p *pool, at time.Duration) int64 { return s.lp().Whole(&p.Pool, at) }

// spare is leasepool.Shape.Spare.
func (s shape) spare(p *pool, at time.Duration) int64 { return s.lp().Spare(&p.Pool, at) }

// take is leasepool.Shape.Take.
func (s shape) take(p *pool, at time.Duration, n int64) bool { return s.lp().Take(&p.Pool, at, n) }

// lend is leasepool.Shape.Lend.
func (s shape) lend(p *pool, n int64) { s.lp().Lend(&p.Pool, n) }

// release is leasepool.Shape.Release.
func (s shape) release(p *pool, n, unused int64) { s.lp().Release(&p.Pool, n, unused) }

// untilOne is leasepool.Shape.UntilOne.
func (s shape) untilOne(p *pool, now time.Duration) time.Duration {
	return s.lp().UntilOne(&p.Pool, now)
}

// full is leasepool.Shape.Full.
func (s shape) full(p *pool, now time.Duration) bool { return s.lp().Full(&p.Pool, now) }

// fillTime is leasepool.Shape.FillTime.
func (s shape) fillTime(p *pool) time.Duration { return s.lp().FillTime(&p.Pool) }

// reserve takes n tokens at time at (advanced to at before) in waiting mode
// (SRTM §5.2, bucket.Bucket.ReserveN's FCFS reservation): when the wait
// until p holds them is at most maxWait, the level goes down by n tokens,
// possibly below 0, and the wait counted from at is returned; otherwise
// nothing is taken. A decision made late (p.Last after at) counts the wait
// from p.Last, where the level is known, plus the lateness.
//
// The wait is rounded up to the nanosecond, so the request proceeds up to
// one nanosecond after p would have held its tokens. When they are p's
// whole capacity (n = burst - leased), p would have been full for that
// fraction of a nanosecond and refilled nothing more (ours): capAtWait
// drops what the level would refill beyond the capacity by then, which
// the negative level would otherwise keep (Refill caps only a level at
// or above the capacity). Without it, a request taking the whole capacity
// leaves up to tokensPerNs-1 ticks (r * 1 ns) that a bucket of that
// capacity would not hold: b + r*T exceeded by 1.352e-6 tokens at
// 1,688/s, burst 4 (TestReserveWholeCapacityRounding).
func (s shape) reserve(p *pool, at time.Duration, n int64, maxWait time.Duration) (time.Duration, bool) {
	if n <= 0 || n > s.burst {
		return 0, false
	}
	cost := n * s.per
	if s.spare(p, at) >= cost {
		p.Level -= cost
		return 0, true
	}
	if s.tokensPerNs == 0 || cost > s.capacity(p) {
		return 0, false
	}
	deficit := cost - p.Level
	fromLast := (deficit + s.tokensPerNs - 1) / s.tokensPerNs // ns after p.Last; <= 0 only for a late decision
	wait := time.Duration(fromLast)
	if late := p.Last - at; late > 0 {
		wait += late
	}
	if wait > maxWait {
		return 0, false
	}
	s.capAtWait(p, fromLast)
	p.Level -= cost
	return wait, true
}

// capAtWait lowers p's level so that, refilled for fromLast ns from
// p.Last, it reaches at most the capacity: the refill a bucket capped at
// the capacity would have lost by then (reserve). fromLast*tokensPerNs is
// at most a deficit plus tokensPerNs, which does not overflow.
func (s shape) capAtWait(p *pool, fromLast int64) {
	if fromLast <= 0 {
		return // proceeds at or before p.Last: the level is already capped
	}
	if c := s.capacity(p) - fromLast*s.tokensPerNs; p.Level > c {
		p.Level = c
	}
}

// charge decides n tokens at time at (advanced to at before; see spare)
// under overdraft: they are taken whatever p holds, down to a level of
// -floor ticks (the rule's max_debt; the part beyond is forgiven), and it
// reports take's verdict: whether p held them. While the level is below
// one token p grants no lease (whole is 0), so tokens in leases plus the
// level never exceed the burst.
func (s shape) charge(p *pool, at time.Duration, n, floor int64) bool {
	if n <= 0 {
		return true
	}
	allowed := n <= s.burst && s.spare(p, at) >= n*s.per
	room := (p.Level + floor) / s.per // whole tokens above -floor (both terms are below 2^62)
	if k := min(n, room); k > 0 {
		p.Level -= k * s.per
	}
	return allowed
}

// credit gives back n tokens to p (a refund), capped at its capacity at
// its current leases, so that a credit never makes tokens.
func (s shape) credit(p *pool, n int64) {
	c := s.capacity(p)
	if n <= 0 || p.Level >= c {
		return
	}
	if n <= (c-p.Level)/s.per {
		p.Level += n * s.per
	} else {
		p.Level = c
	}
}
