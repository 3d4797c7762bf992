// Package leasepool is the owner's bucket of one key with the tokens it has
// leased out counted against its capacity, shared by the lease and
// regionlease strategies (their owners and granters lend out of it). Level
// (in ticks) never exceeds (burst - leased) tokens, so the owner's level
// plus the tokens in leases never exceed what one bucket of burst tokens
// would hold. It is bucket.Bucket's exact tick arithmetic (one token is Per
// ticks, one nanosecond refills TokensPerNs ticks) with a moving capacity
// and a credit, which bucket.Bucket does not offer.
package leasepool

import (
	"math"
	"time"
)

// Pool is one key's bucket with its leases (see the package comment).
type Pool struct {
	Level  int64         // ticks available; <= (burst-leased)*per; below 0 only while lease's waiting-mode reservations wait or under its overdraft (a debt)
	Last   time.Duration // refilled up to here; may lie ahead of now (a conservative start)
	Leased int64         // whole tokens in unexpired, unreturned leases
	// LentUntil is the latest expiry of the leases granted out of it (an
	// upper bound of the unreleased ones', shipped to replicas).
	LentUntil time.Duration
	// Inherited is the whole tokens a previous owner had in leases when it
	// shipped the state this pool continues from (lease's replicas),
	// counted against the capacity until InheritedUntil, when they are
	// released with none unused. Always 0 in regionlease (no replicas).
	Inherited      int64
	InheritedUntil time.Duration
	// Committed is refill the owner has promised ahead (regionlease's
	// dated pushes; none for lease), by interval: the capacity keeps room
	// for the part not made yet, so that the bucket, however full, never
	// loses it. Ordered by At; an entry whose At has passed reserves
	// nothing and may be dropped.
	Committed []Commitment
}

// Commitment is Ticks of refill promised over (From, At] (made at an
// even pace over it).
type Commitment struct {
	From, At time.Duration
	Ticks    int64
}

// Shape is the rate and burst every pool of a node shares.
type Shape struct {
	TokensPerNs int64 // ticks refilled per nanosecond (bucket.Rate.Tokens)
	Per         int64 // ticks per token (bucket.Rate.Per in ns)
	Burst       int64 // tokens
}

// Capacity is the pool's capacity in ticks at its current leases, less
// the promised refill not made yet at Last (reserved). It does not fall
// between two changes of the leases (the promised refill is made as time
// passes), so a Refill that evaluates it at its end is exact.
func (s Shape) Capacity(p *Pool) int64 {
	return (s.Burst-p.Leased-p.Inherited)*s.Per - reserved(p, p.Last)
}

// reserved is the ticks of p's promised refill (Committed) not made yet
// at t, rounded up.
func reserved(p *Pool, t time.Duration) int64 {
	var r int64
	for _, c := range p.Committed {
		switch {
		case t >= c.At:
		case t <= c.From:
			r += c.Ticks
		default:
			// c.Ticks * (c.At - t) / (c.At - c.From), rounded up, without
			// overflow for the ticks and durations at hand (float64).
			r += int64(math.Ceil(float64(c.Ticks) * float64(c.At-t) / float64(c.At-c.From)))
		}
	}
	return r
}

// Advance refills p up to now, releasing its inherited leases at their
// end. A now at or before p.Last refills nothing.
func (s Shape) Advance(p *Pool, now time.Duration) {
	if p.Inherited > 0 && p.InheritedUntil <= now {
		s.Refill(p, p.InheritedUntil)
		p.Inherited = 0
	}
	s.Refill(p, now)
}

// Refill refills p up to now at its current capacity.
func (s Shape) Refill(p *Pool, now time.Duration) {
	dt := int64(now - p.Last)
	if dt <= 0 {
		return
	}
	p.Last = now
	c := s.Capacity(p)
	if p.Level >= c || s.TokensPerNs == 0 {
		return
	}
	need := c - p.Level
	if dt >= need/s.TokensPerNs+1 { // compare first: dt*TokensPerNs may overflow
		p.Level = c
		return
	}
	p.Level = min(p.Level+dt*s.TokensPerNs, c)
}

// Whole is the whole tokens p is sure to have held since at (after
// Advance to at; see Spare).
func (s Shape) Whole(p *Pool, at time.Duration) int64 { return s.Spare(p, at) / s.Per }

// Spare is the ticks p is sure to have held throughout [at, p.Last]: the
// level less what refilled since at (level(t) >= level(last) -
// refill(t, last) for every t in between). A request decided late (after
// the pool was advanced past its arrival) takes only from this, so that it
// could have taken its tokens at its arrival, the time the envelope counts
// it at, and a late decision never uses tokens refilled after it.
func (s Shape) Spare(p *Pool, at time.Duration) int64 {
	late := int64(p.Last - at)
	if late <= 0 || s.TokensPerNs == 0 {
		return max(p.Level, 0) // a negative level (reservations) spares nothing
	}
	if late >= p.Level/s.TokensPerNs+1 { // compare first: late*TokensPerNs may overflow
		return 0
	}
	return max(p.Level-late*s.TokensPerNs, 0)
}

// Take takes n tokens at time at (advanced to at before; see Spare) if p
// holds them.
func (s Shape) Take(p *Pool, at time.Duration, n int64) bool {
	if n <= 0 || n > s.Burst || s.Spare(p, at) < n*s.Per {
		return false
	}
	p.Level -= n * s.Per
	return true
}

// Lend moves n tokens (n <= Whole) from the level into a lease.
func (s Shape) Lend(p *Pool, n int64) {
	p.Level -= n * s.Per
	p.Leased += n
}

// Release ends a lease of n tokens of which unused come back: the
// capacity grows by n, the level by unused (capped at the capacity, so that
// a credit never makes tokens).
func (s Shape) Release(p *Pool, n, unused int64) {
	p.Leased -= n
	p.Level = min(p.Level+unused*s.Per, s.Capacity(p))
}

// UntilOne is the earliest time at or after max(now, p.Last) at which p
// holds one whole token, assuming no credit; 0 when it never will (zero
// rate).
func (s Shape) UntilOne(p *Pool, now time.Duration) time.Duration {
	at := max(now, p.Last)
	if p.Level >= s.Per {
		return at
	}
	if s.TokensPerNs == 0 || s.Capacity(p) < s.Per {
		return 0
	}
	need := s.Per - p.Level
	return at + time.Duration((need+s.TokensPerNs-1)/s.TokensPerNs)
}

// Full reports whether p is at the full burst with no leases at now.
func (s Shape) Full(p *Pool, now time.Duration) bool {
	s.Advance(p, now)
	return p.Leased == 0 && p.Inherited == 0 && p.Level == s.Burst*s.Per
}

// FillTime is how long p takes to refill from its level to its capacity
// (lending tokens moves both by the same amount, so it is the same before
// and after a grant): at least 1 ns, the largest duration with a zero
// rate.
func (s Shape) FillTime(p *Pool) time.Duration {
	if s.TokensPerNs == 0 {
		return time.Duration(math.MaxInt64)
	}
	return max(time.Duration((s.Capacity(p)-p.Level)/s.TokensPerNs), 1)
}
