package gcounter

import (
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"
	"github.com/tokenmesh/tokenmesh/strategy"
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
			v, n := protowire.ConsumeBytes(p)
			if n < 0 {
				return w, scratch, false
			}
			p = p[n:]
			e, ok := g.decodeEntryFast(v)
			if !ok {
				return w, scratch, false
			}
			scratch = append(scratch, e)
		case num >= 3 && num <= 6 && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(p)
			if n < 0 {
				return w, scratch, false
			}
			p = p[n:]
			switch num {
			case 3:
				w.Limit = int64(v)
			case 4:
				w.LimitTicks = int64(v)
			case 5:
				w.RefillNs = int64(v)
			case 6:
				w.Generation = int64(v)
			}
		default:
			return w, scratch, false
		}
	}
	w.Counter = make([]entry, len(scratch))
	copy(w.Counter, scratch)
	return w, scratch, true
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
