package owner

import (
	"math/rand/v2"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"
	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/rendezvous"
	"github.com/tokenmesh/tokenmesh/strategy"
)

var members = []strategy.NodeID{"n0", "n1", "n2"}

func newNode(t testing.TB, self strategy.NodeID, params ...string) *Owner {
	t.Helper()
	p, err := strategy.ParseParams(params)
	if err != nil {
		t.Fatal(err)
	}
	o, err := New(strategy.Config{Self: self, Members: members, Rate: bucket.Rate{Tokens: 1, Per: time.Second}, Burst: 2,
		Rand: rand.New(rand.NewPCG(1, 2)), Params: p, LatencyHint: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	o.Start(0, &strategy.Effects{})
	return o
}

// keyOwnedBy finds a key whose rendezvous owner is node.
func keyOwnedBy(node strategy.NodeID) string {
	for i := 0; ; i++ {
		k := string(rune('a'+i%26)) + string(rune('a'+i/26))
		if rendezvous.Owner(k, members) == node {
			return k
		}
	}
}

func forward(id uint64, key string, tokens, arrival int64) []byte {
	b, _ := proto.Marshal(&peerv1.OwnerMessage{Body: &peerv1.OwnerMessage_Forward{Forward: &peerv1.OwnerForward{
		RequestId: id, Key: key, Tokens: tokens, ArrivalNs: arrival}}})
	return b
}

func TestReceiveRejectsBadMessages(t *testing.T) {
	o := newNode(t, "n0")
	before := o.StateBytes()
	for name, payload := range map[string][]byte{
		"garbage":         {0xff, 0xff, 0xff},
		"no body":         {},
		"empty key":       forward(1, "", 1, 0),
		"zero tokens":     forward(1, "k", 0, 0),
		"negative arrive": forward(1, "k", 1, -5),
	} {
		fx := &strategy.Effects{}
		if err := o.Receive(time.Second, "n1", payload, fx); err == nil {
			t.Errorf("%s: accepted", name)
		}
		if len(fx.Messages)+len(fx.Decisions)+len(fx.Wakeups) != 0 || o.StateBytes() != before {
			t.Errorf("%s: a refused message changed state or produced effects", name)
		}
	}
}

// A forward or charge whose arrival is ahead of the owner's clock (skew,
// or a forged frame from a member; charges may be up to slack ahead) is
// taken at the owner's now: it must not advance the key's bucket into the
// future, where every request decided on time after it would be a late
// decision held to the tokens spared since (bucket.Bucket), refused for
// as long as the arrival was ahead.
func TestFutureArrivalDoesNotLockKey(t *testing.T) {
	o := newNode(t, "n0", "slack=5s") // 1/s, burst 2, hold 1ms
	key := keyOwnedBy("n0")
	fx := &strategy.Effects{}
	if err := o.Receive(time.Second, "n1", chargeMsg(1, key, 1, int64(5*time.Second)), fx); err != nil {
		t.Fatal(err)
	}
	fx.Reset()
	now := time.Second + 10*time.Millisecond
	if _, decided := o.Request(now, strategy.Request{ID: 1, Key: key, Tokens: 1, Arrival: now}, fx); decided {
		t.Fatal("decided before its hold")
	}
	o.Tick(now+2*time.Millisecond, fx)
	if len(fx.Decisions) != 1 || !fx.Decisions[0].Allowed {
		t.Fatalf("after a charge with an arrival 4 s ahead, the owner's own request (1 of 2 tokens left) got %+v, want admitted", fx.Decisions)
	}
}

// A forward retransmitted after its verdict was lost is decided once: the
// owner sends the same verdict again and takes no second token.
func TestDuplicateForwardDecidedOnce(t *testing.T) {
	o := newNode(t, "n0")
	key := keyOwnedBy("n0")
	fx := &strategy.Effects{}
	for i := 0; i < 3; i++ {
		if err := o.Receive(10*time.Millisecond, "n1", forward(7, key, 2, int64(9*time.Millisecond)), fx); err != nil {
			t.Fatal(err)
		}
	}
	fx.Reset()
	o.Tick(10*time.Millisecond, fx)
	if len(fx.Messages) != 1 {
		t.Fatalf("%d verdicts for one request, want 1", len(fx.Messages))
	}
	fx.Reset()
	if err := o.Receive(20*time.Millisecond, "n1", forward(7, key, 2, int64(9*time.Millisecond)), fx); err != nil {
		t.Fatal(err)
	}
	var m peerv1.OwnerMessage
	if len(fx.Messages) != 1 || proto.Unmarshal(fx.Messages[0].Payload, &m) != nil || !m.GetVerdict().GetAllowed() {
		t.Fatalf("retransmission after the verdict: got %d messages, want the same verdict (allowed) again", len(fx.Messages))
	}
	// The 2-token burst was taken once: a new 1-token request at the same time is refused.
	fx.Reset()
	if err := o.Receive(20*time.Millisecond, "n2", forward(8, key, 1, int64(9*time.Millisecond)), fx); err != nil {
		t.Fatal(err)
	}
	o.Tick(20*time.Millisecond, fx)
	// The verdict for request 8 (the tick also ships the level to the
	// key's replica, so it is not necessarily the last message).
	var v8 *peerv1.OwnerVerdict
	for _, msg := range fx.Messages {
		if err := proto.Unmarshal(msg.Payload, &m); err != nil {
			t.Fatal(err)
		}
		if v := m.GetVerdict(); v != nil && v.RequestId == 8 {
			v8 = v
		}
	}
	if v8 == nil {
		t.Fatal("no verdict for request 8")
	}
	if v8.Allowed {
		t.Fatal("a second request was admitted: the duplicate took no token, or took two")
	}
}

// Without a verdict the forwarder retransmits, then answers by fail_open.
func TestRetransmitThenTimeout(t *testing.T) {
	for _, open := range []bool{true, false} {
		p := "fail_open=false"
		if open {
			p = "fail_open=true"
		}
		o := newNode(t, "n1", p, "timeout=90ms", "retries=2")
		key := keyOwnedBy("n0")
		fx := &strategy.Effects{}
		if _, decided := o.Request(0, strategy.Request{ID: 1, Key: key, Tokens: 1}, fx); decided {
			t.Fatal("a request for another node's key was decided locally")
		}
		sends, charges := len(fx.Messages), 0
		for now := time.Duration(0); now <= 100*time.Millisecond; now += time.Millisecond {
			fx.Reset()
			o.Tick(now, fx)
			for _, m := range fx.Messages {
				var om peerv1.OwnerMessage
				if err := proto.Unmarshal(m.Payload, &om); err != nil {
					t.Fatal(err)
				}
				if om.GetForward().GetCharge() {
					charges++
				} else {
					sends++
				}
			}
			if len(fx.Decisions) > 0 {
				if now != 90*time.Millisecond || fx.Decisions[0].Allowed != open {
					t.Fatalf("fail_open=%v: decided %v at %v, want %v at 90ms", open, fx.Decisions[0].Allowed, now, open)
				}
			}
		}
		if sends != 3 {
			t.Fatalf("sent %d forwards, want 1 + 2 retries", sends)
		}
		// An admission by timeout is charged to the owner afterwards.
		if want := map[bool]int{true: 1, false: 0}[open]; charges != want {
			t.Fatalf("fail_open=%v: sent %d charges, want %d", open, charges, want)
		}
	}
}

func TestParamErrors(t *testing.T) {
	for _, bad := range [][]string{{"hold=-1ms"}, {"timeout=0s"}, {"retries=-1"}, {"fail_open=maybe"}, {"color=red"},
		{"on_timeout=maybe"}, {"on_timeout=local", "fail_open=true"}, {"replicas=0"}, {"sync=0s"}} {
		p, _ := strategy.ParseParams(bad)
		_, err := New(strategy.Config{Self: "n0", Members: members, Rate: bucket.Rate{Tokens: 1, Per: time.Second}, Burst: 1,
			Rand: rand.New(rand.NewPCG(1, 2)), Params: p})
		if err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}

// FuzzReceive: no payload panics the owner, and a refused one changes nothing.
func FuzzReceive(f *testing.F) {
	f.Add(forward(1, "k", 1, 5))
	f.Add([]byte{0x12, 0x04, 0x08, 0x01, 0x10, 0x01})
	f.Add([]byte{})
	f.Add(levels(3, &peerv1.OwnerLevel{Key: "k", LevelTicks: 5, AtNs: 7}))
	f.Add(chargeMsg(2, "k", 1, 5))
	ack, _ := proto.Marshal(&peerv1.OwnerMessage{Body: &peerv1.OwnerMessage_LevelsAck{LevelsAck: &peerv1.OwnerLevelsAck{Seq: 1}}})
	f.Add(ack)
	query, _ := proto.Marshal(&peerv1.OwnerMessage{Body: &peerv1.OwnerMessage_LevelQuery{LevelQuery: &peerv1.OwnerLevelQuery{Keys: []string{"k", "j"}}}})
	f.Add(query)
	f.Fuzz(func(t *testing.T, payload []byte) {
		o := newNode(t, "n0")
		before := o.StateBytes()
		fx := &strategy.Effects{}
		if err := o.Receive(time.Second, "n1", payload, fx); err != nil && (o.StateBytes() != before || len(fx.Messages) > 0) {
			t.Fatal("a refused payload changed state")
		}
		o.Tick(2*time.Second, fx)
	})
}

// Waiting mode's peer fields are bounded: a forward's max_wait_ns outside
// [0, MaxWait] and a verdict's delay_ns outside [0, the request's max wait]
// (or on a refusal) are refused as errors and change nothing.
func TestWaitFieldsBounded(t *testing.T) {
	key := keyOwnedBy("n0")
	for name, mw := range map[string]int64{"negative": -1, "above an hour": int64(2 * time.Hour)} {
		o := newNode(t, "n0")
		fx := &strategy.Effects{}
		payload, err := proto.Marshal(&peerv1.OwnerMessage{Body: &peerv1.OwnerMessage_Forward{Forward: &peerv1.OwnerForward{
			RequestId: 1, Key: key, Tokens: 1, ArrivalNs: 0, MaxWaitNs: mw}}})
		if err != nil {
			t.Fatal(err)
		}
		if err := o.Receive(0, "n1", payload, fx); err == nil {
			t.Errorf("max_wait_ns %s: no error", name)
		}
		if len(fx.Messages)+len(fx.Decisions)+len(fx.Wakeups) != 0 {
			t.Errorf("max_wait_ns %s: effects %+v", name, fx)
		}
	}
	remote := keyOwnedBy("n1")
	for name, v := range map[string]*peerv1.OwnerVerdict{
		"delay above max wait": {RequestId: 7, Allowed: true, DelayNs: int64(2 * time.Second)},
		"negative delay":       {RequestId: 7, Allowed: true, DelayNs: -1},
		"delay on a refusal":   {RequestId: 7, Allowed: false, DelayNs: 1},
	} {
		o := newNode(t, "n0")
		fx := &strategy.Effects{}
		if _, ok := o.RequestWait(0, strategy.Request{ID: 7, Key: remote, Tokens: 1}, time.Second, fx); ok {
			t.Fatalf("%s: decided at once, want forwarded to n1", name)
		}
		fx.Reset()
		payload, err := proto.Marshal(&peerv1.OwnerMessage{Body: &peerv1.OwnerMessage_Verdict{Verdict: v}})
		if err != nil {
			t.Fatal(err)
		}
		if err := o.Receive(time.Millisecond, "n1", payload, fx); err == nil {
			t.Errorf("%s: no error", name)
		}
		if len(fx.Decisions) != 0 {
			t.Errorf("%s: decided %v", name, fx.Decisions)
		}
	}
}

// TestFallbackStartsAtArrival: on_timeout=local's bucket (r/N = 1/3 per s,
// its share of the burst 1 at n1) starts empty at the first timed-out
// request's arrival, not at its timeout: 3 forwards arrive at 0 and time
// out together at 3 s, when the bucket has refilled 1 token: one is
// admitted (and charged to the owner). Empty at 3 s instead, as before,
// all were refused, even under a limit that cannot be reached.
func TestFallbackStartsAtArrival(t *testing.T) {
	o := newNode(t, "n1", "timeout=3s")
	key := keyOwnedBy("n0")
	fx := &strategy.Effects{}
	for id := uint64(1); id <= 3; id++ {
		if _, decided := o.Request(0, strategy.Request{ID: id, Key: key, Tokens: 1}, fx); decided {
			t.Fatal("a request for another node's key was decided locally")
		}
	}
	admitted, decided := 0, 0
	for now := time.Duration(0); now <= 4*time.Second && decided < 3; now += 10 * time.Millisecond {
		fx.Reset()
		o.Tick(now, fx)
		for _, d := range fx.Decisions {
			decided++
			if d.Allowed {
				admitted++
			}
		}
	}
	if decided != 3 || admitted != 1 {
		t.Errorf("3 forwards timed out together after 3 s: %d decided, %d admitted; want 3 and 1 (1/3 token/s refilled since their arrival)", decided, admitted)
	}
}
