package tbqueue

import (
	"fmt"
	"math"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// encode builds a TBQueueMessage of the queues of keys (sorted) in m.
func (q *TBQueue) encode(keys []string, m map[string][]elem, full bool) []byte {
	msg := &peerv1.TBQueueMessage{Keys: make([]*peerv1.TBQueueKey, len(keys)), Full: full}
	for i, k := range keys {
		msg.Keys[i] = encodeKey(k, m[k])
	}
	b, err := proto.Marshal(msg)
	if err != nil {
		panic(fmt.Sprintf("%s: marshal: %v", Name, err)) // cannot fail for this message type
	}
	return b
}

func encodeKey(key string, qu []elem) *peerv1.TBQueueKey {
	pk := &peerv1.TBQueueKey{Key: key, Elements: make([]*peerv1.TBQueueElement, len(qu))}
	prev := time.Duration(0)
	for i := range qu {
		pk.Elements[i] = encodeElem(&qu[i], prev)
		prev = qu[i].birth
	}
	return pk
}

func encodeElem(e *elem, prev time.Duration) *peerv1.TBQueueElement {
	pe := &peerv1.TBQueueElement{BirthDeltaNs: int64(e.birth - prev), LifeNs: e.death.ns - int64(e.birth),
		DeathRem: e.death.rem, Origin: string(e.origin), Seq: e.seq}
	if e.tokens != 1 {
		pe.Tokens = e.tokens
	}
	return pe
}

// keySize is the exact size of encodeKey(key, qu) as one element of
// TBQueueMessage.keys: tag, length prefix and body.
func keySize(key string, qu []elem) int {
	n := protowire.SizeTag(1) + protowire.SizeBytes(len(key))
	prev := time.Duration(0)
	for i := range qu {
		e := &qu[i]
		es := 0
		varint := func(f protowire.Number, v int64) {
			if v != 0 {
				es += protowire.SizeTag(f) + protowire.SizeVarint(uint64(v))
			}
		}
		varint(1, int64(e.birth-prev))
		varint(2, e.death.ns-int64(e.birth))
		varint(3, e.death.rem)
		if e.tokens != 1 {
			varint(4, e.tokens)
		}
		if e.origin != "" {
			es += protowire.SizeTag(5) + protowire.SizeBytes(len(e.origin))
		}
		if e.seq != 0 {
			es += protowire.SizeTag(6) + protowire.SizeVarint(e.seq)
		}
		n += protowire.SizeTag(2) + protowire.SizeBytes(es)
		prev = e.birth
	}
	return protowire.SizeTag(1) + protowire.SizeBytes(n)
}

// decode parses and validates a message; nothing is changed on error.
// Without unique_ids, origin and seq are ignored (identity is the
// time-of-birth alone, as in the thesis).
func (q *TBQueue) decode(payload []byte) (keys []string, queues [][]elem, full bool, err error) {
	var m peerv1.TBQueueMessage
	if err := proto.Unmarshal(payload, &m); err != nil {
		return nil, nil, false, fmt.Errorf("does not decode: %w", err)
	}
	seen := make(map[string]bool, len(m.Keys))
	keys = make([]string, len(m.Keys))
	queues = make([][]elem, len(m.Keys))
	for i, pk := range m.Keys {
		switch {
		case pk.Key == "":
			return nil, nil, false, fmt.Errorf("key %d is empty", i)
		case seen[pk.Key]:
			return nil, nil, false, fmt.Errorf("key %q is repeated", pk.Key)
		}
		seen[pk.Key] = true
		qu, err := q.decodeKey(pk)
		if err != nil {
			return nil, nil, false, fmt.Errorf("key %q: %w", pk.Key, err)
		}
		keys[i], queues[i] = pk.Key, qu
	}
	return keys, queues, m.Full, nil
}

func (q *TBQueue) decodeKey(pk *peerv1.TBQueueKey) ([]elem, error) {
	qu := make([]elem, len(pk.Elements))
	prev := int64(0)
	for i, pe := range pk.Elements {
		switch {
		case pe.BirthDeltaNs < 0:
			return nil, fmt.Errorf("element %d: time-of-birth before the previous element's", i)
		case pe.BirthDeltaNs > math.MaxInt64-prev:
			return nil, fmt.Errorf("element %d: time-of-birth overflows", i)
		}
		birth := prev + pe.BirthDeltaNs
		switch {
		case pe.LifeNs < 0:
			return nil, fmt.Errorf("element %d: time-of-death before time-of-birth", i)
		case pe.LifeNs > math.MaxInt64-birth:
			return nil, fmt.Errorf("element %d: time-of-death overflows", i)
		case pe.DeathRem < 0 || (pe.DeathRem > 0 && uint64(pe.DeathRem) >= q.clock.tokens):
			return nil, fmt.Errorf("element %d: time-of-death fraction %d out of range", i, pe.DeathRem)
		case pe.Tokens < 0 || pe.Tokens > q.capacity:
			return nil, fmt.Errorf("element %d: %d tokens out of [1, burst %d]", i, pe.Tokens, q.capacity)
		}
		e := elem{birth: time.Duration(birth), death: stamp{ns: birth + pe.LifeNs, rem: pe.DeathRem}, tokens: max(pe.Tokens, 1)}
		if e.death.ns == math.MaxInt64 {
			e.death.rem = 0
		}
		if q.unique {
			e.origin, e.seq = strategy.NodeID(pe.Origin), pe.Seq
			if i > 0 && cmpID(&qu[i-1], &e) >= 0 {
				return nil, fmt.Errorf("element %d: not after element %d in identity order", i, i-1)
			}
		}
		qu[i] = e
		prev = birth
	}
	return qu, nil
}
