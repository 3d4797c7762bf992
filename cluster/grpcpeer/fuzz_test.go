package grpcpeer

import (
	"bytes"
	"context"
	"errors"
	"io"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/tokenmesh/tokenmesh/api/peer/v1/transportpb"
	"github.com/tokenmesh/tokenmesh/cluster"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// rawFrame is a stream message sent as it is: arbitrary bytes where the
// server expects an encoded PeerFrame.
type rawFrame struct{ b []byte }

// rawCodec stands in for gRPC's proto codec (same name, so the server
// decodes with its own): it sends a rawFrame's bytes untouched, and
// encodes and decodes proto messages as usual.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) {
	switch m := v.(type) {
	case *rawFrame:
		return m.b, nil
	case proto.Message:
		return proto.Marshal(m)
	}
	return nil, errors.New("rawCodec: unsupported message")
}

func (rawCodec) Unmarshal(b []byte, v any) error {
	m, ok := v.(proto.Message)
	if !ok {
		return errors.New("rawCodec: unsupported message")
	}
	return proto.Unmarshal(b, m)
}

func (rawCodec) Name() string { return "proto" }

// recorder is a Listen callback that keeps what it is handed.
type recorder struct {
	mu     sync.Mutex
	frames []cluster.Frame
}

func (r *recorder) recv(f cluster.Frame) {
	r.mu.Lock()
	r.frames = append(r.frames, f)
	r.mu.Unlock()
}

func (r *recorder) take() []cluster.Frame {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.frames
	r.frames = nil
	return out
}

// FuzzFrame opens one real stream per input to a transport "a" whose
// peer book holds b and c, and sends one frame on it:
//
//   - the sender is named in the metadata by fromSel: b (a member), the
//     fuzzed from (a member only if it is "b" or "c"), no name at all, or
//     two names;
//   - the frame is PeerFrame{rule, payload} through the generated client,
//     or, with raw set, the bytes raw where an encoded PeerFrame belongs
//     (unknown fields, bad wire types, invalid UTF-8 in rule...);
//   - with bit 2 of fromSel set, the message goes on a Batch stream
//     instead: a PeerBatch of 1 to 4 copies of the frame (bits 3-4), or,
//     with raw set, the bytes raw where an encoded PeerBatch belongs.
//
// The stream is then half-closed and drained: once the server has ended it,
// its handler has returned, so every frame it delivered is in the
// recorder. A frame from a sender the server does not authenticate never
// reaches the callback (and the refusal is counted); a member's frame that
// decodes reaches it exactly once, unchanged, with From the member (a
// batch's frames each once, in order); a message that does not decode ends
// the stream with an error and delivers nothing.
// Nothing may panic; the transport must still deliver an ordinary frame
// afterwards (the next input's).
func FuzzFrame(f *testing.F) {
	valid, err := proto.Marshal(&transportpb.PeerFrame{Rule: "api", Payload: []byte{0x0a, 0x03, 0x08, 0x01, 0x10}})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(uint8(0), "b", "api", []byte("payload"), false, []byte(nil))
	f.Add(uint8(0), "b", "", []byte{}, false, []byte(nil))
	f.Add(uint8(1), "c", "owner", []byte{0x0a, 0x02, 0x08, 0x01}, false, []byte(nil))
	f.Add(uint8(1), "x", "api", []byte("intruder"), false, []byte(nil))
	f.Add(uint8(1), "", "api", []byte("nameless"), false, []byte(nil))
	f.Add(uint8(1), "b ", "api", []byte("almost b"), false, []byte(nil))
	f.Add(uint8(2), "", "api", []byte("no metadata"), false, []byte(nil))
	f.Add(uint8(3), "b", "api", []byte("two names"), false, []byte(nil))
	f.Add(uint8(0), "b", "\xff\xfe", []byte("bad utf-8 rule"), false, []byte(nil))
	f.Add(uint8(0), "b", "", []byte(nil), true, valid)
	f.Add(uint8(0), "b", "", []byte(nil), true, append(valid, 0x18, 0x07))      // unknown field 3
	f.Add(uint8(0), "b", "", []byte(nil), true, []byte{0x0a, 0x02, 0xff, 0xfe}) // rule: invalid UTF-8
	f.Add(uint8(0), "b", "", []byte(nil), true, []byte{0x0a, 0x7f, 0x61})       // truncated
	f.Add(uint8(0), "b", "", []byte(nil), true, []byte{0x0b})                   // group start
	f.Add(uint8(1), "x", "", []byte(nil), true, valid)
	validBatch, err := proto.Marshal(&transportpb.PeerBatch{Frames: []*transportpb.PeerFrame{
		{Rule: "api", Payload: []byte("one")}, {}, {Rule: "owner", Payload: []byte("three")}}})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(uint8(4), "b", "api", []byte("batched"), false, []byte(nil))
	f.Add(uint8(4|3<<3), "b", "api", []byte("four copies"), false, []byte(nil))
	f.Add(uint8(4|1), "x", "api", []byte("intruder batch"), false, []byte(nil))
	f.Add(uint8(4|2), "", "api", []byte("nameless batch"), false, []byte(nil))
	f.Add(uint8(4|1<<3), "b", "\xff", []byte("bad utf-8 in a batch"), false, []byte(nil))
	f.Add(uint8(4), "b", "", []byte(nil), true, validBatch)
	f.Add(uint8(4), "b", "", []byte(nil), true, []byte{})                                   // empty batch
	f.Add(uint8(4), "b", "", []byte(nil), true, append(validBatch, 0x0a, 0x02, 0x0a, 0x7f)) // truncated frame
	f.Add(uint8(4), "b", "", []byte(nil), true, append([]byte{0x0a, byte(len(valid))}, valid...))
	f.Add(uint8(4|1), "x", "", []byte(nil), true, validBatch)

	rec := &recorder{}
	tr, err := New(Config{Self: "a", ListenAddr: "127.0.0.1:0",
		Peers: map[strategy.NodeID]string{"b": "127.0.0.1:1", "c": "127.0.0.1:1"}})
	if err != nil {
		f.Fatal(err)
	}
	tr.Listen(rec.recv)
	cc, err := grpc.NewClient("passthrough:///"+tr.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() {
		cc.Close()
		tr.Close()
	})
	client := transportpb.NewPeerTransportClient(cc)

	f.Fuzz(func(t *testing.T, fromSel uint8, from, rule string, payload []byte, raw bool, rawBytes []byte) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var claimed []string
		switch fromSel % 4 {
		case 0:
			claimed = []string{"b"}
		case 1:
			claimed = []string{from}
		case 2:
		case 3:
			claimed = []string{"b", from}
		}
		for _, c := range claimed {
			ctx = metadata.AppendToOutgoingContext(ctx, FromKey, c)
		}
		member := len(claimed) == 1 && (claimed[0] == "b" || claimed[0] == "c")
		batched := fromSel&4 != 0
		copies := 1 + int(fromSel>>3)%4

		refusedBefore := tr.Stats().Refused
		rec.take()
		// want is the frames the server must deliver, nil when it cannot
		// decode the message.
		want := []*transportpb.PeerFrame{{Rule: rule, Payload: payload}}
		var msg any = want[0]
		if batched {
			b := &transportpb.PeerBatch{}
			for range copies {
				b.Frames = append(b.Frames, want[0])
			}
			want, msg = b.Frames, b
		}
		var stream grpc.ClientStream
		var err error
		switch {
		case raw:
			msg = &rawFrame{rawBytes}
			desc, method := streamDesc("Stream"), transportpb.PeerTransport_Stream_FullMethodName
			if batched {
				desc, method = streamDesc("Batch"), transportpb.PeerTransport_Batch_FullMethodName
				b := &transportpb.PeerBatch{}
				want = nil
				if proto.Unmarshal(rawBytes, b) == nil {
					want = b.GetFrames()
				}
			} else {
				fr := &transportpb.PeerFrame{}
				want = nil
				if proto.Unmarshal(rawBytes, fr) == nil {
					want = []*transportpb.PeerFrame{fr}
				}
			}
			stream, err = cc.NewStream(ctx, desc, method, grpc.ForceCodec(rawCodec{}))
		case batched:
			stream, err = client.Batch(ctx)
		default:
			stream, err = client.Stream(ctx)
		}
		if !raw && !utf8.ValidString(rule) {
			want = nil // the client refuses to encode it
		}
		var code codes.Code
		if err != nil {
			// The client refused the stream (metadata it cannot send):
			// nothing reached the server.
			code = status.Code(err)
			want = nil
		} else {
			if err := stream.SendMsg(msg); err != nil && want != nil && !errors.Is(err, io.EOF) {
				t.Fatalf("send: %v", err)
			}
			_ = stream.CloseSend()
			for {
				if err = stream.RecvMsg(&transportpb.PeerAck{}); err != nil {
					break
				}
			}
			if !errors.Is(err, io.EOF) {
				code = status.Code(err)
			}
		}
		got := rec.take()
		refused := tr.Stats().Refused - refusedBefore

		switch {
		case code == codes.DeadlineExceeded:
			t.Fatalf("the stream did not end within 5s (from %q)", claimed)
		case !member:
			if len(got) > 0 {
				t.Fatalf("a frame from the non-member %q reached the node: %+v", claimed, got)
			}
			// At least once: a stream the client gave up on in an earlier
			// input (its own encoding error) may be refused meanwhile.
			if (code == codes.PermissionDenied || code == codes.Unauthenticated) && refused < 1 {
				t.Fatalf("refusal of %q (%v) not counted", claimed, code)
			}
			if code == codes.OK {
				t.Fatalf("the stream of the non-member %q ended without an error", claimed)
			}
		case want == nil:
			if len(got) > 0 {
				t.Fatalf("an undecodable frame reached the node: %+v", got)
			}
		default:
			if code != codes.OK {
				t.Fatalf("the member %q's stream ended with %v", claimed[0], err)
			}
			if len(got) != len(want) {
				t.Fatalf("the member %q's stream delivered %d frames, want %d", claimed[0], len(got), len(want))
			}
			for i, g := range got {
				w := want[i]
				if g.From != strategy.NodeID(claimed[0]) || g.Rule != w.GetRule() || !bytes.Equal(g.Payload, w.GetPayload()) {
					t.Fatalf("delivered %+v as frame %d, want rule %q payload %x from %s", g, i, w.GetRule(), w.GetPayload(), claimed[0])
				}
			}
		}
	})
}

// streamDesc is the PeerTransport stream named name.
func streamDesc(name string) *grpc.StreamDesc {
	for i, sd := range transportpb.PeerTransport_ServiceDesc.Streams {
		if sd.StreamName == name {
			return &transportpb.PeerTransport_ServiceDesc.Streams[i]
		}
	}
	panic("no stream " + name)
}
