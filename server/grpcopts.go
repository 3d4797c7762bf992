package server

import (
	goruntime "runtime"

	"google.golang.org/grpc"
)

// StreamWorkers is the number of gRPC stream workers GRPCServerOptions
// asks for: 16 per CPU, at least 64. grpc-go hands each call to an idle
// worker goroutine, and starts a new goroutine (with a new stack that then
// grows, copying itself) when none is idle; with one worker per CPU, most
// of 32 concurrent unbatched calls took that path, and stack growth was
// about a seventh of the server's CPU per check (docs/PERFORMANCE.md). An
// idle worker costs one parked goroutine.
func StreamWorkers() int { return max(64, 16*goruntime.NumCPU()) }

// GRPCServerOptions are the options `tokenmesh serve` builds its gRPC API
// server with (besides credentials): the stream worker pool, and
// INVALID_ARGUMENT for a request that does not decode (grpccodec.go).
func GRPCServerOptions() []grpc.ServerOption {
	return append([]grpc.ServerOption{grpc.NumStreamWorkers(uint32(StreamWorkers()))}, badRequestOptions()...)
}
