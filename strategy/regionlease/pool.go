package regionlease

// This file is strategy/lease/pool.go (lease's owner bucket with its
// leases counted against the capacity), copied because no strategy imports
// another (internal/archtest) and lease is being changed on another branch;
// the waiting-mode and overdraft parts are dropped. To move to
// strategy/internal once both settle.

import (
	"math"
	"time"
)

// pool is the owner's bucket of one key, with the tokens it has leased out
// counted against its capacity: level (in ticks) never exceeds
// (burst - leased) tokens, so the owner's level plus the tokens in leases
// never exceed what one bucket of burst tokens would hold. It is
// bucket.Bucket's exact tick arithmetic (one token is per ticks, one
// nanosecond refills tokensPerNs ticks) with a moving capacity and a
// credit, which bucket.Bucket does not offer.
type pool struct {
	level  int64         // ticks available; <= (burst-leased)*per; below 0 only while waiting-mode reservations wait (reserve) or under overdraft (charge: a debt)
	last   time.Duration // refilled up to here; may lie ahead of now (a conservative start)
	leased int64         // whole tokens in unexpired, unreturned leases
	// lentUntil is the latest expiry of the leases granted out of it (an
	// upper bound of the unreleased ones', shipped to replicas).
	lentUntil time.Duration
	// inherited and inheritedUntil are lease's replicated lent tokens;
	// regionlease has no replicas: always 0.
	inherited      int64
	inheritedUntil time.Duration
}

// shape is the rate and burst every pool of a node shares.
type shape struct {
	tokensPerNs int64 // ticks refilled per nanosecond (bucket.Rate.Tokens)
	per         int64 // ticks per token (bucket.Rate.Per in ns)
	burst       int64 // tokens
}

// capacity is the pool's capacity in ticks at its current leases.
func (s shape) capacity(p *pool) int64 { return (s.burst - p.leased - p.inherited) * s.per }

// advance refills p up to now, releasing its inherited leases at their
// end. A now at or before p.last refills nothing.
func (s shape) advance(p *pool, now time.Duration) {
	if p.inherited > 0 && p.inheritedUntil <= now {
		s.refill(p, p.inheritedUntil)
		p.inherited = 0
	}
	s.refill(p, now)
}

// refill refills p up to now at its current capacity.
func (s shape) refill(p *pool, now time.Duration) {
	dt := int64(now - p.last)
	if dt <= 0 {
		return
	}
	p.last = now
	c := s.capacity(p)
	if p.level >= c || s.tokensPerNs == 0 {
		return
	}
	need := c - p.level
	if dt >= need/s.tokensPerNs+1 { // compare first: dt*tokensPerNs may overflow
		p.level = c
		return
	}
	p.level = min(p.level+dt*s.tokensPerNs, c)
}

// whole is the whole tokens p is sure to have held since at (after
// advance to at; see spare).
func (s shape) whole(p *pool, at time.Duration) int64 { return s.spare(p, at) / s.per }

// spare is the ticks p is sure to have held throughout [at, p.last]: the
// level less what refilled since at (level(t) >= level(last) -
// refill(t, last) for every t in between). A request decided late (after
// the pool was advanced past its arrival) takes only from this, so that it
// could have taken its tokens at its arrival, the time the envelope counts
// it at, and a late decision never uses tokens refilled after it.
func (s shape) spare(p *pool, at time.Duration) int64 {
	late := int64(p.last - at)
	if late <= 0 || s.tokensPerNs == 0 {
		return max(p.level, 0) // a negative level (reservations) spares nothing
	}
	if late >= p.level/s.tokensPerNs+1 { // compare first: late*tokensPerNs may overflow
		return 0
	}
	return max(p.level-late*s.tokensPerNs, 0)
}

// take takes n tokens at time at (advanced to at before; see spare) if p
// holds them.
func (s shape) take(p *pool, at time.Duration, n int64) bool {
	if n <= 0 || n > s.burst || s.spare(p, at) < n*s.per {
		return false
	}
	p.level -= n * s.per
	return true
}

// lend moves n tokens (n <= whole) from the level into a lease.
func (s shape) lend(p *pool, n int64) {
	p.level -= n * s.per
	p.leased += n
}

// release ends a lease of n tokens of which unused come back: the
// capacity grows by n, the level by unused (capped at the capacity, so that
// a credit never makes tokens).
func (s shape) release(p *pool, n, unused int64) {
	p.leased -= n
	p.level = min(p.level+unused*s.per, s.capacity(p))
}

// untilOne is the earliest time at or after max(now, p.last) at which p
// holds one whole token, assuming no credit; 0 when it never will (zero
// rate).
func (s shape) untilOne(p *pool, now time.Duration) time.Duration {
	at := max(now, p.last)
	if p.level >= s.per {
		return at
	}
	if s.tokensPerNs == 0 || s.capacity(p) < s.per {
		return 0
	}
	need := s.per - p.level
	return at + time.Duration((need+s.tokensPerNs-1)/s.tokensPerNs)
}

// full reports whether p is at the full burst with no leases at now.
func (s shape) full(p *pool, now time.Duration) bool {
	s.advance(p, now)
	return p.leased == 0 && p.inherited == 0 && p.level == s.burst*s.per
}

// fillTime is how long p takes to refill from its level to its capacity
// (lending tokens moves both by the same amount, so it is the same before
// and after a grant): at least 1 ns, the largest duration with a zero
// rate.
func (s shape) fillTime(p *pool) time.Duration {
	if s.tokensPerNs == 0 {
		return time.Duration(math.MaxInt64)
	}
	return max(time.Duration((s.capacity(p)-p.level)/s.tokensPerNs), 1)
}
