package gdrl

import (
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// TestRemovalResentKeyReplicated is the mechanism behind the
// TestConservationProperty fail file of seed 4172839587 (capacity
// created): node a's key k, explicit and replicated, is dropped (idle at
// the default share) and the record that carries its removal is lost;
// before a resends it, a request makes k explicit again, so the resent
// record (a delta) carries k explicit at the default share. k goes idle and
// is dropped again. The buddy b's copy of a's record must not keep k: with
// k there at the old default share, an heir of that record adds that amount
// to k after a's default share changed (a default-share payment to a
// joiner, in the fail file: C + 19,500,000 units). Before sendRecord
// marked the shares of a delta record as replicated (share.inRecord), the
// second drop replicated nothing and b kept k for good.
func TestRemovalResentKeyReplicated(t *testing.T) {
	members := []string{"a", "b"}
	nodes := map[strategy.NodeID]*GDRL{
		"a": newMemNode(t, "a", members, "idle=1s"),
		"b": newMemNode(t, "b", members, "idle=1s"),
	}
	a, b := nodes["a"], nodes["b"]
	fx := &strategy.Effects{}
	type msg struct {
		from strategy.NodeID
		m    strategy.Message
	}
	var queue []msg
	collect := func(from strategy.NodeID) {
		for _, m := range fx.Messages {
			queue = append(queue, msg{from, m})
		}
		fx.Reset()
	}
	// deliver delivers the queued messages (and those they cause); lose
	// drops a's records to b, recordsOnly every message but a record or
	// its acknowledgement (so that no exchange moves k meanwhile).
	lose, recordsOnly := false, false
	deliver := func(now time.Duration) {
		t.Helper()
		for n := 0; len(queue) > 0; n++ {
			if n > 10_000 {
				t.Fatal("messages never stop")
			}
			q := queue[0]
			queue = queue[1:]
			var m peerv1.GdrlMessage
			if err := proto.Unmarshal(q.m.Payload, &m); err != nil {
				t.Fatal(err)
			}
			isRecord := m.GetRecord() != nil
			if isRecord && q.from == "a" && lose {
				continue
			}
			if recordsOnly && !isRecord && m.GetRecordAck() == nil {
				continue
			}
			if err := nodes[q.m.To].Receive(now, q.from, q.m.Payload, fx); err != nil {
				t.Fatal(err)
			}
			collect(q.m.To)
		}
	}
	tick := func(now time.Duration) {
		for _, id := range []strategy.NodeID{"a", "b"} {
			nodes[id].Tick(now, fx)
			collect(id)
		}
		deliver(now)
	}
	for _, id := range []strategy.NodeID{"a", "b"} {
		nodes[id].Start(0, fx)
		collect(id)
	}
	deliver(0)
	now := 100 * time.Millisecond
	tick(now)
	if a.buddy != "b" || a.acked != a.version {
		t.Fatalf("setup: a's buddy %q, acked %d of version %d: want b holding a's record", a.buddy, a.acked, a.version)
	}
	recordsOnly = true
	// k explicit and replicated (as a transfer's listed key makes it).
	a.pin("k", now)
	a.flush(now, fx)
	collect("a")
	deliver(now)
	if _, ok := b.held["a"].shares["k"]; !ok || a.acked != a.version {
		t.Fatalf("setup: b's copy of a's record lacks k (acked %d of %d)", a.acked, a.version)
	}
	// k idle at the default share: dropped, its removal lost.
	lose = true
	for a.shares["k"] != nil && now < 2*time.Second {
		now += 100 * time.Millisecond
		tick(now)
	}
	if a.shares["k"] != nil || a.acked == a.version {
		t.Fatalf("setup: k still explicit at a (%v) or its removal acknowledged", a.shares["k"] != nil)
	}
	// A request makes k explicit again before a resends its record.
	now += time.Millisecond
	a.Request(now, strategy.Request{ID: 1, Key: "k", Tokens: 1, Arrival: now}, fx)
	collect("a")
	deliver(now)
	lose = false
	// The resent record carries k explicit; then k goes idle again and is
	// dropped. Run until a is idle and b acknowledged its latest record.
	for end := now + 5*time.Second; now < end; {
		now += 100 * time.Millisecond
		tick(now)
	}
	if a.shares["k"] != nil || a.acked != a.version {
		t.Fatalf("k explicit at a (%v) or a's record unacknowledged (acked %d of %d) after 5 s idle", a.shares["k"] != nil, a.acked, a.version)
	}
	// b holds a's latest record: it must list exactly a's explicit shares.
	for key, v := range b.held["a"].shares {
		sh := a.shares[key]
		if sh == nil {
			t.Errorf("b's copy of a's record (version %d) holds %q at %d, which a dropped: an heir would add %d to %q, not a's default share",
				b.held["a"].version, key, v[0], v[0], key)
			continue
		}
		if sh.c != v[0] || sh.b != v[1] {
			t.Errorf("b's copy holds %q at (%d, %d), a at (%d, %d)", key, v[0], v[1], sh.c, sh.b)
		}
	}
}
