// Package gcounter implements the `gcounter` strategy: a replicated token
// bucket per key on a G-Counter of consumed tokens, kept consistent by delta
// states sent by flat gossip.
//
// Source: Henriksson & Bennhage (seed 002), ch. 3, §3.1, listings 3.1-3.4,
// and Table 4.1 for the gossip interval. From the thesis:
//   - Per key, a bucket of three values: the token counter, a G-Counter
//     (node -> tokens that node admitted; the consumed tokens are its sum);
//     the limit, the tokens the key may have consumed by now; and the refill
//     timestamp, when the limit was last raised (listing 3.1).
//   - A request for n tokens is admitted when consumed + n <= limit after
//     refilling the limit to the request's arrival; admitting adds n to this
//     node's slot of the G-Counter (listing 3.2). A key seen for the first
//     time starts with limit = capacity (= Config.Burst).
//   - Merge takes the maximum per node of the G-Counter, and the larger
//     limit together with its refill timestamp (listing 3.4).
//   - One delta state per neighbour (every other live member): the keys that
//     changed since the last message to it. Every gossip interval the node
//     sends the delta state of ONE neighbour chosen uniformly at random
//     (flat gossip, with Config.Rand) and clears it. The keys a received
//     delta state changed are added to the delta states of the neighbours
//     other than the sender (listing 3.3).
//
// Ours, not the thesis':
//   - Token-bucket refill. Listing 3.1 adds min((now-refill)*rate, capacity)
//     to the limit, so a key idle for a while can hold up to twice its
//     capacity (the cap applies to one refill, not to the bucket). Here the
//     limit never exceeds consumed + capacity: a bucket holds at most Burst
//     tokens, as bucket.Bucket does, and one node alone decides exactly as
//     `central` does. The cap is applied with the consumed tokens this node
//     knows; when it learns of more, its limit may be lower than a central
//     bucket's would be (false rejections, repaid at the refill rate).
//   - Exact arithmetic: tokens are int64 and the limit is kept as whole
//     tokens plus a fraction in ticks of 1/Rate.Per tokens (one nanosecond
//     refills Rate.Tokens ticks), as in package bucket: no float drift.
//   - Ties: listing 3.4 keeps the local limit when the two are equal, so the
//     result depends on which side is local (merge is not commutative; see
//     TestThesisMergeNotCommutative). Here the larger (limit, fraction,
//     refill timestamp) wins: merge is commutative, associative and
//     idempotent (the property tests).
//   - A delta state holds key names; the bucket sent is this node's current
//     bucket for the key (a join of every update the thesis would have
//     merged into the delta state, so never less information).
//   - An empty delta state sends nothing (no empty message).
//   - catch_up (§5.5: the thesis does not handle nodes that rejoin): when
//     SetMembers shows a new member, one established member (the first one
//     after it in sorted order) sends it the full state. With catch_up each
//     node instance also draws a random 32-bit incarnation from
//     Config.Rand, and its G-Counter slot is (node, incarnation): a node
//     that restarts with an empty state would otherwise count again from 0
//     in its old slot, and max() would swallow its new admissions until it
//     passed its old count.
//
// Keys are never forgotten: a G-Counter slot cannot be dropped without
// risking a lower count later, so an idle key costs its encoded bucket (see
// BenchmarkIdleKeyBytes), like the thesis' counter whose memory only grows.
package gcounter

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"math/bits"
	"math/rand/v2"
	"slices"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"
	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// Name is the strategy's name in the registry and in errors.
const Name = "gcounter"

// DefaultGossip is the gossip interval of the thesis' Table 4.1 (seed 002).
const DefaultGossip = 300 * time.Millisecond

// maxConsumed bounds a key's consumed tokens (and any slot of its
// G-Counter) accepted from a peer, so that consumed + capacity never
// overflows.
const maxConsumed = math.MaxInt64 / 4

// GCounter is one node of the gcounter strategy: per key a token bucket on a
// G-Counter of consumed tokens, and one delta state (changed keys) per
// neighbour (seed 002 §3.1). Not safe for concurrent use.
type GCounter struct {
	self        strategy.NodeID
	incarnation uint32
	rate        bucket.Rate
	per         int64 // ticks per token (Rate.Per in ns)
	capacity    int64 // tokens (Config.Burst)
	gossip      time.Duration
	catchUp     bool
	rnd         *rand.Rand

	members    []strategy.NodeID // sorted, self included
	neighbours []strategy.NodeID // members other than self, sorted
	state      map[string]*bucketState
	delta      map[strategy.NodeID]map[string]struct{} // per neighbour, the keys changed since the last message

	nextGossip time.Duration
}

// entry is one slot of a G-Counter.
type entry struct {
	node        strategy.NodeID
	incarnation uint32
	consumed    int64
}

// cmpSlot orders G-Counter slots by (node, incarnation).
func cmpSlot(a, b entry) int {
	return cmp.Or(cmp.Compare(a.node, b.node), cmp.Compare(a.incarnation, b.incarnation))
}

// bucketState is one key's replicated token bucket. Invariant:
// limit + frac/per <= consumed + capacity (frac is 0 when limit reaches it).
type bucketState struct {
	counter  []entry // sorted by (node, incarnation), no repeats
	consumed int64   // sum of counter
	limit    int64   // whole tokens
	frac     int64   // ticks beyond limit, in [0, per)
	refill   time.Duration
}

// New builds a node. Parameters:
//   - gossip (duration, default 300ms, thesis Table 4.1): the gossip
//     interval; must be positive.
//   - catch_up (bool, default false; ours): full-state catch-up for members
//     that join or rejoin, and per-instance G-Counter slots (see the package
//     comment).
//
// Errors: an invalid Config, an unknown or invalid parameter, or a burst too
// large for the rate's tick arithmetic (as bucket.New).
func New(cfg strategy.Config) (*GCounter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	g := &GCounter{self: cfg.Self, rate: cfg.Rate, capacity: cfg.Burst, rnd: cfg.Rand,
		state: map[string]*bucketState{}, delta: map[strategy.NodeID]map[string]struct{}{}}
	var err error
	if g.gossip, err = cfg.Params.Duration("gossip", DefaultGossip); err != nil {
		return nil, err
	}
	if g.gossip <= 0 {
		return nil, fmt.Errorf("%s: parameter gossip must be positive", Name)
	}
	if g.catchUp, err = cfg.Params.Bool("catch_up", false); err != nil {
		return nil, err
	}
	if err := cfg.Params.Check(Name); err != nil {
		return nil, err
	}
	if _, err := bucket.New(cfg.Rate, cfg.Burst, 0); err != nil {
		return nil, fmt.Errorf("%s: %w", Name, err)
	}
	g.per = int64(cfg.Rate.Per)
	if cfg.Rate.Tokens == 0 {
		g.per = 1 // no refill: the fraction stays 0
	}
	if g.catchUp {
		for g.incarnation == 0 {
			g.incarnation = g.rnd.Uint32()
		}
	}
	g.setMembers(cfg.Members)
	return g, nil
}

// Start arms the gossip timer.
func (g *GCounter) Start(now time.Duration, fx *strategy.Effects) {
	g.nextGossip = now + g.gossip
	fx.WakeAt(g.nextGossip)
}

// Request decides at once from the local bucket (listing 3.1): refill the
// limit to req.Arrival, admit when consumed + Tokens <= limit, and count the
// tokens in this node's slot. Tokens <= 0 is admitted and takes nothing;
// more than the burst is rejected.
func (g *GCounter) Request(now time.Duration, req strategy.Request, fx *strategy.Effects) (strategy.Decision, bool) {
	d := strategy.Decision{RequestID: req.ID}
	n := req.Tokens
	if n <= 0 {
		d.Allowed = true
		return d, true
	}
	if n > g.capacity {
		return d, true
	}
	b, ok := g.state[req.Key]
	if !ok {
		b = &bucketState{limit: g.capacity, refill: req.Arrival}
		g.state[req.Key] = b
	}
	g.refill(b, req.Arrival)
	if b.consumed+n > b.limit {
		return d, true
	}
	b.add(entry{node: g.self, incarnation: g.incarnation, consumed: n})
	for _, nb := range g.neighbours {
		g.delta[nb][req.Key] = struct{}{}
	}
	d.Allowed = true
	return d, true
}

// refill raises b's limit to now at the refill rate, never above
// consumed + capacity (the token-bucket semantic; see the package comment).
func (g *GCounter) refill(b *bucketState, now time.Duration) {
	if now <= b.refill {
		return
	}
	dt := uint64(now - b.refill)
	b.refill = now
	if g.rate.Tokens == 0 {
		return
	}
	room := b.consumed + g.capacity - b.limit // >= 0 by the invariant
	if room <= 0 {
		return
	}
	hi, lo := bits.Mul64(dt, uint64(g.rate.Tokens))
	var carry uint64
	lo, carry = bits.Add64(lo, uint64(b.frac), 0)
	hi += carry
	if hi >= uint64(g.per) { // more than 2^64 tokens: full
		b.limit, b.frac = b.consumed+g.capacity, 0
		return
	}
	q, r := bits.Div64(hi, lo, uint64(g.per))
	if q >= uint64(room) {
		b.limit, b.frac = b.consumed+g.capacity, 0
		return
	}
	b.limit += int64(q)
	b.frac = int64(r)
}

// add raises slot e.node/e.incarnation by e.consumed.
func (b *bucketState) add(e entry) {
	i, found := slices.BinarySearchFunc(b.counter, e, cmpSlot)
	if found {
		b.counter[i].consumed += e.consumed
	} else {
		b.counter = slices.Insert(b.counter, i, e)
	}
	b.consumed += e.consumed
}

// merge joins src into b (listing 3.4, with the tie rule of the package
// comment) and reports whether b changed.
func (b *bucketState) merge(src *bucketState) bool {
	changed := false
	out := b.counter
	if !slotsCover(b.counter, src.counter) {
		out = make([]entry, 0, len(b.counter)+len(src.counter))
		i, j := 0, 0
		for i < len(b.counter) || j < len(src.counter) {
			switch {
			case j == len(src.counter) || (i < len(b.counter) && cmpSlot(b.counter[i], src.counter[j]) < 0):
				out = append(out, b.counter[i])
				i++
			case i == len(b.counter) || cmpSlot(b.counter[i], src.counter[j]) > 0:
				out = append(out, src.counter[j])
				j++
			default:
				e := b.counter[i]
				e.consumed = max(e.consumed, src.counter[j].consumed)
				out = append(out, e)
				i++
				j++
			}
		}
		changed = true
	} else {
		// Same slots or a subset: raise in place.
		j := 0
		for i := range out {
			if j < len(src.counter) && cmpSlot(out[i], src.counter[j]) == 0 {
				if src.counter[j].consumed > out[i].consumed {
					out[i].consumed = src.counter[j].consumed
					changed = true
				}
				j++
			}
		}
	}
	if changed {
		b.counter = out
		b.consumed = 0
		for _, e := range out {
			b.consumed += e.consumed
		}
	}
	if cmpLimit(src, b) > 0 {
		b.limit, b.frac, b.refill = src.limit, src.frac, src.refill
		changed = true
	}
	return changed
}

// slotsCover reports whether every slot of sub is in have (both sorted).
func slotsCover(have, sub []entry) bool {
	i := 0
	for _, e := range sub {
		for i < len(have) && cmpSlot(have[i], e) < 0 {
			i++
		}
		if i == len(have) || cmpSlot(have[i], e) != 0 {
			return false
		}
		i++
	}
	return true
}

// cmpLimit orders buckets by (limit, fraction, refill timestamp).
func cmpLimit(a, b *bucketState) int {
	return cmp.Or(cmp.Compare(a.limit, b.limit), cmp.Compare(a.frac, b.frac), cmp.Compare(a.refill, b.refill))
}

func (b *bucketState) clone() *bucketState {
	c := *b
	c.counter = slices.Clone(b.counter)
	return &c
}

func (b *bucketState) equal(o *bucketState) bool {
	return b.consumed == o.consumed && cmpLimit(b, o) == 0 && slices.Equal(b.counter, o.counter)
}

// Receive merges a delta state (listing 3.3) and adds the keys it changed to
// the delta states of the neighbours other than from. A full state
// (catch-up) is merged without being passed on. Errors: an undecodable
// payload, or a bucket with an empty key, unsorted or repeated G-Counter
// slots, an empty node name, a negative or oversized count, a negative
// limit, refill timestamp or fraction, a fraction of a token of 1 or more,
// or a limit above consumed + capacity. Errors change no state.
func (g *GCounter) Receive(now time.Duration, from strategy.NodeID, payload []byte, fx *strategy.Effects) error {
	var m peerv1.GCounterMessage
	if err := proto.Unmarshal(payload, &m); err != nil {
		return fmt.Errorf("%s: message from %s does not decode: %w", Name, from, err)
	}
	in := make([]*bucketState, len(m.Buckets))
	for i, pb := range m.Buckets {
		b, err := g.decodeBucket(pb)
		if err != nil {
			return fmt.Errorf("%s: message from %s: %w", Name, from, err)
		}
		in[i] = b
	}
	for i, b := range in {
		key := m.Buckets[i].Key
		local, ok := g.state[key]
		changed := true
		if ok {
			changed = local.merge(b)
		} else {
			g.state[key] = b
		}
		if !changed || m.Full {
			continue
		}
		for _, nb := range g.neighbours {
			if nb != from {
				g.delta[nb][key] = struct{}{}
			}
		}
	}
	return nil
}

func (g *GCounter) decodeBucket(pb *peerv1.GCounterBucket) (*bucketState, error) {
	if pb.Key == "" {
		return nil, fmt.Errorf("bucket with an empty key")
	}
	b := &bucketState{counter: make([]entry, len(pb.Counter)), limit: pb.Limit, frac: pb.LimitTicks, refill: time.Duration(pb.RefillNs)}
	for i, pe := range pb.Counter {
		e := entry{node: strategy.NodeID(pe.Node), incarnation: pe.Incarnation, consumed: pe.Consumed}
		switch {
		case e.node == "":
			return nil, fmt.Errorf("key %q: G-Counter slot with an empty node", pb.Key)
		case e.consumed < 0 || e.consumed > maxConsumed:
			return nil, fmt.Errorf("key %q: slot %s has consumed %d out of range", pb.Key, e.node, e.consumed)
		case i > 0 && cmpSlot(b.counter[i-1], e) >= 0:
			return nil, fmt.Errorf("key %q: G-Counter slots not sorted or repeated at %s", pb.Key, e.node)
		}
		b.counter[i] = e
		b.consumed += e.consumed
		if b.consumed > maxConsumed {
			return nil, fmt.Errorf("key %q: consumed tokens above %d", pb.Key, int64(maxConsumed))
		}
	}
	switch {
	case b.limit < 0:
		return nil, fmt.Errorf("key %q: negative limit %d", pb.Key, b.limit)
	case b.frac < 0 || b.frac >= g.per:
		return nil, fmt.Errorf("key %q: limit fraction %d ticks out of [0, %d)", pb.Key, b.frac, g.per)
	case b.refill < 0:
		return nil, fmt.Errorf("key %q: negative refill timestamp %d", pb.Key, pb.RefillNs)
	case b.limit > b.consumed+g.capacity || (b.limit == b.consumed+g.capacity && b.frac > 0):
		return nil, fmt.Errorf("key %q: limit %d above consumed %d + capacity %d", pb.Key, b.limit, b.consumed, g.capacity)
	}
	return b, nil
}

// Tick gossips when the gossip interval has come: flat gossip picks one
// neighbour uniformly at random and sends it its delta state, if any.
func (g *GCounter) Tick(now time.Duration, fx *strategy.Effects) {
	if now < g.nextGossip {
		return
	}
	g.gossipOnce(fx)
	for g.nextGossip <= now {
		g.nextGossip += g.gossip
	}
	fx.WakeAt(g.nextGossip)
}

func (g *GCounter) gossipOnce(fx *strategy.Effects) {
	pending := false
	for _, nb := range g.neighbours {
		if len(g.delta[nb]) > 0 {
			pending = true
			break
		}
	}
	if !pending {
		return // nothing to send anywhere: no draw
	}
	nb := g.neighbours[g.rnd.IntN(len(g.neighbours))]
	keys := g.delta[nb]
	if len(keys) == 0 {
		return
	}
	fx.Send(nb, g.encode(sortedKeys(keys), false))
	clear(keys)
}

// sortedKeys returns the keys of m in ascending order, so that nothing sent
// depends on map iteration order.
func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

// allKeys returns every key of the local state, sorted.
func (g *GCounter) allKeys() []string { return sortedKeys(g.state) }

// encode builds the message carrying the current buckets of keys (sorted).
func (g *GCounter) encode(keys []string, full bool) []byte {
	m := &peerv1.GCounterMessage{Buckets: make([]*peerv1.GCounterBucket, len(keys)), Full: full}
	for i, k := range keys {
		m.Buckets[i] = encodeBucket(k, g.state[k])
	}
	b, err := proto.Marshal(m)
	if err != nil {
		panic(fmt.Sprintf("%s: marshal: %v", Name, err)) // cannot fail for this message type
	}
	return b
}

func encodeBucket(key string, b *bucketState) *peerv1.GCounterBucket {
	pb := &peerv1.GCounterBucket{Key: key, Counter: make([]*peerv1.GCounterEntry, len(b.counter)),
		Limit: b.limit, LimitTicks: b.frac, RefillNs: int64(b.refill)}
	for i, e := range b.counter {
		pb.Counter[i] = &peerv1.GCounterEntry{Node: string(e.node), Incarnation: e.incarnation, Consumed: e.consumed}
	}
	return pb
}

// bucketSize is the exact size of encodeBucket(key, b) as one element of
// GCounterMessage.buckets: tag, length prefix and body.
func bucketSize(key string, b *bucketState) int {
	n := protowire.SizeTag(1) + protowire.SizeBytes(len(key))
	for _, e := range b.counter {
		es := 0
		if e.node != "" {
			es += protowire.SizeTag(1) + protowire.SizeBytes(len(e.node))
		}
		if e.incarnation != 0 {
			es += protowire.SizeTag(2) + protowire.SizeFixed32()
		}
		if e.consumed != 0 {
			es += protowire.SizeTag(3) + protowire.SizeVarint(uint64(e.consumed))
		}
		n += protowire.SizeTag(2) + protowire.SizeBytes(es)
	}
	for f, v := range [...]int64{3: b.limit, 4: b.frac, 5: int64(b.refill)} {
		if v != 0 {
			n += protowire.SizeTag(protowire.Number(f)) + protowire.SizeVarint(uint64(v))
		}
	}
	return protowire.SizeTag(1) + protowire.SizeBytes(n)
}

// SetMembers updates the neighbours: a member that left loses its delta
// state, a new one starts with an empty one. With catch_up, the first
// established member after each new member (in sorted order, wrapping)
// sends it the full state.
func (g *GCounter) SetMembers(now time.Duration, members []strategy.NodeID, fx *strategy.Effects) {
	old := g.members
	g.setMembers(members)
	if !g.catchUp || len(g.state) == 0 {
		return
	}
	for _, nb := range g.neighbours {
		if !slices.Contains(old, nb) && buddy(nb, g.members, old) == g.self {
			fx.Send(nb, g.encode(g.allKeys(), true))
		}
	}
}

// buddy returns the member that catches newcomer up: the first member after
// it, in sorted order and wrapping, that was a member before ("" if none).
func buddy(newcomer strategy.NodeID, members, old []strategy.NodeID) strategy.NodeID {
	i, _ := slices.BinarySearch(members, newcomer)
	for k := 1; k < len(members); k++ {
		m := members[(i+k)%len(members)]
		if m != newcomer && slices.Contains(old, m) {
			return m
		}
	}
	return ""
}

func (g *GCounter) setMembers(members []strategy.NodeID) {
	g.members = slices.Clone(members)
	slices.Sort(g.members)
	g.members = slices.Compact(g.members)
	g.neighbours = g.neighbours[:0]
	for _, m := range g.members {
		if m != g.self {
			g.neighbours = append(g.neighbours, m)
		}
	}
	for nb := range g.delta {
		if !slices.Contains(g.neighbours, nb) {
			delete(g.delta, nb)
		}
	}
	for _, nb := range g.neighbours {
		if g.delta[nb] == nil {
			g.delta[nb] = map[string]struct{}{}
		}
	}
}

// Remaining is the whole tokens key's replicated bucket holds at now as
// this node sees it: the limit refilled to now minus the consumed tokens
// it knows of, rounded down and clamped to [0, Burst] (the capacity for a
// key it has not seen: a new key starts full). Always known. It changes no
// state (strategy.Remainer): the refill is computed on a copy.
func (g *GCounter) Remaining(now time.Duration, key string) (int64, bool) {
	b, ok := g.state[key]
	if !ok {
		return g.capacity, true
	}
	c := *b // refill touches limit, frac and refill only, never the counter
	g.refill(&c, now)
	return min(max(c.limit-c.consumed, 0), g.capacity), true
}

var _ strategy.Remainer = (*GCounter)(nil)

// StateBytes is the exact size, in bytes of the wire encoding, of the
// node's local state as a full-state GCounterMessage plus the delta
// message it would send to each neighbour now (computed field by field,
// equal to proto.Size of those messages; see TestStateBytesExact).
func (g *GCounter) StateBytes() int {
	sizes := make(map[string]int, len(g.state))
	n := 0
	for k, b := range g.state {
		s := bucketSize(k, b)
		sizes[k] = s
		n += s
	}
	for _, keys := range g.delta {
		for k := range keys {
			n += sizes[k]
		}
	}
	return n
}
