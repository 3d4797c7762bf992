// Command floor is the harness's floor in `make bench-peers`: a gRPC
// server of ours that answers tokenmesh.v1.RateLimitService.Check with
// every check admitted and no limiter behind it, built with the gRPC
// server options `tokenmesh serve` uses (server.GRPCServerOptions). Its
// checks/s and CPU per check are what any limiter answering tokenmesh.v1
// through grpc-go costs at least on this load generator and machine: the
// ceiling of every ratio the harness can show. With --nodes 3 the harness
// starts three of them, which share nothing (no peer traffic, no store).
//
// Usage:
//
//	floor --grpc-addr 127.0.0.1:9000 --rule bench
//
// It serves until SIGINT or SIGTERM. A check of another rule is answered
// with the item's error set, like tokenmesh.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"syscall"

	"google.golang.org/grpc"

	tokenmeshv1 "github.com/tokenmesh/tokenmesh/api/tokenmesh/v1"
	tmserver "github.com/tokenmesh/tokenmesh/server"
)

type server struct {
	tokenmeshv1.UnimplementedRateLimitServiceServer
	rule string
}

func (s *server) ListRules(context.Context, *tokenmeshv1.ListRulesRequest) (*tokenmeshv1.ListRulesResponse, error) {
	return &tokenmeshv1.ListRulesResponse{Rules: []*tokenmeshv1.RuleInfo{{Name: s.rule, Strategy: "none (floor)"}}}, nil
}

// Check admits every check of the rule; it allocates the response as
// tokenmesh's server does (one result per check).
func (s *server) Check(_ context.Context, req *tokenmeshv1.CheckRequest) (*tokenmeshv1.CheckResponse, error) {
	if n := len(req.GetChecks()); n == 0 || n > tmserver.MaxChecks {
		return nil, fmt.Errorf("checks: %d items, want 1..%d", n, tmserver.MaxChecks)
	}
	resp := &tokenmeshv1.CheckResponse{Results: make([]*tokenmeshv1.CheckResult, len(req.GetChecks()))}
	for i, c := range req.GetChecks() {
		res := &tokenmeshv1.CheckResult{}
		if c.GetRule() != s.rule {
			res.Error = fmt.Sprintf("rule %q: not a rule of this server (it has %q)", c.GetRule(), s.rule)
		} else {
			res.Allowed = true
		}
		resp.Results[i] = res
	}
	return resp, nil
}

func main() {
	grpcAddr := flag.String("grpc-addr", "127.0.0.1:0", "gRPC listen address (host:port)")
	rule := flag.String("rule", "bench", "the rule's name")
	flag.Parse()
	ln, err := net.Listen("tcp", *grpcAddr)
	if err != nil {
		log.Fatalf("--grpc-addr: %v", err)
	}
	gs := grpc.NewServer(tmserver.GRPCServerOptions()...)
	tokenmeshv1.RegisterRateLimitServiceServer(gs, &server{rule: *rule})
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	go func() { <-sig; gs.GracefulStop() }()
	fmt.Fprintf(os.Stderr, "floor: answering %s on %s, every check admitted\n", *rule, ln.Addr())
	if err := gs.Serve(ln); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		log.Fatal(err)
	}
}
