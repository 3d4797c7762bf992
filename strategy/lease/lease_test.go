package lease

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"
	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/rendezvous"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/internal/strattest"
)

var members = []strategy.NodeID{"n0", "n1", "n2"}

// newNode builds a node with rate 10/s, burst 20, latency hint 1ms, hold 0.
func newNode(t testing.TB, self strategy.NodeID, params ...string) *Lease {
	t.Helper()
	return newNodeAt(t, self, bucket.Rate{Tokens: 10, Per: time.Second}, params...)
}

// newNodeAt is newNode at rate.
func newNodeAt(t testing.TB, self strategy.NodeID, rate bucket.Rate, params ...string) *Lease {
	t.Helper()
	p, err := strategy.ParseParams(append([]string{"hold=0s"}, params...))
	if err != nil {
		t.Fatal(err)
	}
	l, err := New(strategy.Config{Self: self, Members: members, Rate: rate, Burst: 20,
		Rand: rand.New(rand.NewPCG(1, 2)), Params: p, LatencyHint: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	l.Start(0, &strategy.Effects{})
	return l
}

func keyOwnedBy(node strategy.NodeID) string {
	for i := 0; ; i++ {
		k := string(rune('a'+i%26)) + string(rune('a'+i/26))
		if rendezvous.Owner(k, members) == node {
			return k
		}
	}
}

func msg(m *peerv1.LeaseMessage) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		panic(err)
	}
	return b
}

func ask(key string, seq uint64, tokens, at int64) []byte {
	return msg(&peerv1.LeaseMessage{Body: &peerv1.LeaseMessage_Ask{Ask: &peerv1.LeaseAsk{Key: key, Seq: seq, Tokens: tokens, AskedAtNs: at}}})
}

func replicas(states ...*peerv1.LeaseReplica) []byte { return replicasAt(0, states...) }

// replica is one state alone (LeaseMessage.replica): its time absolute.
func replica(s *peerv1.LeaseReplica) []byte {
	return msg(&peerv1.LeaseMessage{Body: &peerv1.LeaseMessage_Replica{Replica: s}})
}

// replicasAt is replicas with base_ns set: the states' times count from it.
func replicasAt(baseNs int64, states ...*peerv1.LeaseReplica) []byte {
	return msg(&peerv1.LeaseMessage{Body: &peerv1.LeaseMessage_Replicas{Replicas: &peerv1.LeaseReplicas{BaseNs: baseNs, States: states}}})
}

func decode(t *testing.T, b []byte) *peerv1.LeaseMessage {
	t.Helper()
	var m peerv1.LeaseMessage
	if err := proto.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return &m
}

// make17 is one partly used lease more than an ask may report.
func make17() []*peerv1.LeaseUsed {
	u := make([]*peerv1.LeaseUsed, maxSpent+1)
	for i := range u {
		u[i] = &peerv1.LeaseUsed{Seq: uint64(i + 1), Tokens: 1}
	}
	return u
}

func TestNewRejectsBadParams(t *testing.T) {
	for _, p := range []string{"period=0s", "ttl=1ms", "min_lease=0", "retries=-1", "timeout=0s", "nonsense=1", "window=x", "replicas=0", "sync=0s"} {
		ps, _ := strategy.ParseParams([]string{p})
		_, err := New(strategy.Config{Self: "n0", Members: members, Rate: bucket.Rate{Tokens: 1, Per: time.Second}, Burst: 2,
			Rand: rand.New(rand.NewPCG(1, 2)), Params: ps})
		if err == nil {
			t.Errorf("%s: no error", p)
		}
	}
}

// TestReceiveRejectsBadMessages: every malformed or out-of-bounds message is
// an error and changes no state.
func TestReceiveRejectsBadMessages(t *testing.T) {
	key := keyOwnedBy("n0")
	now := 10 * time.Second
	for name, payload := range map[string][]byte{
		"garbage":                {0xff, 0xff, 0xff},
		"no body":                {},
		"empty key":              ask("", 1, 1, 0),
		"ask above burst":        ask(key, 1, 21, int64(now)),
		"ask zero tokens":        ask(key, 1, 0, int64(now)),
		"ask seq 0":              ask(key, 0, 1, int64(now)),
		"ask in future":          ask(key, 1, 1, int64(now+time.Second)),
		"ask negative":           ask(key, 1, 1, -1),
		"ask used 0":             msg(&peerv1.LeaseMessage{Body: &peerv1.LeaseMessage_Ask{Ask: &peerv1.LeaseAsk{Key: key, Seq: 1, Tokens: 1, AskedAtNs: int64(now), Used: []*peerv1.LeaseUsed{{Seq: 1}}}}}),
		"ask used above burst":   msg(&peerv1.LeaseMessage{Body: &peerv1.LeaseMessage_Ask{Ask: &peerv1.LeaseAsk{Key: key, Seq: 1, Tokens: 1, AskedAtNs: int64(now), Used: []*peerv1.LeaseUsed{{Seq: 1, Tokens: 21}}}}}),
		"ask used too many":      msg(&peerv1.LeaseMessage{Body: &peerv1.LeaseMessage_Ask{Ask: &peerv1.LeaseAsk{Key: key, Seq: 1, Tokens: 1, AskedAtNs: int64(now), Used: make17()}}}),
		"negative tokens":        msg(&peerv1.LeaseMessage{Body: &peerv1.LeaseMessage_Forward{Forward: &peerv1.LeaseForward{RequestId: 1, Key: key, ExtraTokens: -1}}}),
		"forward future":         msg(&peerv1.LeaseMessage{Body: &peerv1.LeaseMessage_Forward{Forward: &peerv1.LeaseForward{RequestId: 1, Key: key, ArrivalNs: int64(now + time.Hour)}}}),
		"return negative":        msg(&peerv1.LeaseMessage{Body: &peerv1.LeaseMessage_Return{Return: &peerv1.LeaseReturn{Key: key, Seq: 1, Unused: -1}}}),
		"grant above burst":      msg(&peerv1.LeaseMessage{Body: &peerv1.LeaseMessage_Grant{Grant: &peerv1.LeaseGrant{Key: key, Seq: 1, Tokens: 21}}}),
		"grant negative":         msg(&peerv1.LeaseMessage{Body: &peerv1.LeaseMessage_Grant{Grant: &peerv1.LeaseGrant{Key: key, Seq: 1, Tokens: -1}}}),
		"grant far expiry":       msg(&peerv1.LeaseMessage{Body: &peerv1.LeaseMessage_Grant{Grant: &peerv1.LeaseGrant{Key: key, Seq: 1, Tokens: 1, ExpiresNs: int64(now + time.Hour)}}}),
		"max wait negative":      msg(&peerv1.LeaseMessage{Body: &peerv1.LeaseMessage_Forward{Forward: &peerv1.LeaseForward{RequestId: 1, Key: key, ArrivalNs: int64(now), MaxWaitNs: -1}}}),
		"max wait too long":      msg(&peerv1.LeaseMessage{Body: &peerv1.LeaseMessage_Forward{Forward: &peerv1.LeaseForward{RequestId: 1, Key: key, ArrivalNs: int64(now), MaxWaitNs: int64(2 * time.Hour)}}}),
		"replica empty key":      replicas(&peerv1.LeaseReplica{Key: "", SinceBaseNs: int64(now)}),
		"replica above burst":    replicas(&peerv1.LeaseReplica{Key: key, LevelTicks: 21 * int64(time.Second), SinceBaseNs: int64(now)}),
		"replica below 0":        replicas(&peerv1.LeaseReplica{Key: key, LevelTicks: -1, SinceBaseNs: int64(now)}),
		"replica level+lent":     replicas(&peerv1.LeaseReplica{Key: key, LevelTicks: 15 * int64(time.Second), LentTokens: 6, SinceBaseNs: int64(now)}),
		"replica lent > b":       replicas(&peerv1.LeaseReplica{Key: key, LentTokens: 21, SinceBaseNs: int64(now)}),
		"replica lent < 0":       replicas(&peerv1.LeaseReplica{Key: key, LentTokens: -1, SinceBaseNs: int64(now)}),
		"replica far future":     replicas(&peerv1.LeaseReplica{Key: key, SinceBaseNs: int64(now + time.Hour)}),
		"replica negative at":    replicas(&peerv1.LeaseReplica{Key: key, SinceBaseNs: -1}),
		"replica far lent":       replicas(&peerv1.LeaseReplica{Key: key, LentTokens: 1, LentForNs: int64(time.Hour), SinceBaseNs: int64(now)}),
		"replica negative lent":  replicas(&peerv1.LeaseReplica{Key: key, LentTokens: 1, LentForNs: -1, SinceBaseNs: int64(now)}),
		"replica far base":       replicasAt(int64(now+time.Hour), &peerv1.LeaseReplica{Key: key}),
		"replica negative base":  replicasAt(-1, &peerv1.LeaseReplica{Key: key, SinceBaseNs: int64(now)}),
		"replica far base+since": replicasAt(int64(now), &peerv1.LeaseReplica{Key: key, SinceBaseNs: int64(time.Hour)}),
		"replica since overflow": replicasAt(int64(now), &peerv1.LeaseReplica{Key: key, SinceBaseNs: math.MaxInt64}),
		"replica lent overflow":  replicasAt(int64(now), &peerv1.LeaseReplica{Key: key, LentTokens: 1, LentForNs: math.MaxInt64}),
		"replica far base+lent":  replicasAt(int64(now), &peerv1.LeaseReplica{Key: key, LentTokens: 1, SinceBaseNs: int64(time.Second), LentForNs: int64(time.Second + 500*time.Millisecond)}),
		"one replica no key":     replica(&peerv1.LeaseReplica{SinceBaseNs: int64(now)}),
		"one replica future":     replica(&peerv1.LeaseReplica{Key: key, SinceBaseNs: int64(now + time.Hour)}),
		"one replica far lent":   replica(&peerv1.LeaseReplica{Key: key, LentTokens: 1, LentForNs: int64(time.Hour), SinceBaseNs: int64(now)}),
		"replica one bad of two": replicas(&peerv1.LeaseReplica{Key: key, SinceBaseNs: int64(now)}, &peerv1.LeaseReplica{Key: key, LevelTicks: -5, SinceBaseNs: int64(now)}),
		"state query empty key":  msg(&peerv1.LeaseMessage{Body: &peerv1.LeaseMessage_StateQuery{StateQuery: &peerv1.LeaseStateQuery{Id: 1}}}),
		"state none empty key":   msg(&peerv1.LeaseMessage{Body: &peerv1.LeaseMessage_State{State: &peerv1.LeaseState{Id: 1, None: true}}}),
		"state above burst":      msg(&peerv1.LeaseMessage{Body: &peerv1.LeaseMessage_State{State: &peerv1.LeaseState{Key: key, Id: 1, LevelTicks: 21 * int64(time.Second), AtNs: int64(now)}}}),
		"state far future":       msg(&peerv1.LeaseMessage{Body: &peerv1.LeaseMessage_State{State: &peerv1.LeaseState{Key: key, Id: 1, AtNs: int64(now + time.Hour)}}}),
	} {
		l := newNode(t, "n0")
		before := l.StateBytes()
		fx := &strategy.Effects{}
		if err := l.Receive(now, "n1", payload, fx); err == nil {
			t.Errorf("%s: no error", name)
		}
		if l.StateBytes() != before || len(fx.Messages)+len(fx.Decisions)+len(fx.Wakeups) != 0 {
			t.Errorf("%s: state or effects changed", name)
		}
	}
}

// TestGrantOnceAndLocalDecisions: a holder with demand asks, the owner
// grants out of its bucket once (a duplicate ask gets the same grant and
// takes nothing more), the holder decides locally with the lease, and the
// unused tokens come back once at expiry.
func TestGrantOnceAndLocalDecisions(t *testing.T) {
	key := keyOwnedBy("n0")
	owner, holder := newNode(t, "n0", "period=1s"), newNode(t, "n1", "period=1s")
	r := strattest.NewRelay(t, []strategy.NodeID{"n0", "n1"}, []strategy.Strategy{owner, holder})
	r.Dup = true // every message is delivered twice (newNode started both)
	local := 0
	now := time.Duration(0)
	for i := range 40 { // 40 requests in 400 ms: demand 100/s, asks ceil(100*1) capped at burst 20
		now = time.Duration(i) * 10 * time.Millisecond
		if _, ok := r.Request(now, "n1", strategy.Request{ID: uint64(i), Key: key, Tokens: 1, Arrival: now}); ok {
			local++
		}
	}
	all := make([]uint64, 40)
	for i := range all {
		all[i] = uint64(i)
	}
	allowed, _ := r.Allowed(all...)
	if local == 0 {
		t.Fatalf("no request was decided locally")
	}
	if allowed > 20+4 { // burst + 10/s over 0.39 s, rounded up
		t.Fatalf("allowed %d requests, more than burst + r*T", allowed)
	}
	// The holder reports a used-up lease at once (a return of 0 unused
	// tokens), so the owner may have none out now; it has granted some.
	if len(owner.grants) == 0 {
		t.Fatalf("owner granted no lease")
	}
	level, leased, ok := owner.Audit(now, key)
	if !ok {
		t.Fatalf("owner has no bucket for %q", key)
	}
	if level/owner.sh.per+leased > 20 {
		t.Fatalf("level %d + leased %d exceed the burst", level/owner.sh.per, leased)
	}
	// After the leases expire (ttl 2s) and the holder returns the unused
	// tokens, the owner's bucket is back to full.
	for now < 4*time.Second {
		now += 100 * time.Millisecond
		r.Tick(now)
	}
	if _, leased, ok := owner.Audit(now, key); ok && leased != 0 {
		t.Fatalf("leases outstanding after expiry: %d", leased)
	}
	if len(holder.returns) != 0 {
		t.Fatalf("returns not acknowledged: %d", len(holder.returns))
	}
}

// TestDryHintRefusesLocally: a refused forward's hint makes the holder
// refuse the next requests locally until the owner's bucket has a token.
func TestDryHintRefusesLocally(t *testing.T) {
	key := keyOwnedBy("n0")
	holder := newNode(t, "n1")
	fx := &strategy.Effects{}
	if _, ok := holder.Request(0, strategy.Request{ID: 1, Key: key, Tokens: 1, Arrival: 0}, fx); ok {
		t.Fatal("decided without a lease")
	}
	v := msg(&peerv1.LeaseMessage{Body: &peerv1.LeaseMessage_Verdict{Verdict: &peerv1.LeaseVerdict{RequestId: 1, Allowed: false, EmptyForUs: 50_000}}})
	fx = &strategy.Effects{}
	if err := holder.Receive(2*time.Millisecond, "n0", v, fx); err != nil {
		t.Fatal(err)
	}
	fx = &strategy.Effects{}
	d, ok := holder.Request(10*time.Millisecond, strategy.Request{ID: 2, Key: key, Tokens: 1, Arrival: 10 * time.Millisecond}, fx)
	if !ok || d.Allowed || len(fx.Messages) != 0 {
		t.Fatalf("want a local refusal before the hint ends, got decided=%v allowed=%v messages=%d", ok, d.Allowed, len(fx.Messages))
	}
	fx = &strategy.Effects{}
	if _, ok := holder.Request(60*time.Millisecond, strategy.Request{ID: 3, Key: key, Tokens: 1, Arrival: 60 * time.Millisecond}, fx); ok {
		t.Fatal("decided locally after the hint ended")
	}
}

// TestTakeoverStartsEmpty: with replicas=1 (no warm-up) a restarted owner
// starts its buckets empty and refilling only after ttl (no fresh burst).
func TestTakeoverStartsEmpty(t *testing.T) {
	key := keyOwnedBy("n0")
	p, _ := strategy.ParseParams([]string{"hold=0s", "period=100ms", "takeover=200ms", "replicas=1"}) // ttl 200ms
	l, err := New(strategy.Config{Self: "n0", Members: members, Rate: bucket.Rate{Tokens: 10, Per: time.Second}, Burst: 20,
		Rand: rand.New(rand.NewPCG(1, 2)), Params: p})
	if err != nil {
		t.Fatal(err)
	}
	l.Start(5*time.Second, &strategy.Effects{})
	fx := &strategy.Effects{}
	at := 5*time.Second + 150*time.Millisecond
	if d, ok := l.Request(at, strategy.Request{ID: 1, Key: key, Tokens: 1, Arrival: at}, fx); !ok || d.Allowed {
		t.Fatalf("restarted owner admitted within ttl: decided %v allowed %v", ok, d.Allowed)
	}
	at = 5*time.Second + 400*time.Millisecond // 200ms of refill at 10/s: 2 tokens
	var n int
	for i := range 5 {
		if d, ok := l.Request(at, strategy.Request{ID: uint64(2 + i), Key: key, Tokens: 1, Arrival: at}, fx); ok && d.Allowed {
			n++
		}
	}
	if n != 2 {
		t.Fatalf("admitted %d after 200ms of refill from empty, want 2", n)
	}
}

// FuzzReceive: any payload from any peer, at any time, never panics, and a
// refused one changes no state.
func FuzzReceive(f *testing.F) {
	key := keyOwnedBy("n0")
	f.Add(ask(key, 1, 3, 0), int64(0))
	f.Add(msg(&peerv1.LeaseMessage{Body: &peerv1.LeaseMessage_Ask{Ask: &peerv1.LeaseAsk{Key: key, Seq: 2, Tokens: 3, AskedAtNs: 1e8,
		Spent: []uint64{1}, Used: []*peerv1.LeaseUsed{{Seq: 1, Tokens: 2}}}}}), int64(1e8))
	f.Add(msg(&peerv1.LeaseMessage{Body: &peerv1.LeaseMessage_Grant{Grant: &peerv1.LeaseGrant{Key: key, Seq: 1, Tokens: 3, ExpiresNs: 1e9}}}), int64(1e8))
	f.Add(msg(&peerv1.LeaseMessage{Body: &peerv1.LeaseMessage_Return{Return: &peerv1.LeaseReturn{Key: key, Seq: 1, Unused: 2}}}), int64(1e8))
	f.Add(msg(&peerv1.LeaseMessage{Body: &peerv1.LeaseMessage_Verdict{Verdict: &peerv1.LeaseVerdict{RequestId: 1, EmptyForUs: 5}}}), int64(1e6))
	f.Add(msg(&peerv1.LeaseMessage{Body: &peerv1.LeaseMessage_Forward{Forward: &peerv1.LeaseForward{RequestId: 7, Key: key, ArrivalNs: 5}}}), int64(1e6))
	f.Add([]byte{0x0a, 0x00}, int64(0))
	f.Add(replicas(&peerv1.LeaseReplica{Key: key, LevelTicks: 3e9, SinceBaseNs: 1e8, LentTokens: 2, LentForNs: 4e8, Handover: true}), int64(1e8))
	f.Add(replica(&peerv1.LeaseReplica{Key: key, LevelTicks: 3e9, SinceBaseNs: 1e8, LentTokens: 2, LentForNs: 4e8}), int64(1e8))
	f.Add(replicasAt(5e7, &peerv1.LeaseReplica{Key: key, LevelTicks: 3e9, SinceBaseNs: 5e7, LentTokens: 2, LentForNs: 4e8},
		&peerv1.LeaseReplica{Key: keyOwnedBy("n1"), LevelTicks: 2e9}), int64(1e8))
	f.Add(replicas(&peerv1.LeaseReplica{Key: keyOwnedBy("n2"), LevelTicks: 1e9, SinceBaseNs: 1e8}), int64(1e8))
	f.Add(msg(&peerv1.LeaseMessage{Body: &peerv1.LeaseMessage_StateQuery{StateQuery: &peerv1.LeaseStateQuery{Key: key, Id: 1}}}), int64(1e8))
	f.Add(msg(&peerv1.LeaseMessage{Body: &peerv1.LeaseMessage_State{State: &peerv1.LeaseState{Key: key, Id: 1, LevelTicks: 3e9, AtNs: 1e8, LentTokens: 2, LentUntilNs: 5e8}}}), int64(1e8))
	f.Add(msg(&peerv1.LeaseMessage{Body: &peerv1.LeaseMessage_State{State: &peerv1.LeaseState{Key: key, Id: 1, None: true}}}), int64(1e8))
	f.Fuzz(func(t *testing.T, payload []byte, nowNs int64) {
		if nowNs < 0 {
			nowNs = -nowNs
		}
		now := time.Duration(nowNs % int64(1000*time.Hour))
		l := newNode(t, "n0")
		// some state first: a forward pending at n0 for a key n1 owns, and
		// a lease of n0's own key granted to n1
		fx := &strategy.Effects{}
		other := keyOwnedBy("n1")
		l.Request(0, strategy.Request{ID: 1, Key: other, Tokens: 1, Arrival: 0}, fx)
		if err := l.Receive(0, "n1", ask(key, 1, 3, 0), fx); err != nil {
			t.Fatal(err)
		}
		l.Tick(0, fx)
		before := l.StateBytes()
		lvl, leased, _ := l.Audit(0, key)
		fx = &strategy.Effects{}
		err := l.Receive(now, "n1", payload, fx)
		if err != nil {
			lvl2, leased2, _ := l.Audit(0, key)
			if l.StateBytes() != before || lvl2 != lvl || leased2 != leased || len(fx.Messages)+len(fx.Decisions) != 0 {
				t.Fatalf("refused payload changed state: %v", err)
			}
		}
		if err := Conserved(map[strategy.NodeID]*Lease{"n0": l}, 20, now); err != nil {
			t.Fatal(err)
		}
		l.Tick(now+time.Hour, &strategy.Effects{})
	})
}

// A verdict whose delay exceeds the request's max wait (or comes with a
// refusal) is refused as an error and decides nothing.
func TestVerdictDelayBounded(t *testing.T) {
	key := keyOwnedBy("n1")
	for name, v := range map[string]*peerv1.LeaseVerdict{
		"delay above max wait": {RequestId: 7, Allowed: true, DelayNs: int64(2 * time.Second)},
		"negative delay":       {RequestId: 7, Allowed: true, DelayNs: -1},
		"delay on a refusal":   {RequestId: 7, Allowed: false, DelayNs: 1},
	} {
		l := newNode(t, "n0", "max_wait=1s")
		fx := &strategy.Effects{}
		if _, ok := l.RequestWait(0, strategy.Request{ID: 7, Key: key, Tokens: 1}, time.Second, fx); ok {
			t.Fatalf("%s: decided at once, want forwarded to n1", name)
		}
		fx.Reset()
		if err := l.Receive(time.Millisecond, "n1", msg(&peerv1.LeaseMessage{Body: &peerv1.LeaseMessage_Verdict{Verdict: v}}), fx); err == nil {
			t.Errorf("%s: no error", name)
		}
		if len(fx.Decisions) != 0 {
			t.Errorf("%s: decided %v", name, fx.Decisions)
		}
	}
}

// TestSpentLeaseReleasedAtOnce: the request that takes a lease's last
// token sends its owner a return of 0 unused tokens, which the owner takes
// as the lease's release (its room back in the bucket, nothing credited)
// without an acknowledgement; a second copy changes nothing.
func TestSpentLeaseReleasedAtOnce(t *testing.T) {
	key := keyOwnedBy("n0")
	owner, holder := newNode(t, "n0"), newNode(t, "n1")
	now := 10 * time.Second
	// a lease of 3 tokens: n1 asked (seq seqBase+1) and n0 granted
	h := holder.holding(key)
	h.seq++
	h.asking, h.askTo, h.askAt, h.askTokens = true, "n0", now, 3
	h.sentTo[h.seq] = "n0"
	fx := &strategy.Effects{}
	if err := owner.Receive(now, "n1", ask(key, h.seq, 3, int64(now)), fx); err != nil {
		t.Fatal(err)
	}
	owner.Tick(now, fx)
	if len(fx.Messages) != 1 {
		t.Fatalf("owner sent %d messages, want the grant", len(fx.Messages))
	}
	if err := holder.Receive(now, "n0", fx.Messages[0].Payload, &strategy.Effects{}); err != nil {
		t.Fatal(err)
	}
	lvl0, leased, _ := owner.Audit(now, key)
	if leased != 3 {
		t.Fatalf("owner has %d tokens lent, want 3", leased)
	}
	var spent []byte
	for i := range 3 {
		fx = &strategy.Effects{}
		d, ok := holder.Request(now, strategy.Request{ID: uint64(i + 1), Key: key, Tokens: 1, Arrival: now}, fx)
		if !ok || !d.Allowed {
			t.Fatalf("request %d: decided %v allowed %v, want a leased token", i, ok, d.Allowed)
		}
		for _, m := range fx.Messages {
			if r := decode(t, m.Payload).GetReturn(); r != nil {
				if i != 2 || m.To != "n0" || r.Unused != 0 || r.Seq != h.seq {
					t.Fatalf("request %d sent return %+v to %s; want only the last, 0 unused, to n0", i, r, m.To)
				}
				spent = m.Payload
			}
		}
	}
	if spent == nil {
		t.Fatal("no return for the used-up lease")
	}
	if ls := holder.keys[key].leases; len(ls) != 1 || ls[0].tokens != 0 {
		t.Fatalf("holder's leases %+v; want the used-up one, kept for the next ask's report", ls)
	}
	for copy := range 2 {
		fx = &strategy.Effects{}
		if err := owner.Receive(now, "n1", spent, fx); err != nil {
			t.Fatal(err)
		}
		owner.Tick(now, fx)
		for _, m := range fx.Messages {
			if decode(t, m.Payload).GetReturnAck() != nil {
				t.Fatalf("copy %d: a spent lease's return was acknowledged", copy)
			}
		}
		lvl, leased, _ := owner.Audit(now, key)
		if leased != 0 || lvl != lvl0 {
			t.Fatalf("copy %d: owner level %d leased %d; want the lease released (0) and the level unchanged (%d)", copy, lvl, leased, lvl0)
		}
	}
}

// reportUsed delivers to owner, at now, holder n1's ask seq of key (5
// tokens) again, reporting the partly used leases u, and ticks it.
func reportUsed(t *testing.T, owner *Lease, key string, seq uint64, now time.Duration, u ...*peerv1.LeaseUsed) {
	t.Helper()
	b := msg(&peerv1.LeaseMessage{Body: &peerv1.LeaseMessage_Ask{Ask: &peerv1.LeaseAsk{Key: key, Seq: seq, Tokens: 5, AskedAtNs: int64(now), Used: u}}})
	fx := &strategy.Effects{}
	if err := owner.Receive(now, "n1", b, fx); err != nil {
		t.Fatal(err)
	}
	owner.Tick(now, fx)
}

// TestPartlyUsedLeaseReleasedWithAsk: a holder's ask reports the tokens
// used so far of a lease that still holds some (those of the driver's open
// allowance not counted: they are out, not used); the owner gives their
// room back at once, nothing credited, keeps the rest lent, and takes a
// resent report once; a later return credits what is left unused.
func TestPartlyUsedLeaseReleasedWithAsk(t *testing.T) {
	key := keyOwnedBy("n0")
	rate := bucket.Rate{Tokens: 1000, Per: time.Second} // an allowance needs a rate of some tokens per AllowanceWindow
	owner, holder := newNodeAt(t, "n0", rate), newNodeAt(t, "n1", rate)
	now := 10 * time.Second
	h := holder.holding(key)
	h.seq++
	seq := h.seq
	h.asking, h.askTo, h.askAt, h.askTokens = true, "n0", now, 5
	h.sentTo[seq] = "n0"
	fx := &strategy.Effects{}
	if err := owner.Receive(now, "n1", ask(key, seq, 5, int64(now)), fx); err != nil {
		t.Fatal(err)
	}
	owner.Tick(now, fx)
	if err := holder.Receive(now, "n0", fx.Messages[0].Payload, &strategy.Effects{}); err != nil {
		t.Fatal(err)
	}
	lvl0, leased, _ := owner.Audit(now, key)
	if leased != 5 {
		t.Fatalf("owner has %d tokens lent, want 5", leased)
	}
	out := func() int64 { return owner.pools[key].askers["n1"].out } // what untilDry counts n1 holds
	if out() != 5 {
		t.Fatalf("owner counts %d tokens out at n1, want 5", out())
	}
	for i := range 2 {
		if d, ok := holder.Request(now, strategy.Request{ID: uint64(i + 1), Key: key, Tokens: 1, Arrival: now}, &strategy.Effects{}); !ok || !d.Allowed {
			t.Fatalf("request %d: decided %v allowed %v, want a leased token", i, ok, d.Allowed)
		}
	}
	if g, _ := holder.Grant(now, key, 1, &strategy.Effects{}); g != 1 {
		t.Fatalf("allowance of %d tokens, want 1", g)
	}
	used := h.used(now, "n0", nil)
	if len(used) != 1 || used[0].seq != seq || used[0].tokens != 2 {
		t.Fatalf("holder reports %v; want seq %d with 2 used (the allowance's token is out, not used)", used, seq)
	}
	if other := h.used(now, "n2", nil); len(other) != 0 {
		t.Fatalf("holder reports %v to n2, which granted nothing", other)
	}
	for copy := range 2 {
		reportUsed(t, owner, key, seq, now, usedMsgs(used)...)
		lvl, leased, _ := owner.Audit(now, key)
		if leased != 3 || lvl != lvl0 || out() != 3 {
			t.Fatalf("copy %d: owner level %d leased %d, %d out at n1; want 3 lent and out, the level unchanged (%d)", copy, lvl, leased, out(), lvl0)
		}
	}
	// the return of the 3 left unused: credited, the lease released
	fx = &strategy.Effects{}
	if err := owner.Receive(now, "n1", msg(&peerv1.LeaseMessage{Body: &peerv1.LeaseMessage_Return{Return: &peerv1.LeaseReturn{Key: key, Seq: seq, Unused: 3}}}), fx); err != nil {
		t.Fatal(err)
	}
	owner.Tick(now, fx)
	if lvl, leased, _ := owner.Audit(now, key); leased != 0 || lvl != lvl0+3*owner.sh.per || out() != 0 {
		t.Fatalf("after the return: owner level %d leased %d, %d out at n1; want 0 lent and out, the level %d", lvl, leased, out(), lvl0+3*owner.sh.per)
	}
}

// TestPartlyUsedReportCappedAtTheGrant: a report of more used tokens than
// the grant held releases the grant's tokens, no more, and credits
// nothing.
func TestPartlyUsedReportCappedAtTheGrant(t *testing.T) {
	key := keyOwnedBy("n0")
	owner := newNodeAt(t, "n0", bucket.Rate{Tokens: 1000, Per: time.Second})
	now := 10 * time.Second
	const seq = 7
	fx := &strategy.Effects{}
	if err := owner.Receive(now, "n1", ask(key, seq, 5, int64(now)), fx); err != nil {
		t.Fatal(err)
	}
	owner.Tick(now, fx)
	lvl0, leased, _ := owner.Audit(now, key)
	if leased != 5 {
		t.Fatalf("owner has %d tokens lent, want 5", leased)
	}
	reportUsed(t, owner, key, seq, now, &peerv1.LeaseUsed{Seq: seq, Tokens: 9})
	if lvl, leased, _ := owner.Audit(now, key); leased != 0 || lvl != lvl0 {
		t.Fatalf("report of 9 used of 5: owner level %d leased %d; want 0 lent and the level unchanged (%d)", lvl, leased, lvl0)
	}
}

// TestDryHintEndsBeforeBucketFills: a partial grant's dry hint lasts at
// most until the owner's bucket could be full again: with a burst that
// refills in 20 ms (20 tokens at 1000/s), not the period (250 ms), else
// the refill would be lost while every holder refuses.
func TestDryHintEndsBeforeBucketFills(t *testing.T) {
	key := keyOwnedBy("n0")
	p, _ := strategy.ParseParams([]string{"hold=0s"})
	owner, err := New(strategy.Config{Self: "n0", Members: members, Rate: bucket.Rate{Tokens: 1000, Per: time.Second}, Burst: 20,
		Rand: rand.New(rand.NewPCG(1, 2)), Params: p, LatencyHint: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	owner.Start(0, &strategy.Effects{})
	now := 10 * time.Second
	for seq, node := range []strategy.NodeID{"n1", "n2"} {
		fx := &strategy.Effects{}
		if err := owner.Receive(now, node, ask(key, uint64(seq+1), 15, int64(now)), fx); err != nil {
			t.Fatal(err)
		}
		owner.Tick(now, fx)
		g := decode(t, fx.Messages[0].Payload).GetGrant()
		switch {
		case seq == 0 && (g.Tokens != 15 || g.EmptyUntilNs != 0):
			t.Fatalf("first grant %+v, want 15 tokens and no hint", g)
		case seq == 1 && g.Tokens != 5:
			t.Fatalf("second grant %+v, want the 5 tokens left", g)
		case seq == 1 && (g.EmptyUntilNs <= int64(now) || g.EmptyUntilNs > int64(now+20*time.Millisecond)):
			t.Fatalf("second grant's hint ends %v after the ask, want within the 20 ms the bucket takes to fill", time.Duration(g.EmptyUntilNs)-now)
		}
	}
}

// keyRanked is a key whose first two nodes in rendezvous order over
// members are first and second.
func keyRanked(first, second strategy.NodeID) string {
	for i := 0; ; i++ {
		k := string(rune('a'+i%26)) + string(rune('a'+i/26%26)) + string(rune('a'+i/676))
		if r := rendezvous.Rank(nil, k, members, 2); r[0] == first && r[1] == second {
			return k
		}
	}
}

// admitted counts the requests of n at instant at (hold 0: decided at
// once) that key's pool admits, IDs from id.
func admitted(l *Lease, key string, at time.Duration, n int, id uint64) int {
	var got int
	for i := range n {
		fx := &strategy.Effects{}
		if d, ok := l.Request(at, strategy.Request{ID: id + uint64(i), Key: key, Tokens: 1, Arrival: at}, fx); ok && d.Allowed {
			got++
		}
	}
	return got
}

// TestTakeoverFromReplica: n1, the second node of n0's key, holds the state
// n0 shipped (5 tokens at 1 s, 3 tokens lent until 1.3 s); when n0 leaves
// its view n1 continues from it (5 + 2 refilled by 1.2 s = 7 tokens, the 3
// lent ones coming back only at 1.3 s, with none unused) instead of
// starting empty; with replicas=1 the state is ignored and the key starts
// empty for takeover.
func TestTakeoverFromReplica(t *testing.T) {
	key := keyRanked("n0", "n1")
	state := replicasAt(int64(time.Second), &peerv1.LeaseReplica{Key: key, LevelTicks: 5 * int64(time.Second),
		LentTokens: 3, LentForNs: int64(300 * time.Millisecond)})
	for _, k := range []string{"1", "2"} {
		l := newNode(t, "n1", "replicas="+k)
		if err := l.Receive(time.Second, "n0", state, &strategy.Effects{}); err != nil {
			t.Fatal(err)
		}
		l.SetMembers(1200*time.Millisecond, []strategy.NodeID{"n1", "n2"}, &strategy.Effects{})
		got := admitted(l, key, 1200*time.Millisecond, 10, 1)
		want := 7
		if k == "1" {
			want = 0
		}
		if got != want {
			t.Fatalf("replicas=%s: admitted %d at the takeover, want %d", k, got, want)
		}
		if k == "1" {
			continue
		}
		// At 1.35 s: 1.5 tokens refilled since 1.2 s, and the 3 lent tokens
		// released at 1.3 s add room (capacity 20), not tokens.
		if got := admitted(l, key, 1350*time.Millisecond, 10, 100); got != 1 {
			t.Fatalf("admitted %d at 1.35 s, want 1 (1.5 tokens refilled)", got)
		}
		if err := Conserved(map[strategy.NodeID]*Lease{"n1": l}, 20, 1350*time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
}

// TestHandoverReplacesConservativeStart: a restarted owner whose warm-up
// query gets no answer starts its key empty; a state from a node that is
// still a member and still decides the key is only merged into that start
// (nothing admitted), and the handover of the node that held the key
// meanwhile replaces it (the key continues from the shipped level). Once
// the start has been used, a handover is merged instead (keeping the more
// consumed).
func TestHandoverReplacesConservativeStart(t *testing.T) {
	key := keyRanked("n0", "n1")
	start := 5 * time.Second
	l := newNode(t, "n0")
	l.Start(start, &strategy.Effects{}) // a restart
	if got := admitted(l, key, start, 3, 1); got != 0 {
		t.Fatalf("restarted owner admitted %d, want 0 (warm-up under way)", got)
	}
	now := start + l.fetchDeadline() // the warm-up times out: conservative start
	fx := &strategy.Effects{}
	l.Tick(now, fx)
	if len(fx.Decisions) != 3 || fx.Decisions[0].Allowed || fx.Decisions[1].Allowed || fx.Decisions[2].Allowed {
		t.Fatalf("after the warm-up timed out: decisions %+v, want 3 refusals", fx.Decisions)
	}
	if got := admitted(l, key, now, 3, 4); got != 0 {
		t.Fatalf("restarted owner admitted %d, want 0 (conservative start)", got)
	}
	st := &peerv1.LeaseReplica{Key: key, LevelTicks: 12 * int64(time.Second), SinceBaseNs: int64(now)}
	if err := l.Receive(now, "n1", replicas(st), &strategy.Effects{}); err != nil {
		t.Fatal(err)
	}
	if got := admitted(l, key, now, 3, 10); got != 0 {
		t.Fatalf("admitted %d after a state without handover, want 0", got)
	}
	st.Handover = true
	if err := l.Receive(now, "n1", replicas(st), &strategy.Effects{}); err != nil {
		t.Fatal(err)
	}
	if got := admitted(l, key, now, 20, 20); got != 12 {
		t.Fatalf("admitted %d after the handover of 12 tokens, want 12", got)
	}
	// Used now: another handover of a fuller bucket does not refill it.
	st.LevelTicks = 20 * int64(time.Second)
	if err := l.Receive(now, "n1", replicas(st), &strategy.Effects{}); err != nil {
		t.Fatal(err)
	}
	if got := admitted(l, key, now, 5, 50); got != 0 {
		t.Fatalf("admitted %d after a second handover into a used bucket, want 0", got)
	}
}

// TestUntilDryCapsLeasesThatOutlastTheBucket: an uncontended grant is cut
// to its holder's demand until the bucket runs dry when the holders'
// latest asks drain it within a period, and left whole otherwise (no
// askers, asks within the refill, a bucket that lasts a period, askers
// older than ttl not counted).
func TestUntilDryCapsLeasesThatOutlastTheBucket(t *testing.T) {
	l := newNodeAt(t, "n0", bucket.Rate{Tokens: 100, Per: time.Second}) // period 250 ms, ttl 500 ms
	now := 10 * time.Second
	q := queued{arrival: now, origin: "n1", tokens: 20}
	p := &pool{}
	if n := l.untilDry(p, q, 20, 30); n != 20 {
		t.Errorf("no askers: %d tokens, want 20", n)
	}
	// 5 holders asking 20 tokens a period: 400 tokens/s against a refill
	// of 100/s drain 300/s; 30 whole tokens last 0.1 s, 0.4 of a period:
	// the ask's share is ceil(20 * 0.4) = 8.
	p.askers = map[strategy.NodeID]askRec{}
	for _, id := range []strategy.NodeID{"n1", "n2", "n3", "n4", "n5"} {
		p.askers[id] = askRec{tokens: 20, at: now - 100*time.Millisecond}
	}
	if n := l.untilDry(p, q, 20, 30); n != 8 {
		t.Errorf("bucket dry in 0.1 s: %d tokens, want 8", n)
	}
	// the holder still holds 5 of its earlier leases: 3 more last it
	// until the bucket runs dry; holding more, it gets 1 (at least one)
	a := p.askers["n1"]
	a.out = 5
	p.askers["n1"] = a
	if n := l.untilDry(p, q, 20, 30); n != 3 {
		t.Errorf("bucket dry in 0.1 s, 5 tokens out: %d tokens, want 3", n)
	}
	a.out = 30
	p.askers["n1"] = a
	if n := l.untilDry(p, q, 20, 30); n != 1 {
		t.Errorf("bucket dry in 0.1 s, 30 tokens out: %d tokens, want 1", n)
	}
	a.out = 0
	p.askers["n1"] = a
	if n := l.untilDry(p, q, 5, 30); n != 5 {
		t.Errorf("bucket dry in 0.1 s, 5 whole asked for: %d tokens, want 5 (never more than n)", n)
	}
	if n := l.untilDry(p, q, 20, 0); n != 1 {
		t.Errorf("bucket dry now: %d tokens, want 1 (at least one)", n)
	}
	if n := l.untilDry(p, q, 20, 100); n != 20 {
		t.Errorf("bucket lasts 0.33 s, more than a period: %d tokens, want 20", n)
	}
	// the same askers older than ttl: no demand left but the ask's own
	for id := range p.askers {
		p.askers[id] = askRec{tokens: 20, at: now - 600*time.Millisecond}
	}
	p.askers["n1"] = askRec{tokens: 20, at: now}
	if n := l.untilDry(p, q, 20, 30); n != 20 {
		t.Errorf("one asker within ttl (80 tokens/s, below the refill): %d tokens, want 20", n)
	}
}
