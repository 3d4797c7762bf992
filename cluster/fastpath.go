package cluster

// The local fast path (issue 14, part 1). Ours. A rule whose strategy is a
// strategy.Allowancer (local, central, static) gets allowances: whole
// tokens of one key the strategy took out of the key's bucket, in the
// loop, as if admitted then. Check consumes them in the caller's
// goroutine (an atomic compare-and-swap on the key's counter, found in a
// lock-free hash table, fastMap: no channel hand-off, no allocation, no
// clock read); a check
// the allowance cannot cover goes through the loop as before, which first
// returns the key's allowance to the strategy (so the strategy decides on
// the exact level), then decides, then grants a new allowance sized from
// the key's measured demand.
//
// Exactness is the strategy's (strategy.Allowancer, AllowanceLedger):
// tokens in an allowance count as spent, and the bucket's level plus the
// tokens held never exceed the burst, so a key's admissions stay within
// b + r*T whichever goroutine admits them.
//
// Invalidation: membership and expected-member changes, Leave and SetRules
// close every allowance and give its unused tokens back to the strategy
// before the strategy hears of the change (nothing lost); Close drops them
// (the strategy goes away with the node). The loop also closes, every
// fastSweepEvery, the allowances past their validity and those no check
// touched for fastIdleSweeps sweeps in a row (returned: nothing lost), so
// an idle key holds no tokens for long, and forgets the keys closed for a
// whole sweep.

import (
	"context"
	"hash/maphash"
	"math"
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
	// and about 90% of the checks went through the loop (issue 14, bench
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
)

// allowance is one key's tokens held for the fast path.
type allowance struct {
	tokens atomic.Int64 // tokens left; allowanceClosed when closed
	level  atomic.Int64 // the key's Remaining at the grant, less the allowance; -1 unknown

	// Loop goroutine only.
	granted   int64         // tokens of the open allowance at its grant
	grantedAt time.Duration // when it was granted
	until     time.Duration // valid until (the strategy's Grant)
	seen      int64         // tokens at the last sweep: unchanged means untouched
	quiet     int           // sweeps in a row that found it untouched
	want      int64         // the size to ask for at the next grant
	idle      bool          // closed at the last sweep already: forget at the next
}

// fastPath is one rule's allowances.
type fastPath struct {
	a strategy.Allowancer
	m *fastMap // read by Check, written by the loop

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
// when s grants no allowances.
func newFastPath(s strategy.Strategy) *fastPath {
	a, ok := s.(strategy.Allowancer)
	if !ok {
		return nil
	}
	return &fastPath{a: a, m: newFastMap(), keys: map[string]*fastEntry{}}
}

// take consumes tokens of key's allowance (any goroutine). ok is false
// when the allowance is closed or holds fewer tokens: the check then goes
// to the loop.
func (f *fastPath) take(key string, tokens int64) (Decision, bool) {
	a, c, ok := f.consume(key, tokens)
	if !ok {
		return Decision{}, false
	}
	rem := int64(-1)
	if l := a.level.Load(); l >= 0 {
		rem = l + c - tokens
	}
	return Decision{Allowed: true, Remaining: rem}, true
}

// takeOnly is take without the Decision: true when tokens of key's
// allowance were taken.
func (f *fastPath) takeOnly(key string, tokens int64) bool {
	_, _, ok := f.consume(key, tokens)
	return ok
}

// consume takes tokens out of key's allowance with a compare-and-swap
// (any goroutine): the entry and its tokens before the take, ok false
// (nothing taken) when key has no entry or its allowance is closed or
// holds fewer tokens.
func (f *fastPath) consume(key string, tokens int64) (a *fastEntry, before int64, ok bool) {
	a = f.m.load(key)
	if a == nil {
		return nil, 0, false
	}
	for {
		c := a.tokens.Load()
		if c < tokens {
			return nil, 0, false
		}
		if a.tokens.CompareAndSwap(c, c-tokens) {
			return a, c, true
		}
	}
}

// fastClose closes key's allowance of rs, if open (loop goroutine): its
// unused tokens go back to the strategy when give is true, and are
// dropped (lost: safe) otherwise. It measures the key's demand for the
// next grant.
func (n *Node) fastClose(now time.Duration, rs *ruleState, key string, give bool) {
	a := rs.fast.keys[key]
	if a == nil {
		return
	}
	n.fastCloseEntry(now, rs, key, a, give)
}

// fastCloseEntry is fastClose of key's entry a, found already.
func (n *Node) fastCloseEntry(now time.Duration, rs *ruleState, key string, a *fastEntry, give bool) {
	left := a.tokens.Swap(allowanceClosed)
	if left < 0 {
		return // closed already
	}
	rs.fast.open--
	used := a.granted - left
	want := float64(fastFirstWant)
	if d := now - a.grantedAt; d > 0 {
		want = float64(used) * float64(fastDemandWindow) / float64(d)
	} else if used > 0 {
		want = float64(2 * a.granted)
	}
	if left == 0 { // used up: the demand may be higher than measured
		want = max(want, float64(2*a.granted))
	}
	a.want = int64(min(max(math.Ceil(want), 1), float64(fastMaxWant)))
	if !give {
		left = 0
	}
	n.h.Do(now, rs.idx, func(_ strategy.Strategy, fx *strategy.Effects) { rs.fast.a.Return(now, key, left, fx) })
	rs.c.returned.Add(left)
}

// fastGrant opens an allowance of key for rs after a decision the loop
// took (loop goroutine), unless the node is leaving. fx is the effects of
// the decision's call (the strategy's Grant adds to them); it returns the
// tokens granted (0: none).
func (n *Node) fastGrant(now time.Duration, rs *ruleState, key string, fx *strategy.Effects) int64 {
	if n.leaving {
		return 0
	}
	f := rs.fast
	a := f.keys[key]
	if a == nil {
		n.fastSeen = true
		n.fastArm() // the filter's periods run on the sweep timer
		if !f.seen.twice(key) || len(f.keys) >= n.fastMaxKeys {
			return 0
		}
		a = &fastEntry{key: key}
		a.want = fastFirstWant
		a.tokens.Store(allowanceClosed)
	}
	if a.tokens.Load() >= 0 {
		return 0 // open already (the caller closes first)
	}
	g, until := f.a.Grant(now, key, a.want, fx) // the Host carries fx out after the request's call
	if g <= 0 {
		return 0
	}
	if f.keys[key] == nil {
		f.keys[key] = a
		f.m.store(a)
	}
	a.granted, a.grantedAt, a.until, a.seen, a.quiet, a.idle = g, now, until, g, 0, false
	lvl := int64(-1)
	if v, known := n.h.Remaining(now, rs.idx, key); known {
		lvl = v
	}
	a.level.Store(lvl)
	a.tokens.Store(g) // open: Check may take from now on
	f.open++
	rs.c.grants.Add(1)
	rs.c.granted.Add(g)
	n.fastArm()
	return g
}

// fastCloseAll closes every allowance of every rule (loop goroutine):
// returned to the strategies when give is true, dropped otherwise.
func (n *Node) fastCloseAll(now time.Duration, give bool) {
	for _, rs := range n.order {
		if rs.fast == nil {
			continue
		}
		for k, a := range rs.fast.keys {
			n.fastCloseEntry(now, rs, k, a, give)
		}
	}
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
			left := a.tokens.Load()
			if left >= 0 && left == a.seen {
				a.quiet++
			} else {
				a.quiet = 0
			}
			switch {
			case left < 0 && a.idle:
				delete(f.keys, k)
				f.m.delete(k)
			case left < 0:
				a.idle = true
			case now >= a.until || a.quiet >= fastIdleSweeps:
				n.fastCloseEntry(now, rs, k, a, true)
				a.idle = true
			default:
				a.seen = left
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
func (r *RuleRef) Check(ctx context.Context, key string, tokens int64) (Decision, error) {
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
// without carrying a whole Decision through the fast path.
func (r *RuleRef) Allow(ctx context.Context, key string, tokens int64) (bool, error) {
	rs := r.rule()
	if rs != nil && rs.fast != nil && tokens > 0 && tokens <= r.n.maxTokens && ctx.Err() == nil {
		if rs.fast.takeOnly(key, tokens) {
			return true, nil
		}
	}
	d, err := r.n.checkRule(ctx, rs, r.name, key, tokens, 0)
	return d.Allowed && err == nil, err
}
