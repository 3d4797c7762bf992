package gdrl

import (
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"
	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/internal/strattest"
)

// heirRace is node c (members a, b, c) holding a tombstone of x's
// incarnation xInc taken at record version 1, while b holds a later one
// (version 18): the two heirs of one incarnation that TestConserveSplitNeverAboveC
// found counted twice (TestConserveLateNoLaterHeirAnswer replays the run).
type heirRace struct {
	t  *testing.T
	g  *GDRL
	fx *strategy.Effects
	tb *tombstone
}

const (
	raceXInc = 5<<20 | 1 // x's dead incarnation
	raceBInc = 1<<20 | 7 // b's incarnation
	raceXNew = 6<<20 | 3 // x's new incarnation
)

func newHeirRace(t *testing.T, fenceDone bool) *heirRace {
	g, err := New(strattest.Config(t, "c", []string{"a", "b", "c"}, bucket.Rate{Tokens: 10, Per: time.Second}, 10, "idle=2s"))
	if err != nil {
		t.Fatal(err)
	}
	r := &heirRace{t: t, g: g, fx: &strategy.Effects{}}
	g.Start(0, r.fx)
	r.tb = &tombstone{node: "x", inc: raceXInc, version: 1, dc: 100, applied: filters{}, at: 1,
		fenceDone: fenceDone, fencing: !fenceDone, fenceSent: time.Second}
	g.tombs = append(g.tombs, r.tb)
	r.fx.Reset()
	return r
}

// receive delivers a message from node from (incarnation inc) at now and
// returns the messages c sends to b in that event.
func (r *heirRace) receive(now time.Duration, from strategy.NodeID, inc uint64, m *peerv1.GdrlMessage) []*peerv1.GdrlFenced {
	r.t.Helper()
	m.Inc = inc
	payload, err := proto.Marshal(m)
	if err != nil {
		r.t.Fatal(err)
	}
	r.fx.Reset()
	if err := r.g.Receive(now, from, payload, r.fx); err != nil {
		r.t.Fatal(err)
	}
	return r.fencesToB()
}

// tick runs c's Tick at now and returns the fences it sends to b.
func (r *heirRace) tick(now time.Duration) []*peerv1.GdrlFenced {
	r.fx.Reset()
	r.g.Tick(now, r.fx)
	return r.fencesToB()
}

func (r *heirRace) fencesToB() []*peerv1.GdrlFenced {
	var out []*peerv1.GdrlFenced
	for _, msg := range r.fx.Messages {
		var m peerv1.GdrlMessage
		if err := proto.Unmarshal(msg.Payload, &m); err != nil {
			r.t.Fatal(err)
		}
		if f := m.GetFenced(); msg.To == "b" && f != nil && f.Node == "x" {
			out = append(out, f)
		}
	}
	return out
}

// bQuery is b's query for a later tombstone of x's incarnation than its
// own (version 18); noLater is b's answer, made before it inherited, to
// c's query or fence (version 1).
func bQuery() *peerv1.GdrlMessage {
	return &peerv1.GdrlMessage{Body: &peerv1.GdrlMessage_Fenced{Fenced: &peerv1.GdrlFenced{Node: "x", Inc: raceXInc, Version: 18, Query: true}}}
}

func bAnswer(absorbed bool) *peerv1.GdrlMessage {
	return &peerv1.GdrlMessage{Body: &peerv1.GdrlMessage_FenceAck{FenceAck: &peerv1.GdrlFenceAck{Node: "x", Inc: raceXInc, Version: 1, Absorbed: absorbed}}}
}

// isFence reports whether fs holds c's fence of its tombstone (version 1,
// with the inherited amounts), not a query.
func isFence(fs []*peerv1.GdrlFenced) bool {
	for _, f := range fs {
		if !f.Query && f.Version == 1 && f.DefaultCapacity == 100 {
			return true
		}
	}
	return false
}

// An heir's answer that it holds no later tombstone can arrive after its
// own query said it does (the answer was held back until its buddy held
// its record, or reordered): the earlier heir must still fence into it.
// Before the fix c took the late answer at its word (heirAsked), never
// asked b again, and the incarnation stayed counted by both heirs.
func TestHeirLateNoLaterAnswer(t *testing.T) {
	t.Run("before c looks", func(t *testing.T) {
		// c's fence is in flight to x when b's query arrives (c does not
		// look for other heirs yet); x answers dead, then b's late "no".
		r := newHeirRace(t, false)
		if fs := r.receive(1100*time.Millisecond, "b", raceBInc, bQuery()); len(fs) != 0 {
			t.Fatalf("c sent %d fences to b while its own fence to x is in flight", len(fs))
		}
		r.receive(1110*time.Millisecond, "x", raceXNew, &peerv1.GdrlMessage{Body: &peerv1.GdrlMessage_FenceAck{FenceAck: &peerv1.GdrlFenceAck{Inc: raceXInc, Version: 1}}})
		if !r.tb.fenceDone {
			t.Fatal("x's new incarnation did not settle c's tombstone")
		}
		r.receive(1120*time.Millisecond, "b", raceBInc, bAnswer(false))
		if !isFence(r.tick(1200 * time.Millisecond)) {
			t.Fatalf("c did not fence into b after b's late answer (heirAsked %v, heirTarget %q)", r.tb.heirAsked, r.tb.heirTarget)
		}
		r.receive(1210*time.Millisecond, "b", raceBInc, bAnswer(true))
		if len(r.g.tombs) != 0 {
			t.Fatalf("c kept its tombstone after b absorbed it: %d", len(r.g.tombs))
		}
	})
	t.Run("taken for the fence's answer", func(t *testing.T) {
		// c looks already: b's query makes it fence into b at once; b's
		// late "no" arrives while the fence is in flight and reads as its
		// answer, and the real answer (absorbed) comes after.
		r := newHeirRace(t, true)
		if !isFence(r.receive(1100*time.Millisecond, "b", raceBInc, bQuery())) {
			t.Fatal("c did not fence into b, whose query showed a later tombstone")
		}
		r.receive(1110*time.Millisecond, "b", raceBInc, bAnswer(false))
		if r.tb.heirAsked["b"] {
			t.Fatal("c took b's late answer for the fence's and asks b no more")
		}
		r.receive(1120*time.Millisecond, "b", raceBInc, bAnswer(true))
		if len(r.g.tombs) != 0 {
			t.Fatalf("c kept its tombstone after b absorbed it: %d", len(r.g.tombs))
		}
	})
	t.Run("asked again", func(t *testing.T) {
		// As above, but the fence's real answer is lost: c asks b again.
		r := newHeirRace(t, true)
		r.receive(1100*time.Millisecond, "b", raceBInc, bQuery())
		r.receive(1110*time.Millisecond, "b", raceBInc, bAnswer(false))
		asked := false
		for now := 1200 * time.Millisecond; now <= 2*time.Second && !asked; now += 100 * time.Millisecond {
			asked = len(r.tick(now)) > 0
		}
		if !asked {
			t.Fatal("c never asked b again")
		}
	})
}
