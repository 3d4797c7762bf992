package gcounter

import (
	"fmt"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"
)

// Encoding: the GCounterMessage a node sends, and the sizes of its parts.

// encode builds the message carrying the current buckets of keys (sorted).
// The bytes are those of proto.Marshal of the GCounterMessage
// (encodeProto), written field by field with protowire into one buffer of
// the exact size: the simulator encodes gigabytes of them at 30 nodes, and
// the generated marshaller allocates a message per bucket and per slot.
// Strings that are not valid UTF-8 (which proto.Marshal refuses) take
// encodeProto's path. TestEncodeMatchesProto checks the equality.
func (g *GCounter) encode(keys []string, full bool) []byte {
	size := 0
	for _, k := range keys {
		b := g.state[k]
		if k == "" || !utf8.ValidString(k) || (!g.selfUTF8 && !validNodes(b)) {
			return g.encodeProto(keys, full)
		}
		size += bucketSize(k, b)
	}
	if full {
		size += protowire.SizeTag(2) + protowire.SizeVarint(1)
	}
	buf := make([]byte, 0, size)
	for _, k := range keys {
		buf = appendBucket(buf, k, g.state[k])
	}
	if full {
		buf = protowire.AppendTag(buf, 2, protowire.VarintType)
		buf = protowire.AppendVarint(buf, 1)
	}
	return buf
}

// validNodes reports whether every slot's node name is valid UTF-8. A slot
// is this node's own or came from a peer through proto.Unmarshal, which
// refuses invalid UTF-8, so encode only asks when self is not valid.
func validNodes(b *bucketState) bool {
	for _, e := range b.counter {
		if !utf8.ValidString(string(e.node)) {
			return false
		}
	}
	return true
}

// appendBucket appends encodeBucket(key, b) as one element of
// GCounterMessage.buckets (field 1), in proto.Marshal's field order.
func appendBucket(buf []byte, key string, b *bucketState) []byte {
	buf = protowire.AppendTag(buf, 1, protowire.BytesType)
	buf = protowire.AppendVarint(buf, uint64(bodySize(key, b)))
	buf = protowire.AppendTag(buf, 1, protowire.BytesType)
	buf = protowire.AppendString(buf, key)
	for _, e := range b.counter {
		buf = protowire.AppendTag(buf, 2, protowire.BytesType)
		buf = protowire.AppendVarint(buf, uint64(entrySize(e)))
		if e.node != "" {
			buf = protowire.AppendTag(buf, 1, protowire.BytesType)
			buf = protowire.AppendString(buf, string(e.node))
		}
		if e.incarnation != 0 {
			buf = protowire.AppendTag(buf, 2, protowire.Fixed32Type)
			buf = protowire.AppendFixed32(buf, e.incarnation)
		}
		if e.consumed != 0 {
			buf = protowire.AppendTag(buf, 3, protowire.VarintType)
			buf = protowire.AppendVarint(buf, uint64(e.consumed))
		}
	}
	for f, v := range [...]int64{3: b.limit, 4: b.frac, 5: int64(b.refill), 6: b.gen} {
		if v != 0 {
			buf = protowire.AppendTag(buf, protowire.Number(f), protowire.VarintType)
			buf = protowire.AppendVarint(buf, uint64(v))
		}
	}
	return buf
}

// encodeProto is encode through the generated marshaller.
func (g *GCounter) encodeProto(keys []string, full bool) []byte {
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
		Limit: b.limit, LimitTicks: b.frac, RefillNs: int64(b.refill), Generation: b.gen}
	for i, e := range b.counter {
		pb.Counter[i] = &peerv1.GCounterEntry{Node: string(e.node), Incarnation: e.incarnation, Consumed: e.consumed}
	}
	return pb
}

// bucketSize is the exact size of encodeBucket(key, b) as one element of
// GCounterMessage.buckets: tag, length prefix and body.
func bucketSize(key string, b *bucketState) int {
	body := bodySize(key, b)
	return protowire.SizeTag(1) + protowire.SizeBytes(body)
}

// bodySize is bucketBodySize, cached in b.size until b changes.
func bodySize(key string, b *bucketState) int {
	if b.size == 0 {
		b.size = bucketBodySize(key, b)
	}
	return b.size
}

// entrySize is the size of a GCounterEntry's body.
func entrySize(e entry) int {
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
	return es
}

// bucketBodySize is the size of encodeBucket(key, b)'s body (key not empty).
func bucketBodySize(key string, b *bucketState) int {
	n := protowire.SizeTag(1) + protowire.SizeBytes(len(key))
	for _, e := range b.counter {
		n += protowire.SizeTag(2) + protowire.SizeBytes(entrySize(e))
	}
	for f, v := range [...]int64{3: b.limit, 4: b.frac, 5: int64(b.refill), 6: b.gen} {
		if v != 0 {
			n += protowire.SizeTag(protowire.Number(f)) + protowire.SizeVarint(uint64(v))
		}
	}
	return n
}
