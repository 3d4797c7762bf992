package main

import (
	"context"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	tokenmeshv1 "github.com/tokenmesh/tokenmesh/api/tokenmesh/v1"
)

// startRedis starts a redis-server on 127.0.0.1 for the test (skips when
// there is none) and stops it by PID at the end.
func startRedis(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("no redis-server (apt-get install -y redis-server)")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	cmd := exec.Command(bin, "--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--save", "", "--appendonly", "no")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	addr := "127.0.0.1:" + strconv.Itoa(port)
	for deadline := time.Now().Add(10 * time.Second); ; {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			return addr
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-server on %s: %v", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A hot key of burst 5 (1 token per hour) admits 5 checks then refuses;
// another key has its own bucket; bad items get an error, not a decision.
func TestCheck(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: startRedis(t)})
	t.Cleanup(func() { _ = rdb.Close() })
	s := &server{lim: redis_rate.NewLimiter(rdb), rule: "r", limit: redis_rate.Limit{Rate: 1, Burst: 5, Period: time.Hour}}
	ctx := context.Background()
	check := func(key string, hits int64) *tokenmeshv1.CheckResult {
		t.Helper()
		resp, err := s.Check(ctx, &tokenmeshv1.CheckRequest{Checks: []*tokenmeshv1.CheckItem{{Rule: "r", Key: key, Hits: hits}}})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetResults()[0]
	}
	allowed := 0
	for range 8 {
		if check("hot", 1).GetAllowed() {
			allowed++
		}
	}
	if allowed != 5 {
		t.Errorf("hot key: %d of 8 allowed, want the burst 5", allowed)
	}
	if r := check("hot", 1); r.GetAllowed() || r.GetRetryAfterMs() <= 0 || r.GetError() != "" {
		t.Errorf("hot key after the burst: %+v, want refused with a retry time", r)
	}
	if r := check("other", 5); !r.GetAllowed() {
		t.Errorf("a fresh key asking for the whole burst: %+v, want allowed", r)
	}
	if r := check("x", 6); r.GetAllowed() || !strings.Contains(r.GetError(), "burst") {
		t.Errorf("hits above the burst: %+v, want an error naming the burst", r)
	}
	resp, err := s.Check(ctx, &tokenmeshv1.CheckRequest{Checks: []*tokenmeshv1.CheckItem{{Rule: "nope", Key: "k", Hits: 1}}})
	if err != nil || resp.GetResults()[0].GetAllowed() || !strings.Contains(resp.GetResults()[0].GetError(), `"nope"`) {
		t.Errorf("unknown rule: %v %v, want an error naming it", resp, err)
	}
	if _, err := s.Check(ctx, &tokenmeshv1.CheckRequest{}); err == nil {
		t.Error("an empty request was accepted")
	}
	rules, err := s.ListRules(ctx, &tokenmeshv1.ListRulesRequest{})
	if err != nil || len(rules.GetRules()) != 1 || rules.GetRules()[0].GetBurst() != 5 || rules.GetRules()[0].GetName() != "r" {
		t.Errorf("ListRules: %v %v", rules, err)
	}
}
