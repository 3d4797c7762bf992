package cluster

// The local fast path . Ours. A rule
// whose strategy is a strategy.Allowancer (local, central, static, owner
// for its own keys) gets allowances: whole tokens of one key the strategy
// took out of the key's bucket, in the loop, as if admitted then. Check
// consumes them in the caller's goroutine (an atomic compare-and-swap on
// the key's counter, found in a lock-free hash table, fastMap: no channel
// hand-off, no allocation, no clock read, no write to memory shared with
// other keys' checks).
//
// Under a strategy.BucketLender (local, central, static) the loop lends
// the driver the key's whole bucket instead (strategy.LentBucket): a
// check the counter cannot cover refills it in the caller's goroutine
// (the key's own mutex, one clock read, the bucket's exact arithmetic)
// and is decided there, admitted or refused, without the loop. Only the
// first checks of a key, and those after its bucket went back (idle, a
// reload or membership change, an Inspect, a wait, a charge, a refund),
// cross to the loop. A lent bucket's allowance is split into one counter
// per P (fastShard, procid.go): a check takes from its own P's counter
// and refills only that one, so checks of one key on several cores write
// separate cache lines (docs/PERFORMANCE.md, "Per-P counters"); a refill
// that the bucket cannot cover takes the other Ps' counters back first,
// so a key is refused only when none holds a token.
//
// Under the other Allowancers (owner) a check the allowance cannot cover
// goes through the loop as before, which first returns the key's
// allowance to the strategy (so the strategy decides on the exact level),
// then decides, then grants a new allowance sized from the key's
// measured demand.
//
// Exactness is the strategy's (strategy.Allowancer, AllowanceLedger,
// LentBucket): tokens in an allowance count as spent, and the bucket's
// level plus the tokens held never exceed the burst, so a key's
// admissions stay within b + r*T whichever goroutine admits them. The
// driver's part: an allowance or a lent bucket is closed at a time read
// after its counter was taken (no token of it is consumed later than
// that; a lent bucket's refills read the clock before, under its mutex),
// and the loop goes on at that time (fastCloseEntry).
//
// Refusal windows (strategy.Refuser: lease at a holder on the owner's
// dry hint): after the loop refused a plain check of a key that the
// strategy will refuse until some time, the key's entry holds that time
// (dryUntil, at most fastRefusalSlice ahead) and Check refuses the key's
// plain checks in the caller's goroutine until the clock reads it,
// counting them on the counter of its P; the strategy hears of them
// (Refuser.Refused) when the loop next touches the key, a sweep included,
// and ends a window sooner with strategy.Effects.EndRefusal (a lease
// arrived: RefusalEnded). A window only refuses, so it cannot break the
// envelope.
//
// Invalidation: membership and expected-member changes, Leave and SetRules
// close every allowance (and take every lent bucket back) and give its
// unused tokens back to the strategy before the strategy hears of the
// change (nothing lost); Inspect takes the lent buckets back first (so it
// reads exact levels); Close drops them (the strategy goes away with the
// node). The loop also closes, every fastSweepEvery, the allowances past
// their validity and those no check touched for fastIdleSweeps sweeps in
// a row (returned: nothing lost), so an idle key holds no tokens for
// long, and forgets the keys closed for a whole sweep.

import (
	"context"
	"hash/maphash"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tokenmesh/tokenmesh/strategy"
)

const (
	// allowanceClosed is the counter of an allowance that is not open:
	// below every request's tokens, so Check goes to the loop.
	allowanceClosed = -1
	// fastSweepEvery is how often the loop closes idle and expired
	// allowances (and forgets keys closed since the last sweep).
	fastSweepEvery = 100 * time.Millisecond
	// fastIdleSweeps is how many sweeps in a row an open allowance must
	// find untouched to be closed as idle (fastIdleSweeps*fastSweepEvery,
	// the demand window), and how many sweeps a seen filter's period
	// lasts at most. One sweep was too short: with 10,000 uniform keys at
	// 40,000-60,000 checks/s a key is checked every 170-250 ms, so nearly
	// every allowance was closed untouched before its key's next check,
	// and about 90% of the checks went through the loop (bench
	// notes in docs/PERFORMANCE.md, "Owner at 3 nodes and the fast path").
	fastIdleSweeps = 5
	// seenFilterMaxKeys is how many keys one seen-filter period records at
	// most before the next period starts (about 4% false positives).
	seenFilterMaxKeys = 60000
	// fastDemandWindow sizes the next allowance of a key: the tokens its
	// checks took in this long at the demand measured over its last
	// allowance (the strategy caps it: strategy.AllowanceCap).
	fastDemandWindow = time.Second
	// fastFirstWant is the size asked for a key's first allowance.
	fastFirstWant = 4
	// fastMaxWant bounds the size asked for (the strategy's cap is lower).
	fastMaxWant = int64(1) << 40
	// fastMaxKeys bounds the keys one rule keeps allowances for: beyond
	// it new keys are decided in the loop only (until a sweep forgets idle
	// ones), so a sweep, which visits every key kept, stays short (~1 ms)
	// however many distinct keys the checks bring.
	fastMaxKeys = 1 << 16
	// fastRefusalSlice caps a refusal window (strategy.Refuser): the
	// requests refused in it reach the strategy as demand within this
	// long, and a window the strategy fails to end costs at most this
	// long of refusals. A key refused for longer crosses to the loop once
	// per slice (200 times a second), instead of on every check.
	fastRefusalSlice = 5 * time.Millisecond
)

// fastEntry is one key's allowance (and lent bucket). Its first cache
// line holds what every check of the key reads (the key, the level, the
// counters' slice), which checks never write; the counters are per P
// (fastShard: a pair of lines each, in an array of their own), so checks
// on two cores write two line pairs, each written by one core only. Entries are 192
// bytes, a multiple of the cache line: the allocator lays them out on
// line boundaries. The rest of the entry is written when a counter runs
// out (under mu) or by the loop.
type fastEntry struct {
	key    string       // written once, before the entry is published
	level  atomic.Int64 // the key's whole tokens beside the counters at the last fill; -1 unknown
	shards []fastShard  // written once, before the entry is published: one per P (lent bucket) or one
	mask   int          // len(shards) - 1 (a power of two minus one)
	// deadline is, under a strategy.ExpiringAllowancer, the until of the
	// open allowance (a time on the node's clock, ns): no token of it is
	// consumed once the clock reads it. 0: none (the others').
	deadline atomic.Int64

	// A lent bucket (strategy.BucketLender): the checks that refill it and
	// the loop (which opens and closes it) hold mu. Under a lender the
	// counters' demand fields (fastShard) are under mu too.
	mu    sync.Mutex
	lent  bool          // lb is the key's bucket, lent: a check the counter cannot cover refills here
	noRem bool          // the strategy is no strategy.Remainer: decisions report Remaining -1
	idle  bool          // loop only: closed at the last sweep already: forget at the next
	quiet int32         // loop only: sweeps in a row that found it untouched
	fills atomic.Uint32 // refills of the lent bucket (under mu), read by the sweep
	// seenFills is fills at the last sweep (loop only): with seen, what
	// tells a touched key from an untouched one (a refused check changes
	// no counter, but it refills).
	seenFills uint32
	// dryUntil is, under a strategy.Refuser, the end of the key's refusal
	// window (the node's clock, ns): plain checks before it are refused
	// on the fast path. 0: none. Written by the loop only.
	dryUntil atomic.Int64
	lb       strategy.LentBucket

	// Loop goroutine only.
	until time.Duration // valid until (the strategy's Grant; never for a lent bucket)
	seen  int64         // tokens of the counters at the last sweep: unchanged means untouched
	most  int64         // under mu: the lent bucket's strategy.AllowanceCap, the largest allowance
	_     [16]byte      // to 192 bytes
}

// fastShard is one counter of a key's allowance: the tokens that checks
// on one P (or on every P, for a plain allowance) take without a lock,
// and the demand measured over its last fill. Two cache lines of its own
// (128 bytes): a core's adjacent-line prefetcher fetches lines in
// 128-byte pairs, so with 64-byte counters the core checking P0's
// counter pulled in P1's, written by the other core, and the two cores
// passed both lines back and forth. Measured on the 2-core machine
// (quiet, BenchmarkLimiterAllowParallel, local, 10k keys, -cpu 2): 46.2
// -> 22.4 ns/op (92 -> 44.5 cpu-ns/op); one hot key and -cpu 1 the same.
type fastShard struct {
	tokens    atomic.Int64  // tokens left; allowanceClosed when closed
	granted   int64         // tokens at its last fill (grant or refill), not settled yet
	grantedAt time.Duration // when it was filled
	want      int64         // the size to ask for at its next fill
	// refused and refusedTokens count the checks (and their tokens)
	// refused on this P in a refusal window (strategy.Refuser) and not
	// reported to the strategy yet.
	refused, refusedTokens atomic.Int64
	_                      [80]byte
}

// newFastEntry is a closed entry of key with shards counters (1 for a
// plain allowance; fastShards() for a lent bucket).
func newFastEntry(key string, shards int) *fastEntry {
	a := &fastEntry{key: key, shards: make([]fastShard, shards), mask: shards - 1}
	for i := range a.shards {
		a.shards[i].want = fastFirstWant
		a.shards[i].tokens.Store(allowanceClosed)
	}
	return a
}

// shard is the counter that checks on P p use.
func (a *fastEntry) shard(p int) *fastShard { return &a.shards[p&a.mask] }

// isOpen reports whether the allowance is open (its counters hold 0 or
// more tokens).
func (a *fastEntry) isOpen() bool { return a.shards[0].tokens.Load() >= 0 }

// held is the tokens the counters hold now (0 when closed).
func (a *fastEntry) held() int64 {
	var t int64
	for i := range a.shards {
		t += max(a.shards[i].tokens.Load(), 0)
	}
	return t
}

// lentForever is a lent bucket's validity: it goes back when idle or
// invalidated, never by age.
const lentForever = time.Duration(math.MaxInt64)

// fastPath is one rule's allowances.
type fastPath struct {
	a     strategy.Allowancer
	l     strategy.BucketLender // a itself when it lends buckets; nil otherwise
	r     strategy.Refuser      // a itself when it tells of refusal windows; nil otherwise
	clock func() time.Duration  // the driver's clock for refills (Node.clock)
	m     *fastMap              // read by Check, written by the loop
	// expiring is true under a strategy.ExpiringAllowancer: checks read
	// the clock against each allowance's deadline.
	expiring bool
	// shards is the counters per key: one per P (fastShards) under a
	// lender, whose checks refill in their own goroutine; one under a
	// plain Allowancer, whose counter only the loop fills.
	shards int

	// Loop goroutine only: the same entries as m, how many are open, and
	// the keys checked recently (a key gets its first allowance at its
	// second check within a sweep or two).
	keys map[string]*fastEntry
	open int
	seen seenFilter
}

// seenFilter remembers which keys were checked in the current and the last
// period: two Bloom filters of 2^19 bits and two probes each (about 4%
// false positives at seenFilterMaxKeys keys a period; no false
// negatives). A period lasts fastIdleSweeps sweeps, or until it has
// recorded seenFilterMaxKeys keys. A key seen once (a workload of ever-new
// keys) gets no allowance, whose grant, sweep and removal would cost more
// than the one check it could serve. Loop goroutine only. Ours.
type seenFilter struct {
	seed      maphash.Seed
	cur, prev []uint64 // allocated at the first use
	n         int      // keys recorded in cur
	sweeps    int      // sweeps since cur started
}

const seenFilterBits = 1 << 19

// twice records key and reports whether it was recorded before (in this
// or the last period).
func (f *seenFilter) twice(key string) bool {
	if f.cur == nil {
		f.seed = maphash.MakeSeed()
		f.cur, f.prev = make([]uint64, seenFilterBits/64), make([]uint64, seenFilterBits/64)
	}
	h := maphash.String(f.seed, key)
	i, j := h%seenFilterBits, (h>>32)%seenFilterBits
	has := func(b []uint64) bool { return b[i/64]&(1<<(i%64)) != 0 && b[j/64]&(1<<(j%64)) != 0 }
	before := has(f.cur) || has(f.prev)
	if !has(f.cur) {
		if f.n >= seenFilterMaxKeys {
			f.rotate()
		}
		f.n++
	}
	f.cur[i/64] |= 1 << (i % 64)
	f.cur[j/64] |= 1 << (j % 64)
	return before
}

// sweep counts a sweep, and starts a new period after fastIdleSweeps.
func (f *seenFilter) sweep() {
	if f.sweeps++; f.sweeps >= fastIdleSweeps {
		f.rotate()
	}
}

// rotate starts a new period: the last one is forgotten.
func (f *seenFilter) rotate() {
	if f.cur == nil {
		return
	}
	f.cur, f.prev = f.prev, f.cur
	clear(f.cur)
	f.n, f.sweeps = 0, 0
}

// newFastPath returns the fast path of a rule whose strategy is s, or nil
// when s grants no allowances. clock is the driver's clock (safe for
// concurrent use), read by the checks that refill a lent bucket.
func newFastPath(s strategy.Strategy, clock func() time.Duration) *fastPath {
	a, ok := s.(strategy.Allowancer)
	if !ok {
		return nil
	}
	l, _ := s.(strategy.BucketLender)
	shards := 1
	if l != nil {
		shards = fastShards()
	}
	_, expiring := s.(strategy.ExpiringAllowancer)
	r, _ := s.(strategy.Refuser)
	return &fastPath{a: a, l: l, r: r, clock: clock, m: newFastMap(), shards: shards, expiring: expiring, keys: map[string]*fastEntry{}}
}

// take decides tokens of key on the fast path (any goroutine): from the
// key's allowance (the caller's P's counter), or from its lent bucket
// when the counter cannot cover them (admitted or refused). ok is false
// when the loop must decide: no entry, or an allowance closed or too
// small that no lent bucket stands behind. Remaining is the key's level
// at the last fill of any counter plus this counter's tokens: other Ps'
// counters are not counted (a hint, as the header it feeds).
func (f *fastPath) take(key string, tokens int64) (CheckResult, bool) {
	a := f.m.load(key)
	if a == nil {
		return CheckResult{}, false
	}
	return f.takeOn(a, a.proc(), tokens)
}

// takeOn is take of a's key on P p.
func (f *fastPath) takeOn(a *fastEntry, p int, tokens int64) (CheckResult, bool) {
	if c, ok := f.consume(a, p, tokens); ok {
		rem := int64(-1)
		if l := a.level.Load(); l >= 0 {
			rem = l + c - tokens
		}
		return CheckResult{Allowed: true, Remaining: rem}, true
	}
	if f.l == nil {
		if f.r != nil && f.refuse(a, p, tokens) {
			return CheckResult{Remaining: a.level.Load()}, true
		}
		return CheckResult{}, false
	}
	return f.refill(a, p, tokens)
}

// refuse reports whether a's key is in a refusal window at the clock
// (strategy.Refuser; any goroutine), and if so counts a refused check of
// tokens on P p's counter for the strategy.
func (f *fastPath) refuse(a *fastEntry, p int, tokens int64) bool {
	u := a.dryUntil.Load()
	if u == 0 || f.clock() >= time.Duration(u) {
		return false
	}
	s := a.shard(p)
	s.refused.Add(1)
	s.refusedTokens.Add(tokens)
	return true
}

// allow is take reduced to the admission, without carrying a whole
// CheckResult through the fast path (RuleRef.Allow).
func (f *fastPath) allow(key string, tokens int64) (allowed, ok bool) {
	a := f.m.load(key)
	if a == nil {
		return false, false
	}
	p := a.proc()
	if _, ok := f.consume(a, p, tokens); ok {
		return true, true
	}
	if f.l == nil {
		return false, f.r != nil && f.refuse(a, p, tokens)
	}
	d, ok := f.refill(a, p, tokens)
	return d.Allowed, ok
}

// proc is the caller's P (procID) when a has a counter per P, else 0
// (no P read).
func (a *fastEntry) proc() int {
	if a.mask == 0 {
		return 0
	}
	return procID()
}

// takeCovered is take without the lent bucket's refill: tokens of key's
// allowance only (a charge, which a refusal would not fit).
func (f *fastPath) takeCovered(key string, tokens int64) (CheckResult, bool) {
	a := f.m.load(key)
	if a == nil {
		return CheckResult{}, false
	}
	c, ok := f.consume(a, a.proc(), tokens)
	if !ok {
		return CheckResult{}, false
	}
	rem := int64(-1)
	if l := a.level.Load(); l >= 0 {
		rem = l + c - tokens
	}
	return CheckResult{Allowed: true, Remaining: rem}, true
}

// consume takes tokens out of a's counter on P p (any goroutine): before
// a deadline (strategy.ExpiringAllowancer) only while the clock reads
// before it. If another allowance (another deadline) replaced the one
// whose deadline was read before the take succeeded, the take counts only
// when that one is valid at the time read too; else the tokens taken are
// dropped (spent: safe) and the loop decides.
func (f *fastPath) consume(a *fastEntry, p int, tokens int64) (before int64, ok bool) {
	d := a.deadline.Load()
	if d == 0 {
		return a.shard(p).consume(tokens)
	}
	now := f.clock()
	if now >= time.Duration(d) {
		return 0, false
	}
	c, ok := a.shard(p).consume(tokens)
	if ok {
		if d2 := a.deadline.Load(); d2 != d && now >= time.Duration(d2) {
			return 0, false
		}
	}
	return c, ok
}

// consume takes tokens out of the counter with a compare-and-swap (any
// goroutine): its tokens before the take, ok false (nothing taken) when
// it is closed or holds fewer tokens.
func (s *fastShard) consume(tokens int64) (before int64, ok bool) {
	for {
		c := s.tokens.Load()
		if c < tokens {
			return 0, false
		}
		if s.tokens.CompareAndSwap(c, c-tokens) {
			return c, true
		}
	}
}

// refill decides tokens of a's key from its lent bucket (any goroutine,
// on P p): under a's mutex, p's counter is taken (its unused tokens go
// back into the bucket), the clock read, the request decided from the
// bucket and the counter filled again for the demand measured since its
// last fill (strategy.LentBucket.Settle and Decide: exact). When the
// bucket cannot cover the request, the other Ps' counters are taken back
// first (their tokens go back too, settled at a clock read after they
// were taken), so a key is not refused while tokens of it sit in another
// P's counter. ok is false when the bucket is not lent (any more): the
// loop decides.
func (f *fastPath) refill(a *fastEntry, p int, tokens int64) (CheckResult, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.lent {
		return CheckResult{}, false
	}
	s := a.shard(p)
	if c, ok := s.consume(tokens); ok { // filled by another check meanwhile
		rem := int64(-1)
		if !a.noRem {
			rem = a.level.Load() + c - tokens
		}
		return CheckResult{Allowed: true, Remaining: rem}, true
	}
	unused := max(s.tokens.Swap(0), 0) // checks take nothing from 0 until the Store below
	now := f.clock()                   // after the swap: every token of the counter was taken before now
	if a.most > 0 {                    // else no allowance can hold a token: nothing to size
		s.want = nextWant(s.granted, unused, now-s.grantedAt)
	}
	a.lb.Settle(now, s.granted, unused)
	s.granted = 0
	if a.mask > 0 && a.lb.Whole(now) < tokens {
		now = f.settleOthers(a, s)
	}
	allowed, g, left := a.lb.Decide(now, tokens, s.want, a.most)
	s.granted, s.grantedAt = g, now
	a.fills.Add(1)
	rem := int64(-1)
	if !a.noRem {
		a.level.Store(left)
		rem = left + g
	}
	s.tokens.Store(g)
	return CheckResult{Allowed: allowed, Remaining: rem}, true
}

// settleOthers takes the tokens of a's counters other than s back into
// its lent bucket (under a's mutex): every counter is emptied first, then
// the clock is read (no token of them is consumed later) and each is
// settled at that time, which it returns. Their demand is measured for
// their next fill.
func (f *fastPath) settleOthers(a *fastEntry, s *fastShard) time.Duration {
	var unused [fastMaxShards]int64
	for i := range a.shards {
		if o := &a.shards[i]; o != s {
			unused[i] = max(o.tokens.Swap(0), 0)
		}
	}
	now := f.clock()
	for i := range a.shards {
		o := &a.shards[i]
		if o == s || o.granted == 0 {
			continue
		}
		if a.most > 0 {
			o.want = nextWant(o.granted, unused[i], now-o.grantedAt)
		}
		a.lb.Settle(now, o.granted, unused[i])
		o.granted = 0
	}
	return now
}

// nextWant is the size to ask for at a key's next allowance: the tokens
// its checks took in fastDemandWindow at the demand measured over the
// last one (granted tokens, left unused after elapsed), at least twice
// the last one when it was used up (the demand may be higher than
// measured).
func nextWant(granted, left int64, elapsed time.Duration) int64 {
	used := granted - max(left, 0)
	want := float64(fastFirstWant)
	if elapsed > 0 {
		want = float64(used) * float64(fastDemandWindow) / float64(elapsed)
	} else if used > 0 {
		want = float64(2 * granted)
	}
	if left <= 0 { // used up: the demand may be higher than measured
		want = max(want, float64(2*granted))
	}
	return int64(min(max(math.Ceil(want), 1), float64(fastMaxWant)))
}

// fastClose closes key's allowance of rs, if open (loop goroutine): its
// unused tokens go back to the strategy when give is true, and are
// dropped (lost: safe) otherwise. It measures the key's demand for the
// next grant. It returns the time the loop carries on at: now, or the
// later time it closed a plain allowance at (fastCloseEntry).
func (n *Node) fastClose(now time.Duration, rs *ruleState, key string, give bool) time.Duration {
	a := rs.fast.keys[key]
	if a == nil {
		return now
	}
	return n.fastCloseEntry(now, rs, key, a, give)
}

// fastCloseEntry is fastClose of key's entry a, found already. The
// allowance is closed at a time read after its counter was taken, not at
// now: checks in other goroutines may consume its tokens until the swap,
// after now, and the strategy must count them as spent until then, or
// its bucket would refill from now while the key's tokens (level +
// counter) were full, letting up to r x (the swap's delay) tokens too
// many through in a window that begins with them
// (TestFastPathAllowanceClosedAfterConsumed). That time is n.now(),
// which every later call of the event is made at (the Host's time never
// goes back): the caller carries on at the time returned. A lent bucket
// likewise (fastReclaim).
func (n *Node) fastCloseEntry(now time.Duration, rs *ruleState, key string, a *fastEntry, give bool) time.Duration {
	if rs.fast.r != nil {
		n.fastEndRefusal(now, rs, key, a, give)
	}
	if rs.fast.l != nil {
		return n.fastReclaim(now, rs, key, a, give)
	}
	s := &a.shards[0] // a plain allowance has one counter
	left := s.tokens.Swap(allowanceClosed)
	if left < 0 {
		return now // closed already
	}
	now = max(n.now(), now) // after the swap: no token of the counter is consumed later
	rs.fast.open--
	s.want = nextWant(s.granted, left, now-s.grantedAt)
	if !give {
		left = 0
	}
	n.h.Do(now, rs.idx, func(_ strategy.Strategy, fx *strategy.Effects) { rs.fast.a.Return(now, key, left, fx) })
	rs.c.returned.Add(left)
	return now
}

// fastRefuse opens a refusal window of key for rs after the loop refused
// a plain check of it at now (loop goroutine): until the strategy's
// Refuser.RefusedUntil, at most fastRefusalSlice ahead; none while the
// node is leaving, for a key first seen (as fastGrant: a key gets an
// entry at its second check within a sweep or two) or beyond the rule's
// fastMaxKeys. rem is the refusal's Remaining, which the window's
// refusals report too.
func (n *Node) fastRefuse(now time.Duration, rs *ruleState, key string, rem int64) {
	f := rs.fast
	if n.leaving {
		return
	}
	until := min(f.r.RefusedUntil(now, key), now+fastRefusalSlice)
	if until <= now {
		return
	}
	a := f.keys[key]
	if a == nil {
		n.fastSeen = true
		n.fastArm()
		if !f.seen.twice(key) || len(f.keys) >= n.fastMaxKeys {
			return
		}
		a = newFastEntry(key, f.shards)
		f.keys[key] = a
		f.m.store(a)
	}
	if a.isOpen() {
		return // an allowance (the caller closed it before the request: not expected)
	}
	a.level.Store(rem)
	a.dryUntil.Store(int64(until))
	a.quiet, a.idle = 0, false
	rs.c.windows.Add(1)
	n.fastArm()
}

// fastEndRefusal ends key's refusal window (entry a of rs, a Refuser's;
// loop goroutine), if any, and reports the checks refused on the fast
// path since the last report to the strategy at now (Refuser.Refused)
// when give is true; dropped otherwise (the strategy counts less demand,
// nothing else). A check that read the window before it ended and counts
// itself after this report is reported at the next one.
func (n *Node) fastEndRefusal(now time.Duration, rs *ruleState, key string, a *fastEntry, give bool) {
	if a.dryUntil.Load() != 0 {
		a.dryUntil.Store(0)
	}
	var reqs, toks int64
	for i := range a.shards {
		s := &a.shards[i]
		if s.refused.Load() != 0 || s.refusedTokens.Load() != 0 { // no write to a line with nothing to report
			reqs += s.refused.Swap(0)
			toks += s.refusedTokens.Swap(0)
		}
	}
	if reqs+toks <= 0 || !give {
		return
	}
	// The two counts are taken one after the other: a check counted in
	// one and not yet in the other is at least one request of one token.
	reqs = max(reqs, 1)
	toks = max(toks, reqs)
	rs.c.refusedFast.Add(reqs)
	n.h.Do(now, rs.idx, func(_ strategy.Strategy, fx *strategy.Effects) { rs.fast.r.Refused(now, key, reqs, toks, fx) })
}

// RefusalEnded ends key's refusal window of rule at once
// (strategy.Effects.EndRefusal; host.RefusalDriver): its next plain check
// goes to the loop, which reports the window's refusals first.
func (ld loopDriver) RefusalEnded(rule int, key string) {
	rs := ld.n.order[rule]
	if rs.fast == nil {
		return
	}
	if a := rs.fast.keys[key]; a != nil && a.dryUntil.Load() != 0 {
		a.dryUntil.Store(0)
	}
}

// fastSweepRefusal is the sweep of a Refuser's entry a (loop goroutine):
// kept while its window lasts; a window past its end, or refusals not
// reported yet, are ended and reported (fastEndRefusal), and the entry is
// kept for this sweep. handled is false when a has neither: the sweep
// goes on with its allowance.
func (n *Node) fastSweepRefusal(now time.Duration, rs *ruleState, key string, a *fastEntry) (handled bool) {
	u := a.dryUntil.Load()
	if u == 0 && !a.hasRefused() {
		return false
	}
	if u == 0 || now >= time.Duration(u) {
		n.fastEndRefusal(now, rs, key, a, true)
	}
	a.idle = false
	return true
}

// hasRefused reports whether a's counters hold refusals not reported yet.
func (a *fastEntry) hasRefused() bool {
	for i := range a.shards {
		if a.shards[i].refused.Load() != 0 || a.shards[i].refusedTokens.Load() != 0 {
			return true
		}
	}
	return false
}

// fastReclaim closes key's lent bucket (entry a of rs, a lender's; loop
// goroutine): under a's mutex the counter is closed, then the bucket is
// settled at the loop's time read after that (no token of the counter is
// consumed later, and every refill in a check's goroutine read the clock
// before: the bucket's last update is not after it) and, when give is
// true, handed back to the strategy at that time
// (strategy.BucketLender.Reclaim); dropped otherwise (its tokens stay
// spent: safe). It returns that time, which the loop carries on at
// (fastCloseEntry), or now when the bucket was not lent.
func (n *Node) fastReclaim(now time.Duration, rs *ruleState, key string, a *fastEntry, give bool) time.Duration {
	a.mu.Lock()
	var unused [fastMaxShards]int64
	left := int64(0)
	for i := range a.shards {
		unused[i] = max(a.shards[i].tokens.Swap(allowanceClosed), 0)
		left += unused[i]
	}
	if !a.lent {
		a.mu.Unlock()
		return now // closed already
	}
	now = max(n.now(), now) // after the swaps, under a's mutex
	b := a.lb.Close(now, left)
	a.lent = false
	for i := range a.shards {
		s := &a.shards[i]
		if s.granted > 0 {
			s.want = nextWant(s.granted, unused[i], now-s.grantedAt)
		}
		s.granted = 0
	}
	a.mu.Unlock()
	rs.fast.open--
	if !give {
		return now
	}
	n.h.Do(now, rs.idx, func(_ strategy.Strategy, fx *strategy.Effects) { rs.fast.l.Reclaim(now, key, b, fx) })
	rs.c.returned.Add(left)
	return now
}

// fastReclaimAll takes every lent bucket back (loop goroutine), before an
// Inspect that reads the strategies' levels. It returns the time the
// loop carries on at (fastReclaim).
func (n *Node) fastReclaimAll(now time.Duration) time.Duration {
	for _, rs := range n.order {
		if rs.fast == nil || rs.fast.l == nil {
			continue
		}
		for k, a := range rs.fast.keys {
			now = n.fastReclaim(now, rs, k, a, true)
		}
	}
	return now
}

// lentKeyState is key's lent bucket of rs as the strategy's
// strategy.KeyLeveler would read it (the tokens of its counter counted as
// spent; false when full), or lent false when the bucket is not lent
// (loop goroutine: the seeder of derived rules).
func (rs *ruleState) lentKeyState(now time.Duration, key string) (st strategy.KeyState, ok, lent bool) {
	if rs.fast == nil || rs.fast.l == nil {
		return strategy.KeyState{}, false, false
	}
	a := rs.fast.keys[key]
	if a == nil {
		return strategy.KeyState{}, false, false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.lent {
		return strategy.KeyState{}, false, false
	}
	st, ok = a.lb.KeyState(now, key)
	return st, ok, true
}

// fastGrant opens an allowance of key for rs after a decision the loop
// took (loop goroutine), unless the node is leaving: under a
// strategy.BucketLender it lends the key's bucket and fills the counter
// from it. fx is the effects of the decision's call (the strategy's Grant
// or Lend adds to them). It returns the tokens granted (0: none) and,
// when it lent the bucket, the whole tokens left in it beside them (lent
// true: the strategy's Remaining of the key, if a strategy.Remainer, is 0
// now).
func (n *Node) fastGrant(now time.Duration, rs *ruleState, key string, fx *strategy.Effects) (granted, left int64, lent bool) {
	if n.leaving {
		return 0, 0, false
	}
	f := rs.fast
	a := f.keys[key]
	if a == nil {
		n.fastSeen = true
		n.fastArm() // the filter's periods run on the sweep timer
		if !f.seen.twice(key) || len(f.keys) >= n.fastMaxKeys {
			return 0, 0, false
		}
		a = newFastEntry(key, f.shards)
	}
	if a.isOpen() {
		return 0, 0, false // open already (the caller closes first)
	}
	var g int64
	until := lentForever
	s := &a.shards[0] // the first fill goes to counter 0; the others fill at their first check
	if f.l != nil {
		b, ok := f.l.Lend(now, key, fx)
		if !ok {
			return 0, 0, false
		}
		_, known := n.h.Remaining(now, rs.idx, key)
		a.mu.Lock()
		a.lb = strategy.NewLentBucket(b)
		a.lent, a.noRem = true, !known
		a.most = strategy.AllowanceCap(a.lb.Shape())
		g, left = a.lb.Grant(now, 0, s.want, a.most)
		s.granted, s.grantedAt = g, now
		a.level.Store(-1)
		if known {
			a.level.Store(left)
		}
		for i := range a.shards[1:] {
			a.shards[1+i].tokens.Store(0) // open, empty: a check refills it
		}
		s.tokens.Store(g) // open: Check may take (and refill) from now on
		a.mu.Unlock()
		rs.c.lent.Add(1)
		lent = true
	} else {
		g, until = f.a.Grant(now, key, s.want, fx) // the Host carries fx out after the request's call
		if g <= 0 {
			return 0, 0, false
		}
		s.granted, s.grantedAt = g, now
		lvl := int64(-1)
		if v, known := n.h.Remaining(now, rs.idx, key); known {
			lvl = v
		}
		a.level.Store(lvl)
		if f.expiring {
			a.deadline.Store(int64(max(until, 1))) // before the tokens: a check that sees them sees it
		}
		s.tokens.Store(g) // open: Check may take from now on
	}
	if f.keys[key] == nil {
		f.keys[key] = a
		f.m.store(a)
	}
	a.until, a.seen, a.seenFills, a.quiet, a.idle = until, g, a.fills.Load(), 0, false
	f.open++
	rs.c.grants.Add(1)
	rs.c.granted.Add(g)
	n.fastArm()
	return g, left, lent
}

// fastCloseAll closes every allowance of every rule (loop goroutine):
// returned to the strategies when give is true, dropped otherwise. It
// returns the time the loop carries on at (fastCloseEntry: now, or later
// if a plain allowance was open).
func (n *Node) fastCloseAll(now time.Duration, give bool) time.Duration {
	for _, rs := range n.order {
		if rs.fast == nil {
			continue
		}
		for k, a := range rs.fast.keys {
			now = n.fastCloseEntry(now, rs, k, a, give)
		}
	}
	return now
}

// fastSweep closes the allowances past their validity or untouched for
// fastIdleSweeps sweeps (returning their tokens), and forgets the keys that were
// closed at the last sweep already (loop goroutine).
func (n *Node) fastSweep(now time.Duration) {
	for _, rs := range n.order {
		f := rs.fast
		if f == nil {
			continue
		}
		f.seen.sweep()
		for k, a := range f.keys {
			if f.r != nil && n.fastSweepRefusal(now, rs, k, a) {
				continue
			}
			open, left, fills := a.isOpen(), a.held(), a.fills.Load()
			if open && left == a.seen && fills == a.seenFills {
				a.quiet++
			} else {
				a.quiet = 0
			}
			switch {
			case !open && a.idle:
				delete(f.keys, k)
				f.m.delete(k)
			case !open:
				a.idle = true
			case now >= a.until || a.quiet >= fastIdleSweeps:
				now = n.fastCloseEntry(now, rs, k, a, true)
				a.idle = true
			default:
				a.seen, a.seenFills = left, fills
			}
		}
	}
}

// fastKept is the number of keys the node's rules keep for the fast path
// (open or closed since the last sweep): the sweep timer runs while any.
func (n *Node) fastKept() int {
	c := 0
	for _, rs := range n.order {
		if rs.fast != nil {
			c += len(rs.fast.keys)
		}
	}
	return c
}

// fastArm sets the sweep timer if it is not set (loop goroutine).
func (n *Node) fastArm() {
	if n.fastArmed {
		return
	}
	n.fastArmed = true
	n.fastTimer.Reset(fastSweepEvery)
}

// fastTimerFired is the sweep timer's function.
func (n *Node) fastTimerFired() {
	n.fastDue.Store(true)
	n.signalWake()
}

// fastTick runs a due sweep and keeps the timer set while keys are kept
// (loop goroutine, after every event).
func (n *Node) fastTick() {
	if !n.fastDue.Load() {
		return
	}
	n.fastDue.Store(false)
	n.fastArmed = false
	n.fastSweep(n.now())
	if n.fastKept() > 0 || n.fastSeen {
		n.fastArm()
	}
	n.fastSeen = false
}

// RuleRef is one rule of a node, named once, for a caller that checks it
// many times (limiter.Limiter): RuleRef.Check is Node.Check without the
// lookup of the rule by name while the node's rules stay the same (a
// reload, SetRules, makes it look the rule up again). Safe for concurrent
// use.
type RuleRef struct {
	n     *Node
	name  string
	cache atomic.Pointer[ruleRefCache]
}

type ruleRefCache struct {
	view *map[string]*ruleState // the rules the lookup was made in
	rs   *ruleState             // nil: no such rule there
}

// Ref returns a reference to the rule named rule. It does not check that
// the node has it: RuleRef.Check fails as Check does for an unknown rule.
func (n *Node) Ref(rule string) *RuleRef { return &RuleRef{n: n, name: rule} }

// Check is Node.Check of the referenced rule: tokens of key, the same
// decisions and errors.
func (r *RuleRef) Check(ctx context.Context, key string, tokens int64) (CheckResult, error) {
	return r.n.checkRule(ctx, r.rule(), r.name, key, tokens, 0)
}

// rule is the referenced rule's state in the node's current rules (nil:
// no such rule), looked up again only after a reload.
func (r *RuleRef) rule() *ruleState {
	view := r.n.rulesView.Load()
	c := r.cache.Load()
	if c == nil || c.view != view {
		c = &ruleRefCache{view: view, rs: (*view)[r.name]}
		r.cache.Store(c)
	}
	return c.rs
}

// Allow is Check of the referenced rule reduced to the admission (the
// decision's Allowed, or the error): what limiter.Limiter.AllowN needs,
// without carrying a whole CheckResult through the fast path. A check the
// fast path decides (an allowance, a lent bucket) reads the node's rules
// and the key's entry and writes only the key's counter: nothing another
// core writes on every call.
func (r *RuleRef) Allow(ctx context.Context, key string, tokens int64) (bool, error) {
	rs := r.rule()
	if rs != nil && rs.fast != nil && tokens > 0 && tokens <= r.n.maxTokens && ctx.Err() == nil {
		if allowed, ok := rs.fast.allow(key, tokens); ok {
			return allowed, nil
		}
	}
	d, err := r.n.checkRule(ctx, rs, r.name, key, tokens, 0)
	return d.Allowed && err == nil, err
}
