// Command redisrate is the redis_rate peer of `make bench-peers`: a small
// gRPC server of ours that answers tokenmesh.v1.RateLimitService (Check,
// ListRules) for one rule with github.com/go-redis/redis_rate (theirs: a
// GCRA limiter, "generic cell rate algorithm", run as a Lua script in
// Redis; rate per period and burst), on a shared redis-server. Several
// front-ends on one Redis are an exact Redis-backed limiter, the thing a
// user would otherwise deploy: every check is one EVALSHA round trip.
//
// Usage:
//
//	redisrate --grpc-addr 127.0.0.1:9000 --redis 127.0.0.1:6379 --rule bench --rate 1000000000 --burst 1000000000
//
// It serves until SIGINT or SIGTERM. Bad checks (unknown rule, hits < 1 or
// above the burst) are answered with the item's error set, like tokenmesh.
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
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"

	tokenmeshv1 "github.com/tokenmesh/tokenmesh/api/tokenmesh/v1"
)

// maxChecks bounds the checks of one call (tokenmesh's server.MaxChecks).
const maxChecks = 1000

type server struct {
	tokenmeshv1.UnimplementedRateLimitServiceServer
	lim   *redis_rate.Limiter
	rule  string
	limit redis_rate.Limit
}

func (s *server) ListRules(context.Context, *tokenmeshv1.ListRulesRequest) (*tokenmeshv1.ListRulesResponse, error) {
	perS := float64(s.limit.Rate) / s.limit.Period.Seconds()
	return &tokenmeshv1.ListRulesResponse{Rules: []*tokenmeshv1.RuleInfo{{Name: s.rule, LimitPerS: perS,
		Burst: int64(s.limit.Burst), Strategy: "redis_rate"}}}, nil
}

func (s *server) Check(ctx context.Context, req *tokenmeshv1.CheckRequest) (*tokenmeshv1.CheckResponse, error) {
	if n := len(req.GetChecks()); n == 0 || n > maxChecks {
		return nil, fmt.Errorf("checks: %d items, want 1..%d", n, maxChecks)
	}
	resp := &tokenmeshv1.CheckResponse{Results: make([]*tokenmeshv1.CheckResult, len(req.GetChecks()))}
	for i, c := range req.GetChecks() {
		res := &tokenmeshv1.CheckResult{LimitPerS: float64(s.limit.Rate) / s.limit.Period.Seconds(), Burst: int64(s.limit.Burst)}
		resp.Results[i] = res
		hits := c.GetHits()
		if hits == 0 {
			hits = 1
		}
		switch {
		case c.GetRule() != s.rule:
			res.Error = fmt.Sprintf("rule %q: not a rule of this server (it has %q)", c.GetRule(), s.rule)
			continue
		case hits < 0 || hits > int64(s.limit.Burst):
			res.Error = fmt.Sprintf("hits %d: must be between 1 and the burst %d", hits, s.limit.Burst)
			continue
		}
		r, err := s.lim.AllowN(ctx, c.GetRule()+":"+c.GetKey(), s.limit, int(hits))
		if err != nil {
			res.Error = "redis: " + err.Error()
			continue
		}
		res.Allowed = r.Allowed > 0
		res.Remaining = int64(r.Remaining)
		res.ResetAfterMs = r.ResetAfter.Milliseconds()
		if !res.Allowed {
			res.RetryAfterMs = r.RetryAfter.Milliseconds()
		}
	}
	return resp, nil
}

func main() {
	grpcAddr := flag.String("grpc-addr", "127.0.0.1:0", "gRPC listen address (host:port)")
	redisAddr := flag.String("redis", "127.0.0.1:6379", "redis-server address (host:port)")
	rule := flag.String("rule", "bench", "the rule's name")
	rate := flag.Int("rate", 1000, "tokens per period")
	period := flag.Duration("period", time.Second, "the rate's period")
	burst := flag.Int("burst", 1000, "the bucket's capacity, tokens")
	pool := flag.Int("pool", 0, "Redis connections (0: go-redis's default, 10 per CPU)")
	flag.Parse()
	if *rate < 1 || *burst < 1 || *period <= 0 {
		log.Fatalf("--rate %d, --burst %d, --period %v: all must be positive", *rate, *burst, *period)
	}
	rdb := redis.NewClient(&redis.Options{Addr: *redisAddr, PoolSize: *pool})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	err := rdb.Ping(ctx).Err()
	cancel()
	if err != nil {
		log.Fatalf("--redis %s: %v", *redisAddr, err)
	}
	ln, err := net.Listen("tcp", *grpcAddr)
	if err != nil {
		log.Fatalf("--grpc-addr: %v", err)
	}
	gs := grpc.NewServer()
	tokenmeshv1.RegisterRateLimitServiceServer(gs, &server{lim: redis_rate.NewLimiter(rdb), rule: *rule,
		limit: redis_rate.Limit{Rate: *rate, Burst: *burst, Period: *period}})
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	go func() { <-sig; gs.GracefulStop() }()
	fmt.Fprintf(os.Stderr, "redisrate: serving %s on %s, Redis %s\n", *rule, ln.Addr(), *redisAddr)
	if err := gs.Serve(ln); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		log.Fatal(err)
	}
	_ = rdb.Close()
}
