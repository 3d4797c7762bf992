package server

import (
	"context"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// A request that does not decode (truncated or malformed protobuf, a
// string field that is not valid UTF-8) is the caller's mistake:
// INVALID_ARGUMENT, naming the decoding error. grpc-go answers any codec
// error with INTERNAL ("grpc: failed to unmarshal the received message",
// rpc_util.go's recv), which reads as the server's fault and which clients
// retry. So the server's codec (badRequestCodec) never fails a decode: it
// resets the message, remembers it as undecodable, and the interceptors
// answer it INVALID_ARGUMENT before any handler sees it. Ours.

// badRequestCodec is grpc-go's proto codec, remembering the messages whose
// decoding failed instead of failing.
type badRequestCodec struct {
	inner encoding.CodecV2
	bad   sync.Map // proto.Message (pointer) -> decoding error text
}

func newBadRequestCodec() *badRequestCodec {
	return &badRequestCodec{inner: encoding.GetCodecV2("proto")}
}

func (c *badRequestCodec) Name() string { return c.inner.Name() }

func (c *badRequestCodec) Marshal(v any) (mem.BufferSlice, error) { return c.inner.Marshal(v) }

// Unmarshal decodes data into v; when that fails and v is a protobuf
// message, v is reset and remembered as undecodable (nil error).
func (c *badRequestCodec) Unmarshal(data mem.BufferSlice, v any) error {
	err := c.inner.Unmarshal(data, v)
	m, ok := v.(proto.Message)
	if err == nil || !ok {
		return err
	}
	proto.Reset(m)
	c.bad.Store(v, err.Error())
	return nil
}

// refused is the INVALID_ARGUMENT status for v if its decoding failed (and
// forgets it), or nil.
func (c *badRequestCodec) refused(v any) error {
	msg, ok := c.bad.LoadAndDelete(v)
	if !ok {
		return nil
	}
	return status.Errorf(codes.InvalidArgument, "the request does not decode as its protobuf message: %s", msg)
}

func (c *badRequestCodec) unary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if err := c.refused(req); err != nil {
		return nil, err
	}
	return h(ctx, req)
}

func (c *badRequestCodec) stream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	return h(srv, &checkedStream{ServerStream: ss, c: c})
}

// checkedStream answers a streamed message that did not decode with
// INVALID_ARGUMENT (its RecvMsg's error, which ends the handler's stream).
type checkedStream struct {
	grpc.ServerStream
	c *badRequestCodec
}

func (s *checkedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	return s.c.refused(m)
}

// badRequestOptions are the server options of badRequestCodec: the codec
// and its interceptors (first in their chains).
func badRequestOptions() []grpc.ServerOption {
	c := newBadRequestCodec()
	return []grpc.ServerOption{grpc.ForceServerCodecV2(c), grpc.ChainUnaryInterceptor(c.unary), grpc.ChainStreamInterceptor(c.stream)}
}
