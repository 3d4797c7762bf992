package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/tokenmesh/tokenmesh/api/peer/v1/transportpb"
	"github.com/tokenmesh/tokenmesh/cluster"
	"github.com/tokenmesh/tokenmesh/cluster/grpcpeer"
	"github.com/tokenmesh/tokenmesh/localcluster"
	"github.com/tokenmesh/tokenmesh/rule"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// wireTap is a man in the middle on a peer link: it forwards Hello and
// Batch to the node at target and records every frame that passes.
type wireTap struct {
	transportpb.UnimplementedPeerTransportServer
	client transportpb.PeerTransportClient
	mu     sync.Mutex
	frames []*transportpb.PeerFrame
}

func (w *wireTap) Hello(ctx context.Context, h *transportpb.PeerHello) (*transportpb.PeerHelloReply, error) {
	return w.client.Hello(ctx, h)
}

func (w *wireTap) Batch(stream grpc.BidiStreamingServer[transportpb.PeerBatch, transportpb.PeerAck]) error {
	md, _ := metadata.FromIncomingContext(stream.Context())
	out, err := w.client.Batch(metadata.NewOutgoingContext(stream.Context(), metadata.Pairs(grpcpeer.FromKey, md.Get(grpcpeer.FromKey)[0])))
	if err != nil {
		return err
	}
	for {
		b, err := stream.Recv()
		if err != nil {
			_ = out.CloseSend()
			return nil
		}
		w.mu.Lock()
		for _, fr := range b.GetFrames() {
			w.frames = append(w.frames, proto.Clone(fr).(*transportpb.PeerFrame))
		}
		w.mu.Unlock()
		if err := out.Send(b); err != nil {
			return err
		}
	}
}

// replayTo sends frames, one stream each, to the peer port addr as from,
// and returns the codes the streams ended with.
func replayTo(t *testing.T, addr, from string, frames []*transportpb.PeerFrame) []codes.Code {
	t.Helper()
	cc, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	var out []codes.Code
	for _, fr := range frames {
		ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), grpcpeer.FromKey, from), 5*time.Second)
		s, err := transportpb.NewPeerTransportClient(cc).Batch(ctx)
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		if err := s.Send(&transportpb.PeerBatch{Frames: []*transportpb.PeerFrame{fr}}); err != nil && !errors.Is(err, io.EOF) {
			cancel()
			t.Fatal(err)
		}
		_ = s.CloseSend()
		code := codes.OK
		for {
			if _, err := s.Recv(); err != nil {
				if !errors.Is(err, io.EOF) {
					code = status.Code(err)
				}
				break
			}
		}
		cancel()
		out = append(out, code)
	}
	return out
}

// TestClusterE2EReplayAfterRestartRefused : frames a member
// holding the key sent to n1 are recorded on the wire (a tap between it
// and n1's peer port); replayed to the same n1 they are refused as
// replays; n1 is killed (-9) and restarted, and the recorded frames
// replayed to the new process are refused as stale_incarnation (wire
// version 2 names the receiver's incarnation under the MAC), counted in
// tokenmesh_peer_refused_frames_total, and none is delivered. Before wire
// versions the restarted n1 took them (its replay windows were empty).
func TestClusterE2EReplayAfterRestartRefused(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	rules := []rule.Rule{{Name: "api", Rate: rule.MustRate("1/s"), Burst: 5, Strategy: "owner"}}
	c := startCluster(t, localcluster.Config{Nodes: 2, SecretKey: key, Rules: rules})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	metric := func(i int, name string) float64 {
		t.Helper()
		m, err := c.Metrics(ctx, i)
		if err != nil {
			t.Fatal(err)
		}
		v, _ := metricValue(m, name)
		return v
	}
	const (
		unknownRule = "tokenmesh_peer_unknown_rule_frames_total"
		replayed    = `tokenmesh_peer_refused_frames_total{reason="replay"}`
		stale       = `tokenmesh_peer_refused_frames_total{reason="stale_incarnation"}`
	)

	// The tap in front of n1's peer port.
	cc, err := grpc.NewClient("passthrough:///"+c.Nodes[1].Peer, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	tap := &wireTap{client: transportpb.NewPeerTransportClient(cc)}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	transportpb.RegisterPeerTransportServer(srv, tap)
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()

	// A sender holding the key, as member n0, to n1 through the tap; its
	// frames name a rule n1 does not have, so they change nothing and
	// each delivered one is counted (unknown rule).
	sender, err := grpcpeer.New(grpcpeer.Config{Self: "n0", ListenAddr: "127.0.0.1:0", SecretKey: key,
		Peers: map[strategy.NodeID]string{"n1": lis.Addr().String()}, MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer sender.Close()
	const n = 10
	for i := range n {
		if err := sender.Send("n1", cluster.Frame{Rule: "recorded", Payload: fmt.Appendf(nil, "frame %d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	for metric(1, unknownRule) < n {
		if ctx.Err() != nil {
			t.Fatalf("n1 never got the frames (sender %+v)", sender.Stats())
		}
		time.Sleep(20 * time.Millisecond)
	}
	tap.mu.Lock()
	captured := append([]*transportpb.PeerFrame(nil), tap.frames...)
	tap.mu.Unlock()
	if len(captured) != n {
		t.Fatalf("recorded %d frames, want %d", len(captured), n)
	}
	for _, fr := range captured {
		if fr.GetVersion() != grpcpeer.WireV2 {
			t.Fatalf("recorded a frame of version %d, want %d", fr.GetVersion(), grpcpeer.WireV2)
		}
	}

	// Replayed to the same process: refused by its replay window.
	r0 := metric(1, replayed)
	replayTo(t, c.Nodes[1].Peer, "n0", captured)
	if got := metric(1, replayed) - r0; got != n {
		t.Fatalf("n1 counted %v replays, want %d", got, n)
	}

	// kill -9 and restart n1: empty replay windows.
	if err := c.Kill(1); err != nil {
		t.Fatal(err)
	}
	if err := c.Restart(ctx, 1); err != nil {
		t.Fatal(err)
	}
	codesAfter := replayTo(t, c.Nodes[1].Peer, "n0", captured)
	for i, code := range codesAfter {
		if code != codes.FailedPrecondition {
			t.Fatalf("replayed frame %d to the restarted n1: stream ended %v, want FailedPrecondition (stale_incarnation)", i, code)
		}
	}
	if got := metric(1, stale); got != n {
		t.Fatalf("the restarted n1 counted %v stale_incarnation refusals, want %d", got, n)
	}
	if got := metric(1, unknownRule); got != 0 {
		t.Fatalf("the restarted n1 delivered %v replayed frames", got)
	}
	t.Logf("%d recorded frames: refused as replay by n1, then as stale_incarnation by the restarted n1, none delivered", n)
}
