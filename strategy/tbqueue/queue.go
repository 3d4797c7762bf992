package tbqueue

import (
	"cmp"
	"math"
	"math/bits"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// stamp is an exact instant: ns nanoseconds plus rem/Rate.Tokens of a
// nanosecond, 0 <= rem < Rate.Tokens. A time-of-death is a stamp because
// 1/rate is rarely a whole number of nanoseconds (1/3 s), and rounding it
// would drift by up to 1 ns per element of a queue.
type stamp struct {
	ns  int64
	rem int64
}

// forever is the time-of-death of elements at a zero rate (never refilled).
var forever = stamp{ns: math.MaxInt64}

// cmpStamp orders stamps in time.
func cmpStamp(a, b stamp) int {
	return cmp.Or(cmp.Compare(a.ns, b.ns), cmp.Compare(a.rem, b.rem))
}

// elem is one queue element: an admitted request of tokens tokens.
// Identity: the thesis identifies an element by its time-of-birth alone
// (§4.1, §4.2.1); with unique_ids it is (birth, origin, seq), and in the
// thesis' mode origin and seq are always zero.
type elem struct {
	birth  time.Duration // time-of-birth
	death  stamp         // time-of-death
	tokens int64         // >= 1
	origin strategy.NodeID
	seq    uint64
}

// cmpID orders elements by identity: time-of-birth, then origin and seq.
func cmpID(a, b *elem) int {
	return cmp.Or(cmp.Compare(a.birth, b.birth), cmp.Compare(a.origin, b.origin), cmp.Compare(a.seq, b.seq))
}

// clock is the refill arithmetic of one rate: how long n tokens take.
type clock struct {
	tokens uint64 // Rate.Tokens; 0: no refill
	per    uint64 // Rate.Per in ns
}

func newClock(r bucket.Rate) clock { return clock{tokens: uint64(r.Tokens), per: uint64(r.Per)} }

// after returns t + n/rate (eq. (4.2)'s "+ 1/refillRate" for n tokens),
// exactly, saturating at forever. n*Per fits in int64 (bucket.New checks
// burst*Per, and n <= burst).
func (c clock) after(t stamp, n int64) stamp {
	if c.tokens == 0 || t.ns == math.MaxInt64 {
		return forever
	}
	num := uint64(n)*c.per + uint64(t.rem) // < 1.5 * 2^63
	q, r := num/c.tokens, num%c.tokens
	if q > uint64(math.MaxInt64-t.ns) {
		return forever
	}
	return stamp{ns: t.ns + int64(q), rem: int64(r)}
}

// aliveTokens returns how many of e's tokens are still consumed at now: 0
// once its time-of-death has come, all of them for a one-token element
// before that, and for an element of n tokens, whose tokens come back one
// by one at 1/rate apart up to its time-of-death, min(n, ceil((death-now)*rate)).
func (c clock) aliveTokens(e *elem, now time.Duration) int64 {
	if !alive(e, now) {
		return 0
	}
	if e.tokens == 1 || e.death.ns == math.MaxInt64 {
		return e.tokens
	}
	d := uint64(e.death.ns - int64(now)) // >= 0
	hi, lo := bits.Mul64(d, c.tokens)
	var carry uint64
	lo, carry = bits.Add64(lo, uint64(e.death.rem), 0)
	hi += carry
	if hi >= c.per {
		return e.tokens
	}
	q, r := bits.Div64(hi, lo, c.per)
	if r > 0 {
		q++
	}
	return int64(min(q, uint64(e.tokens)))
}

// alive reports whether e's time-of-death is after now. An element dies at
// its time-of-death: a token refilled at t is there at t, as in bucket.Bucket.
func alive(e *elem, now time.Duration) bool {
	return e.death.ns > int64(now) || (e.death.ns == int64(now) && e.death.rem > 0)
}

// gone reports whether e may be removed at now: its time-of-death plus
// margin has come (margin is safe_margin; 0 in the thesis).
func gone(e *elem, now, margin time.Duration) bool {
	if e.death.ns == math.MaxInt64 {
		return false
	}
	return !alive(e, now-margin)
}

// refill removes the elements at the head of q that are gone (listing 4.1,
// with the comparison the text describes: time-of-death has passed).
func refill(q []elem, now, margin time.Duration) []elem {
	i := 0
	for i < len(q) && gone(&q[i], now, margin) {
		i++
	}
	if i == 0 {
		return q
	}
	return append(q[:0:0], q[i:]...)
}

// mergeResult is the output of a merge: the merged queue and, for a merge
// into the local state, the elements that are new to it or whose
// time-of-death changed (old reports which of those the local state held).
type mergeResult struct {
	queue   []elem
	updates []elem
	old     []bool
}

// merge merges other into q like merge sort (listing 4.2). With collapse,
// two elements of equal identity become one, with the larger
// time-of-death (listing 4.2 lines 7-14 for into_local_state; always with
// unique_ids); without, both are kept, other's first (the thesis' merge of
// updates into a delta state). Every element put in the result gets
// time-of-death max(its own, previous one's + tokens/rate) (listing 4.3).
// With track, updates lists what changed relative to q.
func (c clock) merge(q, other []elem, collapse, track bool) mergeResult {
	res := mergeResult{queue: make([]elem, 0, len(q)+len(other))}
	put := func(e elem, fromLocal bool, was *elem) {
		if n := len(res.queue); n > 0 {
			if d := c.after(res.queue[n-1].death, e.tokens); cmpStamp(d, e.death) > 0 {
				e.death = d
			}
		}
		res.queue = append(res.queue, e)
		if track && (!fromLocal || e.death != was.death || e.tokens != was.tokens) {
			res.updates = append(res.updates, e)
			res.old = append(res.old, fromLocal)
		}
	}
	i, j := 0, 0
	for i < len(q) && j < len(other) {
		a, b := &q[i], &other[j]
		switch o := cmpID(a, b); {
		case collapse && o == 0:
			put(c.join(*a, *b), true, a)
			i++
			j++
		case o < 0:
			put(*a, true, a)
			i++
		default:
			put(*b, false, nil)
			j++
		}
	}
	for ; i < len(q); i++ {
		put(q[i], true, &q[i])
	}
	for ; j < len(other); j++ {
		put(other[j], false, nil)
	}
	return res
}

// join is the one element two copies of one identity become (listing 4.2
// lines 7-14: the larger time-of-death). Copies differ in tokens only when
// coalesce grew the element after one copy left (more tokens is newer);
// an element of n tokens whose consumption starts at s dies at s + n/rate,
// so the result has the larger tokens and the later start: each copy's
// time-of-death moved by the tokens it lacks, the larger kept.
func (c clock) join(a, b elem) elem {
	if a.tokens < b.tokens {
		a, b = b, a
	}
	if d := c.after(b.death, a.tokens-b.tokens); cmpStamp(d, a.death) > 0 {
		a.death = d
	}
	return a
}

// removeDuplicates removes from q the elements equal (identity and
// time-of-death) to one of sent, each at most once (listing 4.7 line 9).
func removeDuplicates(q, sent []elem) []elem {
	if len(q) == 0 || len(sent) == 0 {
		return q
	}
	count := make(map[elem]int, len(sent))
	for _, e := range sent {
		count[e]++
	}
	out := q[:0:0]
	for _, e := range q {
		if count[e] > 0 {
			count[e]--
			continue
		}
		out = append(out, e)
	}
	return out
}

// tokensIn is the number of tokens q holds that are still consumed at now.
func (c clock) tokensIn(q []elem, now time.Duration) int64 {
	var n int64
	for i := range q {
		n += c.aliveTokens(&q[i], now)
	}
	return n
}
