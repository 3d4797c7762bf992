package gcounter

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"pgregory.net/rapid"

	peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"
	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/internal/peerbound"
	"github.com/tokenmesh/tokenmesh/strategy/internal/strattest"
)

const testCapacity = 5

var testRate = bucket.Rate{Tokens: 1, Per: time.Second}

func newNode(t testing.TB, self string, members []string, params ...string) *GCounter {
	t.Helper()
	g, err := New(strattest.Config(t, self, members, testRate, testCapacity, params...))
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// genBucket draws a bucket that satisfies the invariant limit <= consumed + capacity.
func genBucket(t *rapid.T, label string) *bucketState {
	per := int64(testRate.Per)
	b := &bucketState{}
	for _, node := range []string{"a", "b", "c", "d"} {
		for inc := uint32(0); inc < 2; inc++ {
			if rapid.Bool().Draw(t, fmt.Sprintf("%s.has.%s.%d", label, node, inc)) {
				c := rapid.Int64Range(0, 20).Draw(t, fmt.Sprintf("%s.%s.%d", label, node, inc))
				b.counter = append(b.counter, entry{node: strategy.NodeID(node), incarnation: inc, consumed: c})
				b.consumed += c
			}
		}
	}
	b.limit = rapid.Int64Range(0, b.consumed+testCapacity).Draw(t, label+".limit")
	if b.limit < b.consumed+testCapacity {
		b.frac = rapid.SampledFrom([]int64{0, 1, per / 2, per - 1}).Draw(t, label+".frac")
	}
	b.refill = time.Duration(rapid.Int64Range(0, 3).Draw(t, label+".refill")) * time.Second
	b.gen = rapid.Int64Range(0, 2).Draw(t, label+".gen") * int64(time.Minute) // equal ones often
	return b
}

func merged(a, b *bucketState) *bucketState {
	c := a.clone()
	c.merge(b)
	return c
}

func TestMergeCommutative(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		a, b := genBucket(t, "a"), genBucket(t, "b")
		if ab, ba := merged(a, b), merged(b, a); !ab.equal(ba) {
			t.Fatalf("merge(a, b) = %+v, merge(b, a) = %+v", ab, ba)
		}
	})
}

func TestMergeAssociative(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		a, b, c := genBucket(t, "a"), genBucket(t, "b"), genBucket(t, "c")
		if l, r := merged(merged(a, b), c), merged(a, merged(b, c)); !l.equal(r) {
			t.Fatalf("(a.b).c = %+v, a.(b.c) = %+v", l, r)
		}
	})
}

func TestMergeIdempotent(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		a, b := genBucket(t, "a"), genBucket(t, "b")
		if aa := merged(a, a); !aa.equal(a) {
			t.Fatalf("merge(a, a) = %+v, a = %+v", aa, a)
		}
		ab := merged(a, b)
		if abb := merged(ab, b); !abb.equal(ab) {
			t.Fatalf("merge(merge(a, b), b) = %+v, merge(a, b) = %+v", abb, ab)
		}
		// merge reports a change exactly when the state changed.
		c := a.clone()
		if changed := c.merge(b); changed == c.equal(a) {
			t.Fatalf("merge reported changed=%v; before %+v, after %+v", changed, a, c)
		}
	})
}

// The merge keeps the invariant limit <= consumed + capacity.
func TestMergeKeepsInvariant(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		m := merged(genBucket(t, "a"), genBucket(t, "b"))
		if m.limit > m.consumed+testCapacity || (m.limit == m.consumed+testCapacity && m.frac != 0) {
			t.Fatalf("merged limit %d+%d ticks above consumed %d + capacity", m.limit, m.frac, m.consumed)
		}
	})
}

// thesisMerge is listing 3.4 as printed: the local limit and timestamp are
// kept unless the other limit is strictly larger.
func thesisMerge(local, other *bucketState) *bucketState {
	c := local.clone()
	lim := *c
	c.merge(other)                                              // the G-Counter part is the same
	c.limit, c.frac, c.refill = lim.limit, lim.frac, lim.refill // undo our tie rule...
	if other.limit > lim.limit || (other.limit == lim.limit && other.frac > lim.frac) {
		c.limit, c.frac, c.refill = other.limit, other.frac, other.refill // ...and apply the listing's
	}
	return c
}

// The thesis' merge (listing 3.4) is not commutative: with equal limits the
// local refill timestamp is kept, and the two results then refill to
// different limits and decide differently. Ours breaks the tie by the later
// timestamp.
func TestThesisMergeNotCommutative(t *testing.T) {
	g := newNode(t, "a", []string{"a", "b"})
	counter := []entry{{node: "a", consumed: 5}}
	a := &bucketState{counter: counter, consumed: 5, limit: 5, refill: 0}
	b := &bucketState{counter: slices.Clone(counter), consumed: 5, limit: 5, refill: 2 * time.Second}
	ab, ba := thesisMerge(a, b), thesisMerge(b, a)
	if ab.equal(ba) {
		t.Fatal("the thesis' merge was commutative on a tie of limits")
	}
	g.refill(ab, 3*time.Second)
	g.refill(ba, 3*time.Second)
	if ab.limit == ba.limit {
		t.Fatalf("thesis: both orders refill to limit %d", ab.limit)
	}
	t.Logf("thesis: merge(a,b) refills to %d, merge(b,a) to %d tokens at 3s", ab.limit-ab.consumed, ba.limit-ba.consumed)
	if m1, m2 := merged(a, b), merged(b, a); !m1.equal(m2) || m1.refill != 2*time.Second {
		t.Fatalf("ours: %+v vs %+v", m1, m2)
	}
}

// Listing 3.1 adds min(delta, capacity) per refill, so an idle bucket ends
// up holding more than its capacity; ours never does.
func TestThesisRefillExceedsCapacity(t *testing.T) {
	thesisRefill := func(b *bucketState, now time.Duration) {
		delta := int64((now - b.refill) / testRate.Per * time.Duration(testRate.Tokens))
		if delta > 0 {
			b.limit += min(delta, testCapacity)
			b.refill = now
		}
	}
	g := newNode(t, "a", []string{"a"})
	b := &bucketState{limit: testCapacity} // a new key: full
	thesisRefill(b, 10*time.Second)
	if b.limit-b.consumed <= testCapacity {
		t.Fatalf("thesis refill holds %d tokens", b.limit-b.consumed)
	}
	ours := &bucketState{limit: testCapacity}
	g.refill(ours, 10*time.Second)
	if ours.limit-ours.consumed != testCapacity || ours.frac != 0 {
		t.Fatalf("ours holds %d tokens + %d ticks", ours.limit-ours.consumed, ours.frac)
	}
}

// The refill is exact: a rate of 1 token per 3 s refills exactly one token
// in three steps of 1 s, and none in 2,999,999,999 ns.
func TestRefillExact(t *testing.T) {
	g := newNode(t, "a", []string{"a"})
	g.rate = bucket.Rate{Tokens: 1, Per: 3 * time.Second}
	g.per = int64(g.rate.Per)
	b := &bucketState{consumed: 5, counter: []entry{{node: "a", consumed: 5}}, limit: 5}
	g.refill(b, 3*time.Second-1)
	if b.limit != 5 {
		t.Fatalf("limit %d after 1 ns short of a token", b.limit)
	}
	b = &bucketState{consumed: 5, counter: []entry{{node: "a", consumed: 5}}, limit: 5}
	for s := 1; s <= 3; s++ {
		g.refill(b, time.Duration(s)*time.Second)
	}
	if b.limit != 6 || b.frac != 0 {
		t.Fatalf("limit %d + %d ticks after 3 s, want 6", b.limit, b.frac)
	}
}

func fullState(g *GCounter) []byte { return g.encode(g.allKeys(), true) }

// StateBytes equals proto.Size of the full state plus each delta message.
func TestStateBytesExact(t *testing.T) {
	members := []string{"n0", "n1", "n2"}
	g := newNode(t, "n0", members, "catch_up=true")
	other := newNode(t, "n1", members)
	var fx strategy.Effects
	for i := 0; i < 40; i++ {
		at := time.Duration(i) * 37 * time.Millisecond
		key := fmt.Sprintf("k%d", i%7)
		g.Request(at, strategy.Request{ID: uint64(i), Key: key, Tokens: 1, Arrival: at}, &fx)
		other.Request(at, strategy.Request{ID: uint64(i), Key: key, Tokens: 1 + int64(i%2), Arrival: at}, &fx)
	}
	fx.Reset()
	other.Tick(time.Second, &fx)
	other.Tick(2*time.Second, &fx)
	for _, m := range fx.Messages {
		if err := g.Receive(2*time.Second, "n1", m.Payload, &strategy.Effects{}); err != nil {
			t.Fatal(err)
		}
	}
	want := proto.Size(mustDecode(t, fullState(g))) - 2 // without the full flag
	for _, nb := range g.neighbours {
		if keys := g.delta[nb]; len(keys) > 0 {
			want += len(g.encode(sortedKeys(keys), false))
		}
	}
	if got := g.StateBytes(); got != want {
		t.Fatalf("StateBytes %d, encoded %d", got, want)
	}
}

func mustDecode(t testing.TB, b []byte) *peerv1.GCounterMessage {
	var m peerv1.GCounterMessage
	if err := proto.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return &m
}

// A node that sees the same requests as a central bucket.Bucket decides the
// same, for random token counts and arrival gaps (one node, no peers).
func TestSingleNodeIsTokenBucket(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		rate := bucket.Rate{Tokens: rapid.Int64Range(1, 7).Draw(t, "tokens"), Per: time.Duration(rapid.Int64Range(1, 5000).Draw(t, "perMs")) * time.Millisecond}
		burst := rapid.Int64Range(0, 9).Draw(t, "burst")
		g, err := New(strategy.Config{Self: "a", Members: []strategy.NodeID{"a"}, Rate: rate, Burst: burst, Rand: rand.New(rand.NewPCG(1, 1))})
		if err != nil {
			t.Fatal(err)
		}
		var ref bucket.Bucket
		var fx strategy.Effects
		at := time.Duration(0)
		for i := 0; i < 60; i++ {
			at += time.Duration(rapid.Int64Range(0, 2000).Draw(t, "gapMs")) * time.Millisecond
			n := rapid.Int64Range(-1, burst+1).Draw(t, "n")
			if i == 0 {
				ref = bucket.MustNew(rate, burst, at)
			}
			want := ref.AllowN(at, n)
			d, _ := g.Request(at, strategy.Request{ID: uint64(i), Key: "k", Tokens: n, Arrival: at}, &fx)
			if d.Allowed != want {
				t.Fatalf("request %d (%d tokens at %v): gcounter %v, bucket %v", i, n, at, d.Allowed, want)
			}
		}
	})
}

// Garbage and invalid payloads are refused and change nothing.
func TestReceiveRejectsInvalid(t *testing.T) {
	g := newNode(t, "a", []string{"a", "b", "c"})
	var fx strategy.Effects
	g.Request(0, strategy.Request{ID: 1, Key: "k", Tokens: 2}, &fx)
	mk := func(b *peerv1.GCounterBucket) []byte {
		out, _ := proto.Marshal(&peerv1.GCounterMessage{Buckets: []*peerv1.GCounterBucket{
			{Key: "ok", Counter: []*peerv1.GCounterEntry{{Node: "b", Consumed: 1}}, Limit: 3}, b}})
		return out
	}
	bad := map[string][]byte{
		"garbage":       {0xff, 0xff, 0xff},
		"truncated":     mk(&peerv1.GCounterBucket{Key: "k"})[:5],
		"empty key":     mk(&peerv1.GCounterBucket{Key: ""}),
		"empty node":    mk(&peerv1.GCounterBucket{Key: "k", Counter: []*peerv1.GCounterEntry{{Node: "", Consumed: 1}}}),
		"negative":      mk(&peerv1.GCounterBucket{Key: "k", Counter: []*peerv1.GCounterEntry{{Node: "b", Consumed: -1}}}),
		"unsorted":      mk(&peerv1.GCounterBucket{Key: "k", Counter: []*peerv1.GCounterEntry{{Node: "c", Consumed: 1}, {Node: "b", Consumed: 1}}}),
		"repeated":      mk(&peerv1.GCounterBucket{Key: "k", Counter: []*peerv1.GCounterEntry{{Node: "b", Consumed: 1}, {Node: "b", Consumed: 2}}}),
		"huge":          mk(&peerv1.GCounterBucket{Key: "k", Counter: []*peerv1.GCounterEntry{{Node: "b", Consumed: maxConsumed}, {Node: "c", Consumed: 1}}}),
		"neg limit":     mk(&peerv1.GCounterBucket{Key: "k", Limit: -1}),
		"over capacity": mk(&peerv1.GCounterBucket{Key: "k", Counter: []*peerv1.GCounterEntry{{Node: "b", Consumed: 1}}, Limit: 1 + testCapacity + 1}),
		"frac at cap":   mk(&peerv1.GCounterBucket{Key: "k", Limit: testCapacity, LimitTicks: 1}),
		"frac too big":  mk(&peerv1.GCounterBucket{Key: "k", Limit: 1, LimitTicks: int64(time.Second)}),
		"neg frac":      mk(&peerv1.GCounterBucket{Key: "k", Limit: 1, LimitTicks: -1}),
		"neg refill":    mk(&peerv1.GCounterBucket{Key: "k", RefillNs: -1}),
		"neg gen":       mk(&peerv1.GCounterBucket{Key: "k", Generation: -1}),
	}
	before, sb := fullState(g), g.StateBytes()
	for name, payload := range bad {
		fx.Reset()
		if err := g.Receive(time.Second, "b", payload, &fx); err == nil {
			t.Errorf("%s: accepted", name)
		}
		if after := fullState(g); !slices.Equal(before, after) || g.StateBytes() != sb || len(fx.Messages) != 0 {
			t.Fatalf("%s: state changed", name)
		}
	}
}

func FuzzReceive(f *testing.F) {
	seed := newNode(f, "b", []string{"a", "b"})
	var fx strategy.Effects
	for i := 0; i < 5; i++ {
		seed.Request(time.Duration(i)*time.Millisecond, strategy.Request{ID: uint64(i), Key: fmt.Sprintf("k%d", i%2), Tokens: 1}, &fx)
	}
	f.Add(seed.encode(seed.allKeys(), false))
	f.Add(seed.encode(seed.allKeys(), true))
	f.Add([]byte{})
	f.Add([]byte{0x0a, 0x03, 0x0a, 0x01, 0x6b})
	f.Add(foldedPayload(f))
	f.Fuzz(func(t *testing.T, payload []byte) {
		// With fold off (as a build from before fold reads it) and on.
		fuzzReceive(t, payload)
		fuzzReceive(t, payload, "fold=1m")
	})
}

func fuzzReceive(t *testing.T, payload []byte, params ...string) {
	{
		g := newNode(t, "a", []string{"a", "b", "c"}, append([]string{"catch_up=true"}, params...)...)
		var fx strategy.Effects
		g.Request(0, strategy.Request{ID: 1, Key: "k0", Tokens: 1}, &fx)
		before, sb := fullState(g), g.StateBytes()
		if err := g.Receive(fuzzNow, "b", payload, &fx); err != nil {
			if !slices.Equal(before, fullState(g)) || g.StateBytes() != sb {
				t.Fatal("a refused payload changed the state")
			}
			return
		}
		// Accepted: the invariant holds and requests still work.
		for k, b := range g.state {
			if b.limit > b.consumed+testCapacity || b.consumed < 0 {
				t.Fatalf("key %q: limit %d, consumed %d", k, b.limit, b.consumed)
			}
		}
		g.Request(fuzzNow+time.Second, strategy.Request{ID: 2, Key: "k0", Tokens: 1, Arrival: fuzzNow + time.Second}, &fx)
		g.Tick(fuzzNow+time.Second, &fx)
	}
}

// fuzzNow is when FuzzReceive's node receives the payload: after the
// periods of foldedPayload.
const fuzzNow = 10 * time.Minute

// foldedPayload is a delta state of a node with fold=1m that admitted in
// periods 1 to 4 and folded periods 1 and 2: a base slot of epoch 2 and
// the segments of periods 3 and 4.
func foldedPayload(t testing.TB) []byte {
	g := newNode(t, "b", []string{"a", "b"}, "fold=1m", "catch_up=true")
	var fx strategy.Effects
	for p := 1; p <= 4; p++ {
		at := time.Duration(p)*time.Minute + time.Second
		for _, k := range []string{"k0", "k1"} {
			g.Request(at, strategy.Request{Key: k, Tokens: 2, Arrival: at}, &fx)
		}
	}
	if g.foldAll(4*time.Minute+time.Second) != 2 {
		t.Fatal("nothing folded")
	}
	return g.encode(g.allKeys(), false)
}

// benchDelta builds a delta message of keys buckets with nodes slots each.
func benchDelta(keys, nodes int) []byte {
	m := &peerv1.GCounterMessage{}
	for k := 0; k < keys; k++ {
		b := &peerv1.GCounterBucket{Key: fmt.Sprintf("user%05d", k)}
		for n := 0; n < nodes; n++ {
			b.Counter = append(b.Counter, &peerv1.GCounterEntry{Node: fmt.Sprintf("n%04d", n), Consumed: int64(n%7 + 1)})
			b.Limit += int64(n%7 + 1)
		}
		b.RefillNs = int64(time.Second)
		m.Buckets = append(m.Buckets, b)
	}
	out, _ := proto.Marshal(m)
	return out
}

// BenchmarkMergeDelta receives (decodes, validates and merges) a delta of
// 1,000 keys with 3 G-Counter slots each, and of one key with 1,000 slots,
// into a node that already holds half of the slots.
func BenchmarkMergeDelta(b *testing.B) {
	for _, c := range []struct {
		name        string
		keys, nodes int
	}{{"keys=1000", 1000, 3}, {"nodes=1000", 1, 1000}} {
		b.Run(c.name, func(b *testing.B) {
			payload := benchDelta(c.keys, c.nodes)
			half := benchDelta(c.keys, c.nodes/2)
			b.SetBytes(int64(len(payload)))
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				g := newNode(b, "a", []string{"a", "b", "c"})
				if err := g.Receive(0, "c", half, &strategy.Effects{}); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				if err := g.Receive(0, "b", payload, &strategy.Effects{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkIdleKeyBytes reports the state one idle key costs a node that
// admitted one request for it, in a 30-node cluster where every node has
// admitted some (30 G-Counter slots, node names "n0".."n29"), once its
// delta states are sent, while it is held: keys created in the first idle
// period have generation 0 (no bytes); a later generation adds its field,
// about 10 bytes. Once a key has been idle (unchanged) and full for the idle
// parameter (default 10 minutes), the next sweep drops it and it costs
// nothing (TestIdleKeysExpire); with idle=0 it is kept forever.
func BenchmarkIdleKeyBytes(b *testing.B) {
	var members []string
	for i := 0; i < 30; i++ {
		members = append(members, fmt.Sprintf("n%d", i))
	}
	const keys = 1000
	var perKey, perKeyOne, perKeyExpired float64
	for i := 0; i < b.N; i++ {
		g := newNode(b, "n0", members)
		var fx strategy.Effects
		for k := 0; k < keys; k++ {
			g.Request(0, strategy.Request{ID: uint64(k), Key: fmt.Sprintf("user%05d", k), Tokens: 1}, &fx)
		}
		for _, nb := range g.neighbours {
			g.dropPending(g.delta[nb]) // as gossipOnce does when it sends them
			clear(g.delta[nb])
		}
		perKeyOne = float64(g.StateBytes()) / keys
		for k := 0; k < keys; k++ {
			bs := g.state[fmt.Sprintf("user%05d", k)]
			for _, m := range members[1:] {
				bs.add(entry{node: strategy.NodeID(m), consumed: 1})
			}
			bs.limit = bs.consumed
		}
		perKey = float64(g.StateBytes()) / keys
		g.sweep(DefaultIdle + time.Minute)
		perKeyExpired = float64(g.StateBytes()) / keys
	}
	b.ReportMetric(perKeyOne, "bytes/idle-key(1-slot)")
	b.ReportMetric(perKey, "bytes/idle-key(30-slots)")
	b.ReportMetric(perKeyExpired, "bytes/idle-key(after-idle)")
}

// A member's bucket claiming more than the rule allows since the key's
// generation began (the forged "2^50 tokens consumed" frame that locked a
// key for ages), or times from the future, is refused and changes nothing:
// the next request is decided as before. (A limit has no time bound of its
// own since forgive: it is held to consumed + capacity by checkLimit.)
func TestReceiveRefusesOutOfBounds(t *testing.T) {
	for _, params := range [][]string{{"idle=0"}, {"idle=1m"}} {
		g := newNode(t, "a", []string{"a", "b", "c"}, params...)
		var fx strategy.Effects
		now := 5 * time.Minute
		g.Request(now, strategy.Request{ID: 1, Key: "k", Tokens: 1, Arrival: now}, &fx)
		gen := g.state["k"].gen
		bound := peerbound.Tokens(testRate, testCapacity, time.Duration(gen)*g.idle, now)
		one := func(b *peerv1.GCounterBucket) []byte {
			out, _ := proto.Marshal(&peerv1.GCounterMessage{Buckets: []*peerv1.GCounterBucket{b}})
			return out
		}
		slot := func(c int64) []*peerv1.GCounterEntry { return []*peerv1.GCounterEntry{{Node: "b", Consumed: c}} }
		bad := map[string][]byte{
			"2^50 consumed":   one(&peerv1.GCounterBucket{Key: "k", Generation: gen, Counter: slot(1 << 50), Limit: 1 << 50}),
			"consumed > rule": one(&peerv1.GCounterBucket{Key: "k", Generation: gen, Counter: slot(bound + 1), RefillNs: int64(now)}),
			"future refill":   one(&peerv1.GCounterBucket{Key: "k", Generation: gen, RefillNs: int64(now + peerbound.ClockSkew + time.Second)}),
			"future gen":      one(&peerv1.GCounterBucket{Key: "k", Generation: gen + 1000}),
			// fold is off: a slot named as a fold base is a slot like any
			// other, bounded (with fold on, by every member's slots).
			"fold base > rule": one(&peerv1.GCounterBucket{Key: "k", Generation: gen, RefillNs: int64(now),
				Counter: []*peerv1.GCounterEntry{{Node: string(foldName), Consumed: bound + 1}}}),
		}
		before, sb := fullState(g), g.StateBytes()
		rem, _ := g.Remaining(now, "k")
		for name, payload := range bad {
			fx.Reset()
			if err := g.Receive(now, "b", payload, &fx); err == nil {
				t.Errorf("%v %s: accepted", params, name)
			}
			if after := fullState(g); !slices.Equal(before, after) || g.StateBytes() != sb || len(fx.Messages) != 0 {
				t.Fatalf("%v %s: state changed", params, name)
			}
			if r, _ := g.Remaining(now, "k"); r != rem {
				t.Fatalf("%v %s: remaining %d, was %d", params, name, r, rem)
			}
		}
		// At the bound itself, a member's count is accepted (a real
		// bucket can get there).
		if err := g.Receive(now, "b", one(&peerv1.GCounterBucket{Key: "k", Generation: gen, Counter: slot(bound - testCapacity), Limit: bound - testCapacity, RefillNs: int64(now)}), &fx); err != nil {
			t.Errorf("%v: a bucket within the bound was refused: %v", params, err)
		}
		if d, _ := g.Request(now, strategy.Request{ID: 2, Key: "k", Tokens: 1, Arrival: now}, &fx); d.Allowed {
			t.Errorf("%v: allowed after a member reported the limit used up", params)
		}
	}
}

// The bounds never refuse a real member: in random runs of three nodes
// (random requests and ticks, messages delivered after random delays up
// to 2 s, expiry on or off, times up to 10 minutes so that keys expire
// and come back in new generations), every message is accepted. And the
// same message with one slot's count raised above the bound is refused
// without a change.
func TestBoundsNeverRefuseRealMembers(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		members := []string{"a", "b", "c"}
		idle := rapid.SampledFrom([]string{"idle=0", "idle=1m"}).Draw(rt, "idle")
		nodes := map[strategy.NodeID]*GCounter{}
		for _, m := range members {
			nodes[strategy.NodeID(m)] = newNode(t, m, members, idle)
			nodes[strategy.NodeID(m)].Start(0, &strategy.Effects{})
		}
		type msg struct {
			at       time.Duration
			from, to strategy.NodeID
			payload  []byte
		}
		var inflight []msg
		now := time.Duration(0)
		var fx strategy.Effects
		send := func(from strategy.NodeID) {
			for _, m := range fx.Messages {
				delay := time.Duration(rapid.Int64Range(0, int64(2*time.Second)).Draw(rt, "delay"))
				inflight = append(inflight, msg{now + delay, from, m.To, m.Payload})
			}
			fx.Reset()
		}
		for i := range rapid.IntRange(1, 300).Draw(rt, "steps") {
			now += time.Duration(rapid.Int64Range(0, int64(5*time.Second)).Draw(rt, "dt"))
			n := strategy.NodeID(rapid.SampledFrom(members).Draw(rt, "node"))
			if rapid.Bool().Draw(rt, "request") {
				key := rapid.SampledFrom([]string{"k1", "k2", "k3"}).Draw(rt, "key")
				nodes[n].Request(now, strategy.Request{ID: uint64(i), Key: key, Tokens: rapid.Int64Range(1, testCapacity).Draw(rt, "tokens"), Arrival: now}, &fx)
			} else {
				nodes[n].Tick(now, &fx)
			}
			send(n)
			var keep []msg
			for _, m := range inflight {
				if m.at > now {
					keep = append(keep, m)
					continue
				}
				to := nodes[m.to]
				if err := to.Receive(now, m.from, m.payload, &fx); err != nil {
					rt.Fatalf("%s refused a real message from %s at %v: %v", m.to, m.from, now, err)
				}
				send(m.to)
				// The same message with a slot above the bound.
				var pm peerv1.GCounterMessage
				if proto.Unmarshal(m.payload, &pm) != nil || len(pm.Buckets) == 0 || len(pm.Buckets[0].Counter) == 0 {
					continue
				}
				b := pm.Buckets[0]
				b.Counter[0].Consumed = peerbound.Tokens(testRate, testCapacity, time.Duration(b.Generation)*to.idle, now) + 1
				bad, _ := proto.Marshal(&pm)
				before := fullState(to)
				if err := to.Receive(now, m.from, bad, &fx); err == nil {
					rt.Fatalf("a slot above the bound was accepted")
				}
				if !slices.Equal(before, fullState(to)) || len(fx.Messages) != 0 {
					rt.Fatalf("a refused message changed the state")
				}
			}
			inflight = keep
		}
	})
}

// With catch_up, a newcomer is sent the full state by its buddy, which
// counts itself even when its view leaves it out (strattest.CatchUpBuddy).
func TestCatchUpBuddyCountsSelf(t *testing.T) {
	strattest.CatchUpBuddy(t, func(self string, members []string, params ...string) strategy.Strategy {
		return newNode(t, self, members, params...)
	})
}
