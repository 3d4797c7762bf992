package gdrl_test

import (
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/gdrl"
)

// receive delivers m from node from with incarnation inc to g, failing the
// test if g refuses it.
func receive(t *testing.T, g *gdrl.GDRL, now time.Duration, from strategy.NodeID, inc uint64, m *peerv1.GdrlMessage) {
	t.Helper()
	m.Inc = inc
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var fx strategy.Effects
	if err := g.Receive(now, from, b, &fx); err != nil {
		t.Fatalf("message from %s refused: %v", from, err)
	}
}

func fence(inc, version uint64, dc int64, absorbed ...*peerv1.GdrlAbsorbed) *peerv1.GdrlMessage {
	return &peerv1.GdrlMessage{Body: &peerv1.GdrlMessage_Fenced{Fenced: &peerv1.GdrlFenced{
		Inc: inc, Version: version, DefaultCapacity: dc, Absorbed: absorbed}}}
}

// An incarnation that gave up an inheritance itself (a fence of it) and is
// then fenced by a later heir that gave the same inheritance up on its
// behalf (GdrlAbsorbed, see heir.go) undoes the second give-up, in either
// order; a fence from a build before the field names no give-up, and both
// amounts stay given up, as that build did (a loss, never a creation).
func TestFenceNamesGiveUpOfLaterHeir(t *testing.T) {
	const a, b = 1_000_000, 300_000 // the inheritances at versions 3 (n1's) and 9 (n2's), in units
	give := &peerv1.GdrlAbsorbed{Version: 3, By: "n2", ByInc: 11, DefaultCapacity: a}
	for _, c := range []struct {
		name  string
		steps func(g *gdrl.GDRL)
		want  int64 // given up in all
	}{
		{"direct fence first", func(g *gdrl.GDRL) {
			receive(t, g, 1, "n1", 7, fence(g.Incarnation(), 3, a))
			receive(t, g, 2, "n2", 11, fence(g.Incarnation(), 9, b, give))
		}, b},
		{"later heir first", func(g *gdrl.GDRL) {
			receive(t, g, 1, "n2", 11, fence(g.Incarnation(), 9, b, give))
			receive(t, g, 2, "n1", 7, fence(g.Incarnation(), 3, a))
		}, b},
		{"named twice", func(g *gdrl.GDRL) {
			receive(t, g, 1, "n1", 7, fence(g.Incarnation(), 3, a))
			receive(t, g, 2, "n2", 11, fence(g.Incarnation(), 9, b, give))
			receive(t, g, 3, "n2", 11, fence(g.Incarnation(), 9, b, give))
		}, b},
		{"previous build", func(g *gdrl.GDRL) {
			receive(t, g, 1, "n1", 7, fence(g.Incarnation(), 3, a))
			receive(t, g, 2, "n2", 11, fence(g.Incarnation(), 9, b))
		}, a + b},
	} {
		g := fuzzNode(t)
		dc0, _ := g.DefaultShare()
		c.steps(g)
		if dc, _ := g.DefaultShare(); dc0-dc != c.want {
			t.Errorf("%s: default share gave up %d units, want %d", c.name, dc0-dc, c.want)
		}
	}
}

// A node holding an earlier record of a ward (n2's incarnation 9, version
// 3) inherits another ward that is known dead (n1: its new incarnation
// says hello) whose record says it held a later record of n2 (version 5,
// GdrlRecord.held): n0 drops its stale record, so n2's restart makes it
// inherit nothing, and keeps a lost tombstone of version 5, into which
// another heir's earlier tombstone of n2 fences and is given up. A record
// from a build before the field (parts without bit 5, no held records)
// names none: n0 inherits its stale record at n2's restart, as before.
func TestHeldRecordOfDeadHolderDropsStale(t *testing.T) {
	const x, a = 2_000_000, 700_000 // n2's default share in n0's record of it, and in another heir's, units
	hello := &peerv1.GdrlMessage{Body: &peerv1.GdrlMessage_Hello{Hello: &peerv1.GdrlHello{}}}
	for _, withHeld := range []bool{true, false} {
		g := fuzzNode(t)
		dc0, _ := g.DefaultShare()
		receive(t, g, 5*time.Millisecond, "n2", 9, &peerv1.GdrlMessage{Body: &peerv1.GdrlMessage_Record{Record: &peerv1.GdrlRecord{
			Epoch: 1, Version: 3, Parts: 15, DefaultCapacity: x}}})
		rec := &peerv1.GdrlRecord{Epoch: 1, Version: 3, Parts: 15}
		if withHeld {
			rec.Parts = 63
			rec.Held = []*peerv1.GdrlHeldRecord{{Node: "n2", Inc: 9, Version: 5}}
		}
		receive(t, g, 10*time.Millisecond, "n1", 7, &peerv1.GdrlMessage{Body: &peerv1.GdrlMessage_Record{Record: rec}})
		receive(t, g, 20*time.Millisecond, "n1", 8, hello)  // n1 restarted: n0 inherits its record (no share)
		receive(t, g, 30*time.Millisecond, "n2", 10, hello) // n2 restarted: its incarnation 9 is dead
		want := dc0
		if !withHeld {
			want += x // the stale record inherited
		}
		if dc, _ := g.DefaultShare(); dc != want {
			t.Fatalf("held=%v: default share %d after the restarts, want %d", withHeld, dc, want)
		}
		if !withHeld {
			continue
		}
		// An earlier heir of n2's incarnation 9 (version 4) fences into
		// the lost tombstone, which gives that inheritance up.
		receive(t, g, 40*time.Millisecond, "n3", 11, &peerv1.GdrlMessage{Body: &peerv1.GdrlMessage_Fenced{Fenced: &peerv1.GdrlFenced{
			Inc: 9, Version: 4, Node: "n2", DefaultCapacity: a}}})
		if dc, _ := g.DefaultShare(); dc != dc0-a {
			t.Errorf("default share %d after the earlier heir's fence, want %d", dc, dc0-a)
		}
	}
}

// A node holding a tombstone of a dead incarnation (n1's incarnation 7,
// its record at version 20) gives nothing up for a fence of an earlier
// inheritance of it (version 3, a stale copy's) that the incarnation had
// given up itself by version 20 (GdrlRecord.given_up); a record from a
// build before the field names none, and the fence is absorbed as that
// build did (a loss, never a creation).
func TestHeirFenceOfInheritanceGivenUp(t *testing.T) {
	const x, a = 2_000_000, 700_000 // n1's default share at version 20, and the inheritance at version 3, units
	for _, withField := range []bool{true, false} {
		g := fuzzNode(t)
		dc0, _ := g.DefaultShare()
		rec := &peerv1.GdrlRecord{Epoch: 1, Version: 20, Parts: 15, DefaultCapacity: x}
		if withField {
			rec.Parts, rec.GivenUp = 63, []uint64{3}
		}
		receive(t, g, 10*time.Millisecond, "n1", 7, &peerv1.GdrlMessage{Body: &peerv1.GdrlMessage_Record{Record: rec}})
		receive(t, g, 20*time.Millisecond, "n1", 8, &peerv1.GdrlMessage{Body: &peerv1.GdrlMessage_Hello{Hello: &peerv1.GdrlHello{}}})
		receive(t, g, 30*time.Millisecond, "n1", 8, &peerv1.GdrlMessage{Body: &peerv1.GdrlMessage_FenceAck{FenceAck: &peerv1.GdrlFenceAck{Inc: 7, Version: 20}}})
		if dc, _ := g.DefaultShare(); dc != dc0+x {
			t.Fatalf("given_up=%v: default share %d after inheriting n1, want %d", withField, dc, dc0+x)
		}
		receive(t, g, 40*time.Millisecond, "n2", 11, &peerv1.GdrlMessage{Body: &peerv1.GdrlMessage_Fenced{Fenced: &peerv1.GdrlFenced{
			Inc: 7, Version: 3, Node: "n1", DefaultCapacity: a}}})
		want := dc0 + x
		if !withField {
			want -= a
		}
		if dc, _ := g.DefaultShare(); dc != want {
			t.Errorf("given_up=%v: default share %d after the stale fence, want %d", withField, dc, want)
		}
	}
}
