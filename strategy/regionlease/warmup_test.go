package regionlease

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"
	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/rendezvous"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// wcluster drives nodes for the warm-up tests behind a zero-latency
// network (messages delivered at once, in the order sent; lost to or from
// a node down or one not in nodes), every instance ever built kept for
// the checks.
type wcluster struct {
	t       *testing.T
	nodes   map[strategy.NodeID]*RegionLease
	all     []*RegionLease
	down    map[strategy.NodeID]bool
	ignore  map[strategy.NodeID]bool // a build without warm-up: queries are not answered
	got     map[uint64]bool          // decisions: allowed
	cfg     func(id strategy.NodeID) strategy.Config
	admits  []time.Duration // arrival of every admitted token
	arrival map[uint64]time.Duration
}

var wmembers = []strategy.NodeID{"n0", "n1", "n2"}

func newWCluster(t *testing.T, rate bucket.Rate, burst int64) *wcluster {
	c := &wcluster{t: t, nodes: map[strategy.NodeID]*RegionLease{}, down: map[strategy.NodeID]bool{}, ignore: map[strategy.NodeID]bool{},
		got: map[uint64]bool{}, arrival: map[uint64]time.Duration{}}
	c.cfg = func(id strategy.NodeID) strategy.Config {
		return strategy.Config{Self: id, Members: wmembers, Rate: rate, Burst: burst, Rand: rand.New(rand.NewPCG(1, 2)),
			LatencyHint: 5 * time.Millisecond}
	}
	return c
}

// start builds (again) and starts node id at now: a restart after time 0.
func (c *wcluster) start(now time.Duration, id strategy.NodeID) {
	l, err := New(c.cfg(id))
	if err != nil {
		c.t.Fatal(err)
	}
	c.nodes[id] = l
	c.all = append(c.all, l)
	c.down[id] = false
	c.do(now, id, func(l *RegionLease, fx *strategy.Effects) { l.Start(now, fx) })
}

// do runs f on node id and delivers what it causes.
func (c *wcluster) do(now time.Duration, id strategy.NodeID, f func(l *RegionLease, fx *strategy.Effects)) {
	type env struct {
		from, to strategy.NodeID
		b        []byte
	}
	var q []env
	run := func(id strategy.NodeID, f func(l *RegionLease, fx *strategy.Effects)) {
		var fx strategy.Effects
		f(c.nodes[id], &fx)
		for _, d := range fx.Decisions {
			c.decided(d.RequestID, d.Allowed)
		}
		for _, m := range fx.Messages {
			q = append(q, env{id, m.To, m.Payload})
		}
		c.check(now)
	}
	run(id, f)
	for len(q) > 0 {
		e := q[0]
		q = q[1:]
		if c.down[e.from] || c.down[e.to] || c.nodes[e.to] == nil {
			continue
		}
		if c.ignore[e.to] {
			m := &peerv1.RegionLeaseMessage{}
			if err := proto.Unmarshal(e.b, m); err == nil && m.GetStateQuery() != nil {
				continue // an old build: the field is unknown to it, the frame refused
			}
		}
		run(e.to, func(l *RegionLease, fx *strategy.Effects) {
			if err := l.Receive(now, e.from, e.b, fx); err != nil {
				c.t.Fatalf("Receive on %s from %s: %v", e.to, e.from, err)
			}
		})
	}
}

func (c *wcluster) decided(id uint64, allowed bool) {
	if _, dup := c.got[id]; dup {
		c.t.Fatalf("request %d decided twice", id)
	}
	c.got[id] = allowed
	if allowed {
		c.admits = append(c.admits, c.arrival[id])
	}
}

// check: the levels plus the leases held, key by key across owners, stay
// within the burst; the memory accounting recounts.
func (c *wcluster) check(now time.Duration) {
	up := map[strategy.NodeID]*RegionLease{}
	for id, l := range c.nodes {
		if !c.down[id] {
			up[id] = l
		}
		if err := l.CheckMemory(); err != nil {
			c.t.Fatal(err)
		}
	}
	if err := ConservedKeys(up, func(strategy.NodeID) bool { return false }, c.cfg("n0").Burst, now); err != nil {
		c.t.Fatal(err)
	}
}

func (c *wcluster) request(now time.Duration, id strategy.NodeID, rid uint64, key string) {
	c.arrival[rid] = now
	c.do(now, id, func(l *RegionLease, fx *strategy.Effects) {
		if d, ok := l.Request(now, strategy.Request{ID: rid, Key: key, Tokens: 1, Arrival: now}, fx); ok {
			c.decided(rid, d.Allowed)
		}
	})
}

func (c *wcluster) tick(now time.Duration) {
	for _, id := range wmembers {
		if c.nodes[id] != nil && !c.down[id] {
			c.do(now, id, func(l *RegionLease, fx *strategy.Effects) { l.Tick(now, fx) })
		}
	}
}

func (c *wcluster) setMembers(now time.Duration, id strategy.NodeID, ms ...strategy.NodeID) {
	c.do(now, id, func(l *RegionLease, fx *strategy.Effects) { l.SetMembers(now, ms, fx) })
}

// keyOwnedBy is a key whose global owner among wmembers is o, and whose
// owner among the first two members is not o (so that it moves to o when
// the third joins) when moves is set.
func keyOwnedBy(o strategy.NodeID, firstTwo []strategy.NodeID) string {
	for i := range 10000 {
		k := fmt.Sprintf("k%d", i)
		if rendezvous.Owner(k, wmembers) == o && (firstTwo == nil || rendezvous.Owner(k, firstTwo) != o) {
			return k
		}
	}
	panic("no key")
}

// formLive starts n0..n2 at start as the live runtime does (each a
// restart to the strategy): each sees itself alone, then n0 and n1 join
// each other, then n2 joins them.
func (c *wcluster) formLive(start time.Duration) {
	for _, id := range wmembers {
		c.start(start, id)
		c.setMembers(start, id, id)
	}
	c.setMembers(start+50*time.Millisecond, "n0", "n0", "n1")
	c.setMembers(start+50*time.Millisecond, "n1", "n0", "n1")
	for _, id := range wmembers {
		c.setMembers(start+150*time.Millisecond, id, wmembers...)
	}
}

// TestWarmupLiveClusterFormsRefusesNothing: three nodes start after time 0
// (as every live node does: a restart to the strategy) and join one after
// the other; a hot key, whose global owner (n2) is the last to join, under
// a limit it cannot reach is checked on every node once the cluster
// formed: nothing is refused. Before the warm-up its owner started it
// empty for takeover (region_ttl + 1 s) after the restart and after each
// join: every check for 2.5 s was refused.
func TestWarmupLiveClusterFormsRefusesNothing(t *testing.T) {
	c := newWCluster(t, bucket.Rate{Tokens: 1_000_000_000, Per: time.Second}, 1_000_000_000)
	start := 3 * time.Second
	c.formLive(start)
	key := keyOwnedBy("n2", []strategy.NodeID{"n0", "n1"})
	var rid uint64
	for now := start + 200*time.Millisecond; now < start+time.Second; now += 10 * time.Millisecond {
		for _, id := range wmembers {
			for range 5 {
				rid++
				c.request(now, id, rid, key)
			}
		}
		c.tick(now + 5*time.Millisecond)
	}
	c.tick(start + 2*time.Second)
	refused, undecided := 0, 0
	for id := uint64(1); id <= rid; id++ {
		a, ok := c.got[id]
		switch {
		case !ok:
			undecided++
		case !a:
			refused++
		}
	}
	if refused+undecided > 0 {
		t.Fatalf("hot key after a live start under an unreachable limit: %d of %d checks refused, %d undecided; want none", refused, rid, undecided)
	}
}

// TestWarmupRestartOfLendingOwner: the global owner n0 of a key lends its
// tokens to n1 and n2, takes its whole level itself, then restarts at once
// (the others' views never drop it). Its warm-up asks n1 and n2, which
// report the leases they hold (its previous incarnation's), and it starts
// empty at its restart: the levels plus the leases stay within the burst
// after every call (check), and the tokens admitted in every window stay
// within b + r*T, exactly, whether the key is checked again at once (what
// the previous incarnation took is unknown) or after the bucket's fill
// time (its leases are still out).
func TestWarmupRestartOfLendingOwner(t *testing.T) {
	for _, after := range []time.Duration{time.Millisecond, 90 * time.Millisecond} {
		t.Run(fmt.Sprint(after), func(t *testing.T) {
			rate := bucket.Rate{Tokens: 1000, Per: time.Second}
			const burst = 50
			c := newWCluster(t, rate, burst)
			for _, id := range wmembers {
				c.start(0, id)
			}
			key := keyOwnedBy("n0", nil)
			var rid uint64
			send := func(from, to time.Duration, every time.Duration, each int, nodes ...strategy.NodeID) {
				for now := from; now < to; now += every {
					for _, id := range nodes {
						for range each {
							rid++
							c.request(now, id, rid, key)
						}
					}
					c.tick(now + every/2)
				}
			}
			send(0, 500*time.Millisecond, 10*time.Millisecond, 2, wmembers...) // 600/s of 1000/s: the leases keep tokens
			send(505*time.Millisecond, 506*time.Millisecond, time.Millisecond, 2*burst, "n0")
			h1, _ := c.nodes["n1"].Float(505 * time.Millisecond)
			h2, _ := c.nodes["n2"].Float(505 * time.Millisecond)
			if h1+h2 == 0 {
				t.Fatalf("n1 and n2 hold no lease of n0's: the test lends nothing")
			}
			c.down["n0"] = true
			restart := 506 * time.Millisecond
			c.start(restart, "n0")
			send(restart+after, 2*time.Second, 10*time.Millisecond, 10, wmembers...) // 3000/s: the bucket runs dry
			if c.nodes["n0"].wu.seq == 0 {
				t.Fatalf("the restarted owner did not warm up")
			}
			checkEnvelope(t, c.admits, rate, burst)
			admittedLate := 0
			for _, at := range c.admits {
				if at >= restart+time.Second {
					admittedLate++
				}
			}
			if admittedLate == 0 {
				t.Fatalf("nothing admitted from 1 s after the restart")
			}
		})
	}
}

// TestWarmupMixedClusterTimesOut: a node that does not answer (a build
// without warm-up) makes the warm-up time out into the conservative start
// (empty until the restart + takeover): nothing admitted before it.
func TestWarmupMixedClusterTimesOut(t *testing.T) {
	c := newWCluster(t, bucket.Rate{Tokens: 1_000_000_000, Per: time.Second}, 1_000_000_000)
	c.ignore["n1"] = true
	start := 3 * time.Second
	c.formLive(start)
	key := keyOwnedBy("n2", []strategy.NodeID{"n0", "n1"})
	l := c.nodes["n2"]
	now := start + 200*time.Millisecond
	c.request(now, "n2", 1, key)
	if _, ok := c.got[1]; ok {
		t.Fatalf("decided at once, want held by the warm-up")
	}
	for at := now; at <= now+l.fetchDeadline(); at += l.retryEvery / 2 {
		c.tick(at)
	}
	c.tick(now + l.fetchDeadline())
	if a, ok := c.got[1]; !ok || a {
		t.Fatalf("after the warm-up timed out: decided %v allowed %v; want refused (conservative start)", ok, a)
	}
	c.request(start+l.takeover+10*time.Millisecond, "n2", 2, key)
	if !c.got[2] {
		t.Fatalf("refused after the restart + takeover")
	}
}

// checkEnvelope: the tokens admitted (by arrival) in every window [a, b]
// stay within burst + r*(b - a).
func checkEnvelope(t *testing.T, admits []time.Duration, rate bucket.Rate, burst int64) {
	t.Helper()
	for i, a := range admits {
		n := int64(0)
		for _, b := range admits[i:] {
			if b < a {
				continue
			}
			n++
			if lim := burst + int64(b-a)*rate.Tokens/int64(rate.Per); n > lim {
				t.Fatalf("%d tokens admitted in [%v, %v], over b + r*T = %d", n, a, b, lim)
			}
		}
	}
}

// TestReceiveStateOutOfBounds: an answer out of bounds is refused with an
// error naming the field, and changes nothing.
func TestReceiveStateOutOfBounds(t *testing.T) {
	c := newWCluster(t, bucket.Rate{Tokens: 10, Per: time.Second}, 20)
	for _, id := range wmembers {
		c.start(time.Second, id)
	}
	l := c.nodes["n0"]
	now := 2 * time.Second
	for _, tc := range []struct {
		st   *peerv1.RegionLeaseState
		want string
	}{
		{&peerv1.RegionLeaseState{Key: ""}, "key of 0 bytes"},
		{&peerv1.RegionLeaseState{Key: "k", HasPool: true, LevelTicks: -1}, "level -1 ticks"},
		{&peerv1.RegionLeaseState{Key: "k", HasPool: true, LevelTicks: 21 * int64(time.Second)}, "outside [0, burst 20"},
		{&peerv1.RegionLeaseState{Key: "k", HasPool: true, AtNs: int64(time.Hour)}, "time"},
		{&peerv1.RegionLeaseState{Key: "k", HasPool: true, LeasedTokens: 21}, "21 lent tokens"},
		{&peerv1.RegionLeaseState{Key: "k", HeldTokens: -1}, "-1 held tokens"},
		{&peerv1.RegionLeaseState{Key: "k", HeldTokens: 1, HeldUntilNs: int64(time.Hour)}, "a lease's end"},
		{&peerv1.RegionLeaseState{Key: "k", RestartedAtNs: int64(time.Hour)}, "start"},
		{&peerv1.RegionLeaseState{Key: "k", LevelTicks: 5}, "without has_pool"},
	} {
		b, _ := proto.Marshal(&peerv1.RegionLeaseMessage{Body: &peerv1.RegionLeaseMessage_State{State: tc.st}})
		var fx strategy.Effects
		before := l.MemoryBytes()
		err := l.Receive(now, "n1", b, &fx)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "regionlease: ") {
			t.Errorf("%v: error %v, want one naming %q", tc.st, err, tc.want)
		}
		if len(fx.Messages) > 0 || l.MemoryBytes() != before {
			t.Errorf("%v: refused, yet it sent %d messages, memory %d -> %d", tc.st, len(fx.Messages), before, l.MemoryBytes())
		}
	}
	b, _ := proto.Marshal(&peerv1.RegionLeaseMessage{Body: &peerv1.RegionLeaseMessage_StateQuery{StateQuery: &peerv1.RegionLeaseStateQuery{Id: 1}}})
	var fx strategy.Effects
	if err := l.Receive(now, "n1", b, &fx); err == nil || !strings.Contains(err.Error(), "key of 0 bytes") {
		t.Errorf("query without a key: error %v", err)
	}
}

// FuzzReceiveWarmup: any frame (warm-up queries and answers, and forwards
// and relays of a key decided in the ordering buffer, among the seeds)
// given to a node warming a key up is refused with an error or taken; it
// never panics, the node's pool stays within its bounds (level in [0,
// capacity], inherited in [0, burst]), its ordering buffer is empty a
// second later, and its memory accounting recounts.
func FuzzReceiveWarmup(f *testing.F) {
	now := 10 * time.Second
	for _, m := range []*peerv1.RegionLeaseMessage{
		{Body: &peerv1.RegionLeaseMessage_State{State: &peerv1.RegionLeaseState{Key: "k", Id: 1, HasPool: true, LevelTicks: 5 * int64(time.Second) / 10,
			AtNs: int64(now), LeasedTokens: 3, LentUntilNs: int64(now + time.Second), HeldTokens: 2, HeldUntilNs: int64(now + time.Second), RestartedAtNs: int64(now - time.Second)}}},
		{Body: &peerv1.RegionLeaseMessage_State{State: &peerv1.RegionLeaseState{Key: "k", Id: 1}}},
		{Body: &peerv1.RegionLeaseMessage_StateQuery{StateQuery: &peerv1.RegionLeaseStateQuery{Key: "k", Id: 7}}},
		{Body: &peerv1.RegionLeaseMessage_Grant{Grant: &peerv1.RegionLeaseGrant{Key: "k", Seq: 1, Tokens: 2, ExpiresNs: int64(now), Pushed: true}}},
		{Body: &peerv1.RegionLeaseMessage_Grant{Grant: &peerv1.RegionLeaseGrant{Key: "k", Seq: 1<<63 | 2, Tokens: 2, ExpiresNs: int64(now + time.Second), Pushed: true,
			SentAtNs: int64(now), UsableAtNs: int64(now + 5*time.Millisecond), PrevSeq: 1<<63 | 1, PrevTokens: 1, PrevExpiresNs: int64(now), PrevSentAtNs: int64(now - 5*time.Millisecond), PrevUsableAtNs: int64(now)}}},
		// relays and forwards of a cold key (rate 10/s on a 5 ms hint: no
		// stock, the ordering buffer, order.go), with origin_request_id
		{Body: &peerv1.RegionLeaseMessage_Forward{Forward: &peerv1.RegionLeaseForward{RequestId: 3, Key: "k", ArrivalNs: int64(now), Relay: true, OriginRequestId: 9}}},
		{Body: &peerv1.RegionLeaseMessage_Forward{Forward: &peerv1.RegionLeaseForward{RequestId: 4, Key: "k", ArrivalNs: int64(now - time.Millisecond), OriginRequestId: 9}}},
		{Body: &peerv1.RegionLeaseMessage_Forward{Forward: &peerv1.RegionLeaseForward{RequestId: 5, Key: "k", ExtraTokens: 1, ArrivalNs: int64(now - time.Second)}}},
	} {
		b, _ := proto.Marshal(m)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		self := rendezvous.Owner("k", wmembers) // the seeds' key is owned here
		l, err := New(strategy.Config{Self: self, Members: wmembers, Rate: bucket.Rate{Tokens: 10, Per: time.Second}, Burst: 20,
			Rand: rand.New(rand.NewPCG(1, 2)), LatencyHint: 5 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		var fx strategy.Effects
		l.Start(now-time.Second, &fx)
		l.Request(now, strategy.Request{ID: 1, Key: "k", Tokens: 1, Arrival: now}, &fx)
		for _, from := range wmembers {
			if from != self {
				_ = l.Receive(now, from, data, &fx)
			}
		}
		l.Tick(now+time.Second, &fx)
		if n := l.queue.Len(); n != 0 {
			t.Fatalf("%d requests still in the ordering buffer a second later", n)
		}
		for k, p := range l.pools {
			cp := *p
			l.sh.Advance(&cp, now+time.Second)
			if cp.Level < 0 || cp.Level > l.sh.Capacity(&cp) || cp.Inherited < 0 || cp.Inherited > l.sh.Burst {
				t.Fatalf("%q: pool %+v out of bounds", k, cp)
			}
		}
		if err := l.CheckMemory(); err != nil {
			t.Fatal(err)
		}
	})
}

// TestWarmupAfterHandOverToUnseenOwner: n2 restarts and, as the key's
// global owner in its view (n0, n1, n2), warms the key up: n0, its owner
// so far, answers and hands its bucket over. n0's view (n0, n1) has not
// seen n2's join, so n0 is still the key's owner in it; when it next
// checks the key it must not warm it up again (it would ask n1 alone and,
// with every answer, start from a full bucket at the last answer: a second
// bucket beside the one n2 took over, which TestEnvelopeUnderFaults found
// as 1.5 tokens over b + r*T). It starts conservatively from its answer
// + takeover instead: the levels plus leases across owners stay within the
// burst after every call, and the admitted tokens within b + r*T.
func TestWarmupAfterHandOverToUnseenOwner(t *testing.T) {
	rate := bucket.Rate{Tokens: 1000, Per: time.Second}
	const burst = 50
	c := newWCluster(t, rate, burst)
	two := []strategy.NodeID{"n0", "n1"}
	base := c.cfg
	c.cfg = func(id strategy.NodeID) strategy.Config {
		cfg := base(id)
		if id != "n2" {
			cfg.Members = two // n0 and n1 have not seen n2 (yet)
		}
		return cfg
	}
	key := ""
	for i := range 10000 {
		k := fmt.Sprintf("k%d", i)
		if rendezvous.Owner(k, wmembers) == "n2" && rendezvous.Owner(k, two) == "n0" {
			key = k
			break
		}
	}
	c.start(0, "n0")
	c.start(0, "n1")
	var rid uint64
	send := func(now time.Duration, id strategy.NodeID, n int) {
		for range n {
			rid++
			c.request(now, id, rid, key)
		}
	}
	send(10*time.Millisecond, "n0", burst) // n0's bucket, full: all admitted
	c.start(30*time.Millisecond, "n2")
	send(30*time.Millisecond, "n2", 1) // n2's warm-up: n0 hands the key over
	if _, ok := c.nodes["n0"].answeredAt(key); !ok || c.nodes["n2"].wu.seq == 0 {
		t.Fatalf("n2 did not warm the key up with n0's answer")
	}
	send(40*time.Millisecond, "n0", burst) // n0, still the owner in its view
	send(50*time.Millisecond, "n2", burst)
	c.tick(time.Second)
	admittedN2 := 0
	for id := uint64(burst + 2); id <= rid; id++ {
		if c.got[id] && id > 2*burst+1 {
			admittedN2++
		}
	}
	if admittedN2 == 0 {
		t.Fatalf("n2 admitted nothing after its warm-up: the test does not exercise two owners")
	}
	checkEnvelope(t, c.admits, rate, burst)
}
