package gcounter

import (
	"bytes"
	"fmt"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"pgregory.net/rapid"

	"github.com/tokenmesh/tokenmesh/strategy"
)

// computeBucketSize is bucketSize without the cache.
func computeBucketSize(key string, b *bucketState) int {
	return protowire.SizeTag(1) + protowire.SizeBytes(bucketBodySize(key, b))
}

// inDelta reports whether key is in some neighbour's delta state (what
// bucketState.pending counts), from the delta states themselves.
func inDelta(g *GCounter, key string) bool {
	for _, keys := range g.delta {
		if _, ok := keys[key]; ok {
			return true
		}
	}
	return false
}

// stateBytesUncached is StateBytes computed from scratch, without the
// per-bucket size cache.
func stateBytesUncached(g *GCounter) int {
	n := 0
	for k, b := range g.state {
		n += computeBucketSize(k, b)
	}
	for _, keys := range g.delta {
		for k := range keys {
			if b, ok := g.state[k]; ok {
				n += computeBucketSize(k, b)
			}
		}
	}
	return n
}

// The cached StateBytes equals the uncached one, and every bucket's
// pending count is the number of delta states holding its key (sweep
// keeps a key while it is above 0), after any sequence of
// requests, merges, gossip rounds, sweeps and membership changes: every
// change of a bucket clears its cached size, and every delta state that
// gains, sends or drops a key counts it in the bucket's pending count.
func TestStateBytesCacheExact(t *testing.T) {
	tt := t
	rapid.Check(t, func(t *rapid.T) {
		members := []string{"a", "b", "c"}
		idle := rapid.SampledFrom([]string{"0s", "3s"}).Draw(t, "idle")
		nodes := make([]*GCounter, len(members))
		for i, m := range members {
			nodes[i] = newNode(tt, m, members, "idle="+idle, "catch_up=true")
		}
		now := time.Duration(0)
		var inflight []strategy.Message
		var from []strategy.NodeID
		steps := rapid.IntRange(1, 80).Draw(t, "steps")
		for s := 0; s < steps; s++ {
			now += time.Duration(rapid.IntRange(0, 700).Draw(t, "gapMs")) * time.Millisecond
			i := rapid.IntRange(0, len(nodes)-1).Draw(t, "node")
			g := nodes[i]
			var fx strategy.Effects
			switch rapid.IntRange(0, 4).Draw(t, "op") {
			case 4:
				// A membership change: neighbours leave (their delta
				// states go) and come back (catch-up sends full states).
				view := []strategy.NodeID{g.self}
				for _, m := range members {
					if m != string(g.self) && rapid.Bool().Draw(t, "member") {
						view = append(view, strategy.NodeID(m))
					}
				}
				g.SetMembers(now, view, &fx)
			case 0, 1:
				key := fmt.Sprintf("k%d", rapid.IntRange(0, 4).Draw(t, "key"))
				// An arrival before the bucket's refill timestamp (a late
				// request) changes the counter without a refill.
				arrival := max(0, now-time.Duration(rapid.IntRange(0, 1500).Draw(t, "lateMs"))*time.Millisecond)
				g.Request(now, strategy.Request{ID: uint64(s), Key: key, Tokens: int64(rapid.IntRange(1, 3).Draw(t, "tokens")), Arrival: arrival}, &fx)
			case 2:
				g.Tick(now, &fx)
			case 3:
				if len(inflight) > 0 {
					m, src := inflight[0], from[0]
					inflight, from = inflight[1:], from[1:]
					to := nodes[int(m.To[0]-'a')]
					_ = to.Receive(now, src, m.Payload, &fx)
				}
			}
			for _, m := range fx.Messages {
				inflight, from = append(inflight, m), append(from, g.self)
			}
			for _, n := range nodes {
				if got, want := n.StateBytes(), stateBytesUncached(n); got != want {
					t.Fatalf("step %d: %s StateBytes %d, uncached %d", s, n.self, got, want)
				}
				for k, b := range n.state {
					held := 0
					for _, keys := range n.delta {
						if _, ok := keys[k]; ok {
							held++
						}
					}
					if b.pending != held {
						t.Fatalf("step %d: %s key %s pending %d, in %d delta states", s, n.self, k, b.pending, held)
					}
				}
			}
		}
	})
}

// encode writes the bytes proto.Marshal writes (encodeProto), for random
// buckets: slots with and without incarnations, zero and large values,
// generations, full and delta messages.
func TestEncodeMatchesProto(t *testing.T) {
	tt := t
	rapid.Check(t, func(t *rapid.T) {
		g := newNode(tt, "a", []string{"a", "b"})
		nkeys := rapid.IntRange(0, 6).Draw(t, "keys")
		var keys []string
		for i := 0; i < nkeys; i++ {
			k := rapid.StringMatching(`[a-zé/]{1,20}`).Draw(t, "key")
			if _, dup := g.state[k]; dup {
				continue
			}
			b := &bucketState{}
			nodes := rapid.SliceOfNDistinct(rapid.StringMatching(`n[0-9]{0,3}`), 0, 5, func(s string) string { return s }).Draw(t, "nodes")
			slices.Sort(nodes)
			for _, n := range nodes {
				e := entry{node: strategy.NodeID(n), consumed: rapid.Int64Range(0, 1<<40).Draw(t, "consumed")}
				if rapid.Bool().Draw(t, "inc") {
					e.incarnation = rapid.Uint32().Draw(t, "incarnation")
				}
				b.counter = append(b.counter, e)
				b.consumed += e.consumed
			}
			b.limit = rapid.Int64Range(0, 1<<50).Draw(t, "limit")
			b.frac = rapid.Int64Range(0, 1<<30).Draw(t, "frac")
			b.refill = time.Duration(rapid.Int64Range(0, 1<<62).Draw(t, "refill"))
			b.gen = rapid.Int64Range(0, 1000).Draw(t, "gen")
			g.state[k] = b
			keys = append(keys, k)
		}
		slices.Sort(keys)
		full := rapid.Bool().Draw(t, "full")
		if got, want := g.encode(keys, full), g.encodeProto(keys, full); !bytes.Equal(got, want) {
			t.Fatalf("encode %x\nproto  %x", got, want)
		}
		n := 0
		for _, k := range keys {
			n += bucketSize(k, g.state[k])
		}
		if got := len(g.encodeProto(keys, false)); got != n {
			t.Fatalf("bucket sizes sum to %d, message is %d bytes", n, got)
		}
	})
}

// A key that is not valid UTF-8 takes the generated marshaller's path, as
// before: encode and encodeProto agree on it too (both panic).
func TestEncodeInvalidUTF8(t *testing.T) {
	g := newNode(t, "a", []string{"a", "b"})
	g.state["\xff"] = &bucketState{limit: 1}
	for _, f := range []func(){
		func() { g.encode([]string{"\xff"}, false) },
		func() { g.encodeProto([]string{"\xff"}, false) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Error("no panic on an invalid UTF-8 key")
				}
			}()
			f()
		}()
	}
}

// sameWire reports whether two decoded messages are equal field by field
// (nil and empty slices alike).
func sameWire(a, b wireMessage) bool {
	if a.Full != b.Full || len(a.Buckets) != len(b.Buckets) {
		return false
	}
	for i := range a.Buckets {
		x, y := a.Buckets[i], b.Buckets[i]
		if x.Key != y.Key || x.Limit != y.Limit || x.LimitTicks != y.LimitTicks || x.RefillNs != y.RefillNs ||
			x.Generation != y.Generation || !slices.Equal(x.Counter, y.Counter) {
			return false
		}
	}
	return true
}

// The protowire path of decodeMessage decodes what proto.Unmarshal
// decodes, for any input it accepts; on any other input decodeMessage
// answers as proto.Unmarshal does.
func FuzzDecodeMessage(f *testing.F) {
	g := newNode(f, "a", []string{"a", "b", "c"}, "catch_up=true")
	var fx strategy.Effects
	for i := 0; i < 12; i++ {
		at := time.Duration(i) * 50 * time.Millisecond
		g.Request(at, strategy.Request{ID: uint64(i), Key: fmt.Sprintf("k%d", i%4), Tokens: 1, Arrival: at}, &fx)
	}
	f.Add(g.encode(sortedKeys(g.state), false))
	f.Add(g.encode(sortedKeys(g.state), true))
	f.Add([]byte{})
	f.Add([]byte{0x0a, 0x03, 0x0a, 0x01, 'k', 0x58, 0x01})        // a bucket, then an unknown field 11
	f.Add([]byte{0x0a, 0x05, 0x12, 0x03, 0x0a, 0x01, 0xff})       // a slot whose node is not UTF-8
	f.Add([]byte{0x0a, 0x04, 0x18, 0x01, 0x18, 0x02, 0x10, 0x01}) // limit twice (the last wins), full
	f.Add(foldedPayload(f))                                       // a base slot and segments (fold.go)
	f.Fuzz(func(t *testing.T, payload []byte) {
		d := newNode(t, "b", []string{"a", "b", "c"})
		want, werr := decodeProto(payload)
		got, err := d.decodeMessage(payload)
		if (err != nil) != (werr != nil) {
			t.Fatalf("decodeMessage error %v, proto.Unmarshal error %v", err, werr)
		}
		if err == nil && !sameWire(got, want) {
			t.Fatalf("decodeMessage %+v\nproto.Unmarshal %+v", got, want)
		}
		if fast, ok := d.decodeFast(payload); ok && (werr != nil || !sameWire(fast, want)) {
			t.Fatalf("the protowire path accepted what proto.Unmarshal decodes otherwise (%v): %+v\n%+v", werr, fast, want)
		}
	})
}
