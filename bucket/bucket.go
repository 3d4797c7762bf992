// Package bucket implements the two-parameter token bucket (r, b) that every
// tokenmesh strategy enforces: tokens are refilled at rate r up to the burst b,
// and a request for n tokens conforms when n tokens are in the bucket.
//
// Source: Li et al., SRTM §1.1 and Appendix A: "the number of
// messages that can leave the token bucket in any time interval of duration
// Δt is upper-bounded by b + r·Δt". Allow/AllowN drop non-conformant requests;
// Reserve/ReserveN implement the waiting (shaping) mode of SRTM §5.2 and
// Appendix A, eq. (2), where a message that finds too few tokens waits until
// they are there.
//
// Ours, not the paper's: the arithmetic is exact. A Rate is kept as the ratio
// Tokens/Per and the level is counted in ticks, where one token is Per
// nanoseconds' worth of ticks and one nanosecond refills Tokens ticks. Refill
// is integer multiplication, so a bucket never drifts however long it runs,
// and a Reserve delay is the exact number of nanoseconds (rounded up) until the
// tokens are there. Nothing allocates.
//
// Time is a time.Duration since any epoch the caller chooses (the simulator's
// virtual time, or the live driver's monotonic clock). A call with a time
// earlier than the last one is treated as happening at the last one: the
// bucket never refills backwards, so the envelope holds whatever the caller
// does.
package bucket

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"time"
)

// Rate is a refill rate of Tokens tokens per Per. Keeping the ratio (instead
// of a float) is what makes refill exact: 1 token per 3 s is Rate{1, 3*time.Second}.
// The zero Rate refills nothing.
type Rate struct {
	Tokens int64         // tokens added per Per; >= 0
	Per    time.Duration // the period; > 0 unless Tokens is 0
}

// maxPer bounds Per so that a token in ticks (Per nanoseconds) leaves room
// for large bursts: with Per = 1e6 s a bucket still holds 9,223 tokens.
const maxPer = 1e6 * time.Second

// PerSecond converts a rate given in tokens per second (the unit users write)
// into an exact Rate. Rates with up to 6 decimal places convert exactly
// (0.001 -> 1 per 1000 s, 2.5 -> 5 per 2 s); finer ones are rounded to the
// nearest millionth of a token per second.
//
// Errors: a negative, NaN or infinite rate, or one above 1e12 tokens/s.
func PerSecond(tokensPerSec float64) (Rate, error) {
	switch {
	case math.IsNaN(tokensPerSec) || math.IsInf(tokensPerSec, 0):
		return Rate{}, fmt.Errorf("rate %v tokens/s is not a finite number", tokensPerSec)
	case tokensPerSec < 0:
		return Rate{}, fmt.Errorf("rate %v tokens/s is negative", tokensPerSec)
	case tokensPerSec > 1e12:
		return Rate{}, fmt.Errorf("rate %v tokens/s is above the supported 1e12 tokens/s", tokensPerSec)
	case tokensPerSec == 0:
		return Rate{}, nil
	}
	per := int64(1)
	for k := 0; k < 6; k++ {
		scaled := tokensPerSec * float64(per)
		if math.Abs(scaled-math.Round(scaled)) <= 1e-9*scaled {
			break
		}
		per *= 10
	}
	tokens := int64(math.Round(tokensPerSec * float64(per)))
	if tokens == 0 {
		return Rate{}, fmt.Errorf("rate %v tokens/s is below the supported resolution of 1e-6 tokens/s", tokensPerSec)
	}
	return Rate{Tokens: tokens, Per: time.Duration(per) * time.Second}.Reduced(), nil
}

// Reduced divides Tokens and Per by their greatest common divisor so that
// a token costs as few ticks as possible (the same rate: 10 per 20 s is 1
// per 2 s). A zero rate reduces to Rate{}.
func (r Rate) Reduced() Rate {
	if r.Tokens == 0 {
		return Rate{}
	}
	a, b := r.Tokens, int64(r.Per)
	for b != 0 {
		a, b = b, a%b
	}
	return Rate{Tokens: r.Tokens / a, Per: r.Per / time.Duration(a)}
}

// Div returns the rate r/n exactly (Per*n), for a static split over n nodes
// (SRTM §1.2: sum r_l = r). Errors when n < 1 or Per*n overflows maxPer.
func (r Rate) Div(n int64) (Rate, error) {
	if n < 1 {
		return Rate{}, fmt.Errorf("cannot split a rate over %d nodes", n)
	}
	if r.Tokens == 0 {
		return Rate{}, nil
	}
	g := r.Tokens
	for m := n; m != 0; {
		g, m = m, g%m
	}
	out := Rate{Tokens: r.Tokens / g, Per: r.Per}
	n /= g
	if int64(out.Per) > int64(maxPer)/n {
		return Rate{}, fmt.Errorf("rate %v split over %d nodes is below the supported resolution", r, n*g)
	}
	out.Per *= time.Duration(n)
	return out.Reduced(), nil
}

// PerSec returns the rate in tokens per second, for reports and plots.
func (r Rate) PerSec() float64 {
	if r.Tokens == 0 {
		return 0
	}
	// One division of two exact values (for Tokens below 2^53/1e9 and Per
	// below 2^53 ns), so 1 token per 1ns is 1e9, not 999999999.9999999
	// as with Per.Seconds().
	return float64(r.Tokens) * float64(time.Second) / float64(r.Per)
}

// String prints the rate as tokens/s.
func (r Rate) String() string { return fmt.Sprintf("%g/s", r.PerSec()) }

// Validate reports whether r can drive a bucket.
func (r Rate) Validate() error {
	switch {
	case r.Tokens < 0:
		return fmt.Errorf("rate has negative Tokens %d", r.Tokens)
	case r.Tokens > 0 && r.Per <= 0:
		return fmt.Errorf("rate %d tokens per %v: Per must be positive", r.Tokens, r.Per)
	case r.Per > maxPer:
		return fmt.Errorf("rate period %v is above the supported %v", r.Per, maxPer)
	}
	return nil
}

// Bucket is a token bucket with an exact level. The zero Bucket is a
// bucket of rate 0 and burst 0, as New(Rate{}, 0, 0) returns: it holds no
// token, never refills, refuses every request of n > 0 tokens (AllowN,
// ReserveN, DelayN report false), and every method may be called on it;
// use New for any other bucket. A Bucket is a value of 48 bytes and is not
// safe for concurrent use: the caller (a strategy, driven by one
// goroutine) owns it.
type Bucket struct {
	tokens   int64         // Rate.Tokens: ticks refilled per nanosecond
	per      int64         // Rate.Per in ns: ticks per token
	capacity int64         // burst in ticks
	level    int64         // ticks available at last; negative while reservations wait
	last     time.Duration // time of the last update
	// fullUntil: the bucket held its whole capacity at every time up to
	// fullUntil, before the takes recorded in level (a new bucket: its
	// creation; 0 when nothing is known). A late decision counts the
	// refill it may not use from fullUntil at the earliest (spare). A
	// take, even a late one, keeps it: level already holds that take, so
	// the bound stays below every level from the take on. Only a level
	// of unknown history (SetLevel, a lower MergeLevel) clears it.
	fullUntil time.Duration
}

// ErrBurstTooLarge is returned by New when burst tokens do not fit the tick
// arithmetic for the rate's period.
var ErrBurstTooLarge = errors.New("burst too large for the rate's resolution")

// New returns a full bucket with rate r and burst tokens, as of time now.
//
// Errors: an invalid rate (see Rate.Validate), a negative burst, or a burst
// so large that burst*Per overflows (ErrBurstTooLarge, wrapped).
func New(r Rate, burst int64, now time.Duration) (Bucket, error) {
	if err := r.Validate(); err != nil {
		return Bucket{}, err
	}
	if burst < 0 {
		return Bucket{}, fmt.Errorf("burst %d is negative", burst)
	}
	per := int64(r.Per)
	if r.Tokens == 0 {
		per = int64(time.Second)
	}
	hi, lo := bits.Mul64(uint64(burst), uint64(per))
	if hi != 0 || lo > math.MaxInt64/2 {
		return Bucket{}, fmt.Errorf("burst %d at rate %v: %w", burst, r, ErrBurstTooLarge)
	}
	capacity := int64(lo)
	return Bucket{tokens: r.Tokens, per: per, capacity: capacity, level: capacity, last: now, fullUntil: max(now, 0)}, nil
}

// MustNew is New for rates and bursts known to be valid (tests, constants).
func MustNew(r Rate, burst int64, now time.Duration) Bucket {
	b, err := New(r, burst, now)
	if err != nil {
		panic(err)
	}
	return b
}

// Rate returns the refill rate.
func (b *Bucket) Rate() Rate {
	if b.tokens == 0 {
		return Rate{}
	}
	return Rate{Tokens: b.tokens, Per: time.Duration(b.per)}
}

// Burst returns the burst in whole tokens (the capacity rounded down).
func (b *Bucket) Burst() int64 {
	b.zeroTicks()
	return b.capacity / b.per
}

// zeroTicks gives the zero Bucket the tick size New gives a zero rate (a
// second's nanoseconds per token), so that it is that bucket: rate 0,
// burst 0. Every method that divides by b.per calls it (through advance).
func (b *Bucket) zeroTicks() {
	if b.per == 0 {
		b.per = int64(time.Second)
	}
}

// advance refills the bucket up to now. Time never goes backwards: a now
// before the last update refills nothing.
func (b *Bucket) advance(now time.Duration) {
	b.zeroTicks()
	dt := int64(now - b.last)
	if dt <= 0 {
		return
	}
	b.last = now
	if b.level >= b.capacity || b.tokens == 0 {
		return
	}
	need := b.capacity - b.level // > 0
	// need/tokens ns refill need ticks; compare before multiplying so that
	// dt*tokens cannot overflow.
	if dt >= need/b.tokens+1 {
		b.level = b.capacity
		return
	}
	if add := dt * b.tokens; add < need {
		b.level += add
	} else {
		b.level = b.capacity
	}
}

// Allow is AllowN(now, 1).
func (b *Bucket) Allow(now time.Duration) bool { return b.AllowN(now, 1) }

// AllowN takes n tokens at time now if the bucket holds them and reports
// whether it did (drop mode). n <= 0 always conforms and takes nothing, as in
// golang.org/x/time/rate. A request larger than the burst never conforms.
// A now before the last update (a late decision) takes only tokens the
// bucket is sure to have held since now (see spare), so admissions stay
// within b + r*T counted at the times they were asked for.
func (b *Bucket) AllowN(now time.Duration, n int64) bool {
	b.advance(now)
	if n <= 0 {
		return true
	}
	if n > b.capacity/b.per {
		return false
	}
	cost := n * b.per
	if b.spare(now) < cost {
		return false
	}
	b.level -= cost
	return true
}

// spare is the ticks the bucket is sure to have held throughout [now,
// last]: the level, or for a now before the last update (a late decision:
// a request decided after the bucket was advanced past its arrival) the
// level less what refilled since now (since level(t) >= level(last) -
// refill(t, last) for every t in between), counted only from fullUntil
// if later (before it the bucket was full: a new key's bucket is full
// since forever, so a late request older than the bucket is not held to
// refill it never needed). A late decision takes only from
// it, so it could have taken its tokens at now, the time it is counted at:
// a late decision never uses refill that came after it, and admissions
// stay within b + r*T counted at their own times. Ours (the throttling article's owner
// decides forwarded requests by arrival time; this is what makes a late
// one exact).
func (b *Bucket) spare(now time.Duration) int64 {
	late := int64(b.last - max(now, b.fullUntil))
	if late <= 0 || b.tokens == 0 || b.level <= 0 {
		return b.level
	}
	if late >= b.level/b.tokens+1 { // compare first: late*tokens may overflow
		return 0
	}
	return b.level - late*b.tokens
}

// wait is the time from now until cost ticks may be taken, for a bucket
// that cannot spare them at now (b.spare(now) < cost, b.tokens > 0): the
// deficit refills from last, so a late now adds its lateness.
func (b *Bucket) wait(now time.Duration, cost int64) time.Duration {
	late := max(int64(b.last-now), 0)
	d := cost - b.level // ticks missing at last; negative if only late
	var ns int64
	if d >= 0 {
		ns = (d + b.tokens - 1) / b.tokens
	} else {
		ns = -((-d) / b.tokens) // ceil of a negative quotient
	}
	return time.Duration(late + ns)
}

// ReserveN takes n tokens at time now in waiting (shaping) mode (SRTM §5.2,
// Appendix A eq. (2)): the tokens are taken now, the level may go negative,
// and the returned delay is the exact time (rounded up to the nanosecond)
// until the bucket would have held them; the request may proceed at
// now+delay. Requests reserved later queue behind it (FCFS).
//
// ok is false, and nothing is taken, when n exceeds the burst or the rate is
// zero and the tokens are not there now: no wait would ever be enough. For a
// now before the last update the delay is counted from now and includes
// the lateness (the deficit refills from the last update).
func (b *Bucket) ReserveN(now time.Duration, n int64) (delay time.Duration, ok bool) {
	b.advance(now)
	if n <= 0 {
		return 0, true
	}
	if n > b.capacity/b.per {
		return 0, false
	}
	cost := n * b.per
	if b.spare(now) >= cost {
		b.level -= cost
		return 0, true
	}
	if b.tokens == 0 {
		return 0, false
	}
	d := b.wait(now, cost)
	// The request proceeds at b.last + ns, ns = d less the lateness: a
	// whole nanosecond, rounded up from the instant the bucket holds cost.
	// A bucket that would be full before then loses the refill beyond its
	// capacity (under one nanosecond's); the level, going negative, is
	// never capped by advance again, so it is capped here, or the next
	// reservations would proceed up to a nanosecond early (a rounding
	// excess over b + r*T of under r*1ns). Ours.
	// (ns*tokens is under cost - level + tokens, wait's own sum: no overflow.)
	if ns := int64(d) - max(int64(b.last-now), 0); ns > 0 {
		b.level = min(b.level, b.capacity-ns*b.tokens)
	}
	b.level -= cost
	return d, true
}

// DelayN returns how long from now until n tokens are available, without
// taking any (the retry-after a rejected client should be told), counted
// like ReserveN's delay. ok is false when no wait is enough (n above the
// burst, or zero rate).
func (b *Bucket) DelayN(now time.Duration, n int64) (delay time.Duration, ok bool) {
	b.advance(now)
	if n <= 0 {
		return 0, true
	}
	if n > b.capacity/b.per {
		return 0, false
	}
	cost := n * b.per
	if b.spare(now) >= cost {
		return 0, true
	}
	if b.tokens == 0 {
		return 0, false
	}
	return b.wait(now, cost), true
}

// Tokens returns the tokens available at now (fractional, may be negative
// while reservations wait). For reports and the `remaining` of an API
// answer; decisions use the exact level.
func (b *Bucket) Tokens(now time.Duration) float64 {
	b.advance(now)
	return float64(b.level) / float64(b.per)
}

// Full reports whether the bucket is at its burst at now: a full bucket is
// indistinguishable from a new one, so callers may drop it to save memory.
func (b *Bucket) Full(now time.Duration) bool {
	b.advance(now)
	return b.level >= b.capacity
}

// SetRate changes the rate and burst at time now, keeping the tokens the
// bucket holds (capped at the new burst). Converting the level between the
// two rates' tick sizes rounds down by less than one tick (a nanosecond's
// refill), once per call, so repeated changes never create tokens.
//
// Errors as New; on error the bucket is unchanged.
func (b *Bucket) SetRate(now time.Duration, r Rate, burst int64) error {
	nb, err := New(r, burst, now)
	if err != nil {
		return err
	}
	b.advance(now)
	level := rescale(b.level, b.per, nb.per)
	if level < nb.capacity {
		nb.level = level
	}
	if rescale(b.capacity, b.per, nb.per) >= nb.capacity {
		nb.fullUntil = min(b.fullUntil, nb.fullUntil) // full before is full at the new burst
	} else {
		nb.fullUntil = 0
	}
	*b = nb
	return nil
}

// Rescale converts v ticks of size 1/from token into ticks of size 1/to
// (from, to > 0), rounding towards minus infinity, without overflow for
// in-range results; a result beyond ±MaxInt64/2 is clamped there. For
// strategies that carry levels between buckets of different ticks (owner's
// split=auto: sub-buckets of another K).
func Rescale(v, from, to int64) int64 { return rescale(v, from, to) }

// rescale is Rescale.
func rescale(v, from, to int64) int64 {
	if from == to {
		return v
	}
	neg := v < 0
	u := uint64(v)
	if neg {
		u = uint64(-v)
	}
	hi, lo := bits.Mul64(u, uint64(to))
	if hi >= uint64(from) { // quotient would overflow
		if neg {
			return math.MinInt64 / 2
		}
		return math.MaxInt64 / 2
	}
	q, rem := bits.Div64(hi, lo, uint64(from))
	if q > math.MaxInt64/2 {
		q = math.MaxInt64 / 2
	}
	if neg {
		if rem != 0 {
			q++
		}
		return -int64(q)
	}
	return int64(q)
}

// SplitBurst splits a burst of b tokens over n sub-token buckets so that the
// shares sum to b exactly (SRTM §1.2: sum b_l = b): share i is b/n, plus one
// for the first b mod n shares. Errors when n < 1 or b < 0.
func SplitBurst(b int64, n int, i int) (int64, error) {
	if n < 1 || i < 0 || i >= n {
		return 0, fmt.Errorf("burst share %d of %d does not exist", i, n)
	}
	if b < 0 {
		return 0, fmt.Errorf("burst %d is negative", b)
	}
	share := b / int64(n)
	if int64(i) < b%int64(n) {
		share++
	}
	return share, nil
}
