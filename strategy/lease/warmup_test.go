package lease

import (
	"math/rand/v2"
	"testing"
	"time"

	peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"
	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/internal/leasepool"
	"github.com/tokenmesh/tokenmesh/strategy/internal/strattest"
)

// cluster drives n0..n2 for these tests on strattest.Relay (strategy/host
// behind a zero-latency network: messages delivered at once in the order
// sent, lost to or from the nodes in down); nodes are the instances.
type cluster struct {
	*strattest.Relay
	nodes map[strategy.NodeID]*Lease
	down  map[strategy.NodeID]bool
}

// newCluster starts n0..n2 (rate 10/s, burst 20, hold 0, replicas 2) at
// start: after time 0, as the live runtime starts every node that joins.
func newCluster(t *testing.T, start time.Duration, params ...string) *cluster {
	p, err := strategy.ParseParams(append([]string{"hold=0s"}, params...))
	if err != nil {
		t.Fatal(err)
	}
	c := &cluster{nodes: map[strategy.NodeID]*Lease{}}
	var ss []strategy.Strategy
	for _, id := range members {
		l, err := New(strategy.Config{Self: id, Members: members, Rate: bucket.Rate{Tokens: 10, Per: time.Second}, Burst: 20,
			Rand: rand.New(rand.NewPCG(1, 2)), Params: p, LatencyHint: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		c.nodes[id] = l
		ss = append(ss, l)
	}
	c.Relay = strattest.NewRelay(t, members, ss)
	c.down = c.Down
	c.Start(start)
	return c
}

// request sends a request of one token for key to node at now.
func (c *cluster) request(now time.Duration, node strategy.NodeID, id uint64, key string) {
	c.Request(now, node, strategy.Request{ID: id, Key: key, Tokens: 1, Arrival: now})
}

// tick ticks every node at now.
func (c *cluster) tick(now time.Duration) { c.Tick(now) }

func (c *cluster) allowed(ids ...uint64) (allowed, decided int) { return c.Allowed(ids...) }

// setMembers gives node the view members at now.
func (c *cluster) setMembers(now time.Duration, node strategy.NodeID, members []strategy.NodeID) {
	c.Do(now, node, func(s strategy.Strategy, fx *strategy.Effects) { s.SetMembers(now, members, fx) })
}

// TestWarmupLiveStart: in a cluster whose nodes all started after time 0
// (as every node of the live runtime does: each joins), a key's first
// requests are admitted as one central bucket would (its burst at once),
// not refused for takeover: the owner's warm-up asks the other nodes,
// which hold nothing of the key. Before the warm-up every node counted as
// restarted and refused the key for ttl + 1s.
func TestWarmupLiveStart(t *testing.T) {
	start := 3 * time.Second
	c := newCluster(t, start)
	key := keyRanked("n0", "n1")
	var ids []uint64
	for i := range 25 {
		id := uint64(i + 1)
		ids = append(ids, id)
		c.request(start+time.Millisecond, members[i%3], id, key)
	}
	c.tick(start + 2*time.Millisecond)
	if a, d := c.allowed(ids...); d != len(ids) || a != 20 {
		t.Fatalf("first requests after a live start: %d of %d decided, %d admitted; want all decided, 20 (the burst) admitted", d, len(ids), a)
	}
	if err := Conserved(c.nodes, 20, start+2*time.Millisecond); err != nil {
		t.Fatal(err)
	}
}

// TestWarmupAfterJoiningFromAlone: a node of the live runtime boots with
// the expected members, sees itself alone until it has joined (its
// membership's first view), then all of them. Its keys' first requests
// are admitted as one central bucket would: the view of itself alone is
// not one in which a previous incarnation's state can be lost to others
// (only it decided there), so the warm-up asks the others instead of
// starting conservatively. Before, that view counted as not covered (a
// restarted node forgot its state) and every key the node owned was
// refused for takeover + fill time after every start, also in a bench of
// a fresh cluster under a limit that cannot be reached.
func TestWarmupAfterJoiningFromAlone(t *testing.T) {
	start := 3 * time.Second
	c := newCluster(t, start)
	key := keyRanked("n0", "n1")
	c.setMembers(start+time.Millisecond, "n0", []strategy.NodeID{"n0"})
	c.setMembers(start+200*time.Millisecond, "n0", members)
	now := start + 300*time.Millisecond
	var ids []uint64
	for i := range 25 {
		id := uint64(i + 1)
		ids = append(ids, id)
		c.request(now, members[i%3], id, key)
	}
	c.tick(now + time.Millisecond)
	if a, d := c.allowed(ids...); d != len(ids) || a != 20 {
		t.Fatalf("first requests after joining from alone: %d of %d decided, %d admitted; want all decided, 20 (the burst) admitted", d, len(ids), a)
	}
}

// TestWarmupUnreachableStartsConservatively: when a node that may hold the
// key's state does not answer, the warm-up times out (timeout less one
// resend interval) and the key starts empty as without warm-up: nothing
// before the move + takeover, then the refill.
func TestWarmupUnreachableStartsConservatively(t *testing.T) {
	start := 3 * time.Second
	c := newCluster(t, start)
	c.down["n1"] = true
	key := keyRanked("n0", "n1")
	for i := range 5 {
		c.request(start, "n0", uint64(i+1), key)
	}
	if _, d := c.allowed(1, 2, 3, 4, 5); d != 0 {
		t.Fatalf("%d requests decided while the warm-up waits, want 0", d)
	}
	l := c.nodes["n0"]
	for at := start; at < start+l.fetchDeadline(); at += l.retryEvery / 2 {
		c.tick(at)
	}
	c.tick(start + l.fetchDeadline())
	if a, d := c.allowed(1, 2, 3, 4, 5); d != 5 || a != 0 {
		t.Fatalf("after the warm-up timed out: %d decided, %d admitted; want 5 refused", d, a)
	}
	at := start + l.takeover + 300*time.Millisecond // 3 tokens refilled since the move + takeover
	for i := range 5 {
		c.request(at, "n0", uint64(10+i), key)
	}
	if a, _ := c.allowed(10, 11, 12, 13, 14); a != 3 {
		t.Fatalf("admitted %d at the move + takeover + 300ms, want 3", a)
	}
}

// TestWarmupContinuesFromAnswers: the warm-up continues from the most
// consumed answer, counting its lent tokens against the capacity; a
// node that answers hands the key over (its pool is dropped and the key
// starts conservatively there); replicas=1 keeps the conservative start.
func TestWarmupContinuesFromAnswers(t *testing.T) {
	start := 3 * time.Second
	c := newCluster(t, start)
	key := keyRanked("n0", "n1")
	// n1 decided the key while n0 was away (its pool: 5 tokens at start).
	n1 := c.nodes["n1"]
	p := &pool{Pool: leasepool.Pool{Level: 5 * n1.sh.per, Last: start, Leased: 0, Inherited: 3, InheritedUntil: start + 100*time.Millisecond}}
	n1.setPool(key, p)
	for i := range 10 {
		c.request(start, "n0", uint64(i+1), key)
	}
	if a, d := c.allowed(1, 2, 3, 4, 5, 6, 7, 8, 9, 10); d != 10 || a != 5 {
		t.Fatalf("after the answers: %d decided, %d admitted; want 10 decided, 5 admitted (n1's level)", d, a)
	}
	if n1.pools[key] != nil && !n1.pools[key].conservative {
		t.Fatal("n1 kept deciding the key after answering")
	}
	// n1, asked, decides the key as moved to it at the answer, without a
	// warm-up: even in a view where it owns the key (n0 gone), it refuses
	// the key until the answer + takeover.
	fx := &strategy.Effects{}
	n1.SetMembers(start, []strategy.NodeID{"n1", "n2"}, fx)
	fx = &strategy.Effects{}
	if d, ok := n1.Request(start, strategy.Request{ID: 99, Key: key, Tokens: 1, Arrival: start}, fx); !ok || d.Allowed || len(fx.Messages) != 0 {
		t.Fatalf("n1 after answering: decided %v allowed %v, %d messages; want a refusal at once", ok, d.Allowed, len(fx.Messages))
	}
	// The 3 tokens n1 had lent come back at start + 100ms as room, not
	// tokens: by start + 200ms 2 tokens refilled.
	at := start + 200*time.Millisecond
	for i := range 5 {
		c.request(at, "n0", uint64(20+i), key)
	}
	if a, _ := c.allowed(20, 21, 22, 23, 24); a != 2 {
		t.Fatalf("admitted %d at start + 200ms, want 2", a)
	}

	// replicas=1: no warm-up, the conservative start.
	c = newCluster(t, start, "replicas=1")
	for i := range 5 {
		c.request(start, "n0", uint64(i+1), key)
	}
	if a, d := c.allowed(1, 2, 3, 4, 5); d != 5 || a != 0 {
		t.Fatalf("replicas=1: %d decided, %d admitted; want 5 refused", d, a)
	}
}

// TestWarmupRejectsBadAnswers: an answer out of bounds, or from a node the
// query did not go to, is an error and changes nothing.
func TestWarmupRejectsBadAnswers(t *testing.T) {
	start := 3 * time.Second
	l := newNode(t, "n0")
	l.Start(start, &strategy.Effects{})
	key := keyRanked("n0", "n1")
	fx := &strategy.Effects{}
	if _, ok := l.Request(start, strategy.Request{ID: 1, Key: key, Tokens: 1, Arrival: start}, fx); ok {
		t.Fatal("decided during the warm-up")
	}
	f := l.fetching[key]
	if f == nil || len(f.asked) != 2 {
		t.Fatalf("warm-up: %+v, want a query to n1 and n2", f)
	}
	state := func(s *peerv1.LeaseState) []byte {
		s.Key, s.Id = key, f.id
		return msg(&peerv1.LeaseMessage{Body: &peerv1.LeaseMessage_State{State: s}})
	}
	for _, bad := range []*peerv1.LeaseState{
		{LevelTicks: 21 * int64(time.Second), AtNs: int64(start)},
		{LevelTicks: 10 * int64(time.Second), AtNs: int64(start), LentTokens: 15},
		{LevelTicks: -1, AtNs: int64(start)},
		{AtNs: -1},
		{AtNs: int64(start + time.Hour)},
		{LentTokens: 1, LentUntilNs: int64(start + time.Hour), AtNs: int64(start)},
	} {
		if err := l.Receive(start, "n1", state(bad), &strategy.Effects{}); err == nil {
			t.Errorf("%v: no error", bad)
		}
	}
	if err := l.Receive(start, "n3", state(&peerv1.LeaseState{None: true}), &strategy.Effects{}); err == nil {
		t.Error("an answer from a node not asked: no error")
	}
	if len(f.got) != 0 || l.fetching[key] != f || f.acc.Level != 20*int64(time.Second) {
		t.Fatalf("bad answers changed the warm-up: %+v", f)
	}
	// A good answer from each: done.
	fx = &strategy.Effects{}
	for _, n := range []strategy.NodeID{"n1", "n2"} {
		if err := l.Receive(start, n, state(&peerv1.LeaseState{None: true}), fx); err != nil {
			t.Fatal(err)
		}
	}
	if d, ok := fx.TakeDecision(1); !ok || !d.Allowed {
		t.Fatalf("after the answers: decided %v allowed %v, want admitted", ok, d.Allowed)
	}
}

// TestWarmupAnswererIgnoresAskersState: a node that answered a warm-up
// query does not take up the asker's shipped state as its own, even when
// its lagging view does not list the asker (a restarted node it has not
// seen rejoin, whose state would count as that of a node gone): else both
// would decide the key (found by TestEnvelopeWaitingUnderFaults).
func TestWarmupAnswererIgnoresAskersState(t *testing.T) {
	start := 3 * time.Second
	c := newCluster(t, start)
	key := keyRanked("n0", "n1")
	n1 := c.nodes["n1"]
	n1.SetMembers(start, []strategy.NodeID{"n1", "n2"}, &strategy.Effects{}) // n1 has not seen n0 (re)join
	c.request(start, "n0", 1, key)
	if a, d := c.allowed(1); d != 1 || a != 1 {
		t.Fatalf("n0 after its warm-up: %d decided, %d admitted; want 1 admitted", d, a)
	}
	// n0 ships its state to n1, its replica; n1 must not continue from it.
	st := replicas(&peerv1.LeaseReplica{Key: key, LevelTicks: 19 * int64(time.Second), SinceBaseNs: int64(start)})
	if err := n1.Receive(start, "n0", st, &strategy.Effects{}); err != nil {
		t.Fatal(err)
	}
	fx := &strategy.Effects{}
	if d, ok := n1.Request(start, strategy.Request{ID: 2, Key: key, Tokens: 1, Arrival: start}, fx); !ok || d.Allowed {
		t.Fatalf("n1 after answering, with n0's state: decided %v allowed %v; want a refusal", ok, d.Allowed)
	}
}

// TestWarmupMembershipChange: a membership change during a warm-up stops
// waiting for the nodes that left when the key's state is still covered
// (their replicas answered), and ends the warm-up conservatively when it
// is not.
func TestWarmupMembershipChange(t *testing.T) {
	start := 3 * time.Second
	key := keyRanked("n0", "n1")
	for _, tc := range []struct {
		name    string
		leaving strategy.NodeID
		want    int // admitted of 5
	}{
		// n2 leaves: n1, the key's second node in every view, answered.
		{"covered", "n2", 5},
		// n1 leaves: in the view before the change n0 (restarted: it
		// forgot) and n1 were the key's first two; n1's state may be lost.
		{"not covered", "n1", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, start)
			c.down[tc.leaving] = true
			for i := range 5 {
				c.request(start, "n0", uint64(i+1), key)
			}
			if _, d := c.allowed(1, 2, 3, 4, 5); d != 0 {
				t.Fatalf("%d decided while %s does not answer", d, tc.leaving)
			}
			var rest []strategy.NodeID
			for _, m := range members {
				if m != tc.leaving {
					rest = append(rest, m)
				}
			}
			at := start + 10*time.Millisecond
			c.setMembers(at, "n0", rest)
			if a, d := c.allowed(1, 2, 3, 4, 5); d != 5 || a != tc.want {
				t.Fatalf("after %s left: %d decided, %d admitted; want 5 decided, %d admitted", tc.leaving, d, a, tc.want)
			}
		})
	}
}

// TestWarmupLateAnswerFromDroppedNode: a node asked by a warm-up that a
// membership change then drops from the view may still answer (its answer
// was on the way). It gave the key up when it answered, so its state is
// merged (the rapid envelope test found this answer refused as an error
// from a node never asked); the warm-up no longer waits for it.
func TestWarmupLateAnswerFromDroppedNode(t *testing.T) {
	start := 3 * time.Second
	key := keyRanked("n0", "n1")
	c := newCluster(t, start)
	c.down["n1"], c.down["n2"] = true, true
	for i := range 5 {
		c.request(start, "n0", uint64(i+1), key)
	}
	n0 := c.nodes["n0"]
	f := n0.fetching[key]
	if f == nil || !f.queried["n2"] {
		t.Fatalf("n0's warm-up of %q: %+v, want a query to n2 under way", key, f)
	}
	at := start + time.Millisecond
	c.setMembers(at, "n0", []strategy.NodeID{"n0", "n1"})
	// n2's answer: it had spent the key's bucket.
	late := msg(&peerv1.LeaseMessage{Body: &peerv1.LeaseMessage_State{State: &peerv1.LeaseState{Key: key, Id: f.id, LevelTicks: 0, AtNs: int64(at)}}})
	if err := n0.Receive(at, "n2", late, &strategy.Effects{}); err != nil {
		t.Fatalf("the answer of n2, asked before it left: %v", err)
	}
	if err := n0.Receive(at, "n1", msg(&peerv1.LeaseMessage{Body: &peerv1.LeaseMessage_State{State: &peerv1.LeaseState{Key: key, Id: f.id + 7, None: true}}}), &strategy.Effects{}); err != nil {
		t.Fatalf("an answer to another query: %v, want it ignored", err)
	}
	c.down["n1"] = false
	c.tick(f.next) // the resend: n1 answers that it holds nothing
	if a, d := c.allowed(1, 2, 3, 4, 5); d != 5 || a != 0 {
		t.Fatalf("after the answers: %d decided, %d admitted; want 5 decided and 0 admitted (n2 had spent the bucket)", d, a)
	}
}
