package gcounter

import (
	"fmt"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/internal/peerbound"
)

// wireMessage is a decoded GCounterMessage (peerv1), before validation.
type wireMessage struct {
	Buckets []wireBucket
	Full    bool
}

// wireBucket is a decoded GCounterBucket; Counter holds its slots as they
// came (decodeBucket checks them).
type wireBucket struct {
	Key                                     string
	Counter                                 []entry
	Limit, LimitTicks, RefillNs, Generation int64
}

// maxInterned bounds the node names a node keeps to share between decoded
// slots (decodeMessage).
const maxInterned = 1024

// decodeMessage decodes a GCounterMessage into what proto.Unmarshal
// gives, field for field. The messages gcounter sends (fields 1 and 2 of
// the message, 1 to 6 of a bucket, 1 to 3 of a slot, each in its own wire
// type, strings valid UTF-8) are parsed here with protowire, without a
// generated message per bucket and slot, and with node names shared
// between slots (so that merges compare equal names by pointer first):
// the simulator decodes gigabytes of them at 30 nodes. Anything else
// (unknown fields, other wire types, invalid UTF-8, truncation) goes
// through proto.Unmarshal, whose answer, error or message, is then the
// one returned. FuzzDecodeMessage checks the two paths agree.
func (g *GCounter) decodeMessage(payload []byte) (wireMessage, error) {
	if m, ok := g.decodeFast(payload); ok {
		return m, nil
	}
	return decodeProto(payload)
}

// decodeProto is decodeMessage through proto.Unmarshal.
func decodeProto(payload []byte) (wireMessage, error) {
	var pm peerv1.GCounterMessage
	if err := proto.Unmarshal(payload, &pm); err != nil {
		return wireMessage{}, err
	}
	m := wireMessage{Buckets: make([]wireBucket, len(pm.Buckets)), Full: pm.Full}
	for i, pb := range pm.Buckets {
		w := wireBucket{Key: pb.Key, Counter: make([]entry, len(pb.Counter)), Limit: pb.Limit,
			LimitTicks: pb.LimitTicks, RefillNs: pb.RefillNs, Generation: pb.Generation}
		for j, pe := range pb.Counter {
			w.Counter[j] = entry{node: strategy.NodeID(pe.Node), incarnation: pe.Incarnation, consumed: pe.Consumed}
		}
		m.Buckets[i] = w
	}
	return m, nil
}

// decodeFast is decodeMessage's protowire path; false: not a message it
// parses (decodeProto decides).
func (g *GCounter) decodeFast(p []byte) (wireMessage, bool) {
	var m wireMessage
	var scratch []entry
	for len(p) > 0 {
		num, typ, n := protowire.ConsumeTag(p)
		if n < 0 {
			return m, false
		}
		p = p[n:]
		switch {
		case num == 1 && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(p)
			if n < 0 {
				return m, false
			}
			p = p[n:]
			var w wireBucket
			var ok bool
			if w, scratch, ok = g.decodeBucketFast(v, scratch[:0]); !ok {
				return m, false
			}
			m.Buckets = append(m.Buckets, w)
		case num == 2 && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(p)
			if n < 0 {
				return m, false
			}
			p = p[n:]
			m.Full = protowire.DecodeBool(v)
		default:
			return m, false
		}
	}
	return m, true
}

// decodeBucketFast parses one GCounterBucket, its slots collected in
// scratch (returned for reuse) and then copied to a slice of their own.
func (g *GCounter) decodeBucketFast(p []byte, scratch []entry) (wireBucket, []entry, bool) {
	var w wireBucket
	for len(p) > 0 {
		num, typ, n := protowire.ConsumeTag(p)
		if n < 0 {
			return w, scratch, false
		}
		p = p[n:]
		switch {
		case num == 1 && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(p)
			if n < 0 || !utf8.Valid(v) {
				return w, scratch, false
			}
			p = p[n:]
			w.Key = string(v)
		case num == 2 && typ == protowire.BytesType:
			e, n, ok := g.consumeEntryFast(p)
			if !ok {
				return w, scratch, false
			}
			p = p[n:]
			scratch = append(scratch, e)
		case num >= 3 && num <= 6 && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(p)
			if n < 0 {
				return w, scratch, false
			}
			p = p[n:]
			w.setVarint(num, int64(v))
		default:
			return w, scratch, false
		}
	}
	w.Counter = make([]entry, len(scratch))
	copy(w.Counter, scratch)
	return w, scratch, true
}

// setVarint sets the bucket's varint field num (3 to 6) to v.
func (w *wireBucket) setVarint(num protowire.Number, v int64) {
	switch num {
	case 3:
		w.Limit = v
	case 4:
		w.LimitTicks = v
	case 5:
		w.RefillNs = v
	case 6:
		w.Generation = v
	}
}

// consumeEntryFast parses one length-delimited GCounterEntry at the start
// of p and returns it and the bytes it took.
func (g *GCounter) consumeEntryFast(p []byte) (entry, int, bool) {
	v, n := protowire.ConsumeBytes(p)
	if n < 0 {
		return entry{}, n, false
	}
	e, ok := g.decodeEntryFast(v)
	return e, n, ok
}

// decodeEntryFast parses one GCounterEntry.
func (g *GCounter) decodeEntryFast(p []byte) (entry, bool) {
	var e entry
	for len(p) > 0 {
		num, typ, n := protowire.ConsumeTag(p)
		if n < 0 {
			return e, false
		}
		p = p[n:]
		switch {
		case num == 1 && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(p)
			if n < 0 || !utf8.Valid(v) {
				return e, false
			}
			p = p[n:]
			e.node = g.intern(v)
		case num == 2 && typ == protowire.Fixed32Type:
			v, n := protowire.ConsumeFixed32(p)
			if n < 0 {
				return e, false
			}
			p = p[n:]
			e.incarnation = v
		case num == 3 && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(p)
			if n < 0 {
				return e, false
			}
			p = p[n:]
			e.consumed = int64(v)
		default:
			return e, false
		}
	}
	return e, true
}

// intern returns the node name b, shared with earlier slots of the same
// name while at most maxInterned names are kept.
func (g *GCounter) intern(b []byte) strategy.NodeID {
	if id, ok := g.names[string(b)]; ok {
		return id
	}
	id := strategy.NodeID(b)
	if len(g.names) < maxInterned {
		if g.names == nil {
			g.names = map[string]strategy.NodeID{string(g.self): g.self}
		}
		g.names[string(id)] = id
	}
	return id
}

// decodeBucket validates a decoded bucket and returns its state, which
// takes pb.Counter over.
func (g *GCounter) decodeBucket(now time.Duration, pb *wireBucket) (*bucketState, error) {
	if pb.Key == "" {
		return nil, fmt.Errorf("bucket with an empty key")
	}
	b := &bucketState{gen: pb.Generation, counter: pb.Counter, limit: pb.Limit, frac: pb.LimitTicks, refill: time.Duration(pb.RefillNs)}
	if err := checkSlots(pb.Key, b); err != nil {
		return nil, err
	}
	if err := g.checkLimit(now, pb, b); err != nil {
		return nil, err
	}
	if err := g.checkSinceGeneration(now, pb.Key, b); err != nil {
		return nil, err
	}
	return b, nil
}

// checkSlots checks the slots of key's decoded bucket b (named, counts in
// range, sorted without repeats) and sums them into b.consumed.
func checkSlots(key string, b *bucketState) error {
	for i, e := range b.counter {
		switch {
		case e.node == "":
			return fmt.Errorf("key %q: G-Counter slot with an empty node", key)
		case e.consumed < 0 || e.consumed > maxConsumed:
			return fmt.Errorf("key %q: slot %s has consumed %d out of range", key, e.node, e.consumed)
		case i > 0 && cmpSlot(b.counter[i-1], e) >= 0:
			return fmt.Errorf("key %q: G-Counter slots not sorted or repeated at %s", key, e.node)
		}
		b.consumed += e.consumed
		if b.consumed > maxConsumed {
			return fmt.Errorf("key %q: consumed tokens above %d", key, int64(maxConsumed))
		}
	}
	return nil
}

// checkLimit checks a decoded bucket's limit, its fraction, refill
// timestamp and generation: not negative, the limit at most consumed plus
// capacity, the refill not after now (plus the clock skew allowed).
func (g *GCounter) checkLimit(now time.Duration, pb *wireBucket, b *bucketState) error {
	switch {
	case b.limit < 0:
		return fmt.Errorf("key %q: negative limit %d", pb.Key, b.limit)
	case b.frac < 0 || b.frac >= g.per:
		return fmt.Errorf("key %q: limit fraction %d ticks out of [0, %d)", pb.Key, b.frac, g.per)
	case b.refill < 0:
		return fmt.Errorf("key %q: negative refill timestamp %d", pb.Key, pb.RefillNs)
	case b.gen < 0:
		return fmt.Errorf("key %q: negative generation %d", pb.Key, b.gen)
	case b.limit > b.consumed+g.capacity || (b.limit == b.consumed+g.capacity && b.frac > 0):
		return fmt.Errorf("key %q: limit %d above consumed %d + capacity %d", pb.Key, b.limit, b.consumed, g.capacity)
	case b.refill > now+peerbound.ClockSkew:
		return fmt.Errorf("key %q: refill timestamp %v is after now %v", pb.Key, b.refill, now)
	}
	return nil
}

// checkSinceGeneration checks a decoded bucket against what the rule
// allows since its generation began: a generation not after now, and
// every slot at most the burst plus the refill since.
func (g *GCounter) checkSinceGeneration(now time.Duration, key string, b *bucketState) error {
	// The key's life began at its generation's start: nobody can have
	// consumed (or been allowed) more than its burst plus its refill since.
	genStart := time.Duration(0)
	switch {
	case g.idle <= 0 && b.gen != 0:
		return fmt.Errorf("key %q: generation %d with expiry off (every generation is 0)", key, b.gen)
	case g.idle > 0:
		if b.gen > int64((now+peerbound.ClockSkew)/g.idle) {
			return fmt.Errorf("key %q: generation %d begins after now %v (idle %v)", key, b.gen, now, g.idle)
		}
		genStart = time.Duration(b.gen) * g.idle
	}
	// The limit has no time bound of its own: forgive raises it to
	// consumed - capacity, so a real limit may be anywhere up to
	// consumed + capacity (checkLimit), and a limit is worth nothing
	// beyond the consumption it comes with. The slots are bounded.
	bound := peerbound.Tokens(g.rate, g.capacity, genStart, now)
	for _, e := range b.counter {
		if e.node == foldName && g.fold > 0 {
			// The sum of many slots, one per node and fold period of the
			// generation: at most the bound per member ever seen, of
			// which this node knows its current members (and as many
			// again for those that left; checkFold checks its epoch).
			// With fold off the name is a slot like any other.
			if slots := 2 * int64(max(len(g.members), 1)); e.consumed/slots > bound { // (divided: no overflow)
				return fmt.Errorf("key %q: fold base consumed %d, above %d slots of %d tokens (what the rule allows since generation %d)", key, e.consumed, slots, bound, b.gen)
			}
			continue
		}
		if e.consumed > bound {
			return fmt.Errorf("key %q: slot %s consumed %d, above the %d tokens the rule allows since generation %d", key, e.node, e.consumed, bound, b.gen)
		}
	}
	return g.checkFold(now, key, b)
}

// checkFold checks a decoded bucket's fold (fold.go): no segment of a
// period, nor a base of an epoch, after now's period (with
// peerbound.ClockSkew of slack), which would never be folded. The base,
// a sum of slots, has no bound of its own beyond the consumed tokens'
// (checkSlots): a debt it makes is held to one burst (forgive). With fold
// off the names are not read.
func (g *GCounter) checkFold(now time.Duration, key string, b *bucketState) error {
	if g.fold <= 0 {
		return nil
	}
	last := g.period(now + peerbound.ClockSkew)
	for _, e := range b.counter {
		if e.node == foldName && int64(e.incarnation) > last {
			return fmt.Errorf("key %q: fold epoch %d after now's period %d", key, e.incarnation, last)
		}
		if p, ok := segmentPeriod(e.node); ok && p > last {
			return fmt.Errorf("key %q: slot %q of a period after now's %d", key, e.node, last)
		}
	}
	return nil
}
