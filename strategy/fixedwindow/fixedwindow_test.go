package fixedwindow

import (
	"math/rand/v2"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/rendezvous"
	"github.com/tokenmesh/tokenmesh/strategy"
)

type fataler interface {
	Helper()
	Fatal(args ...any)
}

func newFW(t fataler, self strategy.NodeID, members []strategy.NodeID, limit int64, per time.Duration, params ...string) *FixedWindow {
	t.Helper()
	p, err := strategy.ParseParams(params)
	if err != nil {
		t.Fatal(err)
	}
	f, err := New(strategy.Config{Self: self, Members: members, Rate: bucket.Rate{Tokens: limit, Per: per}, Burst: limit,
		Rand: rand.New(rand.NewPCG(1, 2)), Params: p})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// envoyModel is envoyproxy/ratelimit's fixed window counting: INCRBY of
// the key's counter in window floor(unix / W), over when after > limit,
// remaining limit - after when not over.
type envoyModel struct {
	limit  int64
	window time.Duration
	counts map[int64]int64
}

func (m *envoyModel) hit(unix time.Duration, hits int64) (ok bool, remaining int64) {
	w := int64(unix / m.window)
	m.counts[w] += hits
	after := m.counts[w]
	if after > m.limit {
		return false, 0
	}
	return true, m.limit - after
}

// TestMatchesEnvoyCounting: alone, every decision and remaining count
// equals the model's, for random hits and times, with windows aligned to
// the Unix time the driver's epoch stands for.
func TestMatchesEnvoyCounting(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		limit := rapid.Int64Range(1, 20).Draw(t, "limit")
		window := time.Duration(rapid.SampledFrom([]int64{1, 60, 3600}).Draw(t, "unit")) * time.Second
		epochUnix := time.Duration(rapid.Int64Range(0, 1<<40).Draw(t, "epoch_unix_ms")) * time.Millisecond
		align := epochUnix % window
		f := newFW(t, "n0", []strategy.NodeID{"n0"}, limit, window, "align="+align.String())
		if f.Window() != window {
			t.Fatalf("window %v, want %v", f.Window(), window)
		}
		m := &envoyModel{limit: limit, window: window, counts: map[int64]int64{}}
		var fx strategy.Effects
		f.Start(0, &fx)
		now := time.Duration(0)
		for i := range rapid.IntRange(1, 60).Draw(t, "n") {
			now += time.Duration(rapid.Int64Range(0, int64(window)/2).Draw(t, "dt"))
			hits := rapid.Int64Range(1, 5).Draw(t, "hits")
			if rapid.Bool().Draw(t, "tick") {
				fx.Reset()
				f.Tick(now, &fx)
			}
			fx.Reset()
			d, decided := f.Request(now, strategy.Request{ID: uint64(i), Key: "k", Tokens: hits, Arrival: now}, &fx)
			rem, known := f.Remaining(now, "k")
			ok, wantRem := m.hit(epochUnix+now, hits)
			if !decided || !known || d.Allowed != ok || rem != wantRem {
				t.Fatalf("hit %d (%d at %v): allowed %v remaining %d (decided %v, known %v); envoy: %v, %d",
					i, hits, now, d.Allowed, rem, decided, known, ok, wantRem)
			}
		}
	})
}

// TestRefusedHitsCount: unlike the token bucket, a refused hit is counted,
// so a client that keeps sending stays refused until the window ends.
func TestRefusedHitsCount(t *testing.T) {
	f := newFW(t, "n0", []strategy.NodeID{"n0"}, 5, time.Minute)
	var fx strategy.Effects
	seq := []struct {
		at      time.Duration
		hits    int64
		allowed bool
		rem     int64
	}{
		{0, 3, true, 2}, {time.Second, 3, false, 0}, {2 * time.Second, 1, false, 0},
		{time.Minute, 1, true, 4}, {time.Minute + time.Second, 4, true, 0}, {2*time.Minute - 1, 1, false, 0},
	}
	for i, s := range seq {
		d, _ := f.Request(s.at, strategy.Request{ID: uint64(i), Key: "k", Tokens: s.hits, Arrival: s.at}, &fx)
		if rem, _ := f.Remaining(s.at, "k"); d.Allowed != s.allowed || rem != s.rem {
			t.Errorf("hit %d: %v %d, want %v %d", i, d.Allowed, rem, s.allowed, s.rem)
		}
	}
}

// deliver runs messages between nodes until none are left.
func deliver(t *testing.T, now time.Duration, nodes map[strategy.NodeID]*FixedWindow, from strategy.NodeID, fx *strategy.Effects, decided map[uint64]bool) {
	t.Helper()
	type msg struct {
		from strategy.NodeID
		m    strategy.Message
	}
	var q []msg
	for _, m := range fx.Messages {
		q = append(q, msg{from, m})
	}
	for _, d := range fx.Decisions {
		decided[d.RequestID] = d.Allowed
	}
	for len(q) > 0 {
		x := q[0]
		q = q[1:]
		var out strategy.Effects
		if err := nodes[x.m.To].Receive(now, x.from, x.m.Payload, &out); err != nil {
			t.Fatal(err)
		}
		for _, m := range out.Messages {
			q = append(q, msg{x.m.To, m})
		}
		for _, d := range out.Decisions {
			decided[d.RequestID] = d.Allowed
		}
	}
}

// TestForwardedToOwner: three nodes; checks of one key at every node are
// counted once, at the key's owner: exactly limit admitted per window.
func TestForwardedToOwner(t *testing.T) {
	ids := []strategy.NodeID{"n0", "n1", "n2"}
	nodes := map[strategy.NodeID]*FixedWindow{}
	for _, id := range ids {
		nodes[id] = newFW(t, id, ids, 4, time.Hour)
	}
	owner := rendezvous.Owner("k", ids)
	decided := map[uint64]bool{}
	for i := range 12 {
		at := ids[i%3]
		var fx strategy.Effects
		d, ok := nodes[at].Request(time.Duration(i)*time.Millisecond, strategy.Request{ID: uint64(i), Key: "k", Tokens: 1}, &fx)
		if ok {
			if at != owner {
				t.Fatalf("decided at once at %s, not the owner %s", at, owner)
			}
			decided[d.RequestID] = d.Allowed
		}
		deliver(t, time.Duration(i)*time.Millisecond, nodes, at, &fx, decided)
	}
	admitted := 0
	for _, ok := range decided {
		if ok {
			admitted++
		}
	}
	if len(decided) != 12 || admitted != 4 {
		t.Fatalf("%d decided, %d admitted; want 12 and 4", len(decided), admitted)
	}
	if _, known := nodes[owner].Remaining(0, "k"); !known {
		t.Error("the owner does not know its key's count")
	}
	for _, id := range ids {
		if _, known := nodes[id].Remaining(0, "k"); known != (id == owner) {
			t.Errorf("%s: Remaining known %v", id, known)
		}
	}
}

// TestTimeoutAndBadInput: an unanswered forward is answered by fail_open
// at its timeout; undecodable or bad payloads are errors that change
// nothing.
func TestTimeoutAndBadInput(t *testing.T) {
	ids := []strategy.NodeID{"n0", "n1"}
	key := "k0"
	for i := 0; rendezvous.Owner(key, ids) != "n1"; i++ {
		key = "k" + string(rune('a'+i))
	}
	f := newFW(t, "n0", ids, 2, time.Second, "timeout=50ms", "fail_open=false")
	var fx strategy.Effects
	if _, ok := f.Request(0, strategy.Request{ID: 7, Key: key, Tokens: 1}, &fx); ok || len(fx.Messages) != 1 {
		t.Fatalf("not forwarded: %+v", fx)
	}
	fx.Reset()
	f.Tick(49*time.Millisecond, &fx)
	if len(fx.Decisions) != 0 {
		t.Fatalf("decided before the timeout: %+v", fx.Decisions)
	}
	f.Tick(50*time.Millisecond, &fx)
	if len(fx.Decisions) != 1 || fx.Decisions[0] != (strategy.Decision{RequestID: 7, Allowed: false}) {
		t.Fatalf("timeout: %+v, want request 7 refused (fail_open=false)", fx.Decisions)
	}
	before := f.StateBytes()
	for _, p := range [][]byte{{0xff, 0xff}, {}, mustMarshalForward("", 1), mustMarshalForward("x", 0)} {
		fx.Reset()
		if err := f.Receive(0, "n1", p, &fx); err == nil {
			t.Errorf("payload %x accepted", p)
		}
		if len(fx.Messages) != 0 || f.StateBytes() != before {
			t.Errorf("payload %x changed state", p)
		}
	}
	if _, err := New(strategy.Config{Self: "n0", Members: ids, Rate: bucket.Rate{Tokens: 3, Per: time.Second}, Burst: 1,
		Rand: rand.New(rand.NewPCG(1, 2))}); err == nil {
		t.Error("a window of 1/3 s (not whole nanoseconds) accepted")
	}
}

// FuzzReceive: any payload from a peer is handled or refused, never a
// panic; a refused one changes no state and sends nothing.
func FuzzReceive(f *testing.F) {
	f.Add(mustMarshalForward("k", 1))
	f.Add([]byte{0x12, 0x02, 0x08, 0x01})
	f.Fuzz(func(t *testing.T, payload []byte) {
		n := newFW(t, "n0", []strategy.NodeID{"n0", "n1"}, 3, time.Second)
		var fx strategy.Effects
		before := n.StateBytes()
		if err := n.Receive(0, "n1", payload, &fx); err != nil && (n.StateBytes() != before || len(fx.Messages)+len(fx.Decisions) != 0) {
			t.Fatalf("refused payload (%v) changed state or produced effects", err)
		}
		if rem, ok := n.Remaining(0, "k"); ok && (rem < 0 || rem > 3) {
			t.Fatalf("remaining %d", rem)
		}
	})
}
