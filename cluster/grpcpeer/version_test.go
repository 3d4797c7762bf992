package grpcpeer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/tokenmesh/tokenmesh/api/peer/v1/transportpb"
	"github.com/tokenmesh/tokenmesh/cluster"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// recordingProxy stands between a sender and a receiver ("on the wire"):
// it forwards Hello and Batch streams to the receiver at target and
// records a copy of every frame that passes.
type recordingProxy struct {
	transportpb.UnimplementedPeerTransportServer
	client transportpb.PeerTransportClient
	lis    net.Listener
	srv    *grpc.Server

	mu     sync.Mutex
	frames []*transportpb.PeerFrame
}

func newRecordingProxy(t *testing.T, target string) *recordingProxy {
	t.Helper()
	cc, err := grpc.NewClient("passthrough:///"+target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &recordingProxy{client: transportpb.NewPeerTransportClient(cc), lis: lis, srv: grpc.NewServer()}
	transportpb.RegisterPeerTransportServer(p.srv, p)
	go func() { _ = p.srv.Serve(lis) }()
	t.Cleanup(p.srv.Stop)
	return p
}

func (p *recordingProxy) Hello(ctx context.Context, h *transportpb.PeerHello) (*transportpb.PeerHelloReply, error) {
	return p.client.Hello(ctx, h)
}

func (p *recordingProxy) Batch(stream grpc.BidiStreamingServer[transportpb.PeerBatch, transportpb.PeerAck]) error {
	md, _ := metadata.FromIncomingContext(stream.Context())
	ctx := metadata.NewOutgoingContext(stream.Context(), metadata.Pairs(FromKey, md.Get(FromKey)[0]))
	out, err := p.client.Batch(ctx)
	if err != nil {
		return err
	}
	for {
		b, err := stream.Recv()
		if err != nil {
			_ = out.CloseSend()
			return nil
		}
		p.mu.Lock()
		for _, fr := range b.GetFrames() {
			p.frames = append(p.frames, proto.Clone(fr).(*transportpb.PeerFrame))
		}
		p.mu.Unlock()
		if err := out.Send(b); err != nil {
			return err
		}
	}
}

func (p *recordingProxy) recorded() []*transportpb.PeerFrame {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*transportpb.PeerFrame(nil), p.frames...)
}

// TestReplayToRestartedReceiverRefused: frames n0 sent to n1 are recorded
// on the wire; n1 restarts (a new process: a new transport, a new
// incarnation, empty replay windows); the recorded frames replayed to it
// are refused as stale_incarnation and counted, none delivered, while n0's
// new frames reach the new n1. The same frames with version and
// to_incarnation stripped (passed off as version 1) fail the MAC; a
// version 1 frame signed by n0 is refused as old_version while the
// membership reports n0 at version 2, and accepted only while it reports
// n0 at version 1 (the residual risk during a rolling upgrade).
func TestReplayToRestartedReceiverRefused(t *testing.T) {
	versions := map[strategy.NodeID]uint32{"n0": WireV2, "n1": WireV2}
	n0 := newTransport(t, Config{Self: "n0", SecretKey: testSecret})
	n1 := newTransport(t, Config{Self: "n1", SecretKey: testSecret})
	box1 := &inbox{}
	n1.Listen(box1.recv)
	proxy := newRecordingProxy(t, n1.Addr())
	n0.SetPeers(map[strategy.NodeID]string{"n1": proxy.lis.Addr().String()})
	n1.SetPeers(map[strategy.NodeID]string{"n0": n0.Addr()})
	n0.SetPeerVersions(versions)
	n1.SetPeerVersions(versions)
	for i := range 20 {
		_ = n0.Send("n1", cluster.Frame{Rule: "r", Payload: fmt.Appendf(nil, "before%d", i)})
	}
	eventually(t, "frames through the proxy", func() bool { return box1.has("n0", "r", "before19") })
	captured := proxy.recorded()
	if len(captured) != 20 {
		t.Fatalf("recorded %d frames, want 20", len(captured))
	}
	for _, fr := range captured {
		if fr.GetVersion() != WireV2 || fr.GetToIncarnation() != n1.Incarnation() {
			t.Fatalf("frame version %d to_incarnation %d, want %d and n1's %d", fr.GetVersion(), fr.GetToIncarnation(), WireV2, n1.Incarnation())
		}
	}
	if st := n0.Stats(); st.Links[WireV2] < 1 {
		t.Fatalf("links %v, want a v2 one", st.Links)
	}

	// n1 restarts: same id, a new process.
	addr := n1.Addr()
	n1.Close()
	var n1b *Transport
	deadline := time.Now().Add(5 * time.Second)
	for n1b == nil {
		tr, err := New(Config{Self: "n1", SecretKey: testSecret, ListenAddr: addr,
			MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond})
		switch {
		case err == nil:
			n1b = tr
		case time.Now().After(deadline):
			t.Fatal(err)
		default:
			time.Sleep(20 * time.Millisecond)
		}
	}
	t.Cleanup(func() { n1b.Close() })
	if n1b.Incarnation() <= captured[0].GetToIncarnation() {
		t.Fatalf("restarted incarnation %d not above %d", n1b.Incarnation(), captured[0].GetToIncarnation())
	}
	box1b := &inbox{}
	n1b.Listen(box1b.recv)
	n1b.SetPeers(map[strategy.NodeID]string{"n0": n0.Addr()})
	n1b.SetPeerVersions(versions)

	// Replayed, one stream per frame (the first refusal ends a stream).
	for _, fr := range captured {
		b := &transportpb.PeerBatch{Frames: []*transportpb.PeerFrame{fr}}
		if code := endOf(t, batchStream(t, n1b, "n0"), b); code != codes.FailedPrecondition {
			t.Fatalf("a replayed frame's stream ended %v, want FailedPrecondition", code)
		}
	}
	if got := n1b.Stats().Refusals[ReasonStaleIncarnation]; got != int64(len(captured)) {
		t.Fatalf("stale_incarnation counted %d, want %d", got, len(captured))
	}
	// Passed off as version 1: the v2 MAC does not verify as a v1 one.
	stripped := proto.Clone(captured[0]).(*transportpb.PeerFrame)
	stripped.Version, stripped.ToIncarnation = 0, 0
	if code := endOf(t, batchStream(t, n1b, "n0"), &transportpb.PeerBatch{Frames: []*transportpb.PeerFrame{stripped}}); code != codes.PermissionDenied {
		t.Fatalf("a stripped frame's stream ended %v, want PermissionDenied (bad_mac)", code)
	}
	// A genuine version 1 frame of n0 (as a node of the previous build
	// signs it), recorded and replayed: refused while gossip says n0
	// speaks v2.
	v1 := signed(t, testSecret, "n0", "n1", n0.Incarnation(), 1<<40, "v1 frame")
	if code := endOf(t, batchStream(t, n1b, "n0"), &transportpb.PeerBatch{Frames: []*transportpb.PeerFrame{v1}}); code != codes.OK {
		t.Fatalf("a v1 frame's stream ended %v, want OK (refused, stream kept)", code)
	}
	if got := n1b.Stats().Refusals[ReasonOldVersion]; got != 1 {
		t.Fatalf("old_version counted %d, want 1", got)
	}
	time.Sleep(20 * time.Millisecond)
	if n := len(box1b.snapshot()); n != 0 {
		t.Fatalf("the restarted n1 delivered %d replayed frames: %v", n, box1b.snapshot())
	}

	// n0's own traffic reaches the new process (redial, a new Hello).
	n0.SetPeers(map[strategy.NodeID]string{"n1": addr})
	for i := range 5 {
		_ = n0.Send("n1", cluster.Frame{Rule: "r", Payload: fmt.Appendf(nil, "after%d", i)})
	}
	eventually(t, "frames after the restart", func() bool { return box1b.has("n0", "r", "after4") })

	// While gossip reports n0 at version 1 only (n0 of the previous build,
	// mid-upgrade), a v1 frame is accepted: the residual risk.
	n1b.SetPeerVersions(map[strategy.NodeID]uint32{"n0": WireV1, "n1": WireV2})
	v1b := signed(t, testSecret, "n0", "n1", n0.Incarnation()+1, 1, "v1 accepted")
	if code := endOf(t, batchStream(t, n1b, "n0"), &transportpb.PeerBatch{Frames: []*transportpb.PeerFrame{v1b}}); code != codes.OK {
		t.Fatalf("stream ended %v", code)
	}
	eventually(t, "v1 from a v1-only member", func() bool { return box1b.has("n0", "r", "v1 accepted") })
}

// oldBuild is a receiver of the build before versions: it serves Batch
// only (Hello is UNIMPLEMENTED) and checks version 1 MACs.
type oldBuild struct {
	transportpb.UnimplementedPeerTransportServer
	self strategy.NodeID
	key  []byte

	mu            sync.Mutex
	good, bad, v2 int
}

func (o *oldBuild) Batch(stream grpc.BidiStreamingServer[transportpb.PeerBatch, transportpb.PeerAck]) error {
	md, _ := metadata.FromIncomingContext(stream.Context())
	from := strategy.NodeID(md.Get(FromKey)[0])
	for {
		b, err := stream.Recv()
		if err != nil {
			return nil
		}
		for _, fr := range b.GetFrames() {
			want := FrameMAC(nil, newMAC(o.key), from, o.self, fr.GetRule(), fr.GetIncarnation(), fr.GetSeq(), fr.GetPayload())
			o.mu.Lock()
			if string(want) == string(fr.GetMac()) {
				o.good++
			} else {
				o.bad++
			}
			if fr.GetVersion() > WireV1 {
				o.v2++
			}
			o.mu.Unlock()
		}
	}
}

// TestSendsV1ToOldBuild: a node of this build sends version 1 frames
// (v1 MACs) to a peer that does not serve Hello, and v2 to one of its own
// build.
func TestSendsV1ToOldBuild(t *testing.T) {
	key, _ := DeriveFrameKey(testSecret)
	old := &oldBuild{self: "old", key: key}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	transportpb.RegisterPeerTransportServer(srv, old)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)

	n0 := newTransport(t, Config{Self: "n0", SecretKey: testSecret})
	n0.SetPeers(map[strategy.NodeID]string{"old": lis.Addr().String()})
	for i := range 10 {
		_ = n0.Send("old", cluster.Frame{Rule: "r", Payload: fmt.Appendf(nil, "%d", i)})
	}
	eventually(t, "frames at the old build", func() bool {
		old.mu.Lock()
		defer old.mu.Unlock()
		return old.good+old.bad == 10
	})
	if old.bad != 0 || old.v2 != 0 {
		t.Fatalf("the old build got %d frames whose v1 MAC failed, %d of version 2", old.bad, old.v2)
	}
	if st := n0.Stats(); st.Links[WireV1] < 1 || st.Links[WireV2] != 0 {
		t.Fatalf("links %v, want v1 only", st.Links)
	}
}

// TestUnknownVersionRefused: a frame of a version above WireVersionMax is
// refused and counted, never delivered, and the stream goes on.
func TestUnknownVersionRefused(t *testing.T) {
	for _, keyed := range []bool{false, true} {
		t.Run(fmt.Sprint("keyed=", keyed), func(t *testing.T) {
			cfg := Config{Self: "n1", Peers: map[strategy.NodeID]string{"n0": "127.0.0.1:1"}}
			if keyed {
				cfg.SecretKey = testSecret
			}
			n1 := newTransport(t, cfg)
			box := &inbox{}
			n1.Listen(box.recv)
			future := &transportpb.PeerFrame{Rule: "r", Payload: []byte("future"), Version: WireVersionMax + 1, Seq: 1, Mac: make([]byte, MACSize)}
			good := &transportpb.PeerFrame{Rule: "r", Payload: []byte("good"), Version: WireV2, ToIncarnation: n1.Incarnation(), Incarnation: 7, Seq: 2}
			if keyed {
				key, _ := DeriveFrameKey(testSecret)
				good.Mac = FrameMACV2(nil, newMAC(key), "n0", "n1", "r", 7, 2, n1.Incarnation(), good.Payload)
			}
			b := &transportpb.PeerBatch{Frames: []*transportpb.PeerFrame{future, good}}
			if code := endOf(t, batchStream(t, n1, "n0"), b); code != codes.OK {
				t.Fatalf("stream ended %v", code)
			}
			if got := n1.Stats().Refusals[ReasonUnknownVersion]; got != 1 {
				t.Fatalf("unknown_version counted %d, want 1", got)
			}
			if box.has("n0", "r", "future") || !box.has("n0", "r", "good") {
				t.Fatalf("delivered %v, want the good frame only", box.snapshot())
			}
		})
	}
}

// FuzzLinkVersion: the version chosen from a Hello answer is one both
// sides speak, and out-of-bounds answers are refused.
func FuzzLinkVersion(f *testing.F) {
	f.Add(uint32(1), uint32(2))
	f.Add(uint32(1), uint32(1))
	f.Add(uint32(2), uint32(9))
	f.Add(uint32(0), uint32(0))
	f.Add(uint32(3), uint32(2))
	f.Add(uint32(3), uint32(300))
	f.Add(uint32(1), uint32(1<<32-1))
	f.Fuzz(func(t *testing.T, lo, hi uint32) {
		v, ok := linkVersion(lo, hi)
		valid := lo >= 1 && hi <= 255 && lo <= hi && lo <= WireVersionMax && hi >= WireVersionMin
		if ok != valid {
			t.Fatalf("linkVersion(%d, %d) ok %v, want %v", lo, hi, ok, valid)
		}
		if ok && (v < lo || v > hi || v < WireVersionMin || v > WireVersionMax || v != min(hi, WireVersionMax)) {
			t.Fatalf("linkVersion(%d, %d) = %d", lo, hi, v)
		}
	})
}

// FuzzVersionedFrame sends one keyed frame per input with a fuzzed
// version, receiver incarnation and MAC layout to a transport "a" whose
// membership reports b at version v1Peer ? 1 : 2. A frame is delivered
// only if it is of version 0 or 1 with a valid v1 MAC and b is reported at
// version 1, or of version 2 with a valid v2 MAC naming a's incarnation;
// a version above 2 is never delivered (nor decoded) and is counted.
func FuzzVersionedFrame(f *testing.F) {
	f.Add(uint32(2), true, false, false, "api", []byte("p"))
	f.Add(uint32(2), false, false, false, "api", []byte("stale"))
	f.Add(uint32(1), true, false, true, "api", []byte("v1 from v1 peer"))
	f.Add(uint32(0), true, false, false, "api", []byte("v1 from v2 peer"))
	f.Add(uint32(2), true, true, false, "api", []byte("v1 MAC on v2"))
	f.Add(uint32(3), true, false, false, "api", []byte("future"))
	f.Add(uint32(1<<32-1), true, false, false, "", []byte(nil))

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
	mac := newMAC(key)
	seq := uint64(0)

	f.Fuzz(func(t *testing.T, version uint32, ownInc, v1MAC, v1Peer bool, rule string, payload []byte) {
		if !utf8.ValidString(rule) {
			return
		}
		peerV := uint32(WireV2)
		if v1Peer {
			peerV = WireV1
		}
		tr.SetPeerVersions(map[strategy.NodeID]uint32{"b": peerV})
		seq++
		toInc := tr.Incarnation()
		if !ownInc {
			toInc--
		}
		fr := &transportpb.PeerFrame{Rule: rule, Payload: payload, Version: version, ToIncarnation: toInc, Incarnation: 1, Seq: seq}
		if v1MAC {
			fr.Mac = FrameMAC(nil, mac, "b", "a", rule, 1, seq, payload)
		} else {
			fr.Mac = FrameMACV2(nil, mac, "b", "a", rule, 1, seq, toInc, payload)
		}
		before := tr.Stats().Refusals
		rec.take()
		code := endOf(t, batchStream(t, tr, "b"), &transportpb.PeerBatch{Frames: []*transportpb.PeerFrame{fr}})
		got := rec.take()
		after := tr.Stats().Refusals
		var want bool
		switch {
		case version > WireVersionMax:
			if after[ReasonUnknownVersion] != before[ReasonUnknownVersion]+1 {
				t.Fatalf("version %d not counted as unknown", version)
			}
			if code != codes.OK {
				t.Fatalf("an unknown version ended the stream with %v", code)
			}
		case version <= WireV1:
			want = v1MAC && v1Peer
		default:
			want = !v1MAC && ownInc
		}
		if want != (len(got) == 1) || len(got) > 1 {
			t.Fatalf("version %d ownInc %v v1MAC %v v1Peer %v: delivered %d frames (code %v)", version, ownInc, v1MAC, v1Peer, len(got), code)
		}
	})
}

// TestHelloUnimplementedIsV1: the error a sender gets from a peer without
// Hello is UNIMPLEMENTED (what hello reads as version 1 only).
func TestHelloUnimplementedIsV1(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	transportpb.RegisterPeerTransportServer(srv, &oldBuild{})
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	cc, err := grpc.NewClient("passthrough:///"+lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	_, err = transportpb.NewPeerTransportClient(cc).Hello(context.Background(), &transportpb.PeerHello{})
	if err == nil || errors.Is(err, io.EOF) {
		t.Fatalf("Hello of an old build: %v", err)
	}
}
