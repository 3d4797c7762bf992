package gdrl_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"
	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/gdrl"
)

// fuzzNode is n0 of {n0, n1, n2}, started, with some explicit keys.
func fuzzNode(t testing.TB) *gdrl.GDRL {
	g, err := gdrl.New(strategy.Config{Self: "n0", Members: []strategy.NodeID{"n0", "n1", "n2"},
		Rate: bucket.Rate{Tokens: 10, Per: time.Second}, Burst: 6, Rand: rand.New(rand.NewPCG(1, 2))})
	if err != nil {
		t.Fatal(err)
	}
	var fx strategy.Effects
	g.Start(0, &fx)
	for i, k := range []string{"a", "b", "a"} {
		fx.Reset()
		g.Request(time.Duration(i)*time.Millisecond, strategy.Request{ID: uint64(i), Key: k, Tokens: 1, Arrival: time.Duration(i) * time.Millisecond}, &fx)
	}
	return g
}

type snapshot string

func snap(g *gdrl.GDRL) snapshot {
	dc, db := g.DefaultShare()
	s := fmt.Sprintf("inc=%d buddy=%s default=(%d,%d) bytes=%d", g.Incarnation(), g.Buddy(), dc, db, g.StateBytes())
	for _, k := range append(g.Keys(), "zz") {
		c, b := g.InFlight(k)
		s += fmt.Sprintf(" %s=(%d,%d,%d,%d)", k, g.CapacityShare(k), g.BurstShare(k), c, b)
	}
	return snapshot(s)
}

func fuzzSeeds(g *gdrl.GDRL) [][]byte {
	inc := g.Incarnation()
	id := &peerv1.GdrlTransferId{Src: "n1", SrcInc: 7, Dst: "n0", DstInc: inc, Seq: 1}
	id2 := &peerv1.GdrlTransferId{Src: "n1", SrcInc: 7, Dst: "n2", DstInc: 9, Seq: 1}
	id3 := &peerv1.GdrlTransferId{Src: "n1", SrcInc: 7, Dst: "n2", DstInc: 3, Seq: 2}
	items := []*peerv1.GdrlItem{{Key: "a", Capacity: 1000, Burst: 1000000, Tokens: 5}}
	bodies := []*peerv1.GdrlMessage{
		{Body: &peerv1.GdrlMessage_Hello{Hello: &peerv1.GdrlHello{}}},
		{Body: &peerv1.GdrlMessage_Probe{Probe: &peerv1.GdrlProbe{DefaultCapacity: 5, Complete: true,
			Shares: []*peerv1.GdrlShare{{Key: "a", Capacity: 3, Demand: 2e6, Noise: 1, Active: true}}, Empty: []string{"b"}}}},
		{Body: &peerv1.GdrlMessage_Ask{Ask: &peerv1.GdrlAsk{ToInc: inc, Shares: []*peerv1.GdrlShare{{Key: "a", Demand: 9e6, Active: true}}}}},
		{Body: &peerv1.GdrlMessage_Transfer{Transfer: &peerv1.GdrlTransfer{Id: id, Items: items}}},
		{Body: &peerv1.GdrlMessage_Transfer{Transfer: &peerv1.GdrlTransfer{Id: id2, Items: items, Resolve: true, DstNewInc: 10}}},
		{Body: &peerv1.GdrlMessage_TransferAck{TransferAck: &peerv1.GdrlTransferAck{Id: id}}},
		{Body: &peerv1.GdrlMessage_Record{Record: &peerv1.GdrlRecord{Epoch: 1, Version: 2, Parts: 15, DefaultCapacity: 4,
			Shares:     []*peerv1.GdrlShare{{Key: "a", Capacity: 9}, {Key: "c", Removed: true}},
			Outbox:     []*peerv1.GdrlTransfer{{Id: id3, Items: items}},
			Applied:    []*peerv1.GdrlApplied{{Src: "n2", SrcInc: 3, Seq: 4}},
			Tombstones: []*peerv1.GdrlTombstone{{Node: "n3", Inc: 5, Version: 1, Items: []*peerv1.GdrlItem{{Key: "a", Capacity: -3}}}}}}},
		{Body: &peerv1.GdrlMessage_RecordAck{RecordAck: &peerv1.GdrlRecordAck{WardInc: inc, Epoch: 1, Version: 1}}},
		{Body: &peerv1.GdrlMessage_Fenced{Fenced: &peerv1.GdrlFenced{Inc: inc, Version: 3, DefaultCapacity: 1,
			Items: []*peerv1.GdrlItem{{Key: "a", Capacity: 2}}, OnBehalf: []*peerv1.GdrlTransfer{{Id: id, Items: items}}}}},
		{Body: &peerv1.GdrlMessage_FenceAck{FenceAck: &peerv1.GdrlFenceAck{Inc: 5, Version: 1, Alive: true}}},
		// Between heirs of n3's incarnation 5 (split brain): a query, a
		// fence, and the answers.
		{Body: &peerv1.GdrlMessage_Fenced{Fenced: &peerv1.GdrlFenced{Inc: 5, Version: 2, Node: "n3", Query: true}}},
		{Body: &peerv1.GdrlMessage_Fenced{Fenced: &peerv1.GdrlFenced{Inc: 5, Version: 2, Node: "n3", DefaultCapacity: 1,
			Items: []*peerv1.GdrlItem{{Key: "a", Capacity: 2}}, OnBehalf: []*peerv1.GdrlTransfer{{Id: id, Items: items}}}}},
		{Body: &peerv1.GdrlMessage_FenceAck{FenceAck: &peerv1.GdrlFenceAck{Inc: 5, Version: 1, Node: "n3", Later: true}}},
		{Body: &peerv1.GdrlMessage_FenceAck{FenceAck: &peerv1.GdrlFenceAck{Inc: 5, Version: 1, Node: "n3", Absorbed: true}}},
		// Give-ups by a later heir, named in a fence to the incarnation,
		// in a fence between heirs, and in a tombstone of a record; and a
		// record carrying the records its sender holds of wards out of
		// its view.
		{Body: &peerv1.GdrlMessage_Fenced{Fenced: &peerv1.GdrlFenced{Inc: inc, Version: 9, DefaultCapacity: 1,
			Absorbed: []*peerv1.GdrlAbsorbed{{Version: 3, By: "n2", ByInc: 11, DefaultCapacity: 2, Items: []*peerv1.GdrlItem{{Key: "a", Capacity: 4}},
				GivenUp: []*peerv1.GdrlTransfer{{Id: id, Items: items}}, Passed: []*peerv1.GdrlTransfer{{Id: id3, Items: items}}},
				{Version: 3, By: "n1", ByInc: 7, CreditsOnly: true}}}}},
		{Body: &peerv1.GdrlMessage_Fenced{Fenced: &peerv1.GdrlFenced{Inc: 5, Version: 2, Node: "n3", DefaultCapacity: 1,
			Absorbed: []*peerv1.GdrlAbsorbed{{Version: 1, By: "n2", ByInc: 11, DefaultCapacity: 2, Passed: []*peerv1.GdrlTransfer{{Id: id2, Items: items}}}}}}},
		{Body: &peerv1.GdrlMessage_Record{Record: &peerv1.GdrlRecord{Epoch: 1, Version: 2, Parts: 127, DefaultCapacity: 4, GivenUp: []uint64{1},
			Retired:  []*peerv1.GdrlTombstone{{Node: "n2", Inc: 9, Version: 3, OnBehalf: []*peerv1.GdrlTransfer{{Id: id3, Items: items}}}},
			Draining: []*peerv1.GdrlTombstone{{Node: "n0", Inc: inc, Version: 1, DefaultCapacity: 2, OnBehalf: []*peerv1.GdrlTransfer{{Id: id, Items: items}}}},
			Tombstones: []*peerv1.GdrlTombstone{{Node: "n3", Inc: 5, Version: 4, GivenUp: []uint64{2},
				Absorbed: []*peerv1.GdrlAbsorbed{{Version: 1, By: "n2", ByInc: 11, DefaultBurst: 3}}}},
			Held: []*peerv1.GdrlHeldRecord{{Node: "n2", Inc: 9, Version: 6}}}}},
		// A lost tombstone (of a record lost with its holder).
		{Body: &peerv1.GdrlMessage_Record{Record: &peerv1.GdrlRecord{Epoch: 1, Version: 3, Parts: 8,
			Tombstones: []*peerv1.GdrlTombstone{{Node: "n2", Inc: 9, Version: 6, Lost: true}}}}},
	}
	var out [][]byte
	for _, m := range bodies {
		m.Inc, m.Buddy = 7, "n2"
		b, err := proto.Marshal(m)
		if err != nil {
			panic(err)
		}
		out = append(out, b)
	}
	return append(out, nil, []byte{0xff, 0x01}, []byte("garbage"))
}

// FuzzReceive: no payload makes a node panic, and one it refuses changes
// nothing.
func FuzzReceive(f *testing.F) {
	for _, s := range fuzzSeeds(fuzzNode(f)) {
		f.Add(s, uint8(1))
	}
	f.Fuzz(func(t *testing.T, payload []byte, from uint8) {
		g := fuzzNode(t)
		sender := strategy.NodeID(fmt.Sprintf("n%d", from%4))
		before := snap(g)
		var fx strategy.Effects
		if err := g.Receive(10*time.Millisecond, sender, payload, &fx); err != nil {
			if after := snap(g); after != before {
				t.Fatalf("refused payload (%v) changed the node:\nbefore %s\nafter  %s", err, before, after)
			}
			if len(fx.Messages)+len(fx.Wakeups)+len(fx.Decisions) != 0 {
				t.Fatalf("refused payload (%v) produced effects %+v", err, fx)
			}
			return
		}
		// Accepted: the node keeps working.
		fx.Reset()
		g.Tick(time.Second, &fx)
		g.Request(time.Second, strategy.Request{ID: 99, Key: "a", Tokens: 1, Arrival: time.Second}, &fx)
		_ = g.StateBytes()
	})
}

// The seeds themselves are accepted (they are valid messages) except the
// garbage, and the ones meant to be refused are.
func TestReceiveErrors(t *testing.T) {
	g := fuzzNode(t)
	totalC, err := gdrl.RateUnits(bucket.Rate{Tokens: 10, Per: time.Second}) // fuzzNode's rule
	if err != nil {
		t.Fatal(err)
	}
	totalB := int64(6) * gdrl.UnitsPerToken
	seeds := fuzzSeeds(g)
	items0 := []*peerv1.GdrlItem{{Key: "a", Capacity: 1}}
	var fx strategy.Effects
	for i, s := range seeds[:len(seeds)-3] {
		if err := fuzzNode(t).Receive(0, "n1", s, &fx); err != nil {
			t.Errorf("seed %d refused: %v", i, err)
		}
	}
	bad := []*peerv1.GdrlMessage{
		{Inc: 0, Body: &peerv1.GdrlMessage_Hello{Hello: &peerv1.GdrlHello{}}},
		{Inc: 1},
		{Inc: 1, Body: &peerv1.GdrlMessage_Transfer{Transfer: &peerv1.GdrlTransfer{Id: &peerv1.GdrlTransferId{Src: "n1", SrcInc: 1, Seq: 1, Dst: "n1", DstInc: 1}}}},
		{Inc: 1, Body: &peerv1.GdrlMessage_Transfer{Transfer: &peerv1.GdrlTransfer{Id: &peerv1.GdrlTransferId{Src: "n1", SrcInc: 1, Seq: 1, Dst: "n0", DstInc: 1},
			Items: []*peerv1.GdrlItem{{Key: "a", Capacity: -1}}}}},
		{Inc: 1, Body: &peerv1.GdrlMessage_Transfer{Transfer: &peerv1.GdrlTransfer{Id: &peerv1.GdrlTransferId{Src: "n1", SrcInc: 1, Seq: 1, Dst: "n0", DstInc: 1},
			Items: []*peerv1.GdrlItem{{Key: "a", Capacity: 1e12}}}}},
		{Inc: 1, Body: &peerv1.GdrlMessage_Transfer{Transfer: &peerv1.GdrlTransfer{Id: &peerv1.GdrlTransferId{Src: "n1", SrcInc: 1, Seq: 1, Dst: "n0", DstInc: 1},
			Items: []*peerv1.GdrlItem{{Key: "a", Burst: 1, Tokens: 2}}}}},
		{Inc: 1, Body: &peerv1.GdrlMessage_Transfer{Transfer: &peerv1.GdrlTransfer{Id: &peerv1.GdrlTransferId{Src: "n1", SrcInc: 1, Dst: "n0", DstInc: 1}}}},
		{Inc: 1, Body: &peerv1.GdrlMessage_Probe{Probe: &peerv1.GdrlProbe{Shares: []*peerv1.GdrlShare{{Key: "a"}, {Key: "a"}}}}},
		{Inc: 1, Body: &peerv1.GdrlMessage_Probe{Probe: &peerv1.GdrlProbe{Shares: []*peerv1.GdrlShare{{Key: "a"}}, Empty: []string{"a"}}}},
		{Inc: 1, Body: &peerv1.GdrlMessage_Probe{Probe: &peerv1.GdrlProbe{Shares: []*peerv1.GdrlShare{{Key: "a", Demand: -1}}}}},
		{Inc: 1, Body: &peerv1.GdrlMessage_Record{Record: &peerv1.GdrlRecord{Base: 3, Version: 3}}},
		{Inc: 1, Body: &peerv1.GdrlMessage_Fenced{Fenced: &peerv1.GdrlFenced{Inc: 0}}},
		// Out of bounds: shares, defaults and inherited amounts beyond
		// twice the rule's capacity C or burst B.
		{Inc: 1, Body: &peerv1.GdrlMessage_Probe{Probe: &peerv1.GdrlProbe{Shares: []*peerv1.GdrlShare{{Key: "a", Capacity: 2*totalC + 1}}}}},
		{Inc: 1, Body: &peerv1.GdrlMessage_Probe{Probe: &peerv1.GdrlProbe{DefaultCapacity: -2*totalC - 1}}},
		{Inc: 1, Body: &peerv1.GdrlMessage_Ask{Ask: &peerv1.GdrlAsk{Shares: []*peerv1.GdrlShare{{Key: "a", Burst: 2*totalB + 1}}}}},
		{Inc: 1, Body: &peerv1.GdrlMessage_Record{Record: &peerv1.GdrlRecord{Version: 1, Shares: []*peerv1.GdrlShare{{Key: "a", Capacity: 1 << 57}}}}},
		{Inc: 1, Body: &peerv1.GdrlMessage_Fenced{Fenced: &peerv1.GdrlFenced{Inc: 1, Version: 1, Items: []*peerv1.GdrlItem{{Key: "a", Capacity: 2*totalC + 1}}}}},
		// Give-ups by a later heir (GdrlAbsorbed): without a version or a
		// giver, credits only with amounts, amounts beyond the bounds, a
		// bad transfer.
		{Inc: 1, Body: &peerv1.GdrlMessage_Fenced{Fenced: &peerv1.GdrlFenced{Inc: 1, Version: 1, Absorbed: []*peerv1.GdrlAbsorbed{{By: "n2", ByInc: 1}}}}},
		{Inc: 1, Body: &peerv1.GdrlMessage_Fenced{Fenced: &peerv1.GdrlFenced{Inc: 1, Version: 1, Absorbed: []*peerv1.GdrlAbsorbed{{Version: 1, ByInc: 1}}}}},
		{Inc: 1, Body: &peerv1.GdrlMessage_Fenced{Fenced: &peerv1.GdrlFenced{Inc: 1, Version: 1, Absorbed: []*peerv1.GdrlAbsorbed{{Version: 1, By: "n2"}}}}},
		{Inc: 1, Body: &peerv1.GdrlMessage_Fenced{Fenced: &peerv1.GdrlFenced{Inc: 1, Version: 1, Absorbed: []*peerv1.GdrlAbsorbed{{Version: 1, By: "n2", ByInc: 1, CreditsOnly: true, DefaultCapacity: 1}}}}},
		{Inc: 1, Body: &peerv1.GdrlMessage_Fenced{Fenced: &peerv1.GdrlFenced{Inc: 1, Version: 1, Absorbed: []*peerv1.GdrlAbsorbed{{Version: 1, By: "n2", ByInc: 1, DefaultCapacity: 2*totalC + 1}}}}},
		{Inc: 1, Body: &peerv1.GdrlMessage_Fenced{Fenced: &peerv1.GdrlFenced{Inc: 1, Version: 1, Absorbed: []*peerv1.GdrlAbsorbed{{Version: 1, By: "n2", ByInc: 1, Items: []*peerv1.GdrlItem{{Key: "a", Burst: -2*totalB - 1}}}}}}},
		{Inc: 1, Body: &peerv1.GdrlMessage_Fenced{Fenced: &peerv1.GdrlFenced{Inc: 1, Version: 1, Absorbed: []*peerv1.GdrlAbsorbed{{Version: 1, By: "n2", ByInc: 1,
			GivenUp: []*peerv1.GdrlTransfer{{Id: &peerv1.GdrlTransferId{Src: "n1", SrcInc: 1, Seq: 1, Dst: "n0", DstInc: 1}, Items: []*peerv1.GdrlItem{{Key: "a", Capacity: -1}}}}}}}}},
		{Inc: 1, Body: &peerv1.GdrlMessage_Record{Record: &peerv1.GdrlRecord{Version: 1, Tombstones: []*peerv1.GdrlTombstone{{Node: "n3", Inc: 5, Version: 1,
			Absorbed: []*peerv1.GdrlAbsorbed{{Version: 1, By: "n2", ByInc: 1, Passed: []*peerv1.GdrlTransfer{{Items: items0}}}}}}}}},
		// Retired and draining tombstones (GdrlRecord.retired, .draining)
		// without a node, with an amount beyond the bounds, a bad transfer.
		{Inc: 1, Body: &peerv1.GdrlMessage_Record{Record: &peerv1.GdrlRecord{Version: 1, Retired: []*peerv1.GdrlTombstone{{Inc: 5, Version: 1}}}}},
		{Inc: 1, Body: &peerv1.GdrlMessage_Record{Record: &peerv1.GdrlRecord{Version: 1, Draining: []*peerv1.GdrlTombstone{{Node: "n3", Inc: 5, Version: 1, DefaultBurst: 2*totalB + 1}}}}},
		{Inc: 1, Body: &peerv1.GdrlMessage_Record{Record: &peerv1.GdrlRecord{Version: 1, Draining: []*peerv1.GdrlTombstone{{Node: "n3", Inc: 5, Version: 1,
			OnBehalf: []*peerv1.GdrlTransfer{{Items: items0}}}}}}},
		// A fence of version 0 (no tombstone is taken at version 0).
		{Inc: 1, Body: &peerv1.GdrlMessage_Fenced{Fenced: &peerv1.GdrlFenced{Inc: 5}}},
		// Inheritances given up at version 0 (GdrlRecord.given_up,
		// GdrlTombstone.given_up).
		{Inc: 1, Body: &peerv1.GdrlMessage_Record{Record: &peerv1.GdrlRecord{Version: 1, GivenUp: []uint64{2, 0}}}},
		{Inc: 1, Body: &peerv1.GdrlMessage_Record{Record: &peerv1.GdrlRecord{Version: 1, Tombstones: []*peerv1.GdrlTombstone{{Node: "n3", Inc: 5, Version: 1, GivenUp: []uint64{0}}}}}},
		// Held records (GdrlRecord.held) without a node, an incarnation or
		// a version; a lost tombstone with an amount or a credit.
		{Inc: 1, Body: &peerv1.GdrlMessage_Record{Record: &peerv1.GdrlRecord{Version: 1, Held: []*peerv1.GdrlHeldRecord{{Inc: 9, Version: 1}}}}},
		{Inc: 1, Body: &peerv1.GdrlMessage_Record{Record: &peerv1.GdrlRecord{Version: 1, Held: []*peerv1.GdrlHeldRecord{{Node: "n2", Version: 1}}}}},
		{Inc: 1, Body: &peerv1.GdrlMessage_Record{Record: &peerv1.GdrlRecord{Version: 1, Held: []*peerv1.GdrlHeldRecord{{Node: "n2", Inc: 9}}}}},
		{Inc: 1, Body: &peerv1.GdrlMessage_Record{Record: &peerv1.GdrlRecord{Version: 1, Tombstones: []*peerv1.GdrlTombstone{{Node: "n2", Inc: 9, Version: 1, Lost: true, DefaultCapacity: 1}}}}},
		{Inc: 1, Body: &peerv1.GdrlMessage_Record{Record: &peerv1.GdrlRecord{Version: 1, Tombstones: []*peerv1.GdrlTombstone{{Node: "n2", Inc: 9, Version: 1, Lost: true,
			OnBehalf: []*peerv1.GdrlTransfer{{Id: &peerv1.GdrlTransferId{Src: "n1", SrcInc: 1, Seq: 1, Dst: "n2", DstInc: 9}, Items: items0}}}}}}},
		// An incarnation that starts after now + 10 s (received at 0).
		{Inc: uint64(10001) << 20, Body: &peerv1.GdrlMessage_Hello{Hello: &peerv1.GdrlHello{}}},
	}
	for i, m := range bad {
		b, _ := proto.Marshal(m)
		g := fuzzNode(t)
		before := snap(g)
		if err := g.Receive(0, "n1", b, &fx); err == nil {
			t.Errorf("bad message %d accepted", i)
		} else if snap(g) != before {
			t.Errorf("bad message %d (%v) changed the node", i, err)
		}
	}
	// At the bounds themselves (twice C and B), the same messages are
	// accepted: the bound is ±2(C, B), not tighter.
	edge := []*peerv1.GdrlMessage{
		{Inc: 1, Body: &peerv1.GdrlMessage_Probe{Probe: &peerv1.GdrlProbe{Shares: []*peerv1.GdrlShare{{Key: "a", Capacity: 2 * totalC}}}}},
		{Inc: 1, Body: &peerv1.GdrlMessage_Probe{Probe: &peerv1.GdrlProbe{DefaultCapacity: -2 * totalC}}},
		{Inc: 1, Body: &peerv1.GdrlMessage_Ask{Ask: &peerv1.GdrlAsk{Shares: []*peerv1.GdrlShare{{Key: "a", Burst: 2 * totalB}}}}},
		{Inc: 1, Body: &peerv1.GdrlMessage_Fenced{Fenced: &peerv1.GdrlFenced{Inc: 1, Version: 1, Items: []*peerv1.GdrlItem{{Key: "a", Capacity: 2 * totalC}}}}},
		{Inc: 1, Body: &peerv1.GdrlMessage_Fenced{Fenced: &peerv1.GdrlFenced{Inc: 1, Version: 1, Absorbed: []*peerv1.GdrlAbsorbed{{Version: 1, By: "n2", ByInc: 1,
			DefaultCapacity: -2 * totalC, Items: []*peerv1.GdrlItem{{Key: "a", Burst: 2 * totalB}}}}}}},
	}
	for i, m := range edge {
		b, _ := proto.Marshal(m)
		if err := fuzzNode(t).Receive(0, "n1", b, &fx); err != nil {
			t.Errorf("message %d at the bound refused: %v", i, err)
		}
	}
}
