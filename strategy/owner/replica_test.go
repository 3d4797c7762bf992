package owner

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"
	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/rendezvous"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// One token at 1/s with burst 2 is 1e9 ticks; the burst is 2e9.
const tick1 = int64(time.Second)

func decode(t *testing.T, m strategy.Message) *peerv1.OwnerMessage {
	t.Helper()
	var om peerv1.OwnerMessage
	if err := proto.Unmarshal(m.Payload, &om); err != nil {
		t.Fatal(err)
	}
	return &om
}

func levels(seq uint64, ls ...*peerv1.OwnerLevel) []byte {
	b, _ := proto.Marshal(&peerv1.OwnerMessage{Body: &peerv1.OwnerMessage_Levels{Levels: &peerv1.OwnerLevels{Levels: ls, Seq: seq}}})
	return b
}

func chargeMsg(id uint64, key string, tokens, arrival int64) []byte {
	b, _ := proto.Marshal(&peerv1.OwnerMessage{Body: &peerv1.OwnerMessage_Forward{Forward: &peerv1.OwnerForward{
		RequestId: id, Key: key, Tokens: tokens, ArrivalNs: arrival, Charge: true}}})
	return b
}

// second is key's replica: the second node in rendezvous order.
func second(key string) strategy.NodeID { return rendezvous.Rank(nil, key, members, 2)[1] }

// Levels from a peer outside [-burst, burst] in ticks, at a negative time,
// or more than slack after now, with an empty key, or too many, are
// refused whole: no level of the message is merged.
func TestLevelsRefused(t *testing.T) {
	o := newNode(t, "n0", "hold=0s")
	good := &peerv1.OwnerLevel{Key: "good", LevelTicks: 0, AtNs: int64(time.Second)}
	many := make([]*peerv1.OwnerLevel, maxLevelsAccepted+1)
	for i := range many {
		many[i] = good
	}
	for name, payload := range map[string][]byte{
		"above burst":   levels(0, good, &peerv1.OwnerLevel{Key: "k", LevelTicks: 2*tick1 + 1, AtNs: 0}),
		"below -burst":  levels(0, good, &peerv1.OwnerLevel{Key: "k", LevelTicks: -2*tick1 - 1, AtNs: 0}),
		"negative time": levels(0, good, &peerv1.OwnerLevel{Key: "k", LevelTicks: 0, AtNs: -1}),
		"future":        levels(0, good, &peerv1.OwnerLevel{Key: "k", LevelTicks: 0, AtNs: int64(2*time.Second + time.Nanosecond)}),
		"empty key":     levels(0, good, &peerv1.OwnerLevel{Key: "", LevelTicks: 0, AtNs: 0}),
		"too many":      levels(0, many...),
		"charge future": chargeMsg(1, "k", 1, int64(3*time.Second)),
	} {
		fx := &strategy.Effects{}
		if err := o.Receive(time.Second, "n1", payload, fx); err == nil {
			t.Errorf("%s: accepted", name)
		}
		if o.table.Len() != 0 || len(fx.Messages)+len(fx.Decisions)+len(fx.Wakeups) != 0 {
			t.Errorf("%s: a refused message changed state (%d keys) or produced effects", name, o.table.Len())
		}
	}
	// The bounds themselves are accepted (slack is 1s).
	fx := &strategy.Effects{}
	if err := o.Receive(time.Second, "n1", levels(0, &peerv1.OwnerLevel{Key: "a", LevelTicks: 2 * tick1, AtNs: int64(2 * time.Second)},
		&peerv1.OwnerLevel{Key: "b", LevelTicks: -2 * tick1, AtNs: 0}), fx); err != nil {
		t.Fatal(err)
	}
	if o.table.Len() != 2 {
		t.Fatalf("levels at the bounds: %d keys held, want both merged", o.table.Len())
	}
}

// Merge rule: a level meets the node's own; the more consumed wins,
// whichever arrives first.
func TestMergeKeepsMoreConsumed(t *testing.T) {
	key := keyOwnedBy("n0")
	o := newNode(t, "n0", "hold=0s")
	fx := &strategy.Effects{}
	if _, ok := o.Request(0, strategy.Request{ID: 1, Key: key, Tokens: 1}, fx); !ok {
		t.Fatal("not decided at once")
	}
	// Own level: 1 token at 0. A peer's 1.5 tokens at 0 is less consumed: kept 1.
	if err := o.Receive(0, "n1", levels(0, &peerv1.OwnerLevel{Key: key, LevelTicks: 3 * tick1 / 2, AtNs: 0}), fx); err != nil {
		t.Fatal(err)
	}
	if got := o.table.Remaining(key, 0); got != 1 {
		t.Fatalf("after a less consumed level: %d tokens, want 1", got)
	}
	// A peer's 0 tokens at 500ms is 0.5 at 500ms against our 1.5 there: 0.5 wins.
	if err := o.Receive(500*time.Millisecond, "n2", levels(0, &peerv1.OwnerLevel{Key: key, LevelTicks: 0, AtNs: int64(500 * time.Millisecond)}), fx); err != nil {
		t.Fatal(err)
	}
	if got := o.table.Remaining(key, 999*time.Millisecond); got != 0 {
		t.Fatalf("after a more consumed level: %d whole tokens at 999ms, want 0", got)
	}
	if got := o.table.Remaining(key, 1500*time.Millisecond); got != 1 {
		t.Fatalf("after a more consumed level: %d whole tokens at 1.5s, want 1", got)
	}
}

// The primary ships the level of every key it decided to the key's
// replica at the next sync; when membership drops the primary, the replica
// decides from that level, not from a full bucket.
func TestReplicaContinuesAfterPrimaryLeaves(t *testing.T) {
	key := keyOwnedBy("n0")
	rep := second(key)
	p := newNode(t, "n0", "hold=0s", "sync=10ms")
	r := newNode(t, rep, "hold=0s", "sync=10ms")
	fx := &strategy.Effects{}
	for i := range 2 {
		if d, ok := p.Request(0, strategy.Request{ID: uint64(i + 1), Key: key, Tokens: 1}, fx); !ok || !d.Allowed {
			t.Fatalf("request %d: %v %v", i, d, ok)
		}
	}
	if len(fx.Messages) != 0 || !slices.Contains(fx.Wakeups, 10*time.Millisecond) {
		t.Fatalf("decisions sent %d messages at once and asked for wake-ups %v, want the sync at 10ms", len(fx.Messages), fx.Wakeups)
	}
	fx.Reset()
	p.Tick(10*time.Millisecond, fx)
	var sent *strategy.Message
	for i, m := range fx.Messages {
		if decode(t, m).GetLevels() != nil {
			if m.To != rep {
				t.Fatalf("levels sent to %s, want the replica %s", m.To, rep)
			}
			sent = &fx.Messages[i]
		}
	}
	if sent == nil {
		t.Fatal("no levels shipped at the sync")
	}
	ls := decode(t, *sent).GetLevels().GetLevels()
	if len(ls) != 1 || ls[0].Key != key || ls[0].LevelTicks != 0 || ls[0].AtNs != 0 {
		t.Fatalf("shipped %v, want %s at 0 ticks at 0", ls, key)
	}
	fx.Reset()
	if err := r.Receive(11*time.Millisecond, "n0", sent.Payload, fx); err != nil {
		t.Fatal(err)
	}
	live := []strategy.NodeID{}
	for _, m := range members {
		if m != "n0" {
			live = append(live, m)
		}
	}
	r.SetMembers(20*time.Millisecond, live, fx)
	fx.Reset()
	// 500ms later the replica's bucket holds half a token, not the burst.
	if d, ok := r.Request(500*time.Millisecond, strategy.Request{ID: 9, Key: key, Tokens: 1, Arrival: 500 * time.Millisecond}, fx); !ok || d.Allowed {
		t.Fatalf("new primary at 500ms: %v %v, want a refusal from the replicated level", d, ok)
	}
	if d, ok := r.Request(time.Second, strategy.Request{ID: 10, Key: key, Tokens: 1, Arrival: time.Second}, fx); !ok || !d.Allowed {
		t.Fatalf("new primary at 1s: %v %v, want one token refilled", d, ok)
	}
}

// A forward whose (origin, ID) is remembered with another key is a new
// request: decided and charged, not answered with the other key's verdict.
func TestDedupChecksKey(t *testing.T) {
	o := newNode(t, "n0", "hold=0s")
	a, b := keyOwnedBy("n0"), ""
	for i := 0; ; i++ {
		k := string(rune('a'+i%26)) + string(rune('a'+i/26)) + "x"
		if rendezvous.Owner(k, members) == "n0" {
			b = k
			break
		}
	}
	fx := &strategy.Effects{}
	for _, key := range []string{a, b} {
		if err := o.Receive(0, "n1", forward(7, key, 2, 0), fx); err != nil {
			t.Fatal(err)
		}
	}
	o.Tick(0, fx)
	verdicts := 0
	for _, m := range fx.Messages {
		if v := decode(t, m).GetVerdict(); v != nil {
			verdicts++
			if !v.Allowed {
				t.Fatal("a new key's first request was refused")
			}
		}
	}
	if verdicts != 2 || o.table.Remaining(a, 0) != 0 || o.table.Remaining(b, 0) != 0 {
		t.Fatalf("%d verdicts, remaining %d and %d: want both keys decided and charged", verdicts, o.table.Remaining(a, 0), o.table.Remaining(b, 0))
	}
}

// After a timeout the owner is suspected: requests for its keys are
// decided at once by the local bucket (r/3, this node's share of the burst
// of 2, empty when first used), and every local admission is sent to the
// owner as a charge; the owner takes the tokens and acknowledges, which
// ends the suspicion.
func TestSuspectLocalAndCharge(t *testing.T) {
	key := keyOwnedBy("n0")
	f := newNode(t, "n1", "timeout=90ms", "retries=0", "suspect=10s")
	fx := &strategy.Effects{}
	if _, ok := f.Request(0, strategy.Request{ID: 1, Key: key, Tokens: 1}, fx); ok {
		t.Fatal("decided before the timeout")
	}
	fx.Reset()
	f.Tick(90*time.Millisecond, fx)
	if len(fx.Decisions) != 1 || fx.Decisions[0].Allowed {
		t.Fatalf("timeout decisions %v, want the empty local bucket's refusal", fx.Decisions)
	}
	var charges [][]byte
	collect := func() {
		for _, m := range fx.Messages {
			if om := decode(t, m); om.GetForward().GetCharge() {
				if m.To != "n0" {
					t.Fatalf("charge sent to %s, want the owner n0", m.To)
				}
				charges = append(charges, m.Payload)
			}
		}
	}
	collect()
	// Suspected: decided at once; one token refills in 3 s at r/3.
	for i, c := range []struct {
		at   time.Duration
		want bool
	}{{3090 * time.Millisecond, true}, {3100 * time.Millisecond, false}} {
		fx.Reset()
		d, ok := f.Request(c.at, strategy.Request{ID: uint64(2 + i), Key: key, Tokens: 1, Arrival: c.at}, fx)
		if !ok || d.Allowed != c.want {
			t.Fatalf("suspected owner at %v: %v decided=%v, want allowed=%v at once", c.at, d, ok, c.want)
		}
		collect()
	}
	if len(charges) != 1 {
		t.Fatalf("%d charges, want 1", len(charges))
	}
	// The owner takes the charged token and acknowledges.
	o := newNode(t, "n0", "hold=0s")
	fx.Reset()
	if err := o.Receive(3200*time.Millisecond, "n1", charges[0], fx); err != nil {
		t.Fatal(err)
	}
	if got := o.table.Remaining(key, 3200*time.Millisecond); got != 1 {
		t.Fatalf("owner holds %d tokens after the charge, want 1", got)
	}
	if len(fx.Messages) != 1 || decode(t, fx.Messages[0]).GetVerdict() == nil {
		t.Fatal("the charge was not acknowledged")
	}
	ack := fx.Messages[0].Payload
	fx.Reset()
	if err := f.Receive(3210*time.Millisecond, "n0", ack, fx); err != nil {
		t.Fatal(err)
	}
	if len(f.charges) != 0 || len(f.suspect) != 0 {
		t.Fatalf("after the acknowledgement: %d charges, suspicion %v", len(f.charges), f.suspect)
	}
	// Not suspected any more: the next request is forwarded.
	if _, ok := f.Request(3300*time.Millisecond, strategy.Request{ID: 9, Key: key, Tokens: 1, Arrival: 3300 * time.Millisecond}, fx); ok {
		t.Fatal("decided locally after the owner answered")
	}
}

// A node that joins (starts after 0) and must decide a key it holds no
// level for asks the key's possible holders first (warm-up): the request
// waits for their answers, and the key continues from the most consumed
// level they hold, not from a fresh burst. Without answers by the timeout
// the key starts empty as of the start. After the warm-up a new key
// starts full.
// seenBy has peers show o they see it (each ships it another key's
// level, as at a hand-over), so that o, started late, decides the keys it
// owns instead of deferring them (restart.go).
func seenBy(t *testing.T, o *Owner, at time.Duration, peers ...strategy.NodeID) {
	t.Helper()
	for _, p := range peers {
		if err := o.Receive(at, p, levels(0, &peerv1.OwnerLevel{Key: "handed-over", LevelTicks: 0, AtNs: int64(at)}), &strategy.Effects{}); err != nil {
			t.Fatal(err)
		}
	}
}

func TestWarmupFetchesLevels(t *testing.T) {
	key := keyOwnedBy("n0")
	start := 10 * time.Second
	joiner := func() *Owner {
		ps, err := strategy.ParseParams([]string{"hold=0s", "warmup=1s", "timeout=100ms"})
		if err != nil {
			t.Fatal(err)
		}
		o, err := New(strategy.Config{Self: "n0", Members: members, Rate: bucket.Rate{Tokens: 1, Per: time.Second}, Burst: 2,
			Rand: rand.New(rand.NewPCG(1, 2)), Params: ps, LatencyHint: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		o.Start(start, &strategy.Effects{})
		seenBy(t, o, start, "n1", "n2")
		return o
	}
	at := start + 500*time.Millisecond
	req := strategy.Request{ID: 1, Key: key, Tokens: 1, Arrival: at}

	// The holders answer: n1 holds the key drained at 10.4s, n2 holds none (full).
	o := joiner()
	fx := &strategy.Effects{}
	if _, ok := o.Request(at, req, fx); ok {
		t.Fatal("decided before the holders answered")
	}
	var asked []strategy.NodeID
	for _, m := range fx.Messages {
		if q := decode(t, m).GetLevelQuery(); q != nil && len(q.Keys) == 1 && q.Keys[0] == key {
			asked = append(asked, m.To)
		}
	}
	if len(asked) != 2 {
		t.Fatalf("asked %v for the level, want n1 and n2", asked)
	}
	// n2's answer: it holds nothing (a peer answers an unknown key as full).
	peer := newNode(t, "n2")
	qfx := &strategy.Effects{}
	if err := peer.Receive(at, "n0", fx.Messages[0].Payload, qfx); err != nil || len(qfx.Messages) != 1 {
		t.Fatalf("query answered with %d messages, %v", len(qfx.Messages), err)
	}
	full := qfx.Messages[0].Payload
	fx.Reset()
	if err := o.Receive(at, "n2", full, fx); err != nil {
		t.Fatal(err)
	}
	if len(fx.Decisions) != 0 {
		t.Fatal("decided before every holder answered")
	}
	if err := o.Receive(at, "n1", levels(0, &peerv1.OwnerLevel{Key: key, LevelTicks: 0, AtNs: int64(start + 400*time.Millisecond)}), fx); err != nil {
		t.Fatal(err)
	}
	if len(fx.Decisions) != 1 || fx.Decisions[0].Allowed {
		t.Fatalf("decisions %v, want a refusal from n1's drained level (0.1 token)", fx.Decisions)
	}

	// Nobody answers: at the timeout the key starts empty as of the start.
	o = joiner()
	fx.Reset()
	o.Request(at, req, fx)
	fx.Reset()
	o.Tick(at+100*time.Millisecond, fx)
	if len(fx.Decisions) != 1 || fx.Decisions[0].Allowed {
		t.Fatalf("decisions at the timeout %v, want a refusal (0.6 token since the start)", fx.Decisions)
	}
	fx.Reset()
	if d, ok := o.Request(start+time.Second, strategy.Request{ID: 2, Key: key, Tokens: 1, Arrival: start + time.Second}, fx); !ok || !d.Allowed {
		t.Fatalf("1s after the start: %v %v, want the token refilled since the start", d, ok)
	}
	// A key first seen after the warm-up starts full, without asking.
	other := ""
	for i := 0; ; i++ {
		k := "w" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		if rendezvous.Owner(k, members) == "n0" {
			other = k
			break
		}
	}
	fx.Reset()
	if d, ok := o.Request(start+2*time.Second, strategy.Request{ID: 3, Key: other, Tokens: 2, Arrival: start + 2*time.Second}, fx); !ok || !d.Allowed || len(fx.Messages) != 0 {
		t.Fatalf("after the warm-up: %v %v with %d messages, want a full bucket at once", d, ok, len(fx.Messages))
	}
}

// Leave ships every level to the key's next nodes and is Left once every
// shipment is acknowledged; unacknowledged ones are sent again.
func TestLeaveHandsOver(t *testing.T) {
	key := keyOwnedBy("n0")
	o := newNode(t, "n0", "hold=0s", "timeout=90ms", "retries=2")
	fx := &strategy.Effects{}
	o.Request(0, strategy.Request{ID: 1, Key: key, Tokens: 2}, fx)
	fx.Reset()
	o.Leave(time.Millisecond, fx)
	if o.Left() {
		t.Fatal("left before any acknowledgement")
	}
	next := rendezvous.Rank(nil, key, []strategy.NodeID{"n1", "n2"}, 2)
	var got []strategy.NodeID
	var seqs []uint64
	for _, m := range fx.Messages {
		ls := decode(t, m).GetLevels()
		if ls == nil || ls.Seq == 0 || len(ls.Levels) != 1 || ls.Levels[0].Key != key || ls.Levels[0].LevelTicks != 0 {
			t.Fatalf("leave sent %v, want the drained level with a seq", decode(t, m))
		}
		got = append(got, m.To)
		seqs = append(seqs, ls.Seq)
	}
	if len(got) != 2 || !(got[0] == next[0] && got[1] == next[1] || got[0] == next[1] && got[1] == next[0]) {
		t.Fatalf("levels sent to %v, want %v", got, next)
	}
	fx.Reset()
	o.Tick(31*time.Millisecond, fx)
	resent := 0
	for _, m := range fx.Messages {
		if decode(t, m).GetLevels().GetSeq() != 0 {
			resent++
		}
	}
	if resent != 2 {
		t.Fatalf("%d shipments resent, want 2 unacknowledged", resent)
	}
	for i, to := range got {
		ack, _ := proto.Marshal(&peerv1.OwnerMessage{Body: &peerv1.OwnerMessage_LevelsAck{LevelsAck: &peerv1.OwnerLevelsAck{Seq: seqs[i]}}})
		if err := o.Receive(40*time.Millisecond, to, ack, fx); err != nil {
			t.Fatal(err)
		}
	}
	if !o.Left() {
		t.Fatal("not left after every acknowledgement")
	}
	// Until it stops, a leaving node still decides, and ships each change
	// to the next nodes at once.
	fx.Reset()
	if d, ok := o.Request(2*time.Second, strategy.Request{ID: 2, Key: key, Tokens: 2, Arrival: 2 * time.Second}, fx); !ok || !d.Allowed {
		t.Fatalf("leaving node's decision: %v %v", d, ok)
	}
	shipped := 0
	for _, m := range fx.Messages {
		if ls := decode(t, m).GetLevels(); ls != nil && len(ls.Levels) == 1 && ls.Levels[0].LevelTicks == 0 && ls.Levels[0].AtNs == int64(2*time.Second) {
			shipped++
		}
	}
	if shipped != 2 {
		t.Fatalf("a leaving node's decision shipped to %d nodes at once, want 2", shipped)
	}
}

// A charge for a request this node refused (the forwarder timed out and
// admitted it locally) takes its tokens once; a duplicate charge takes none.
func TestChargeAfterRefusal(t *testing.T) {
	key := keyOwnedBy("n0")
	o := newNode(t, "n0", "hold=0s")
	fx := &strategy.Effects{}
	for id, tokens := range map[uint64]int64{4: 2} {
		if err := o.Receive(0, "n1", forward(id, key, tokens, 0), fx); err != nil {
			t.Fatal(err)
		}
	}
	o.Tick(0, fx)
	if err := o.Receive(0, "n1", forward(5, key, 1, 0), fx); err != nil {
		t.Fatal(err)
	}
	o.Tick(0, fx)
	for range 2 {
		if err := o.Receive(time.Millisecond, "n1", chargeMsg(5, key, 1, 0), fx); err != nil {
			t.Fatal(err)
		}
	}
	// Level -1 token at 0: empty until 1s, one token at 2s.
	if got := o.table.Remaining(key, 1999*time.Millisecond); got != 0 {
		t.Fatalf("%d tokens at 1.999s, want 0 (the charge taken once)", got)
	}
	if got := o.table.Remaining(key, 2*time.Second); got != 1 {
		t.Fatalf("%d tokens at 2s, want 1 (the charge taken once, not twice)", got)
	}
}

// split=2 on one node: a key's burst of 3 is split 2 + 1 over two
// sub-buckets refilling at r/2 each, and requests alternate between them
// by request id; sub-bucket keys from peers must carry a valid index.
func TestSplitSubBuckets(t *testing.T) {
	ps, err := strategy.ParseParams([]string{"hold=0s", "split=2"})
	if err != nil {
		t.Fatal(err)
	}
	o, err := New(strategy.Config{Self: "n0", Members: []strategy.NodeID{"n0"}, Rate: bucket.Rate{Tokens: 1, Per: time.Second}, Burst: 3,
		Rand: rand.New(rand.NewPCG(1, 2)), Params: ps})
	if err != nil {
		t.Fatal(err)
	}
	fx := &strategy.Effects{}
	o.Start(0, fx)
	admitted := map[uint64]bool{}
	for id := uint64(0); id < 8; id++ {
		d, ok := o.Request(0, strategy.Request{ID: id, Key: "k", Tokens: 1}, fx)
		if !ok {
			t.Fatalf("request %d not decided at once", id)
		}
		admitted[id] = d.Allowed
	}
	// Even ids take sub-bucket 0 (burst 2), odd ids sub-bucket 1 (burst 1).
	if !admitted[0] || !admitted[2] || admitted[4] || !admitted[1] || admitted[3] {
		t.Fatalf("admitted %v, want ids 0, 2 (sub 0) and 1 (sub 1)", admitted)
	}
	// Each sub-bucket refills at 1/2 per s: one token each after 2 s.
	for _, c := range []struct {
		id   uint64
		want bool
	}{{10, true}, {12, false}, {11, true}, {13, false}} {
		if d, _ := o.Request(2*time.Second, strategy.Request{ID: c.id, Key: "k", Tokens: 1, Arrival: 2 * time.Second}, fx); d.Allowed != c.want {
			t.Fatalf("request %d at 2s: allowed=%v, want %v", c.id, d.Allowed, c.want)
		}
	}
	for _, bad := range []string{"k", "k\x002", "k\x00-1", "k\x0001", "k\x00x"} {
		if err := o.Receive(time.Second, "n1", forward(1, bad, 1, 0), fx); err == nil {
			t.Errorf("forward for %q accepted with split=2", bad)
		}
	}
}

// A charge lost while the owner was unreachable is sent again when the
// owner answers anything later (at most once per timeout), until it is
// acknowledged.
func TestChargeResentWhenOwnerAnswers(t *testing.T) {
	key := keyOwnedBy("n0")
	f := newNode(t, "n1", "timeout=90ms", "retries=0", "on_timeout=admit", "suspect=100ms")
	fx := &strategy.Effects{}
	f.Request(0, strategy.Request{ID: 1, Key: key, Tokens: 1}, fx)
	fx.Reset()
	f.Tick(90*time.Millisecond, fx) // admitted by timeout; its charge is lost
	if len(fx.Decisions) != 1 || !fx.Decisions[0].Allowed || len(f.charges) != 1 {
		t.Fatalf("timeout: %v with %d charges", fx.Decisions, len(f.charges))
	}
	// Later, past the suspicion, a request is forwarded and answered.
	fx.Reset()
	if _, ok := f.Request(time.Second, strategy.Request{ID: 2, Key: key, Tokens: 1, Arrival: time.Second}, fx); ok {
		t.Fatal("decided locally after the suspicion ended")
	}
	verdict, _ := proto.Marshal(&peerv1.OwnerMessage{Body: &peerv1.OwnerMessage_Verdict{Verdict: &peerv1.OwnerVerdict{RequestId: 2, Allowed: true}}})
	fx.Reset()
	if err := f.Receive(time.Second+time.Millisecond, "n0", verdict, fx); err != nil {
		t.Fatal(err)
	}
	resent := 0
	for _, m := range fx.Messages {
		if fw := decode(t, m).GetForward(); fw.GetCharge() && fw.RequestId == 1 && m.To == "n0" {
			resent++
		}
	}
	if resent != 1 {
		t.Fatalf("charge resent %d times when the owner answered, want once", resent)
	}
	// A second answer within the timeout sends nothing again.
	fx.Reset()
	if err := f.Receive(time.Second+2*time.Millisecond, "n0", verdict, fx); err != nil || len(fx.Messages) != 0 {
		t.Fatalf("a second answer: %d messages, %v", len(fx.Messages), err)
	}
	// That one was a duplicate, dropped before the charges are looked at;
	// a verdict for another pending request reaches them, and within the
	// timeout sends nothing again either.
	if _, ok := f.Request(time.Second+2*time.Millisecond, strategy.Request{ID: 3, Key: key, Tokens: 1, Arrival: time.Second + 2*time.Millisecond}, fx); ok {
		t.Fatal("request 3 decided locally, want forwarded")
	}
	verdict3, _ := proto.Marshal(&peerv1.OwnerMessage{Body: &peerv1.OwnerMessage_Verdict{Verdict: &peerv1.OwnerVerdict{RequestId: 3, Allowed: true}}})
	fx.Reset()
	if err := f.Receive(time.Second+2*time.Millisecond, "n0", verdict3, fx); err != nil || len(fx.Messages) != 0 || len(fx.Decisions) != 1 {
		t.Fatalf("an answer to another request within the timeout: %d messages, %d decisions, %v; want no charge resent, request 3 decided", len(fx.Messages), len(fx.Decisions), err)
	}
	ack, _ := proto.Marshal(&peerv1.OwnerMessage{Body: &peerv1.OwnerMessage_Verdict{Verdict: &peerv1.OwnerVerdict{RequestId: 1, Allowed: true}}})
	if err := f.Receive(time.Second+3*time.Millisecond, "n0", ack, fx); err != nil || len(f.charges) != 0 || len(f.chargesTo) != 0 {
		t.Fatalf("after the acknowledgement: %d charges (%v), %v", len(f.charges), f.chargesTo, err)
	}
}
