package quota

import (
	"cmp"
	"math"
	"slices"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// holderID names a quota client: the node it is attached to and its number
// there.
type holderID struct {
	node   strategy.NodeID
	client strategy.QuotaClient
}

func (a holderID) compare(b holderID) int {
	if c := cmp.Compare(a.node, b.node); c != 0 {
		return c
	}
	return cmp.Compare(a.client, b.client)
}

// share is one client's part of a key's (r, b) at the key's owner: what it
// was last sent (units tokens per fill interval, burst tokens) and until
// when it surely holds it.
type share struct {
	id      holderID
	demand  float64 // tokens/s from its last report; < 0: unknown (a first report)
	units   int64   // tokens_per_fill sent
	burst   int64   // max_tokens sent
	sent    bool    // an assignment was sent (or adopted)
	seq     uint64  // the last assignment's number (QuotaAssign.seq)
	sentAt  time.Duration
	expires time.Duration // sentAt + ttl + apply_lag: expired at the client by then
	denyAt  time.Duration // the last DENY_ALL sent while its first token bucket is unpaid; 0: none
	// idleSince is the start of the span its reports showed no request
	// over (0: it had requests in its last report): abandon_idle.
	idleSince time.Duration
	live      bool // attached and its node a member: renewed
	// await: adopted from a replica, counted as held but not renewed until
	// the client's node reports what the client holds (confirm)
	await bool
	// pinned: adopted from a replica and renewed as it is, neither cut nor
	// raised until the client's node reports to this owner (it may still
	// see the previous one, and then applies identical renewals only:
	// Quota.renewsHeld)
	pinned bool
	// pinnedUntil is, for a pinned share, the earliest time the client's
	// assignment may expire: the previous owner's last send plus ttl (the
	// client received it after that send, and its TTL counts from the
	// receipt). A pinned renewal does not move it: the client's node drops
	// a renewal from a node it does not yet see as a member, so the owner
	// cannot know that one arrived. A pinned share is renewed only while a
	// renewal surely reaches the client before pinnedUntil; after that it
	// awaits its node's report (confirm), for a renewal that came after
	// the client's assignment expired would start a full token bucket,
	// unpaid.
	pinnedUntil time.Duration

	// Client ids (clientid.go). cid is the client's own id ("" none).
	// ackedAt, for a share with a cid, is when the owner sent the latest
	// token bucket whose write its node confirmed (0: none): the client
	// holds an assignment until at least ackedAt + ttl. claimUntil > 0
	// marks a claim: a new share whose first report carried a cid and
	// time_elapsed > 0 (its Envoy holds the bucket) and nothing held, which
	// may take over the share of its id until then; holdDeny is until when
	// its DENY_ALL is withheld meanwhile (a blanket rule would replace the
	// bucket its Envoy holds, and the token bucket after it would start
	// full).
	cid        string
	ackedAt    time.Duration
	claimUntil time.Duration
	holdDeny   time.Duration
}

// release is capacity a cut gave up, counted as held until at: the
// expiry of the assignment the cut replaced (the client holds that one
// until the cut reaches it), or apply_lag after the client's node
// confirms it wrote the cut (seq) to the client's stream (ack).
type release struct {
	at           time.Duration
	units, burst int64
	id           holderID
	seq          uint64 // the cut's assignment number
}

// alloc is one key's (r, b) at its owner, divided into the clients' shares
// and the reserve: a token bucket of the units and burst no client holds,
// from which requests checked at the nodes are decided. Conservation:
// heldUnits (the shares' units plus pending releases) + the reserve's rate
// units = the key's units; likewise for burst; a share's burst grows only by
// tokens taken from the reserve's level.
type alloc struct {
	shares               []*share // sorted by id
	pending              []release
	heldUnits, heldBurst int64
	reserve              bucket.Bucket
	frozenUntil          time.Duration // a takeover: no raise, no refill before it
	// gatherUntil: no raise and no first assignment before it (the first
	// reports of a key's clients gathered, so that they are split at once
	// instead of each newcomer cutting the ones before it).
	gatherUntil time.Duration
	// slowedAt is the last time the reserve's rate went down: a request
	// that arrived before it is refused (the bucket knows only its current
	// rate, so the tokens it held at such an arrival cannot be told:
	// bucket.Bucket's late decisions assume one rate since then).
	slowedAt time.Duration
	// plain demand (tokens checked at the nodes, decided from the
	// reserve): counts over the current and previous window
	winStart        time.Duration
	plainCur, plain int64
	wake            time.Duration // the next time rebalance has work; 0: none

	// replication (replica.go): adopted says this allocation continues a
	// replica (never adopt a second one); adoptAt > 0 is when a crashed
	// owner's replica is to be adopted (replica_wait after the change);
	// replBytes and replAt are the last replica sent (its encoding without
	// time and reserve, to send only changes; and when).
	adopted   bool
	memBytes  int32 // the heap of its shares and slices counted in Quota.mem (memory.go), bytes
	adoptAt   time.Duration
	replBytes []byte
	replAt    time.Duration
}

// shape is the rule's quota geometry: the fill interval every assignment
// of the rule uses (whole seconds, fixed: Envoy compares only the nanos of
// fill_interval, so rates change through tokens_per_fill), the key's rate
// in whole tokens per fill interval (units) and its burst.
type shape struct {
	fill   time.Duration
	units  int64
	burst  int64
	window time.Duration // plain demand window
}

// maxEnvoyTokens is the largest max_tokens and tokens_per_fill Envoy takes
// (uint32 fields).
const maxEnvoyTokens = math.MaxUint32

// minUnits is the resolution quota aims for: a fill interval long enough
// that the key's rate is at least this many whole tokens per interval.
const minUnits = 100

// newShape picks the fill interval S (whole seconds, 1 to 3600) as the
// shortest with r*S >= minUnits tokens and burst*S within the tick
// arithmetic, and units = floor(r*S) (at most maxEnvoyTokens): the rate
// quota divides is units/S <= r (the floor's loss is under one token per
// S).
func newShape(r bucket.Rate, burst int64) shape {
	perSec := r.PerSec()
	s := int64(1)
	if perSec > 0 && perSec < minUnits {
		s = int64(math.Ceil(minUnits / perSec))
	}
	s = min(s, 3600)
	if burst > 0 {
		s = max(min(s, (math.MaxInt64/4)/(burst*int64(time.Second))), 1)
	}
	fill := time.Duration(s) * time.Second
	var units int64
	if r.Tokens > 0 {
		// floor(Tokens * fill / Per), exactly
		units = mulDiv(r.Tokens, int64(fill), int64(r.Per))
	}
	return shape{fill: fill, units: min(units, maxEnvoyTokens), burst: min(burst, maxEnvoyTokens), window: time.Second}
}

// mulDiv is floor(a*b/c) for non-negative a, b and positive c, saturating
// at MaxInt64.
func mulDiv(a, b, c int64) int64 {
	f := float64(a) * float64(b) / float64(c)
	if f >= math.MaxInt64/2 {
		return math.MaxInt64 / 2
	}
	// exact when the product fits; the float guess is only for the range
	if a == 0 || b <= math.MaxInt64/a {
		return a * b / c
	}
	return int64(f)
}

// reserveRate is the reserve's rate: the units no share holds, per fill
// interval (0 while frozen).
func (sh shape) reserveRate(a *alloc, now time.Duration) bucket.Rate {
	free := sh.units - a.heldUnits
	if free <= 0 || now < a.frozenUntil {
		return bucket.Rate{}
	}
	return bucket.Rate{Tokens: free, Per: sh.fill}
}

// resize sets the reserve's rate and burst to what the shares leave,
// keeping its tokens (capped at the new burst: a shrink destroys tokens,
// never makes them).
func (sh shape) resize(a *alloc, now time.Duration) {
	r := sh.reserveRate(a, now).Reduced()
	if old := a.reserve.Rate(); lessRate(r, old) {
		a.slowedAt = now
	}
	// SetRate errs only for a burst that overflows the ticks, which
	// newShape's fill interval rules out.
	_ = a.reserve.SetRate(now, r, max(sh.burst-a.heldBurst, 0))
}

// lessRate reports whether a refills slower than b (exactly: a.Tokens/a.Per
// < b.Tokens/b.Per, cross-multiplied in floats: rates here are small
// integers per whole seconds).
func lessRate(a, b bucket.Rate) bool {
	return float64(a.Tokens)*float64(b.Per) < float64(b.Tokens)*float64(a.Per)
}

// newAlloc is a key's allocation at its owner: the reserve full at (r, b);
// for a takeover that ends at takeoverEnd (> 0), as if it had been emptied
// then: empty and not refilling until takeoverEnd (frozen) when that is
// still to come, else refilled since takeoverEnd.
func (sh shape) newAlloc(now, takeoverEnd time.Duration) *alloc {
	a := &alloc{winStart: now}
	full := bucket.Rate{Tokens: sh.units, Per: sh.fill}.Reduced()
	switch {
	case takeoverEnd > now:
		a.frozenUntil = takeoverEnd
		a.reserve = bucket.MustNew(bucket.Rate{}, sh.burst, now)
		a.reserve.AllowN(now, sh.burst) // empty
		a.wake = takeoverEnd
	case takeoverEnd > 0:
		a.reserve = bucket.MustNew(full, sh.burst, takeoverEnd)
		a.reserve.AllowN(takeoverEnd, sh.burst) // empty then; refilled since
	default:
		a.reserve = bucket.MustNew(full, sh.burst, now)
	}
	return a
}

// fillTime is how long the reserve takes to fill the whole burst at the
// key's rate (at most a day; a day for a zero rate).
func (sh shape) fillTime() time.Duration {
	if sh.units <= 0 {
		return 24 * time.Hour
	}
	return min(time.Duration(float64(sh.burst)/float64(sh.units)*float64(sh.fill))+time.Nanosecond, 24*time.Hour)
}

// find returns the share of id, or nil.
func (a *alloc) find(id holderID) *share {
	i, ok := slices.BinarySearchFunc(a.shares, id, func(s *share, id holderID) int { return s.id.compare(id) })
	if !ok {
		return nil
	}
	return a.shares[i]
}

// remove deletes the share of id (what it held must be counted elsewhere).
func (a *alloc) remove(id holderID) {
	a.shares = slices.DeleteFunc(a.shares, func(s *share) bool { return s.id == id })
}

// anyLive reports whether a has a live share.
func (a *alloc) anyLive() bool {
	return slices.ContainsFunc(a.shares, func(s *share) bool { return s.live })
}

// add inserts a new share of id and returns it.
func (a *alloc) add(id holderID) *share {
	s := &share{id: id, demand: -1}
	i, _ := slices.BinarySearchFunc(a.shares, id, func(s *share, id holderID) int { return s.id.compare(id) })
	a.shares = slices.Insert(a.shares, i, s)
	return s
}

// countPlain counts tokens checked at the nodes (decided from the reserve)
// in the demand windows.
func (sh shape) countPlain(a *alloc, now time.Duration, tokens int64) {
	sh.roll(a, now)
	a.plainCur += tokens
}

func (sh shape) roll(a *alloc, now time.Duration) {
	for now-a.winStart >= sh.window {
		if now-a.winStart >= 2*sh.window {
			a.plain, a.plainCur = 0, 0
			a.winStart = now - (now-a.winStart)%sh.window
			continue
		}
		a.plain, a.plainCur = a.plainCur, 0
		a.winStart += sh.window
	}
}

// plainDemand is the tokens/s checked at the nodes: the larger of the last
// full window and the current one so far.
func (sh shape) plainDemand(a *alloc, now time.Duration) float64 {
	sh.roll(a, now)
	return float64(max(a.plain, a.plainCur)) / sh.window.Seconds()
}

// waterFill divides total units max-min fairly over wants (each gets at
// most its want; what one does not take is shared among the others),
// ties broken by index: the first ones get the odd unit. Returns the
// allocation, in the order of wants.
func waterFill(total int64, wants []int64) []int64 {
	out := make([]int64, len(wants))
	idx := make([]int, len(wants))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(i, j int) int { return cmp.Compare(wants[i], wants[j]) })
	left := total
	for k, i := range idx {
		n := int64(len(idx) - k)
		fair := left / n
		give := min(wants[i], fair)
		out[i] = give
		left -= give
	}
	// the remainder (< n units when every want was above the fair share):
	// one more unit each to the unsatisfied, in index order
	for i := range out {
		if left == 0 {
			break
		}
		if out[i] < wants[i] {
			out[i]++
			left--
		}
	}
	return out
}

// targets computes every live share's target (units, burst) and the
// reserve's own units (its plain demand's fair share): the key's units
// water-filled over the wants (demand*headroom per fill interval, at
// least 1; unknown demand wants everything), bursts in proportion to
// units, at least 1 token for a share with units while burst remains.
func (sh shape) targets(a *alloc, now time.Duration, headroom float64) (units, burst []int64) {
	plain := sh.plainDemand(a, now)
	wants := sh.wants(a, plain, headroom)
	var sum int64
	for _, w := range wants {
		sum += w
	}
	if sum > sh.units && headroom > 1 {
		// Oversubscribed: headroom would hold units a light client does
		// not use while a heavy one is refused; max-min on the demands.
		wants = sh.wants(a, plain, 1)
	}
	all, burst := sh.split(a, wants)
	return all[:len(a.shares)], burst
}

// split water-fills the key's units over wants (the shares' and, last, the
// reserve's) and sizes the shares' bursts by need; it returns the units of
// all (the reserve's last) and the shares' bursts.
func (sh shape) split(a *alloc, wants []int64) (all, burst []int64) {
	wants = slices.Clone(wants)
	all = sh.keepUnits(a, wants, waterFill(sh.units, wants))
	return all, sh.burstsByNeed(a, all)
}

// keepUnits is all (the water-fill of wants), filled again where a sent
// share that got its want keeps the units it holds while its want is
// within the cut's hysteresis of them (above, both ways): the noise of a
// demand estimate moves no unit, and the others are not cut to pay for it
// (a cut's units refill nobody until its release). It rewrites those
// shares' wants.
func (sh shape) keepUnits(a *alloc, wants, all []int64) []int64 {
	again := false
	for i, s := range a.shares {
		if s.live && s.sent && !s.pinned && all[i] == wants[i] && all[i] != s.units &&
			!above(s.units, all[i]) && !above(all[i], s.units) {
			wants[i] = s.units
			again = true
		}
	}
	if again {
		return waterFill(sh.units, wants)
	}
	return all
}

// burstsByNeed is the shares' bursts for the units all (the reserve's
// last), in tokens, summing to at most the key's burst: every share with
// units gets minBurst first (while the burst lasts), the rest is divided
// by needWeights, and a share with units left at 0 gets 1 while the burst
// lasts.
func (sh shape) burstsByNeed(a *alloc, all []int64) []int64 {
	units := all[:len(a.shares)]
	burst := make([]int64, len(a.shares))
	weights, sumW, holders := sh.needWeights(a, all)
	base := int64(0)
	if holders > 0 {
		base = min(minBurst, sh.burst/holders)
	}
	var used int64
	for i, u := range units {
		if u > 0 {
			burst[i] = base
		}
		if sumW > 0 {
			burst[i] += int64(float64(sh.burst-holders*base) * weights[i] / sumW)
		}
		used += burst[i]
	}
	for i, u := range units {
		if used >= sh.burst {
			break
		}
		if u > 0 && burst[i] == 0 {
			burst[i] = 1
			used++
		}
	}
	return burst
}

// needWeights is each of all's weight in the burst's division, their sum
// (with the units no one takes, whose burst stays in the reserve for the
// requests checked at the nodes) and how many hold units. Bursts by need:
// a share's weight is its units, times (units/want)^2 for a share held
// below its demand (saturated: its bucket is empty but for the token in
// flight, a burst it cannot keep); a share at about its demand keeps the
// burst that its Poisson arrivals need (its loss to a full bucket is
// about demand/(2*burst) tokens/s). Only while some share is at about its
// demand (the ones that need a burst): when every share is saturated
// their weights are their units, else the noise of their demand
// estimates, doubled by the square, would reshuffle bursts that none of
// them keeps (20 saturated proxies of a key, docs/EVALUATION.md's tenant
// workload: 60% more bytes per request).
func (sh shape) needWeights(a *alloc, all []int64) (weights []float64, sumW float64, holders int64) {
	factors := make([]float64, len(all))
	needy := false
	for i, u := range all {
		factors[i] = 1
		if i >= len(a.shares) || a.shares[i].demand < 0 || !a.shares[i].live {
			continue
		}
		if d := a.shares[i].demand * sh.fill.Seconds(); d > float64(u) {
			factors[i] = (float64(u) / d) * (float64(u) / d)
		}
		if u > 0 && a.shares[i].demand*sh.fill.Seconds() <= 1.25*float64(u) {
			needy = true
		}
	}
	weights = make([]float64, len(all))
	for i, u := range all {
		w := float64(u)
		if needy {
			w *= factors[i]
		}
		weights[i] = w
		sumW += w
		if u > 0 {
			holders++
		}
	}
	var given int64
	for _, u := range all {
		given += u
	}
	sumW += float64(max(sh.units-given, 0))
	return weights, sumW, holders
}

// minBurst is the burst a share with units gets first (while the key's
// burst lasts), before the rest is divided by need: Envoy admits a
// request only from a whole token, so a bucket of 1 token loses its
// refill whenever it is full, which a saturated client's is after every
// token until its next request (a 31/s share of a 150/s client lost 17%
// in the model with 1). Ours.
const minBurst = 3

// wants is every share's want and, last, the reserve's for a plain demand
// of plain tokens/s.
func (sh shape) wants(a *alloc, plain, headroom float64) []int64 {
	wants := make([]int64, 0, len(a.shares)+1)
	for _, s := range a.shares {
		if !s.live {
			wants = append(wants, 0)
			continue
		}
		wants = append(wants, sh.want(s.demand, headroom))
	}
	if plain > 0 {
		return append(wants, sh.want(plain, headroom))
	}
	return append(wants, 0)
}

// above reports whether held is enough above target to cut it (a
// hysteresis of 10% + 1: a cut holds its capacity for apply_lag and
// destroys the tokens above the kept fill ratio, so small moves cost more
// than they give).
func above(held, target int64) bool { return held > target+target/10+1 }

// want is the units a demand of d tokens/s asks for: ceil(d*headroom*S), at
// least 1; an unknown demand (< 0) asks for all. Without headroom (an
// oversubscribed key) the demand is rounded to the nearest unit, not up:
// a unit above a light client's demand is refilled into its bucket and
// lost while a heavy one is refused (TestSkewedFleet, seeds 7, 1, 2, 3:
// 95.2, 95.1, 95.4, 94.0 % of the ceiling at 5 s reports and 93.2, 93.3,
// 94.6, 94.2 % at 1 s, against 94.4, 95.0, 94.7, 91.9 % and 92.1, 93.2,
// 93.5, 93.0 % rounding up).
func (sh shape) want(d, headroom float64) int64 {
	if d < 0 {
		return sh.units
	}
	w := math.Ceil(d * headroom * sh.fill.Seconds())
	if headroom == 1 {
		w = math.Round(d * sh.fill.Seconds())
	}
	if w >= float64(sh.units) {
		return sh.units
	}
	return max(int64(w), 1)
}

// settle releases the capacity of cuts that have surely been applied and of
// shares that have surely expired at their clients (not live: no longer
// renewed), at now.
func (sh shape) settle(a *alloc, now time.Duration) {
	changed := false
	keep := a.pending[:0]
	for _, r := range a.pending {
		if r.at <= now {
			a.heldUnits -= r.units
			a.heldBurst -= r.burst
			changed = true
			continue
		}
		keep = append(keep, r)
	}
	a.pending = keep
	shares := a.shares[:0]
	for _, s := range a.shares {
		if !s.live && (!s.sent || s.expires <= now) {
			a.heldUnits -= s.units
			a.heldBurst -= s.burst
			changed = true
			continue
		}
		shares = append(shares, s)
	}
	clear(a.shares[len(shares):]) // the dropped shares' pointers: let them be collected
	a.shares = shares
	if changed || (a.frozenUntil > 0 && now >= a.frozenUntil) {
		if now >= a.frozenUntil {
			a.frozenUntil = 0
		}
		sh.resize(a, now)
	}
}

// rebalance moves every live share towards its target at now: cuts at
// once (their capacity held until apply_lag has passed), raises from free
// units and from whole tokens of the reserve (a raised burst may hand the
// client its whole increase at once: Envoy keeps a changed bucket's fill
// ratio, and a full one stays full), none while frozen. A share never sent
// gets its first assignment only once its burst is paid (Envoy starts a
// first bucket full). send is called for each share whose assignment is
// to be sent: changed, new, or due for renewal (renewEvery after the last
// send). It sets a.wake to the next time rebalance has work.
func (sh shape) rebalance(a *alloc, now time.Duration, headroom float64, applyLag, ttl, renewEvery time.Duration, send func(s *share, deny bool)) {
	sh.settle(a, now)
	units, burst := sh.targets(a, now, headroom)
	changed := make([]bool, len(a.shares))
	if a.adoptAt <= now {
		// (while a crashed owner's replica is awaited the frozen
		// allocation only renews what the clients report they hold:
		// adopt merges it with the replica)
		sh.cut(a, now, units, burst, changed)
	}
	blockedAt := time.Duration(0)
	if now >= a.frozenUntil && now >= a.gatherUntil {
		blockedAt = sh.raise(a, now, units, burst, changed)
	}
	sh.resize(a, now)
	a.wake = minWake(blockedAt, sh.sendDue(a, now, ttl, applyLag, renewEvery, changed, send))
	for _, r := range a.pending {
		a.wake = minWake(a.wake, r.at)
	}
	for _, until := range []time.Duration{a.frozenUntil, a.gatherUntil} {
		if until > now {
			a.wake = minWake(a.wake, until)
		}
	}
}

// cut moves every live, sent share above its target down to it at once
// (within the hysteresis of above; never to 0 units or burst: Envoy
// refuses tokens_per_fill 0, and max_tokens 0 would admit nothing, ever).
// What a cut frees is held as a release until the assignment it replaced
// expires, or an ack (alloc.ack).
func (sh shape) cut(a *alloc, now time.Duration, units, burst []int64, changed []bool) {
	for i, s := range a.shares {
		if !s.live || !s.sent || s.pinned {
			continue
		}
		var r release
		if t := max(units[i], 1); above(s.units, t) {
			r.units, s.units = s.units-t, t
		}
		if t := max(burst[i], 1); above(s.burst, t) {
			r.burst, s.burst = s.burst-t, t
		}
		if r.units > 0 || r.burst > 0 {
			r.at, r.id, r.seq = max(s.expires, now), s.id, s.seq+1
			a.pending = append(a.pending, r)
			changed[i] = true
		}
	}
}

// raise moves every live share below its target up: burst first, paid
// with whole tokens of the reserve (a first assignment needs at least
// one), then units from the free ones. It returns when the reserve will
// hold the tokens a raise still waits for (0: none).
func (sh shape) raise(a *alloc, now time.Duration, units, burst []int64, changed []bool) (blockedAt time.Duration) {
	// First assignments first: a share never sent is paid before the sent
	// ones below their targets take the reserve's tokens and the free
	// units (else, with every unit held, a sent share whose target moves
	// with its demand's noise takes each unit freed, and the new one
	// waits indefinitely: seen after an owner's crash,
	// TestOwnerCrashTakeover). Ours.
	// Then the sent shares whose bursts are starved (below 1/starvedBurst
	// of their targets), then the others, whose bursts are raised only
	// beyond the cut's hysteresis (above): the reserve's tokens go where a
	// burst is far too small (a light client's Poisson arrivals refused
	// and its refill lost to a full bucket), not a token at a time to
	// every burst whose target moves with the demand estimates (a raise
	// hands the client only its fill ratio of the tokens paid). Ours.
	for pass := range 3 {
		blockedAt = minWake(blockedAt, sh.raisePass(a, now, units, burst, changed, pass))
	}
	return blockedAt
}

// raisePass is raise over the shares never sent (pass 0), the sent ones
// whose bursts are starved (1) or the other sent ones (2).
func (sh shape) raisePass(a *alloc, now time.Duration, units, burst []int64, changed []bool, pass int) (blockedAt time.Duration) {
	for i, s := range a.shares {
		if !s.inRaisePass(burst[i], pass) {
			continue
		}
		raised, at := sh.raiseBurst(a, s, now, burst[i], pass)
		blockedAt = minWake(blockedAt, at)
		// A burst not paid yet (0) gets no units either: they refill the
		// reserve meanwhile.
		if s.burst > 0 && sh.raiseUnits(a, s, s.unitTarget(units[i], burst[i])) {
			raised = true
		}
		changed[i] = changed[i] || raised
	}
	return blockedAt
}

// inRaisePass says whether raise's pass (see raisePass) takes s, whose
// burst target is burstTarget tokens: a live share neither pinned nor of
// another pass.
func (s *share) inRaisePass(burstTarget int64, pass int) bool {
	if !s.live || s.sent != (pass > 0) || s.pinned {
		return false
	}
	starved := s.sent && s.burst*starvedBurst < burstTarget
	return !s.sent || (pass == 1) == starved
}

// raiseBurst raises s's burst towards target (tokens), paid with whole
// tokens of the reserve and within the shape's free burst; on pass 2 only
// when the target is beyond the cut's hysteresis (above). It reports
// whether it raised the burst, and when the reserve will hold the tokens
// still missing (0: none missing, or never).
func (sh shape) raiseBurst(a *alloc, s *share, now time.Duration, target int64, pass int) (raised bool, blockedAt time.Duration) {
	need := target - s.burst
	if need <= 0 || (pass == 2 && !above(target, s.burst)) {
		return false, 0
	}
	whole := int64(math.Floor(a.reserve.Tokens(now)))
	give := min(need, max(sh.burst-a.heldBurst, 0), max(whole, 0))
	if give > 0 && a.reserve.AllowN(now, give) {
		s.burst += give
		a.heldBurst += give
		raised = true
	}
	if give < need {
		if d, ok := a.reserve.DelayN(now, need-give); ok {
			blockedAt = now + max(d, time.Millisecond)
		}
	}
	return raised, blockedAt
}

// unitTarget is the units s may hold now given its targets target
// (units) and burstTarget (tokens): target, but in proportion to the part
// of the burst paid while that is not all paid (a first assignment) or
// starved (a sent share), never below what s holds or 1.
func (s *share) unitTarget(target, burstTarget int64) int64 {
	if !s.sent && s.burst < burstTarget {
		// A first assignment whose burst is not all paid yet:
		// units in proportion to the part paid (at least the one
		// an assignment needs: Envoy refuses tokens_per_fill 0);
		// the others stay in the reserve and refill it, which
		// pays the rest of the burst (with every unit held,
		// nothing would). A share already sent takes its units
		// at once, its burst as the reserve pays it: a raise of
		// tokens_per_fill alone hands no tokens (the other
		// shares' targets leave the free units that pay first
		// assignments).
		return min(target, max(s.units, 1, mulDiv(target, s.burst, burstTarget)))
	}
	if s.burst*starvedBurst < burstTarget {
		// A sent share whose burst is far below its target (paid a
		// token at a time after a takeover emptied the reserve):
		// units up to starvedBurst times the part paid, the others
		// left to refill the reserve, which pays its burst. With
		// every unit held the reserve refills nothing, and a share
		// kept a burst of 1 (Envoy: one token per refill at most
		// held) for good (seen live after an owner's kill).
		return min(target, max(s.units, 1, mulDiv(target, starvedBurst*s.burst, burstTarget)))
	}
	return target
}

// raiseUnits raises s's units towards target from the shape's free units
// and reports whether it did.
func (sh shape) raiseUnits(a *alloc, s *share, target int64) bool {
	give := min(target-s.units, max(sh.units-a.heldUnits, 0))
	if give <= 0 {
		return false
	}
	s.units += give
	a.heldUnits += give
	return true
}

// starvedBurst: a sent share whose burst is below 1/starvedBurst of its
// target gets units up to starvedBurst times the paid part only (raise),
// the others refilling the reserve that pays its burst. Ours; 2 rather
// than 4: a light client that came after the others' first assignments
// was paid a token at a time and kept a burst of 3-6 against a target of
// about 20 (its Poisson arrivals refused, its refill lost to a full
// bucket): the skewed fleet with Poisson starts, seeds 1-10, the live
// test's parameters, 94.9 % -> 95.6 % of the ceiling at 1 s reports, 93.9
// % -> 94.3 % at 5 s; with the owner's crash 92.2 % -> 93.1 % and 91.0 %
// -> 91.7 %.
const starvedBurst = 2

// unpinIfLate makes a pinned share due for renewal await its node's report
// instead when the renewal might reach the client after pinnedUntil.
func (s *share) unpinIfLate(now, applyLag, renewEvery time.Duration) {
	if s.live && s.pinned && now >= s.sentAt+renewEvery && now+applyLag >= s.pinnedUntil {
		s.live, s.pinned, s.await = false, false, true
	}
}

// sendDue sends every live share whose assignment changed, is new (its
// burst paid and a unit given), or is due for renewal (renewEvery after
// the last send); a sent assignment is surely held for ttl + applyLag
// after it is sent. A pinned share whose renewal might reach its client
// after pinnedUntil is not renewed: it awaits its node's report (confirm).
// It returns the next renewal or expiry to wake for.
func (sh shape) sendDue(a *alloc, now, ttl, applyLag, renewEvery time.Duration, changed []bool, send func(s *share, deny bool)) (wake time.Duration) {
	valid := ttl + applyLag
	for i, s := range a.shares {
		s.unpinIfLate(now, applyLag, renewEvery)
		if !s.live {
			if s.sent {
				wake = minWake(wake, s.expires)
			}
			continue
		}
		if !s.sent && (s.burst == 0 || s.units == 0) {
			wake = minWake(wake, s.denyDue(now, renewEvery, send))
			continue
		}
		if changed[i] || !s.sent || now >= s.sentAt+renewEvery {
			s.sent, s.sentAt, s.expires = true, now, now+valid
			s.seq++
			send(s, false)
		}
		wake = minWake(wake, s.sentAt+renewEvery)
	}
	return wake
}

// denyDue sends s, a share whose first token bucket is not paid yet (its
// burst or its unit), a DENY_ALL blanket rule when one is due (renewed
// every renewEvery), so that the client's no_assignment_behavior (Envoy's
// default: ALLOW_ALL) never decides while its share is withheld; but none
// to a claim while its DENY_ALL is withheld (clientid.go). It returns when
// to look again.
func (s *share) denyDue(now, renewEvery time.Duration, send func(s *share, deny bool)) time.Duration {
	if s.holdDeny > now && s.denyAt == 0 {
		return s.holdDeny
	}
	if s.denyAt == 0 || now >= s.denyAt+renewEvery {
		s.denyAt = now
		s.seq++
		send(s, true)
	}
	return s.denyAt + renewEvery
}

// ack takes node's confirmation that it wrote assignment seq (and every
// earlier one) of client to the client's stream at or before now: the
// releases of those cuts come apply_lag after now (if not earlier)
// (changed); and, for a share with a client id, its last token bucket is
// the client's surely (acked: share.ackedAt moved).
func (a *alloc) ack(id holderID, seq uint64, now, applyLag time.Duration) (changed, acked bool) {
	if s := a.find(id); s != nil && s.cid != "" && s.sent && seq >= s.seq && s.sentAt > s.ackedAt {
		s.ackedAt = s.sentAt // clientid.go: the client holds it until at least then + ttl
		acked = true
	}
	for i := range a.pending {
		r := &a.pending[i]
		if r.id == id && r.seq <= seq && r.at > now+applyLag {
			r.at = now + applyLag
			changed = true
		}
	}
	if changed {
		a.wake = minWake(a.wake, now+applyLag)
	}
	return changed, acked
}

// minWake is the earlier of two wake-up times, 0 meaning none.
func minWake(a, b time.Duration) time.Duration {
	if a == 0 {
		return b
	}
	if b == 0 {
		return a
	}
	return min(a, b)
}

// idleCheck is when an allocation that holds no share, release or held
// capacity, but is not idle yet (its reserve refilling, a takeover's
// freeze, plain requests in the demand window), may have become idle: the
// reserve full, the freeze over, or two demand windows on (0: it holds
// shares, or nothing later will make it idle by itself). Without this
// wake nothing would look at such an allocation again until the key's
// next use, and it would stay in memory for good (found measuring
// MemoryBytes: 100k keys kept 28 MB after their clients left).
func (sh shape) idleCheck(a *alloc, now time.Duration) time.Duration {
	if len(a.shares) > 0 || len(a.pending) > 0 || a.heldUnits > 0 || a.heldBurst > 0 {
		return 0
	}
	at := now + 2*sh.window
	if a.frozenUntil > now {
		at = max(at, a.frozenUntil)
	} else if d, ok := a.reserve.DelayN(now, sh.burst); ok {
		at = max(at, now+d)
	}
	return at
}

// idle reports whether a holds nothing worth keeping at now: no share, no
// pending release, a full reserve at the full rate, not frozen.
func (sh shape) idle(a *alloc, now time.Duration) bool {
	return len(a.shares) == 0 && len(a.pending) == 0 && a.heldUnits == 0 && a.heldBurst == 0 &&
		now >= a.frozenUntil && a.reserve.Full(now) && sh.plainDemand(a, now) == 0
}
