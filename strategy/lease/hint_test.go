package lease

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/strategy"
)

var _ strategy.LatencyHinter = (*Lease)(nil)

func newHinted(t *testing.T, hint time.Duration, params ...string) *Lease {
	t.Helper()
	p, err := strategy.ParseParams(params)
	if err != nil {
		t.Fatal(err)
	}
	l, err := New(strategy.Config{Self: "n0", Members: members, Rate: bucket.Rate{Tokens: 10, Per: time.Second}, Burst: 20,
		Rand: rand.New(rand.NewPCG(1, 2)), Params: p, LatencyHint: hint})
	if err != nil {
		t.Fatal(err)
	}
	l.Start(0, &strategy.Effects{})
	return l
}

type leaseTimers struct {
	hold, timeout, retryEvery, syncEvery, lead, returnLead, sweepLag, seenTTL time.Duration
}

func timersOf(l *Lease) leaseTimers {
	return leaseTimers{l.hold, l.timeout, l.retryEvery, l.syncEvery, l.lead, l.returnLead, l.sweepLag, l.seen.TTL()}
}

// SetLatencyHint derives what New derives from the same hint (from a
// smaller one: the windows that only grow are then equal too), and a
// parameter always wins.
func TestSetLatencyHintMatchesNew(t *testing.T) {
	for _, params := range [][]string{nil, {"hold=3ms"}, {"timeout=1s", "retries=4"}, {"ttl=100ms", "period=50ms"}, {"sync=20ms"}} {
		for _, h := range []time.Duration{0, 300 * time.Microsecond, 7 * time.Millisecond, 60 * time.Millisecond} {
			want := timersOf(newHinted(t, h, params...))
			l := newHinted(t, 0, params...)
			l.SetLatencyHint(time.Second, h, &strategy.Effects{})
			if got := timersOf(l); got != want {
				t.Errorf("params %v: New(hint 0) + SetLatencyHint(%v) = %+v, New(hint %v) = %+v", params, h, got, h, want)
			}
		}
	}
	l := newHinted(t, 0, "hold=3ms", "timeout=1s")
	l.SetLatencyHint(0, 50*time.Millisecond, &strategy.Effects{})
	if l.hold != 3*time.Millisecond || l.timeout != time.Second {
		t.Errorf("parameters hold=3ms timeout=1s after SetLatencyHint(50ms): hold %v timeout %v; the parameters must win", l.hold, l.timeout)
	}
	// The windows for late messages only grow.
	l = newHinted(t, 100*time.Millisecond)
	before := timersOf(l)
	l.SetLatencyHint(0, time.Millisecond, &strategy.Effects{})
	if after := timersOf(l); after.sweepLag != before.sweepLag || after.seenTTL != before.seenTTL {
		t.Errorf("after the hint shrank from 100ms to 1ms: sweepLag %v, seen TTL %v; want them kept at %v, %v",
			after.sweepLag, after.seenTTL, before.sweepLag, before.seenTTL)
	}
}

// A forward buffered under a long hold is decided once, at its new turn,
// when the hold shrinks; a wake-up is asked for it.
func TestSetLatencyHintShrinkDecidesBuffered(t *testing.T) {
	l := newHinted(t, 10*time.Millisecond)
	key := keyOwnedBy("n0")
	var fx strategy.Effects
	if _, ok := l.Request(0, strategy.Request{ID: 1, Key: key, Tokens: 1, Arrival: 0}, &fx); ok {
		t.Fatal("decided at once under hold 10ms")
	}
	fx.Reset()
	l.SetLatencyHint(2*time.Millisecond, time.Millisecond, &fx)
	if len(fx.Decisions) != 1 || fx.Decisions[0].RequestID != 1 {
		t.Fatalf("after the hold shrank to 1ms at 2ms: decisions %+v, want request 1 decided", fx.Decisions)
	}
	fx.Reset()
	l.Tick(20*time.Millisecond, &fx)
	if len(fx.Decisions) != 0 {
		t.Fatalf("request decided again at the old turn: %+v", fx.Decisions)
	}
}
