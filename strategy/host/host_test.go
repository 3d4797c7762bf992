package host

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/tokenmesh/tokenmesh/strategy"
)

// script is a strategy whose every call does what its next field says.
type script struct {
	wakes    []time.Duration // asked for in the next call
	send     []strategy.Message
	decide   []strategy.Decision
	sync     bool // Request decides at once
	ticks    []time.Duration
	members  [][]strategy.NodeID
	expected [][]strategy.NodeID
	left     bool
	recvErr  error
}

func (s *script) effects(fx *strategy.Effects) {
	for _, d := range s.decide {
		fx.DecideAfter(d.RequestID, d.Allowed, d.Delay)
	}
	for _, m := range s.send {
		fx.Send(m.To, m.Payload)
	}
	for _, at := range s.wakes {
		fx.WakeAt(at)
	}
}
func (s *script) Start(_ time.Duration, fx *strategy.Effects) { s.effects(fx) }
func (s *script) Request(_ time.Duration, req strategy.Request, fx *strategy.Effects) (strategy.Decision, bool) {
	s.effects(fx)
	return strategy.Decision{RequestID: req.ID, Allowed: true}, s.sync
}
func (s *script) Receive(_ time.Duration, _ strategy.NodeID, _ []byte, fx *strategy.Effects) error {
	if s.recvErr != nil {
		return s.recvErr
	}
	s.effects(fx)
	return nil
}
func (s *script) Tick(now time.Duration, fx *strategy.Effects) {
	s.ticks = append(s.ticks, now)
	s.effects(fx)
}
func (s *script) SetMembers(_ time.Duration, m []strategy.NodeID, fx *strategy.Effects) {
	s.members = append(s.members, m)
	s.effects(fx)
}
func (s *script) SetExpected(_ time.Duration, m []strategy.NodeID, fx *strategy.Effects) {
	s.expected = append(s.expected, m)
	s.effects(fx)
}
func (s *script) Leave(_ time.Duration, fx *strategy.Effects) { s.effects(fx) }
func (s *script) Left() bool                                  { return s.left }
func (s *script) StateBytes() int                             { return 0 }

// plain has none of the optional interfaces.
type plain struct{ script }

func (p *plain) SetExpected() {} // not strategy.Conserver's signature
func (p *plain) Leave()       {}

// log is a Driver that records every call in order.
type log struct{ calls []string }

func (l *log) Decided(rule int, d strategy.Decision) {
	l.calls = append(l.calls, fmt.Sprintf("decided %d %d %v", rule, d.RequestID, d.Allowed))
}
func (l *log) Send(rule int, to strategy.NodeID, p []byte) {
	l.calls = append(l.calls, fmt.Sprintf("send %d %s %s", rule, to, p))
}
func (l *log) Schedule(rule int, at time.Duration) {
	l.calls = append(l.calls, fmt.Sprintf("schedule %d %v", rule, at))
}

func TestEffectsInOrderAndWakeupsDeduplicated(t *testing.T) {
	s := &script{
		decide: []strategy.Decision{{RequestID: 7, Allowed: true}},
		send:   []strategy.Message{{To: "n1", Payload: []byte("a")}},
		wakes:  []time.Duration{5, 3, 5, 1}, // 1 is in the past at now=2
	}
	l := &log{}
	h, err := New("n0", 100, l, s)
	if err != nil {
		t.Fatal(err)
	}
	h.Start(2, 0)
	want := []string{"decided 0 7 true", "send 0 n1 a", "schedule 0 5ns", "schedule 0 3ns", "schedule 0 2ns"}
	if !slices.Equal(l.calls, want) {
		t.Fatalf("calls %q, want %q", l.calls, want)
	}
	// Asking again for times already scheduled schedules nothing.
	l.calls, s.decide, s.send = nil, nil, nil
	h.Receive(2, 0, "n1", nil)
	if len(l.calls) != 0 {
		t.Fatalf("re-asked wake-ups scheduled again: %q", l.calls)
	}
	// A tick at 3 forgets 2 and 3, not 5: asking for 3 and 5 again
	// schedules 3 (raised to now) only.
	s.wakes = []time.Duration{3, 5}
	h.Tick(3, 0)
	if want := []string{"schedule 0 3ns"}; !slices.Equal(l.calls, want) {
		t.Fatalf("after tick: %q, want %q", l.calls, want)
	}
	if h.NextRequestID() != 101 || h.NextRequestID() != 102 {
		t.Fatal("request ids do not start above the incarnation")
	}
}

func TestRequestThenSeesEffectsBeforeTheyApply(t *testing.T) {
	s := &script{sync: true, send: []strategy.Message{{To: "n1", Payload: []byte("x")}}}
	l := &log{}
	h, _ := New("n0", 0, l, s)
	var sawCalls int
	d, ok := h.RequestThen(1, 0, strategy.Request{ID: 9, Key: "k", Tokens: 1}, 0,
		func(_ strategy.Strategy, d strategy.Decision, ok bool, fx *strategy.Effects) {
			sawCalls = len(l.calls)
			fx.Send("n2", []byte("y")) // added by the driver, carried out too
		})
	if !ok || !d.Allowed || d.RequestID != 9 {
		t.Fatalf("decision %+v %v", d, ok)
	}
	if sawCalls != 0 {
		t.Fatal("effects applied before then")
	}
	if want := []string{"send 0 n1 x", "send 0 n2 y"}; !slices.Equal(l.calls, want) {
		t.Fatalf("calls %q, want %q", l.calls, want)
	}
}

func TestOptionalInterfaces(t *testing.T) {
	c, p := &script{}, &plain{}
	h, _ := New("n0", 0, &log{}, c, p)
	m := []strategy.NodeID{"n0", "n1"}
	if !h.SetExpected(0, 0, m) || h.SetExpected(0, 1, m) {
		t.Fatal("SetExpected: Conserver not told, or a non-Conserver was")
	}
	m[0] = "zz" // the strategy has its own copy
	if c.expected[0][0] != "n0" {
		t.Fatal("SetExpected passed the caller's slice")
	}
	if !h.Leave(0, 0) || h.Leave(0, 1) {
		t.Fatal("Leave: Leaver not told, or a non-Leaver was")
	}
	if h.Left() {
		t.Fatal("Left with a Leaver not done")
	}
	c.left = true
	if !h.Left() {
		t.Fatal("not Left with every Leaver done")
	}
	if _, ok := h.Remaining(0, 0, "k"); ok {
		t.Fatal("Remaining known without a Remainer")
	}
	if _, _, ok := h.CapacityShares(1); ok {
		t.Fatal("shares without a ShareReporter")
	}
	bad := errors.New("bad payload")
	c.recvErr = bad
	if err := h.Receive(0, 0, "n1", []byte{1}); !errors.Is(err, bad) {
		t.Fatalf("Receive error %v, want the strategy's", err)
	}
}

func TestSetRulesKeepsWakeupsOfKeptRules(t *testing.T) {
	a, b := &script{wakes: []time.Duration{10}}, &script{wakes: []time.Duration{20}}
	l := &log{}
	h, _ := New("n0", 0, l, a, b)
	h.Start(0, 0)
	h.Start(0, 1)
	c := &script{}
	if err := h.SetRules([]strategy.Strategy{c, b}, []int{-1, 1, 0}); err == nil {
		t.Fatal("length mismatch accepted")
	}
	if err := h.SetRules([]strategy.Strategy{b, b}, []int{1, 1}); err == nil {
		t.Fatal("an old rule kept twice accepted")
	}
	if err := h.SetRules([]strategy.Strategy{c, b}, []int{-1, 1}); err != nil {
		t.Fatal(err)
	}
	l.calls = nil
	h.Start(0, 0) // c asks nothing
	h.Receive(1, 1, "n1", nil)
	if len(l.calls) != 0 {
		t.Fatalf("b's wake-up at 20 was lost by the reload: %q", l.calls)
	}
	if _, err := New("n0", 0, nil, a); err == nil {
		t.Fatal("nil driver accepted")
	}
	if _, err := New("n0", 0, l, a, nil); err == nil {
		t.Fatal("nil strategy accepted")
	}
}

// The de-duplication invariant: Schedule is called for (rule, at) exactly
// when no earlier Schedule of it is still unticked, and at is never before
// the call's now.
func TestScheduleOncePerPendingWakeup(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := &script{}
		l := &log{}
		h, _ := New("n0", 0, l, s)
		pending := map[time.Duration]bool{}
		now := time.Duration(0)
		for range rapid.IntRange(1, 40).Draw(t, "steps") {
			now += time.Duration(rapid.IntRange(0, 3).Draw(t, "dt"))
			s.wakes = rapid.SliceOfN(rapid.Map(rapid.IntRange(0, 12), func(i int) time.Duration { return time.Duration(i) }), 0, 4).Draw(t, "wakes")
			l.calls = nil
			tick := rapid.Bool().Draw(t, "tick")
			if tick {
				for at := range pending {
					if at <= now {
						delete(pending, at)
					}
				}
				h.Tick(now, 0)
			} else {
				h.Receive(now, 0, "n1", nil)
			}
			var want []string
			for _, at := range s.wakes {
				at = max(at, now)
				if !pending[at] {
					pending[at] = true
					want = append(want, fmt.Sprintf("schedule 0 %v", at))
				}
			}
			if !slices.Equal(l.calls, want) {
				t.Fatalf("at %v (tick %v) asked %v: calls %q, want %q", now, tick, s.wakes, l.calls, want)
			}
		}
	})
}
