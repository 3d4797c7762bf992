package gcounter

import (
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/host"
)

// cluster is a tiny driver on strategy/host: every node ticks at the
// test's times, and what it sends at a tick is delivered at once; what a
// node sends while receiving is dropped (a message is delivered once).
type cluster struct {
	t     *testing.T
	nodes map[strategy.NodeID]*GCounter // for inspection
	hosts map[strategy.NodeID]*host.Host
	sinks map[strategy.NodeID]*sink
	names []strategy.NodeID
	sent  int
}

// sink is a node's host.Driver: it keeps what the node sends.
type sink struct{ out []strategy.Message }

func (s *sink) Decided(int, strategy.Decision) {}
func (s *sink) Send(_ int, to strategy.NodeID, payload []byte) {
	s.out = append(s.out, strategy.Message{To: to, Payload: payload})
}
func (s *sink) Schedule(int, time.Duration) {}

func newCluster(t *testing.T, params ...string) *cluster {
	members := []string{"a", "b", "c"}
	c := &cluster{t: t, nodes: map[strategy.NodeID]*GCounter{}, hosts: map[strategy.NodeID]*host.Host{}, sinks: map[strategy.NodeID]*sink{}}
	for _, m := range members {
		id := strategy.NodeID(m)
		g := newNode(t, m, members, params...)
		c.sinks[id] = &sink{}
		h, err := host.New(id, 0, c.sinks[id], g)
		if err != nil {
			t.Fatal(err)
		}
		h.Start(0, 0)
		c.nodes[id], c.hosts[id] = g, h
		c.names = append(c.names, id)
	}
	return c
}

func (c *cluster) request(now time.Duration, node strategy.NodeID, key string) bool {
	c.sent++
	d, _ := c.hosts[node].Request(now, 0, strategy.Request{ID: uint64(c.sent), Key: key, Tokens: 1, Arrival: now}, 0)
	return d.Allowed
}

// tick ticks every node at now and delivers what they send.
func (c *cluster) tick(now time.Duration) {
	for _, n := range c.names {
		c.sinks[n].out = nil
		c.hosts[n].Tick(now, 0)
		out := c.sinks[n].out
		c.sinks[n].out = nil
		for _, m := range out {
			if err := c.hosts[m.To].Receive(now, 0, n, m.Payload); err != nil {
				c.t.Fatal(err)
			}
			c.sinks[m.To].out = nil // a reply is not delivered
		}
	}
}

// run ticks every gossip interval in (from, to].
func (c *cluster) run(from, to time.Duration) {
	for at := from - from%DefaultGossip + DefaultGossip; at <= to; at += DefaultGossip {
		c.tick(at)
	}
}

// Many keys requested once expire once idle (and full): StateBytes goes back
// to 0. A key in use stays.
func TestIdleKeysExpire(t *testing.T) {
	c := newCluster(t, "idle=1m")
	a := c.nodes["a"]
	for k := 0; k < 1000; k++ {
		c.request(time.Duration(k)*time.Millisecond, "a", fmt.Sprintf("user%04d", k))
	}
	c.run(time.Second, 30*time.Second)
	if len(a.state) != 1000 || a.StateBytes() == 0 || len(c.nodes["b"].state) != 1000 {
		t.Fatalf("before idle: a holds %d keys (%d bytes), b %d", len(a.state), a.StateBytes(), len(c.nodes["b"].state))
	}
	before := a.StateBytes()
	// Requests for "busy" every 10 s, interleaved with the gossip (a
	// request's time is never after the time its delta is received: a
	// receiver refuses a refill timestamp from its future).
	prev := 30 * time.Second
	for at := 10 * time.Second; at <= 2*time.Minute; at += 10 * time.Second {
		if at > prev {
			c.run(prev, at-time.Millisecond)
			prev = at - time.Millisecond
		}
		c.request(at, "b", "busy")
	}
	c.run(prev, 2*time.Minute)
	for _, n := range c.names {
		g := c.nodes[n]
		if len(g.state) != 1 || g.state["busy"] == nil {
			t.Fatalf("%s holds %d keys after idle", n, len(g.state))
		}
		t.Logf("%s: %d bytes for 1000 idle keys, %d after the sweep", n, before, g.StateBytes())
		if g.StateBytes() > 100 {
			t.Fatalf("%s: StateBytes %d after the sweep", n, g.StateBytes())
		}
	}
	c.run(2*time.Minute, 4*time.Minute)
	for _, n := range c.names {
		if g := c.nodes[n]; len(g.state) != 0 || g.StateBytes() != 0 {
			t.Fatalf("%s: %d keys, %d bytes", n, len(g.state), g.StateBytes())
		}
	}
}

// A key whose bucket has not refilled is kept however long it is idle: it
// is not equivalent to a new one. With idle=0 nothing expires.
func TestNotFullNotExpired(t *testing.T) {
	g := newNode(t, "a", []string{"a"}, "idle=1m")
	g.rate.Per = time.Hour // 1 token per hour
	g.per = int64(time.Hour)
	var fx strategy.Effects
	g.Start(0, &fx)
	for i := 0; i < testCapacity; i++ {
		g.Request(0, strategy.Request{ID: uint64(i), Key: "k", Tokens: 1}, &fx)
	}
	for at := time.Duration(0); at <= 4*time.Hour; at += DefaultGossip * 100 {
		g.Tick(at, &fx)
	}
	if g.state["k"] == nil {
		t.Fatal("dropped a key before it refilled")
	}
	g.Tick(5*time.Hour+time.Minute, &fx)
	if g.state["k"] != nil {
		t.Fatal("kept a full idle key")
	}

	off := newNode(t, "a", []string{"a"}, "idle=0")
	off.Start(0, &fx)
	off.Request(time.Hour, strategy.Request{ID: 1, Key: "k", Tokens: 1, Arrival: time.Hour}, &fx)
	off.Tick(100*time.Hour, &fx)
	if b := off.state["k"]; b == nil || b.gen != 0 {
		t.Fatalf("idle=0: %+v", b)
	}
}

// The argument of the package comment: a node with no requests of its own
// for a key that another node keeps using keeps receiving that node's
// admissions, so it never finds the key idle, and when it gets a request
// after a long time it decides on the same generation, with the other's
// consumption.
func TestActiveElsewhereNotExpired(t *testing.T) {
	const idle = time.Minute
	c := newCluster(t, "idle=1m")
	a, b := c.nodes["a"], c.nodes["b"]
	c.request(0, "a", "k")
	gen := a.state["k"].gen
	admitted := int64(1)
	for i, at := 0, time.Duration(0); at < 10*idle; i, at = i+1, at+DefaultGossip {
		if i%67 == 66 && c.request(at, "b", "k") { // every 20.1 s
			admitted++
		}
		c.tick(at)
		if a.state["k"] == nil {
			t.Fatalf("a dropped k at %v although b admits every 20 s", at)
		}
	}
	// Every copy holds the one generation and every admission.
	for _, n := range c.names {
		g := c.nodes[n]
		if s := g.state["k"]; s == nil || s.gen != gen || s.consumed != admitted {
			t.Fatalf("%s: %+v, want generation %d and %d consumed", n, s, gen, admitted)
		}
	}
	// b empties the bucket; a, asked at once after it hears of it, admits
	// nothing more than a central bucket would.
	at := 10 * idle
	for i := 0; i < testCapacity; i++ {
		c.request(at, "b", "k")
	}
	c.run(at, at+5*DefaultGossip)
	if a.state["k"].gen != b.state["k"].gen {
		t.Fatal("generations differ")
	}
	if rem, _ := a.Remaining(at+5*DefaultGossip, "k"); rem > 2 {
		t.Fatalf("a sees %d tokens 1.5 s after b emptied the bucket", rem)
	}
}

// Two nodes re-create a key after it expired everywhere: within one idle
// period they get the same generation and merge as before (no excess);
// across a multiple of idle the lower side's admissions are discarded, at
// most the burst, and the nodes then agree.
func TestExpiryRace(t *testing.T) {
	const idle = time.Minute
	for _, tc := range []struct {
		name         string
		atA, atB     time.Duration
		sameGen      bool
		wantConsumed int64 // on every node once merged
	}{
		// As without expiry: both admit the burst before they hear of
		// each other (gcounter's usual excess), and the merge counts both.
		{"same period", 5*idle + 10*time.Second, 5*idle + 10*time.Second + 100*time.Millisecond, true, 2 * testCapacity},
		// a's admissions are discarded: later requests see only b's.
		{"across a multiple", 6*idle - 100*time.Millisecond, 6 * idle, false, testCapacity},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, "idle=1m")
			a, b := c.nodes["a"], c.nodes["b"]
			c.request(0, "a", "k")
			c.run(0, 3*idle)
			for _, n := range c.names {
				if c.nodes[n].state["k"] != nil {
					t.Fatalf("%s still holds k", n)
				}
			}
			var admitted int64
			for i := 0; i < 2*testCapacity; i++ {
				if c.request(tc.atA, "a", "k") {
					admitted++
				}
			}
			for i := 0; i < 2*testCapacity; i++ {
				if c.request(tc.atB, "b", "k") {
					admitted++
				}
			}
			if same := a.state["k"].gen == b.state["k"].gen; same != tc.sameGen {
				t.Fatalf("generations %d and %d", a.state["k"].gen, b.state["k"].gen)
			}
			if a.state["k"].gen <= 0 {
				t.Fatal("a re-created key has generation 0")
			}
			c.run(tc.atB, tc.atB+20*DefaultGossip)
			t.Logf("admitted %d (central: %d)", admitted, testCapacity)
			if admitted != 2*testCapacity {
				t.Fatalf("admitted %d", admitted)
			}
			for _, n := range c.names {
				s := c.nodes[n].state["k"]
				if s == nil || s.gen != b.state["k"].gen || s.consumed != tc.wantConsumed {
					t.Fatalf("%s: %+v", n, s)
				}
			}
		})
	}
}

// A key's new life has a higher generation than the one that expired, so
// an old copy still held elsewhere (or a late delta) cannot hide it; a late
// old delta is ignored and not passed on.
func TestGenerationMerge(t *testing.T) {
	g := newNode(t, "a", []string{"a", "b", "c"}, "idle=1m")
	var fx strategy.Effects
	g.Start(0, &fx)
	old := &peerv1.GCounterBucket{Key: "k", Counter: []*peerv1.GCounterEntry{{Node: "b", Consumed: 4}}, Limit: 4, RefillNs: int64(time.Second)}
	oldMsg, _ := proto.Marshal(&peerv1.GCounterMessage{Buckets: []*peerv1.GCounterBucket{old}})
	// Legacy encodings (no generation) decode to generation 0.
	if err := g.Receive(time.Second, "b", oldMsg, &fx); err != nil {
		t.Fatal(err)
	}
	if s := g.state["k"]; s.gen != 0 || s.consumed != 4 {
		t.Fatalf("%+v", s)
	}
	if g.sweep(3*time.Minute) != 0 {
		t.Fatal("swept a key pending in a delta state")
	}
	for _, nb := range g.neighbours {
		g.dropPending(g.delta[nb]) // as gossipOnce does when it sends them
		clear(g.delta[nb])
	}
	if g.sweep(3*time.Minute) != 1 {
		t.Fatal("not swept")
	}
	d, _ := g.Request(3*time.Minute, strategy.Request{ID: 1, Key: "k", Tokens: 1, Arrival: 3 * time.Minute}, &fx)
	if !d.Allowed || g.state["k"].gen != 3 { // 3 whole idle periods of 1m
		t.Fatalf("re-created %+v", g.state["k"])
	}
	for _, nb := range g.neighbours {
		g.dropPending(g.delta[nb]) // as gossipOnce does when it sends them
		clear(g.delta[nb])
	}
	if err := g.Receive(3*time.Minute, "b", oldMsg, &fx); err != nil {
		t.Fatal(err)
	}
	if s := g.state["k"]; s.consumed != 1 || inDelta(g, "k") {
		t.Fatalf("a late delta of the old generation changed %+v (pending %v)", s, inDelta(g, "k"))
	}
	newer := proto.Clone(old).(*peerv1.GCounterBucket)
	newer.Generation = 4 // idle periods
	msg, _ := proto.Marshal(&peerv1.GCounterMessage{Buckets: []*peerv1.GCounterBucket{newer}})
	if err := g.Receive(4*time.Minute, "b", msg, &fx); err != nil {
		t.Fatal(err)
	}
	if s := g.state["k"]; s.gen != newer.Generation || s.consumed != 4 || len(s.counter) != 1 || !inDelta(g, "k") {
		t.Fatalf("a newer generation did not replace the state: %+v", s)
	}
	if len(g.delta["b"]) != 0 || len(g.delta["c"]) != 1 {
		t.Fatal("not passed on to c only")
	}
}

// The other race of the package comment: a re-creates a key it dropped
// while b still holds its old, full copy, and both admit before they hear
// of each other: a's new generation wins and b's admissions are discarded
// (at most the burst).
func TestExpiryRaceOldCopy(t *testing.T) {
	const idle = time.Minute
	c := newCluster(t, "idle=1m")
	a, b := c.nodes["a"], c.nodes["b"]
	c.request(0, "a", "k")
	c.run(0, 10*time.Second)
	at := 2*idle + time.Second
	if a.sweep(at) != 1 || b.state["k"] == nil {
		t.Fatal("setup")
	}
	var admitted int64
	for i := 0; i < 2*testCapacity; i++ {
		for _, n := range []strategy.NodeID{"a", "b"} {
			if c.request(at, n, "k") {
				admitted++
			}
		}
	}
	if a.state["k"].gen != 2 || b.state["k"].gen != 0 || admitted != 2*testCapacity {
		t.Fatalf("a %+v, b %+v, admitted %d", a.state["k"], b.state["k"], admitted)
	}
	c.run(at, at+20*DefaultGossip)
	for _, n := range c.names {
		if s := c.nodes[n].state["k"]; s == nil || s.gen != 2 || s.consumed != testCapacity {
			t.Fatalf("%s: %+v", n, s)
		}
	}
}
