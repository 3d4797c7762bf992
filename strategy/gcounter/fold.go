package gcounter

import (
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tokenmesh/tokenmesh/strategy"
)

// Folding (ours, not the thesis'; the parameter fold, off by default): a
// key's G-Counter keeps one slot per node instance that ever admitted for
// it (the CRDT thesis §3.1), so over months of restarts (a new incarnation
// each, with catch_up) and scale-ups and downs its slots grow without
// bound. With fold = P, slots are cut in periods and the old ones are
// summed into one base slot:
//
//   - Segments. A node admits into the slot named "<node>\x00<p>" (its
//     incarnation as before), p = the whole periods P in now: a new slot
//     every period. A segment is frozen once its owner's clock has left
//     period p: no node writes it again.
//   - Base. The slot "\x00fold" with incarnation e (the fold epoch) counts
//     the tokens of every segment of period <= e. It is an ordinary slot
//     on the wire, so a reader that knows nothing of folding counts it
//     (see "Versions" below).
//   - Folding. Every P/10 (from the gossip timer) a node at period p folds
//     every key to epoch e = p - 2: the segments of period <= e are added to
//     the base and removed. With clocks within P of each other (P is at
//     least a minute, peerbound.ClockSkew is 10 s), every owner is at
//     period >= p - 1 and writes only segments >= p - 1: those folded are
//     frozen. A node folds only after it has seen every expected member
//     (the last agreed members, SetExpected) for a whole P: not on either
//     side of a split, and not in the first P after a heal.
//   - Merge. Both buckets are first folded to the larger of their epochs,
//     then merged as before: the max per slot, the base slot included
//     (both have the same (name, epoch)). Deterministic, commutative and
//     idempotent; associative (and then exact) on the states real nodes
//     reach, see below.
//
// Why no token is counted twice or lost. An instance's segments are
// written by it alone and sent as whole buckets, so every copy of a key
// knows an instance's segments as they were at some time (a prefix of its
// history: the max per slot of two such prefixes is the later one). A
// segment is either in the base or a slot, never both, in every copy of a
// given epoch: nothing is counted twice, whatever the order of merges. A
// copy folded to epoch e holds in its base, per instance, the tokens of
// that instance's prefix in periods <= e; the base of a merge is the
// larger of two bases of the same epoch. That is exact when the copies
// that folded knew every instance's final count of the folded periods
// (then every base of epoch e is the same sum); the rule above waits for
// that: a segment is folded P after it ended, by a node that has been
// connected to every member for P (a delta reaches every neighbour within
// seconds; with catch_up, the whole state of a healed side arrives at the
// heal). What breaks it, and then loses at most the tokens the folder had
// not heard of (an over-admission of that much, never a double count): a
// delta lost on every path for more than P (without catch_up a key's lost
// delta is repaired only by its next change), or clocks more than P
// apart. TestFoldMergeLaws checks the merge laws and exactness with folds
// on some copies and not others, merged in any order; TestFoldBounded the
// slots per key under churn.
//
// Versions. No field is new: the base and the segments are ordinary
// slots, which a build from before fold decodes and counts (never less
// than a folding node does). But it keeps the segments it had and adds the
// base, so it counts them twice (a debt on the key, repaid at the rate),
// and it holds the base to its bound for one slot, burst + rate x (now -
// the generation's start + 10 s): a base passes that once the cluster has
// admitted more than rate x (fold + 10 s) beyond b + r*T for the key
// (gossip lag, splits), and that build then refuses the frame. So turn
// fold on only once every node runs a build that knows it. This build
// with fold off reads folded buckets without error (TestFoldReadWithoutFold).

// foldName is the base slot's node name; node names do not begin with a
// NUL byte.
const foldName strategy.NodeID = "\x00fold"

// segmentSep separates a node's name from the period in a segment's name.
const segmentSep = "\x00"

// minFold is the shortest fold period accepted: several times the clock
// skew the bounds allow (peerbound.ClockSkew), so that clocks stay within
// one period.
const minFold = time.Minute

// period is the fold period of now (0 with fold off).
func (g *GCounter) period(now time.Duration) int64 {
	if g.fold <= 0 || now <= 0 {
		return 0
	}
	return int64(now / g.fold)
}

// selfSlot is the slot this node admits into at now: (self, incarnation),
// or with fold its segment of now's period (the name built once per
// period).
func (g *GCounter) selfSlot(now time.Duration) strategy.NodeID {
	if g.fold <= 0 {
		return g.self
	}
	if p := g.period(now); p != g.segPeriod || g.segName == "" {
		g.segPeriod = p
		g.segName = strategy.NodeID(string(g.self) + segmentSep + strconv.FormatInt(p, 10))
	}
	return g.segName
}

// segmentPeriod is the period of a segment's slot name; false for the
// base and for slots without a period (fold off, or an older build).
func segmentPeriod(node strategy.NodeID) (int64, bool) {
	i := strings.LastIndex(string(node), segmentSep)
	if i <= 0 {
		return 0, false
	}
	p, err := strconv.ParseInt(string(node[i+1:]), 10, 64)
	if err != nil || p < 0 {
		return 0, false
	}
	return p, true
}

// baseEpoch is the epoch of b's base slot and its index; -1, -1 without
// one. The base sorts first (its name begins with NUL).
func (b *bucketState) baseEpoch() (int64, int) {
	for i, e := range b.counter {
		if e.node == foldName {
			return int64(e.incarnation), i
		}
		if e.node > foldName {
			break
		}
	}
	return -1, -1
}

// foldTo folds b to epoch e: the segments of period <= e are summed into
// the base slot, whose epoch becomes e, and removed. It reports whether b
// changed; consumed is unchanged. A bucket with a later epoch is left as
// it is.
func (b *bucketState) foldTo(e int64) bool {
	have, at := b.baseEpoch()
	if have >= e {
		return false
	}
	var sum int64
	out := b.counter[:0]
	for i, s := range b.counter {
		if i == at {
			sum += s.consumed
			continue
		}
		if p, ok := segmentPeriod(s.node); ok && p <= e {
			sum += s.consumed
			continue
		}
		out = append(out, s)
	}
	if at < 0 && len(out) == len(b.counter) {
		return false // nothing to fold and no base: already at any epoch
	}
	clear(b.counter[len(out):])
	base := entry{node: foldName, incarnation: uint32(e), consumed: sum}
	b.counter = slices.Insert(out, 0, base) // first: "\x00fold" sorts before any node name
	b.size = 0
	return true
}

// alignFold folds local and in (a decoded bucket, changed in place) to
// the larger of their epochs, so that merge compares the same slots.
func alignFold(local, in *bucketState) {
	el, _ := local.baseEpoch()
	ei, _ := in.baseEpoch()
	switch {
	case el > ei:
		in.foldTo(el)
	case ei > el:
		local.foldTo(ei)
	}
}

// fullView notes whether this node sees every expected member at now
// (fullSince: since when; -1: not now).
func (g *GCounter) fullView(now time.Duration) {
	full := true
	for _, m := range g.expected {
		if _, ok := slices.BinarySearch(g.members, m); !ok {
			full = false
			break
		}
	}
	switch {
	case !full:
		g.fullSince = -1
	case g.fullSince < 0:
		g.fullSince = now
		g.healAt = now
	}
}

// foldAll folds every key to epoch period(now) - 2 when this node has seen
// every expected member for a whole fold period, once per epoch (a pass
// walks every key: a bucket merged later with older segments is folded at
// the next epoch's pass), and returns how many buckets changed.
func (g *GCounter) foldAll(now time.Duration) int {
	e := g.period(now) - 2
	if e < 0 || e <= g.foldedTo || g.fullSince < 0 || now-g.fullSince < g.fold {
		return 0
	}
	g.foldedTo = e
	n := 0
	for _, b := range g.state {
		if b.foldTo(e) {
			n++
		}
	}
	g.names = nil // the interned names of folded segments go with them
	return n
}
