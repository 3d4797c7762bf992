package server

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
)

// rawCodec sends a []byte as the message's encoding, as a broken or
// hostile client could.
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }
func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(*v.(*[]byte))}, nil
}
func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*v.(*[]byte) = data.Materialize()
	return nil
}

// A request that does not decode gets INVALID_ARGUMENT naming the
// decoding error (grpc-go alone answers INTERNAL), on a unary call and on
// a stream, and a good request on the same server is answered as usual.
func TestUndecodableRequestIsInvalidArgument(t *testing.T) {
	gs := grpc.NewServer(GRPCServerOptions()...)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(gs, hs)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(lis)
	defer gs.Stop()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for name, body := range map[string][]byte{
		"invalid UTF-8 in a string field": {0x0a, 0x02, 0xff, 0xfe},
		"truncated":                       {0x0a, 0x05, 'a'},
	} {
		var out []byte
		err := conn.Invoke(ctx, "/grpc.health.v1.Health/Check", &body, &out, grpc.ForceCodecV2(rawCodec{}))
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), "does not decode") {
			t.Errorf("%s (unary): %v; want INVALID_ARGUMENT naming the decoding error", name, err)
		}
		st, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, "/grpc.health.v1.Health/Watch", grpc.ForceCodecV2(rawCodec{}))
		if err != nil {
			t.Fatal(err)
		}
		if err := st.SendMsg(&body); err != nil {
			t.Fatal(err)
		}
		_ = st.CloseSend()
		if err := st.RecvMsg(&out); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s (stream): %v; want INVALID_ARGUMENT", name, err)
		}
	}
	r, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("a good request: %v, %v", r, err)
	}
}
