package grpcpeer

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"pgregory.net/rapid"

	"github.com/tokenmesh/tokenmesh/api/peer/v1/transportpb"
	"github.com/tokenmesh/tokenmesh/cluster"
	"github.com/tokenmesh/tokenmesh/internal/logthrottle"
	"github.com/tokenmesh/tokenmesh/strategy"
)

var testSecret = []byte("0123456789abcdef0123456789abcdef")

// keyedMesh starts n transports "n0".. sharing secret, that know each other.
func keyedMesh(t *testing.T, n int, secret []byte) ([]strategy.NodeID, map[strategy.NodeID]*Transport, map[strategy.NodeID]*inbox) {
	t.Helper()
	return meshOf(t, n, func(id strategy.NodeID) Config { return Config{Self: id, SecretKey: secret} })
}

// signed is a frame from from to to signed with secret.
func signed(t *testing.T, secret []byte, from, to strategy.NodeID, inc, seq uint64, payload string) *transportpb.PeerFrame {
	t.Helper()
	key, err := DeriveFrameKey(secret)
	if err != nil {
		t.Fatal(err)
	}
	fr := &transportpb.PeerFrame{Rule: "r", Payload: []byte(payload), Incarnation: inc, Seq: seq}
	fr.Mac = FrameMAC(nil, newMAC(key), from, to, fr.Rule, inc, seq, fr.Payload)
	return fr
}

// TestKeyedExchange: members sharing the key exchange frames both ways;
// a process without the key, or with another one, claiming to be a member
// gets nothing delivered, and its frames are counted as bad_mac.
func TestKeyedExchange(t *testing.T) {
	ids, trs, boxes := keyedMesh(t, 2, testSecret)
	for i := range 50 {
		_ = trs[ids[0]].Send(ids[1], cluster.Frame{Rule: "r", Payload: fmt.Appendf(nil, "a%d", i)})
		_ = trs[ids[1]].Send(ids[0], cluster.Frame{Rule: "r", Payload: fmt.Appendf(nil, "b%d", i)})
	}
	eventually(t, "n0->n1", func() bool { return boxes["n1"].has("n0", "r", "a49") })
	eventually(t, "n1->n0", func() bool { return boxes["n0"].has("n1", "r", "b49") })
	if got := len(boxes["n1"].snapshot()); got != 50 {
		t.Fatalf("n1 got %d frames, want 50", got)
	}

	book := map[strategy.NodeID]string{"n1": trs["n1"].Addr()}
	nokey := newTransport(t, Config{Self: "n0", Peers: book})
	wrongKey := newTransport(t, Config{Self: "n0", Peers: book, SecretKey: []byte("another secret key of 32 bytes!!")})
	for range 10 {
		_ = nokey.Send("n1", cluster.Frame{Rule: "r", Payload: []byte("forged")})
		_ = wrongKey.Send("n1", cluster.Frame{Rule: "r", Payload: []byte("wrong")})
		time.Sleep(5 * time.Millisecond)
	}
	eventually(t, "bad MACs counted", func() bool { return trs["n1"].Stats().Refusals[ReasonBadMAC] >= 2 })
	time.Sleep(50 * time.Millisecond)
	if boxes["n1"].has("n0", "r", "forged") || boxes["n1"].has("n0", "r", "wrong") {
		t.Fatal("a frame without a valid MAC was delivered")
	}
}

// TestReplayRefused: a frame with a valid MAC is delivered once; sending it
// again, or an older incarnation's, is refused as a replay; a newer
// incarnation replaces the old one.
func TestReplayRefused(t *testing.T) {
	_, trs, boxes := keyedMesh(t, 2, testSecret)
	n1 := trs["n1"]
	count := func(p string) int {
		c := 0
		for _, f := range boxes["n1"].snapshot() {
			if string(f.Payload) == p {
				c++
			}
		}
		return c
	}
	f1 := signed(t, testSecret, "n0", "n1", 100, 1, "one")
	f2 := signed(t, testSecret, "n0", "n1", 100, 2, "two")
	b := &transportpb.PeerBatch{Frames: []*transportpb.PeerFrame{f1, f2, f1, f2}}
	if code := endOf(t, batchStream(t, n1, "n0"), b); code != codes.OK {
		t.Fatalf("stream ended %v", code)
	}
	// A second stream replays the first one's frames.
	if code := endOf(t, batchStream(t, n1, "n0"), b); code != codes.OK {
		t.Fatalf("stream ended %v", code)
	}
	if count("one") != 1 || count("two") != 1 {
		t.Fatalf("delivered one %d, two %d times; want once each", count("one"), count("two"))
	}
	if got := n1.Stats().Refusals[ReasonReplay]; got != 6 {
		t.Fatalf("replays counted %d, want 6", got)
	}
	// A newer incarnation starts over; then the old one is stale.
	nb := &transportpb.PeerBatch{Frames: []*transportpb.PeerFrame{signed(t, testSecret, "n0", "n1", 200, 1, "new"),
		signed(t, testSecret, "n0", "n1", 100, 3, "stale")}}
	if code := endOf(t, batchStream(t, n1, "n0"), nb); code != codes.OK {
		t.Fatalf("stream ended %v", code)
	}
	if count("new") != 1 || count("stale") != 0 {
		t.Fatalf("delivered new %d, stale %d times; want 1, 0", count("new"), count("stale"))
	}
	// A frame MACed for another receiver, or altered, ends the stream.
	other := signed(t, testSecret, "n0", "n2", 200, 5, "elsewhere")
	if code := endOf(t, batchStream(t, n1, "n0"), &transportpb.PeerBatch{Frames: []*transportpb.PeerFrame{other}}); code != codes.PermissionDenied {
		t.Fatalf("a frame MACed for n2 ended the stream with %v, want PermissionDenied", code)
	}
	altered := signed(t, testSecret, "n0", "n1", 200, 6, "honest")
	altered.Payload = []byte("altered")
	if code := endOf(t, batchStream(t, n1, "n0"), &transportpb.PeerBatch{Frames: []*transportpb.PeerFrame{altered}}); code != codes.PermissionDenied {
		t.Fatalf("an altered frame ended the stream with %v, want PermissionDenied", code)
	}
	if count("elsewhere") != 0 || count("altered") != 0 {
		t.Fatal("a frame with a bad MAC was delivered")
	}
	if got := n1.Stats().Refusals[ReasonBadMAC]; got != 2 {
		t.Fatalf("bad MACs counted %d, want 2", got)
	}
}

// TestReplayWindowModel: the window accepts a sequence number exactly when
// it is new and not ReplayWindow or more below the highest one accepted
// (a model with the whole set of seen numbers).
func TestReplayWindowModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var w replayWindow
		seen := map[uint64]bool{}
		top := uint64(0)
		for i := range rapid.IntRange(1, 400).Draw(t, "n") {
			var seq uint64
			if rapid.Bool().Draw(t, fmt.Sprint("jump", i)) {
				seq = top + rapid.Uint64Range(0, 3*ReplayWindow).Draw(t, fmt.Sprint("up", i))
			} else {
				seq = top - min(top, rapid.Uint64Range(0, ReplayWindow+5).Draw(t, fmt.Sprint("down", i)))
			}
			want := seq != 0 && !seen[seq] && (seq > top || top-seq < ReplayWindow)
			if got := w.admit(seq); got != want {
				t.Fatalf("admit(%d) with top %d = %v, want %v", seq, top, got, want)
			}
			if want {
				seen[seq] = true
				top = max(top, seq)
			}
		}
	})
}

// TestFrameMACCovers: changing any covered field changes the MAC.
func TestFrameMACCovers(t *testing.T) {
	key, _ := DeriveFrameKey(testSecret)
	h := newMAC(key)
	base := FrameMAC(nil, h, "n0", "n1", "r", 1, 2, []byte("p"))
	for name, m := range map[string][]byte{
		"from":        FrameMAC(nil, h, "n9", "n1", "r", 1, 2, []byte("p")),
		"to":          FrameMAC(nil, h, "n0", "n9", "r", 1, 2, []byte("p")),
		"rule":        FrameMAC(nil, h, "n0", "n1", "s", 1, 2, []byte("p")),
		"incarnation": FrameMAC(nil, h, "n0", "n1", "r", 9, 2, []byte("p")),
		"seq":         FrameMAC(nil, h, "n0", "n1", "r", 1, 9, []byte("p")),
		"payload":     FrameMAC(nil, h, "n0", "n1", "r", 1, 2, []byte("q")),
		"boundary":    FrameMAC(nil, h, "n0", "n1r", "", 1, 2, []byte("p")),
	} {
		if bytes.Equal(m, base) {
			t.Errorf("the MAC does not cover %s", name)
		}
	}
	if again := FrameMAC(nil, h, "n0", "n1", "r", 1, 2, []byte("p")); !bytes.Equal(again, base) || len(base) != MACSize {
		t.Fatal("the MAC is not deterministic or not MACSize bytes")
	}
	if _, err := DeriveFrameKey(nil); err == nil {
		t.Fatal("an empty secret derived a key")
	}
}

// FuzzKeyedFrame sends one frame, signed or not, possibly altered, to a
// transport that requires MACs, from the member "b". Whatever the input:
// a frame whose MAC is not the one for its content is never delivered, a
// (incarnation, seq) is never delivered twice, and nothing from an
// incarnation older than one already delivered is delivered (the
// transport's replay state carries over from input to input).
func FuzzKeyedFrame(f *testing.F) {
	f.Add(uint64(1), uint64(1), true, uint8(0), "api", []byte("p"))
	f.Add(uint64(1), uint64(1), true, uint8(0), "api", []byte("p")) // a replay
	f.Add(uint64(1), uint64(0), true, uint8(0), "api", []byte("seq 0"))
	f.Add(uint64(2), uint64(5000), true, uint8(1), "api", []byte("altered payload"))
	f.Add(uint64(2), uint64(7), true, uint8(2), "api", []byte("altered MAC"))
	f.Add(uint64(0), uint64(0), false, uint8(0), "", []byte(nil))
	f.Add(uint64(1), uint64(3), true, uint8(0), "api", []byte("stale incarnation"))

	key, err := DeriveFrameKey(testSecret)
	if err != nil {
		f.Fatal(err)
	}
	rec := &recorder{}
	tr, err := New(Config{Self: "a", ListenAddr: "127.0.0.1:0", SecretKey: testSecret,
		Peers: map[strategy.NodeID]string{"b": "127.0.0.1:1"}})
	if err != nil {
		f.Fatal(err)
	}
	tr.Listen(rec.recv)
	f.Cleanup(func() { tr.Close() })
	delivered := map[[2]uint64]bool{}
	maxInc := uint64(0)
	mac := newMAC(key)

	f.Fuzz(func(t *testing.T, inc, seq uint64, sign bool, tamper uint8, rule string, payload []byte) {
		if !utf8.ValidString(rule) {
			return // the client cannot encode it (FuzzFrame covers that)
		}
		fr := &transportpb.PeerFrame{Rule: rule, Payload: payload, Incarnation: inc, Seq: seq}
		if sign {
			fr.Mac = FrameMAC(nil, mac, "b", "a", rule, inc, seq, payload)
		}
		valid := sign
		switch tamper % 4 {
		case 1:
			fr.Payload = append(bytes.Clone(payload), 'x')
			valid = false
		case 2:
			if len(fr.Mac) > 0 {
				fr.Mac[0] ^= 1
				valid = false
			}
		case 3:
			fr.Seq++ // covered by the MAC
			valid = false
		}
		rec.take()
		code := endOf(t, batchStream(t, tr, "b"), &transportpb.PeerBatch{Frames: []*transportpb.PeerFrame{fr}})
		got := rec.take()
		if !valid {
			if len(got) > 0 {
				t.Fatalf("a frame with a wrong MAC was delivered: %+v", got)
			}
			if code != codes.PermissionDenied {
				t.Fatalf("a wrong MAC ended the stream with %v, want PermissionDenied", code)
			}
			return
		}
		if code != codes.OK {
			t.Fatalf("a signed frame's stream ended with %v", code)
		}
		if len(got) > 1 {
			t.Fatalf("one frame delivered %d times", len(got))
		}
		if len(got) == 1 {
			id := [2]uint64{inc, seq}
			switch {
			case delivered[id]:
				t.Fatalf("incarnation %d seq %d delivered twice", inc, seq)
			case inc < maxInc:
				t.Fatalf("incarnation %d delivered after %d", inc, maxInc)
			case seq == 0:
				t.Fatal("seq 0 delivered")
			}
			delivered[id] = true
			maxInc = max(maxInc, inc)
			if got[0].From != "b" || got[0].Rule != rule || !bytes.Equal(got[0].Payload, payload) {
				t.Fatalf("delivered %+v", got[0])
			}
		}
	})
}

// BenchmarkFrameMAC is the cost of one frame's MAC (sender or receiver)
// for a 48-byte payload (about an owner forward).
func BenchmarkFrameMAC(b *testing.B) {
	key, _ := DeriveFrameKey(testSecret)
	m := newFramer(key)
	payload := bytes.Repeat([]byte("x"), 48)
	sum := make([]byte, 0, MACSize)
	b.ReportAllocs()
	for i := uint64(0); b.Loop(); i++ {
		sum = m.sum(sum[:0], "n1", "n2", "api", 1, i, payload)
	}
}

// Refusals are logged at most once per reason per RefusalLogEvery; the
// next line says how many were left out.
func TestRefusalLogRateLimited(t *testing.T) {
	var buf bytes.Buffer
	now := time.Now()
	l := refusalLog{log: slog.New(slog.NewTextHandler(&buf, nil)),
		throttle: logthrottle.Throttle{Every: RefusalLogEvery, Now: func() time.Time { return now }}}
	for range 100 {
		l.refused(ReasonBadMAC, "n1", "forged")
		l.refused(ReasonReplay, "n1", "again")
	}
	if n := strings.Count(buf.String(), "\n"); n != 2 {
		t.Fatalf("%d lines for 200 refusals of 2 reasons, want 2:\n%s", n, buf.String())
	}
	if !strings.Contains(buf.String(), "level=WARN") || !strings.Contains(buf.String(), "reason=bad_mac") || !strings.Contains(buf.String(), "reason=replay") {
		t.Fatalf("log:\n%s", buf.String())
	}
	now = now.Add(RefusalLogEvery) // RefusalLogEvery has passed
	l.refused(ReasonBadMAC, "n1", "forged")
	if !strings.Contains(buf.String(), "suppressed_since_last_line=99") {
		t.Fatalf("the next line does not count the 99 left out:\n%s", buf.String())
	}
}

// TestFramesFlowAfterMembershipFlap: a peer removed from the book and
// added again (a partition that heals, without a restart) gets a new
// sender; its frames must not be refused as replays of the old sender's
// sequence numbers, which the receiver's window still holds.
func TestFramesFlowAfterMembershipFlap(t *testing.T) {
	_, trs, boxes := keyedMesh(t, 2, testSecret)
	n0, n1 := trs["n0"], trs["n1"]
	for i := range 100 {
		_ = n0.Send("n1", cluster.Frame{Rule: "r", Payload: fmt.Appendf(nil, "before%d", i)})
	}
	eventually(t, "n0->n1 before", func() bool { return boxes["n1"].has("n0", "r", "before99") })
	n0.SetPeers(map[strategy.NodeID]string{"n0": n0.Addr()})
	n0.SetPeers(map[strategy.NodeID]string{"n0": n0.Addr(), "n1": n1.Addr()})
	for i := range 10 {
		_ = n0.Send("n1", cluster.Frame{Rule: "r", Payload: fmt.Appendf(nil, "after%d", i)})
	}
	eventually(t, "n0->n1 after the flap", func() bool { return boxes["n1"].has("n0", "r", "after9") })
	if got := n1.Stats().Refusals[ReasonReplay]; got != 0 {
		t.Fatalf("%d frames refused as replays after the flap, want 0", got)
	}
}

// TestNotMemberYet: with a secret key, a stream from a node not in the
// peer book (it learned of this node first: a restart or a heal) is kept;
// its frames whose MACs verify are dropped and counted as not_member, not
// as unknown_sender, and once the node is in the book the same stream's
// frames are delivered. A forged frame under an unknown name still ends
// the stream as bad_mac.
func TestNotMemberYet(t *testing.T) {
	box := &inbox{}
	a := newTransport(t, Config{Self: "n1", SecretKey: testSecret, Peers: map[strategy.NodeID]string{"n2": "127.0.0.1:1"}})
	a.Listen(box.recv)
	stream := batchStream(t, a, "n0")
	if err := stream.Send(&transportpb.PeerBatch{Frames: []*transportpb.PeerFrame{signed(t, testSecret, "n0", "n1", 100, 1, "early")}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "not_member counted", func() bool { return a.Stats().Refusals[ReasonNotMember] == 1 })
	a.SetPeers(map[strategy.NodeID]string{"n0": "127.0.0.1:1", "n2": "127.0.0.1:1"})
	if code := endOf(t, stream, &transportpb.PeerBatch{Frames: []*transportpb.PeerFrame{signed(t, testSecret, "n0", "n1", 100, 2, "member")}}); code != codes.OK {
		t.Fatalf("the stream ended with %v, want it kept through the early frame", code)
	}
	if box.has("n0", "r", "early") || !box.has("n0", "r", "member") {
		t.Fatalf("delivered %+v: want the frame after n0 joined the book, not the one before", box.snapshot())
	}
	if st := a.Stats(); st.Refusals[ReasonUnknownSender] != 0 || st.Refusals[ReasonBadMAC] != 0 {
		t.Fatalf("refusals %v: a keyed member-to-be is neither unknown_sender nor bad_mac", st.Refusals)
	}
	forged := signed(t, []byte("another secret key of 32 bytes!!"), "x", "n1", 1, 1, "forged")
	if code := endOf(t, batchStream(t, a, "x"), &transportpb.PeerBatch{Frames: []*transportpb.PeerFrame{forged}}); code != codes.PermissionDenied {
		t.Fatalf("a forged frame under an unknown name ended the stream with %v, want PermissionDenied", code)
	}
	if a.Stats().Refusals[ReasonBadMAC] != 1 || box.has("x", "r", "forged") {
		t.Fatalf("forged frame: refusals %v", a.Stats().Refusals)
	}
}

// TestOversizeCounted: a stream message above gRPC's receive limit (4 MiB)
// ends the stream with RESOURCE_EXHAUSTED and is counted as oversize
// (it used to be counted and logged nowhere).
func TestOversizeCounted(t *testing.T) {
	a := newTransport(t, Config{Self: "n1", Peers: map[strategy.NodeID]string{"n0": "127.0.0.1:1"}})
	a.Listen((&inbox{}).recv)
	big := &transportpb.PeerBatch{Frames: []*transportpb.PeerFrame{{Rule: "r", Payload: bytes.Repeat([]byte{1}, 5<<20)}}}
	if code := endOf(t, batchStream(t, a, "n0"), big); code != codes.ResourceExhausted {
		t.Fatalf("a 5 MiB message ended the stream with %v, want ResourceExhausted", code)
	}
	eventually(t, "oversize counted", func() bool { return a.Stats().Refusals[ReasonOversize] == 1 })
}
