package tbqueue

import (
	"fmt"
	"maps"
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

func newNode(t testing.TB, self string, members []string, params ...string) *TBQueue {
	t.Helper()
	q, err := New(strattest.Config(t, self, members, testRate, testCapacity, params...))
	if err != nil {
		t.Fatal(err)
	}
	return q
}

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

// genDeltas draws k delta states over one universe of elements with unique
// identities: each delta is a sorted subset, and each copy of an element
// carries a time-of-death of its own and its tokens (a version: coalesce
// grows an element, so a copy may hold fewer tokens than another), the
// time-of-death at least its time-of-birth plus tokens/rate.
func genDeltas(t *rapid.T, c clock) [][]elem {
	var universe []elem
	n := rapid.IntRange(1, 12).Draw(t, "elements")
	for i := 0; i < n; i++ {
		e := elem{
			birth:  ms(rapid.IntRange(0, 8).Draw(t, "birth")),
			origin: strategy.NodeID(rapid.SampledFrom([]string{"a", "b", "c"}).Draw(t, "origin")),
			seq:    uint64(i + 1),
			tokens: int64(rapid.IntRange(1, 3).Draw(t, "tokens")),
		}
		universe = append(universe, e)
	}
	slices.SortFunc(universe, func(a, b elem) int { return cmpID(&a, &b) })
	k := rapid.IntRange(1, 4).Draw(t, "deltas")
	out := make([][]elem, k)
	for d := range out {
		for _, e := range universe {
			if !rapid.Bool().Draw(t, "in") {
				continue
			}
			e.tokens = int64(rapid.IntRange(1, int(e.tokens)).Draw(t, "version"))
			e.death = c.after(stamp{ns: int64(e.birth)}, e.tokens)
			e.death.ns += int64(ms(rapid.IntRange(0, 3000).Draw(t, "extra")))
			out[d] = append(out[d], e)
		}
	}
	return out
}

// With unique_ids, merging delta states into the local state gives the
// same queue (identities and times-of-death) whatever the delivery order,
// and delivering any of them again changes nothing.
func TestMergeOrderInsensitiveAndIdempotent(t *testing.T) {
	c := newClock(bucket.Rate{Tokens: 2, Per: 3 * time.Second}) // 1.5 s per token: fractions
	rapid.Check(t, func(t *rapid.T) {
		deltas := genDeltas(t, c)
		order := rapid.Permutation(deltas).Draw(t, "order")
		var want, got []elem
		for _, d := range deltas {
			want = c.merge(want, d, true, false).queue
		}
		for _, d := range order {
			got = c.merge(got, d, true, false).queue
		}
		if !slices.Equal(got, want) {
			t.Fatalf("order changed the result:\n%v\n%v", want, got)
		}
		again := rapid.SampledFrom(deltas).Draw(t, "again")
		res := c.merge(got, again, true, true)
		if !slices.Equal(res.queue, got) || len(res.updates) != 0 {
			t.Fatalf("delivering a delta again changed the state: %v -> %v (updates %v)", got, res.queue, res.updates)
		}
		if self := c.merge(got, got, true, true); !slices.Equal(self.queue, got) {
			t.Fatalf("merge(x, x) != x")
		}
	})
}

// The merged queue has strictly increasing times-of-death spaced by at
// least tokens/rate (listing 4.3), so refilling from the head is exact.
func TestMergeChainsTimesOfDeath(t *testing.T) {
	c := newClock(testRate)
	rapid.Check(t, func(t *rapid.T) {
		var q []elem
		for _, d := range genDeltas(t, c) {
			q = c.merge(q, d, true, false).queue
		}
		for i := 1; i < len(q); i++ {
			if cmpStamp(q[i].death, c.after(q[i-1].death, q[i].tokens)) < 0 {
				t.Fatalf("element %d dies at %v, before %v + %d/rate", i, q[i].death, q[i-1].death, q[i].tokens)
			}
		}
	})
}

// The thesis' merge of updates into a delta state (into_local_state false,
// listing 4.2; here delta_duplicates) is not idempotent: an element merged
// twice is queued twice, and the neighbour that receives both counts one
// request as two. Our default collapses equal elements pairwise in delta
// states too, as the local merge does; unique_ids collapses by identity.
func TestThesisDeltaMergeNotIdempotent(t *testing.T) {
	c := newClock(testRate)
	e := elem{birth: ms(5), death: stamp{ns: int64(ms(1005))}, tokens: 1}
	if got := c.merge([]elem{e}, []elem{e}, false, false).queue; len(got) != 2 {
		t.Fatalf("thesis delta merge of an element with itself: %v", got)
	}
	if got := c.merge([]elem{e}, []elem{e}, true, false).queue; len(got) != 1 {
		t.Fatalf("collapsing merge of an element with itself: %v", got)
	}
	// The same through the nodes: D admits x at 3 ms, A admits e at 5 ms.
	// B learns e from A, then from D x and e with a time-of-death pushed
	// back by x: B's delta state for C then holds e twice, and C counts
	// three tokens for two requests.
	for _, c := range []struct {
		params []string
		want   int64
	}{{[]string{"delta_duplicates=true"}, 3}, {nil, 2}, {[]string{"unique_ids=true"}, 2}} {
		members := []string{"a", "b", "c", "d"}
		a, b, cc, d := newNode(t, "a", members, c.params...), newNode(t, "b", members, c.params...), newNode(t, "c", members, c.params...), newNode(t, "d", members, c.params...)
		var fx strategy.Effects
		d.Request(ms(3), strategy.Request{ID: 1, Key: "k", Tokens: 1, Arrival: ms(3)}, &fx)
		a.Request(ms(5), strategy.Request{ID: 2, Key: "k", Tokens: 1, Arrival: ms(5)}, &fx)
		if err := b.Receive(ms(10), "a", a.encode([]string{"k"}, a.delta["b"], false), &fx); err != nil {
			t.Fatal(err)
		}
		if err := d.Receive(ms(10), "a", a.encode([]string{"k"}, a.delta["d"], false), &fx); err != nil {
			t.Fatal(err)
		}
		if err := b.Receive(ms(20), "d", d.encode([]string{"k"}, d.delta["b"], false), &fx); err != nil {
			t.Fatal(err)
		}
		if err := cc.Receive(ms(30), "b", b.encode([]string{"k"}, b.delta["c"], false), &fx); err != nil {
			t.Fatal(err)
		}
		got := cc.clock.tokensIn(cc.local["k"].q, ms(30))
		t.Logf("%v: C counts %d tokens for 2 requests", c.params, got)
		if got != c.want {
			t.Fatalf("%v: C counts %d tokens for 2 requests, want %d", c.params, got, c.want)
		}
	}
}

// §4.2.2 scenario 2: two nodes admit a request of one key at the same
// instant; in the thesis the two elements are one after merging. With
// unique_ids both count.
func TestScenario2SameBirth(t *testing.T) {
	for _, unique := range []bool{false, true} {
		p := fmt.Sprintf("unique_ids=%v", unique)
		a, b := newNode(t, "a", []string{"a", "b"}, p), newNode(t, "b", []string{"a", "b"}, p)
		var fx strategy.Effects
		a.Request(ms(7), strategy.Request{ID: 1, Key: "k", Tokens: 1, Arrival: ms(7)}, &fx)
		b.Request(ms(7), strategy.Request{ID: 2, Key: "k", Tokens: 1, Arrival: ms(7)}, &fx)
		if err := b.Receive(ms(8), "a", a.encode([]string{"k"}, a.delta["b"], false), &fx); err != nil {
			t.Fatal(err)
		}
		got := b.clock.tokensIn(b.local["k"].q, ms(8))
		if want := map[bool]int64{false: 1, true: 2}[unique]; got != want {
			t.Fatalf("unique_ids=%v: %d tokens for 2 requests, want %d", unique, got, want)
		}
	}
}

// Requests a node admits for one key at one instant (timestamps of 1 s, or
// batches) have one time-of-birth. In the thesis' identity each is its own
// element and a merge pairs equal births one to one in order (listing 4.2
// lines 7-14); once a node has refilled the first of them, a copy that
// still holds it pairs off by one: the copy's first pairs with the
// node's second, and its last has no partner, is added again and chained
// 1/rate after the tail (listing 4.3). Every round of gossip that brings
// back an older copy keeps the group alive and pushes it back again. Here
// 3 requests at 0 s (gone from a central bucket at 3 s) still hold 3
// tokens at 4.6 s with coalesce=false; with coalesce they are one element
// of 3 tokens and every node counts at most what central does.
func TestSameInstantDiesOnTime(t *testing.T) {
	for _, c := range []struct {
		params   []string
		inflated bool
	}{{nil, false}, {[]string{"unique_ids=true"}, false}, {[]string{"unique_ids=true", "coalesce=false"}, false}, {[]string{"coalesce=false"}, true}} {
		members := []string{"a", "b", "c"}
		a, b, cc := newNode(t, "a", members, c.params...), newNode(t, "b", members, c.params...), newNode(t, "c", members, c.params...)
		var fx strategy.Effects
		for i := 0; i < 3; i++ {
			if d, _ := a.Request(0, strategy.Request{ID: uint64(i), Key: "k", Tokens: 1}, &fx); !d.Allowed {
				t.Fatalf("%v: request %d rejected", c.params, i)
			}
		}
		worst := int64(0) // most tokens a node counts beyond central
		send := func(now int, from, to *TBQueue) {
			t.Helper()
			if err := to.Receive(ms(now), from.self, from.encode([]string{"k"}, from.delta[to.self], false), &fx); err != nil {
				t.Fatal(err)
			}
			from.setDelta(to.self, "k", nil)
			central := max(0, 3-int64(now/1000)) // consumed and not yet refilled
			if got := to.clock.tokensIn(to.local["k"].q, ms(now)); got-central > worst {
				worst = got - central
			}
		}
		send(300, a, b)
		send(1500, b, cc) // b's copy, sent after its first element died
		send(1800, cc, a)
		for r := 0; r < 3; r++ {
			now := 2000 + 1000*r
			send(now, a, b)
			send(now+300, b, cc)
			send(now+600, cc, a)
		}
		t.Logf("%v: at most %d tokens beyond central", c.params, worst)
		if (worst > 0) != c.inflated {
			t.Fatalf("%v: a node counts up to %d tokens beyond central", c.params, worst)
		}
	}
}

// A node's requests at one instant grow one element: its tokens and its
// time-of-death; the neighbours' delta states hold the grown version once.
func TestCoalesceSameInstant(t *testing.T) {
	a := newNode(t, "a", []string{"a", "b"})
	var fx strategy.Effects
	for i := 0; i < 3; i++ {
		a.Request(ms(7), strategy.Request{ID: uint64(i), Key: "k", Tokens: 1, Arrival: ms(7)}, &fx)
	}
	a.Request(ms(8), strategy.Request{ID: 3, Key: "k", Tokens: 2, Arrival: ms(8)}, &fx)
	want := []elem{{birth: ms(7), death: stamp{ns: int64(ms(3007))}, tokens: 3}, {birth: ms(8), death: stamp{ns: int64(ms(5007))}, tokens: 2}}
	if !slices.Equal(a.local["k"].q, want) || !slices.Equal(a.delta["b"]["k"], want) {
		t.Fatalf("local %v, delta %v, want %v", a.local["k"].q, a.delta["b"]["k"], want)
	}
	// The version of one token sent before the element grew merges into
	// the grown one, whichever comes first.
	c := newClock(testRate)
	old := elem{birth: ms(7), death: stamp{ns: int64(ms(2500))}, tokens: 1} // pushed back elsewhere
	for _, got := range []elem{c.join(old, want[0]), c.join(want[0], old)} {
		if got.tokens != 3 || got.death != (stamp{ns: int64(ms(4500))}) {
			t.Fatalf("join: %v, want 3 tokens dying at 4.5 s", got)
		}
	}
}

// One node decides exactly as a bucket.Bucket, with requests of several
// tokens and rates whose 1/rate is not a whole number of nanoseconds.
func TestSingleNodeIsTokenBucket(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		rate := bucket.Rate{Tokens: rapid.Int64Range(1, 7).Draw(t, "tokens"), Per: time.Duration(rapid.Int64Range(1, 5000).Draw(t, "perMs")) * time.Millisecond}
		burst := rapid.Int64Range(0, 9).Draw(t, "burst")
		margin := rapid.SampledFrom([]string{"0s", "2s"}).Draw(t, "margin")
		p, _ := strategy.ParseParams([]string{"safe_margin=" + margin, "unique_ids=" + fmt.Sprint(rapid.Bool().Draw(t, "unique"))})
		q, err := New(strategy.Config{Self: "a", Members: []strategy.NodeID{"a"}, Rate: rate, Burst: burst, Rand: rand.New(rand.NewPCG(1, 1)), Params: p})
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
			q.Tick(at, &fx)
			d, _ := q.Request(at, strategy.Request{ID: uint64(i), Key: "k", Tokens: n, Arrival: at}, &fx)
			if d.Allowed != want {
				t.Fatalf("request %d (%d tokens at %v): tbqueue %v, bucket %v", i, n, at, d.Allowed, want)
			}
		}
	})
}

func fullState(q *TBQueue) []byte {
	queues := q.localQueues()
	return q.encode(slices.Sorted(maps.Keys(queues)), queues, true)
}

func deltaBytes(q *TBQueue) []byte {
	var out []byte
	for _, nb := range q.neighbours {
		keys := make([]string, 0)
		for k := range q.delta[nb] {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		out = append(out, q.encode(keys, q.delta[nb], false)...)
	}
	return out
}

// StateBytes equals proto.Size of the local state and of each delta message.
func TestStateBytesExact(t *testing.T) {
	members := []string{"n0", "n1", "n2"}
	for _, params := range [][]string{nil, {"unique_ids=true", "safe_margin=1s"}} {
		q := newNode(t, "n0", members, params...)
		other := newNode(t, "n1", members, params...)
		q.clock = newClock(bucket.Rate{Tokens: 3, Per: time.Second}) // fractional deaths
		other.clock = q.clock
		var fx strategy.Effects
		for i := 0; i < 40; i++ {
			at := time.Duration(i) * 37 * time.Millisecond
			key := fmt.Sprintf("k%d", i%7)
			q.Request(at, strategy.Request{ID: uint64(i), Key: key, Tokens: 1 + int64(i%3), Arrival: at}, &fx)
			other.Request(at, strategy.Request{ID: uint64(i), Key: key, Tokens: 1, Arrival: at}, &fx)
		}
		fx.Reset()
		other.Tick(time.Second, &fx)
		for _, m := range fx.Messages {
			if err := q.Receive(time.Second, "n1", m.Payload, &strategy.Effects{}); err != nil {
				t.Fatal(err)
			}
		}
		want := len(fullState(q)) - 2 // without the full flag
		for _, nb := range q.neighbours {
			if len(q.delta[nb]) > 0 {
				keys := make([]string, 0)
				for k := range q.delta[nb] {
					keys = append(keys, k)
				}
				want += proto.Size(mustDecode(t, q.encode(keys, q.delta[nb], false)))
			}
		}
		if got := q.StateBytes(); got != want || got == 0 {
			t.Fatalf("%v: StateBytes %d, encoded %d", params, got, want)
		}
	}
}

func mustDecode(t testing.TB, b []byte) *peerv1.TBQueueMessage {
	var m peerv1.TBQueueMessage
	if err := proto.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return &m
}

// Garbage and invalid payloads are refused and change nothing.
func TestReceiveRejectsInvalid(t *testing.T) {
	for _, unique := range []bool{false, true} {
		q := newNode(t, "a", []string{"a", "b", "c"}, fmt.Sprintf("unique_ids=%v", unique))
		var fx strategy.Effects
		q.Request(0, strategy.Request{ID: 1, Key: "k", Tokens: 2}, &fx)
		mk := func(k *peerv1.TBQueueKey) []byte {
			out, _ := proto.Marshal(&peerv1.TBQueueMessage{Keys: []*peerv1.TBQueueKey{
				{Key: "ok", Elements: []*peerv1.TBQueueElement{{BirthDeltaNs: 1, LifeNs: int64(time.Second)}}}, k}})
			return out
		}
		el := func(es ...*peerv1.TBQueueElement) *peerv1.TBQueueKey {
			return &peerv1.TBQueueKey{Key: "k", Elements: es}
		}
		bad := map[string][]byte{
			"garbage":       {0xff, 0xff, 0xff},
			"truncated":     mk(el(&peerv1.TBQueueElement{LifeNs: 5}))[:7],
			"empty key":     mk(&peerv1.TBQueueKey{Key: ""}),
			"repeated key":  mk(&peerv1.TBQueueKey{Key: "ok"}),
			"neg birth":     mk(el(&peerv1.TBQueueElement{BirthDeltaNs: -1, LifeNs: 5})),
			"neg life":      mk(el(&peerv1.TBQueueElement{BirthDeltaNs: 1, LifeNs: -5})),
			"life overflow": mk(el(&peerv1.TBQueueElement{BirthDeltaNs: 10, LifeNs: 1<<63 - 5})),
			"rem":           mk(el(&peerv1.TBQueueElement{BirthDeltaNs: 1, LifeNs: 5, DeathRem: 1})),
			"neg rem":       mk(el(&peerv1.TBQueueElement{BirthDeltaNs: 1, LifeNs: 5, DeathRem: -1})),
			"tokens":        mk(el(&peerv1.TBQueueElement{BirthDeltaNs: 1, LifeNs: 5, Tokens: testCapacity + 1})),
			"neg tokens":    mk(el(&peerv1.TBQueueElement{BirthDeltaNs: 1, LifeNs: 5, Tokens: -1})),
			"birth overflow": mk(el(&peerv1.TBQueueElement{BirthDeltaNs: 1 << 62, LifeNs: 5},
				&peerv1.TBQueueElement{BirthDeltaNs: 1 << 62, LifeNs: 5})),
			// Received at 1 s: a request admitted 11 s later, beyond the
			// clock skew allowed, or ages later.
			"future birth": mk(el(&peerv1.TBQueueElement{BirthDeltaNs: int64(time.Second + peerbound.ClockSkew + time.Millisecond), LifeNs: 5})),
			"far future":   mk(el(&peerv1.TBQueueElement{BirthDeltaNs: 1 << 60, LifeNs: int64(time.Hour)})),
		}
		if unique {
			bad["id order"] = mk(el(&peerv1.TBQueueElement{BirthDeltaNs: 1, LifeNs: 5, Origin: "b", Seq: 2},
				&peerv1.TBQueueElement{LifeNs: 5, Origin: "b", Seq: 1}))
		}
		before, deltas, sb := fullState(q), deltaBytes(q), q.StateBytes()
		for name, payload := range bad {
			fx.Reset()
			if err := q.Receive(time.Second, "b", payload, &fx); err == nil {
				t.Errorf("unique_ids=%v: %s: accepted", unique, name)
			}
			if !slices.Equal(before, fullState(q)) || !slices.Equal(deltas, deltaBytes(q)) || q.StateBytes() != sb || len(fx.Messages) != 0 {
				t.Fatalf("unique_ids=%v: %s: state changed", unique, name)
			}
		}
		// Within the skew, a birth ahead of this node's clock is accepted.
		if err := q.Receive(time.Second, "b", mk(el(&peerv1.TBQueueElement{BirthDeltaNs: int64(time.Second + peerbound.ClockSkew), LifeNs: 5})), &fx); err != nil {
			t.Errorf("unique_ids=%v: a birth within the clock skew was refused: %v", unique, err)
		}
	}
}

func FuzzReceive(f *testing.F) {
	seed := newNode(f, "b", []string{"a", "b"}, "unique_ids=true")
	var fx strategy.Effects
	for i := 0; i < 5; i++ {
		seed.Request(ms(i), strategy.Request{ID: uint64(i), Key: fmt.Sprintf("k%d", i%2), Tokens: 1 + int64(i%2), Arrival: ms(i)}, &fx)
	}
	f.Add(fullState(seed), true)
	f.Add(fullState(seed), false)
	f.Add([]byte{}, false)
	f.Add([]byte{0x0a, 0x03, 0x0a, 0x01, 0x6b}, true)
	f.Fuzz(func(t *testing.T, payload []byte, unique bool) {
		q := newNode(t, "a", []string{"a", "b", "c"}, fmt.Sprintf("unique_ids=%v", unique), "frequency_analysis=true", "linf=true", "catch_up=true")
		var fx strategy.Effects
		q.Request(0, strategy.Request{ID: 1, Key: "k0", Tokens: 1}, &fx)
		before, deltas, sb := fullState(q), deltaBytes(q), q.StateBytes()
		if err := q.Receive(time.Second, "b", payload, &fx); err != nil {
			if !slices.Equal(before, fullState(q)) || !slices.Equal(deltas, deltaBytes(q)) || q.StateBytes() != sb {
				t.Fatal("a refused payload changed the state")
			}
			return
		}
		for k, e := range q.local {
			qu := e.q
			for i := 1; i < len(qu); i++ {
				if cmpStamp(qu[i].death, qu[i-1].death) <= 0 {
					t.Fatalf("key %q: times-of-death not increasing", k)
				}
			}
		}
		q.Request(2*time.Second, strategy.Request{ID: 2, Key: "k0", Tokens: 1, Arrival: 2 * time.Second}, &fx)
		q.Tick(2*time.Second, &fx)
	})
}

// BenchmarkMergeDelta receives (decodes, validates and merges into the
// local and delta states) a delta state of 1,000 elements of one key, half
// of which the node already holds, in a 3-node cluster.
func BenchmarkMergeDelta(b *testing.B) {
	for _, unique := range []bool{false, true} {
		b.Run(fmt.Sprintf("unique_ids=%v", unique), func(b *testing.B) {
			p := fmt.Sprintf("unique_ids=%v", unique)
			src := newNode(b, "b", []string{"a", "b", "c"}, p)
			src.capacity = 100000
			var fx strategy.Effects
			for i := 0; i < 1000; i++ {
				at := time.Duration(i) * time.Millisecond
				src.Request(at, strategy.Request{ID: uint64(i), Key: "hot", Tokens: 1, Arrival: at}, &fx)
			}
			all := src.encode([]string{"hot"}, src.localQueues(), false)
			halfQ := map[string][]elem{"hot": src.local["hot"].q[:500]}
			half := src.encode([]string{"hot"}, halfQ, false)
			b.SetBytes(int64(len(all)))
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				q := newNode(b, "a", []string{"a", "b", "c"}, p)
				q.capacity = 100000
				if err := q.Receive(time.Second, "c", half, &fx); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				if err := q.Receive(time.Second, "b", all, &fx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkIdleKeyBytes reports the state one idle key costs: right after
// its one request (one element, delta states sent), and after the sweep.
func BenchmarkIdleKeyBytes(b *testing.B) {
	const keys = 1000
	var fresh, swept float64
	for i := 0; i < b.N; i++ {
		q := newNode(b, "n0", []string{"n0", "n1"})
		var fx strategy.Effects
		for k := 0; k < keys; k++ {
			q.Request(0, strategy.Request{ID: uint64(k), Key: fmt.Sprintf("user%05d", k), Tokens: 1}, &fx)
		}
		clear(q.delta["n1"])
		q.queued["n1"] = 0
		fresh = float64(q.StateBytes()) / keys
		q.Tick(time.Minute, &fx) // the elements died at 1 s: gone for a sweep interval
		swept = float64(q.StateBytes()) / keys
	}
	b.ReportMetric(fresh, "bytes/idle-key(1-element)")
	b.ReportMetric(swept, "bytes/idle-key(swept)")
}

// LINF (§4.2.4) gossips to the neighbour with the most queued elements,
// breaking ties at random, and sends nothing once every count is 0.
func TestLINFPicksLeastInformed(t *testing.T) {
	members := []string{"a", "b", "c", "d"}
	a, b := newNode(t, "a", members, "linf=true"), newNode(t, "b", members)
	var fx strategy.Effects
	for i := 0; i < 3; i++ {
		b.Request(ms(i), strategy.Request{ID: uint64(i), Key: "k", Tokens: 1, Arrival: ms(i)}, &fx)
	}
	if err := a.Receive(ms(5), "b", b.encode([]string{"k"}, b.delta["a"], false), &fx); err != nil {
		t.Fatal(err)
	}
	a.Request(ms(6), strategy.Request{ID: 9, Key: "k2", Tokens: 1, Arrival: ms(6)}, &fx)
	if got := map[strategy.NodeID]int{"b": a.queued["b"], "c": a.queued["c"], "d": a.queued["d"]}; got["b"] != 1 || got["c"] != 4 || got["d"] != 4 {
		t.Fatalf("queued %v, want b:1 c:4 d:4", got)
	}
	var order []strategy.NodeID
	for i := 1; i <= 4; i++ {
		fx.Reset()
		a.Tick(time.Duration(i)*DefaultGossip, &fx)
		for _, m := range fx.Messages {
			order = append(order, m.To)
		}
	}
	if len(order) != 3 || order[2] != "b" || !slices.Contains(order[:2], "c") || !slices.Contains(order[:2], "d") {
		t.Fatalf("LINF gossip order %v, want c and d (either order), then b, then nothing", order)
	}
}

// With catch_up, a newcomer is sent the full state by its buddy, which
// counts itself even when its view leaves it out (strattest.CatchUpBuddy).
func TestCatchUpBuddyCountsSelf(t *testing.T) {
	strattest.CatchUpBuddy(t, func(self string, members []string, params ...string) strategy.Strategy {
		return newNode(t, self, members, params...)
	})
}
