package owner

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"pgregory.net/rapid"

	peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"
	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/strategy"
)

var _ strategy.LatencyHinter = (*Owner)(nil)

func newHinted(t interface {
	Helper()
	Fatal(...any)
}, hint time.Duration, params ...string) *Owner {
	t.Helper()
	p, err := strategy.ParseParams(params)
	if err != nil {
		t.Fatal(err)
	}
	o, err := New(strategy.Config{Self: "n0", Members: members, Rate: bucket.Rate{Tokens: 1, Per: time.Second}, Burst: 5,
		Rand: rand.New(rand.NewPCG(1, 2)), Params: p, LatencyHint: hint})
	if err != nil {
		t.Fatal(err)
	}
	o.Start(0, &strategy.Effects{})
	return o
}

type ownerTimers struct {
	hold, timeout, retryEvery, syncEvery, chargeTTL, seenTTL time.Duration
}

func timersOf(o *Owner) ownerTimers {
	return ownerTimers{o.hold, o.timeout, o.retryEvery, o.syncEvery, o.chargeTTL, o.seen.TTL()}
}

// SetLatencyHint derives what New derives from the same hint (the formulas
// in hint.go are New's), and a parameter always wins.
func TestSetLatencyHintMatchesNew(t *testing.T) {
	for _, params := range [][]string{nil, {"hold=3ms"}, {"timeout=1s", "retries=4"}, {"sync=50ms"}, {"retries=0"}} {
		for _, h := range []time.Duration{0, 200 * time.Microsecond, 7 * time.Millisecond, 40 * time.Millisecond} {
			want := timersOf(newHinted(t, h, params...))
			o := newHinted(t, 0, params...)
			o.SetLatencyHint(time.Second, h, &strategy.Effects{})
			if got := timersOf(o); got != want {
				t.Errorf("params %v: New(hint 0) + SetLatencyHint(%v) = %+v, New(hint %v) = %+v", params, h, got, h, want)
			}
		}
	}
	o := newHinted(t, 0, "hold=3ms", "timeout=1s", "sync=20ms")
	o.SetLatencyHint(0, 50*time.Millisecond, &strategy.Effects{})
	if o.hold != 3*time.Millisecond || o.timeout != time.Second || o.syncEvery != 20*time.Millisecond {
		t.Errorf("parameters hold=3ms timeout=1s sync=20ms after SetLatencyHint(50ms): hold %v timeout %v sync %v; the parameters must win",
			o.hold, o.timeout, o.syncEvery)
	}
}

// The de-duplication window only grows: a forward remembered under a long
// hint is still recognised after the hint shrank.
func TestSetLatencyHintDedupeOnlyGrows(t *testing.T) {
	o := newHinted(t, 100*time.Millisecond)
	ttl := o.seen.TTL()
	o.SetLatencyHint(0, time.Millisecond, &strategy.Effects{})
	if o.seen.TTL() != ttl {
		t.Fatalf("seen TTL %v after the hint shrank from 100ms to 1ms, want it kept at %v", o.seen.TTL(), ttl)
	}
	o.SetLatencyHint(0, 300*time.Millisecond, &strategy.Effects{})
	if o.seen.TTL() <= ttl {
		t.Fatalf("seen TTL %v after the hint grew to 300ms, want above %v", o.seen.TTL(), ttl)
	}
}

// Under any interleaving of local requests, forwards from a peer (up to
// 5 ms late), ticks and hint changes (hold growing and shrinking between 0
// and 20 ms), every request the owner holds in its ordering buffer is
// decided exactly once, and the buffer is empty once the wake-ups it asked
// for have run: a hold change neither loses nor double-decides a request.
func TestSetLatencyHintNoLossNoDoubleProperty(t *testing.T) {
	key := keyOwnedBy("n0")
	rapid.Check(t, func(rt *rapid.T) {
		o := newHinted(rt, time.Duration(rapid.IntRange(0, 20).Draw(rt, "hint0"))*time.Millisecond)
		var fx strategy.Effects
		now := time.Duration(0)
		var wakes []time.Duration
		decided := map[uint64]int{}
		asked := map[uint64]bool{}
		collect := func() {
			for _, d := range fx.Decisions {
				decided[d.RequestID]++
			}
			for _, m := range fx.Messages {
				var msg peerv1.OwnerMessage
				if err := proto.Unmarshal(m.Payload, &msg); err != nil {
					rt.Fatalf("a message the owner sent does not decode: %v", err)
				}
				if v := msg.GetVerdict(); v != nil {
					decided[v.RequestId]++
				}
			}
			wakes = append(wakes, fx.Wakeups...)
			fx.Reset()
		}
		// The buffer's head always has a wake-up at or before its turn
		// (arrival + the hold now in force), so it is decided in time, not
		// at some later sweep.
		checkWake := func() {
			if o.queue.Len() == 0 {
				return
			}
			due := max(o.queue.Peek().arrival+o.hold, now)
			if !slices.ContainsFunc(wakes, func(w time.Duration) bool { return w <= due }) {
				rt.Fatalf("at %v: the queue's head is due at %v (hold %v) but no wake-up is asked for by then (wake-ups %v)", now, due, o.hold, wakes)
			}
		}
		nextID := uint64(1)
		steps := rapid.IntRange(1, 80).Draw(rt, "steps")
		for range steps {
			now += time.Duration(rapid.IntRange(0, 3000).Draw(rt, "dt_us")) * time.Microsecond
			switch rapid.IntRange(0, 3).Draw(rt, "op") {
			case 0: // a local request
				id := nextID
				nextID++
				asked[id] = true
				d, ok := o.Request(now, strategy.Request{ID: id, Key: key, Tokens: 1, Arrival: now}, &fx)
				if ok {
					fx.Decide(d.RequestID, d.Allowed)
				}
			case 1: // a forward from n1, sent up to 5ms earlier
				id := nextID
				nextID++
				asked[id] = true
				arr := max(now-time.Duration(rapid.IntRange(0, 5000).Draw(rt, "delay_us"))*time.Microsecond, 0)
				if err := o.Receive(now, "n1", forward(id, key, 1, int64(arr)), &fx); err != nil {
					rt.Fatal(err)
				}
			case 2: // the hint moves
				h := time.Duration(rapid.IntRange(0, 20000).Draw(rt, "hint_us")) * time.Microsecond
				o.SetLatencyHint(now, h, &fx)
			case 3: // the wake-ups asked for so far that are due
				o.Tick(now, &fx)
			}
			collect()
			// Run every due wake-up, as a driver would.
			slices.Sort(wakes)
			for len(wakes) > 0 && wakes[0] <= now {
				wakes = wakes[1:]
				o.Tick(now, &fx)
				collect()
				slices.Sort(wakes)
			}
			checkWake()
		}
		// Drain: follow the wake-ups (a request is never left without one).
		for len(wakes) > 0 && len(decided) < len(asked) {
			slices.Sort(wakes)
			now = max(now, wakes[0])
			wakes = wakes[1:]
			o.Tick(now, &fx)
			collect()
			checkWake()
		}
		for id := range asked {
			if decided[id] != 1 {
				rt.Fatalf("request %d decided %d times, want once (hold now %v)", id, decided[id], o.hold)
			}
		}
		if o.queue.Len() != 0 {
			rt.Fatalf("%d requests still queued after the wake-ups ran out", o.queue.Len())
		}
	})
}
