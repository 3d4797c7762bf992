package rlqs

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tokenmesh/tokenmesh/cluster"
	"github.com/tokenmesh/tokenmesh/envoyrls"
	"github.com/tokenmesh/tokenmesh/internal/lockedbuf"
	"github.com/tokenmesh/tokenmesh/strategy"
)

const limitsYAML = `
domain: edge
descriptors:
  - key: tenant
    rate_limit: {unit: second, requests_per_unit: 100}
    tokenmesh: {strategy: quota}
  - key: open
    rate_limit: {unlimited: true}
  - key: plain
    rate_limit: {unit: second, requests_per_unit: 10}
`

// serve starts a one-node cluster with the limits' rules and an RLQS
// server on 127.0.0.1:0, and returns a client stream factory.
func serve(t *testing.T) (*Server, func() rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasClient) {
	t.Helper()
	return serveLog(t, nil)
}

// serveLog is serve with the server's logger.
func serveLog(t *testing.T, log *slog.Logger) (*Server, func() rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasClient) {
	t.Helper()
	cfg, err := envoyrls.Parse("edge.yaml", []byte(limitsYAML))
	if err != nil {
		t.Fatal(err)
	}
	ep, err := cluster.NewMemNetwork().Endpoint("n0")
	if err != nil {
		t.Fatal(err)
	}
	node, err := cluster.New(cluster.Config{Self: "n0", Rules: cfg.Rules(time.Time{}), Transport: ep, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { node.Close() })
	srv, err := New(node, cfg, log, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	node.SetQuotaSink(srv.Assigned)
	streams := listen(t, srv)
	return srv, func() rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasClient { return streams() }
}

// listen serves srv on a gRPC server on 127.0.0.1:0 (stopped at the
// test's end) and returns a factory of client streams to it, each with
// the metadata kv (pairs) and a 10 s deadline.
func listen(t *testing.T, srv *Server) func(kv ...string) rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasClient {
	t.Helper()
	g := grpc.NewServer()
	srv.Register(g)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go g.Serve(ln)
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return func(kv ...string) rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasClient {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		t.Cleanup(cancel)
		st, err := rlqsv3.NewRateLimitQuotaServiceClient(conn).StreamRateLimitQuotas(metadata.AppendToOutgoingContext(ctx, kv...))
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
}

func usage(domain string, id map[string]string, elapsed time.Duration, allowed, denied uint64) *rlqsv3.RateLimitQuotaUsageReports {
	return &rlqsv3.RateLimitQuotaUsageReports{Domain: domain, BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{{
		BucketId: &rlqsv3.BucketId{Bucket: id}, TimeElapsed: durationpb.New(elapsed), NumRequestsAllowed: allowed, NumRequestsDenied: denied}}}
}

// A first report (time_elapsed 0, as Envoy sends it) gets a DENY_ALL
// blanket rule at once (no_assignment_behavior never decides while the
// share is withheld), then, once the key's other clients had their
// chance to report (quota's gather), a token bucket of the whole (r, b)
// for the only client, with the rule's fill interval and a TTL; an
// unlimited bucket gets ALLOW_ALL; Drain expires the assignment (TTL 0).
func TestStreamAssignsAndDrains(t *testing.T) {
	srv, open := serve(t)
	st := open()
	if err := st.Send(usage("edge", map[string]string{"tenant": "acme"}, 0, 0, 0)); err != nil {
		t.Fatal(err)
	}
	r, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if qa := r.BucketAction[0].GetQuotaAssignmentAction(); qa.GetRateLimitStrategy().GetBlanketRule().String() != "DENY_ALL" ||
		qa.AssignmentTimeToLive.AsDuration() != 2*time.Second {
		t.Fatalf("first answer %v, want a DENY_ALL blanket rule for the ttl", r)
	}
	if r, err = st.Recv(); err != nil {
		t.Fatal(err)
	}
	a := r.BucketAction[0]
	tb := a.GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket()
	if a.BucketId.Bucket["tenant"] != "acme" || tb == nil || tb.MaxTokens != 100 || tb.TokensPerFill.GetValue() != 100 ||
		tb.FillInterval.AsDuration() != time.Second || a.GetQuotaAssignmentAction().AssignmentTimeToLive.AsDuration() != 2*time.Second {
		t.Fatalf("assignment %v", a)
	}
	if err := st.Send(usage("", map[string]string{"open": "x"}, 0, 0, 0)); err != nil {
		t.Fatal(err)
	}
	r, err = st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if got := r.BucketAction[0].GetQuotaAssignmentAction().GetRateLimitStrategy(); got.GetBlanketRule().String() != "ALLOW_ALL" || got.GetTokenBucket() != nil {
		t.Fatalf("unlimited bucket: %v", got)
	}
	if n := srv.Drain(); n != 1 {
		t.Fatalf("Drain expired %d buckets, want 1", n)
	}
	for {
		r, err = st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		qa := r.BucketAction[0].GetQuotaAssignmentAction()
		if qa.GetRateLimitStrategy() == nil && qa.AssignmentTimeToLive != nil && qa.AssignmentTimeToLive.AsDuration() == 0 {
			break // the drain's TTL 0 (renewals may come first)
		}
	}
}

// An empty bucket id is skipped: the stream goes on and its next bucket
// is answered.
func TestEmptyBucketIDSkipped(t *testing.T) {
	_, open := serve(t)
	st := open()
	if err := st.Send(usage("edge", map[string]string{}, 0, 0, 0)); err != nil {
		t.Fatal(err)
	}
	if err := st.Send(usage("", map[string]string{"open": "x"}, 0, 0, 0)); err != nil {
		t.Fatal(err)
	}
	r, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if r.BucketAction[0].BucketId.Bucket["open"] != "x" {
		t.Fatalf("answer %v, want the open bucket's ALLOW_ALL", r)
	}
}

// Bad input ends the stream with a status naming it.
func TestStreamRefusesBadInput(t *testing.T) {
	_, open := serve(t)
	for _, c := range []struct {
		name string
		msgs []*rlqsv3.RateLimitQuotaUsageReports
		code codes.Code
	}{
		{"no domain", []*rlqsv3.RateLimitQuotaUsageReports{usage("", map[string]string{"tenant": "a"}, 0, 0, 0)}, codes.InvalidArgument},
		{"unknown domain", []*rlqsv3.RateLimitQuotaUsageReports{usage("nope", map[string]string{"tenant": "a"}, 0, 0, 0)}, codes.NotFound},
		{"domain change", []*rlqsv3.RateLimitQuotaUsageReports{usage("edge", map[string]string{"open": "a"}, 0, 0, 0),
			usage("other", map[string]string{"open": "a"}, 0, 0, 0)}, codes.InvalidArgument},
		{"negative elapsed", []*rlqsv3.RateLimitQuotaUsageReports{usage("edge", map[string]string{"tenant": "a"}, -time.Second, 0, 0)}, codes.InvalidArgument},
		{"long elapsed", []*rlqsv3.RateLimitQuotaUsageReports{usage("edge", map[string]string{"tenant": "a"}, strategy.MaxQuotaElapsed+time.Second, 0, 0)}, codes.InvalidArgument},
		{"too many requests", []*rlqsv3.RateLimitQuotaUsageReports{usage("edge", map[string]string{"tenant": "a"}, time.Second, 0, strategy.MaxQuotaReport+1)}, codes.InvalidArgument},
		{"bucket id too large", []*rlqsv3.RateLimitQuotaUsageReports{usage("edge", map[string]string{"tenant": strings.Repeat("a", MaxBucketIDBytes)}, 0, 0, 0)}, codes.InvalidArgument},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := open()
			for _, m := range c.msgs {
				if err := st.Send(m); err != nil {
					t.Fatal(err)
				}
			}
			for {
				_, err := st.Recv()
				if err == nil {
					continue // an answer to an earlier, good report
				}
				if status.Code(err) != c.code {
					t.Fatalf("%v, want %v", err, c.code)
				}
				return
			}
		})
	}
}

var _ Node = (*cluster.Node)(nil)

// An abandon from the strategy (an idle bucket taken back) reaches the
// stream as an AbandonAction and the stream forgets the bucket: Envoy's
// next report of it is a new bucket's.
func TestAbandonForgetsBucket(t *testing.T) {
	srv, open := serve(t)
	st := open()
	if err := st.Send(usage("edge", map[string]string{"tenant": "acme"}, 0, 0, 0)); err != nil {
		t.Fatal(err)
	}
	for range 2 { // DENY_ALL, then the token bucket
		if _, err := st.Recv(); err != nil {
			t.Fatal(err)
		}
	}
	srv.mu.Lock()
	var s *stream
	for _, x := range srv.streams {
		s = x
	}
	srv.mu.Unlock()
	s.mu.Lock()
	var rk ruleKey
	for k := range s.byKey {
		rk = k
	}
	s.mu.Unlock()
	srv.Assigned(rk.rule, strategy.QuotaAssignment{Client: s.client, Key: rk.key, Abandon: true})
	for {
		r, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if r.BucketAction[0].GetAbandonAction() != nil {
			break
		}
	}
	s.mu.Lock()
	n, m := len(s.buckets), len(s.byKey)
	s.mu.Unlock()
	if n != 0 || m != 0 {
		t.Fatalf("after the abandon the stream keeps %d buckets (%d by key), want none", n, m)
	}
}

// A bucket whose descriptor's rule is not a quota rule (a file without
// the tokenmesh extension: owner) gets no assignment, and the operator is
// told why at Warn, once per rule per UnservedLogEvery, with the fix.
func TestUnservedBucketLogged(t *testing.T) {
	var buf lockedbuf.Buffer
	_, open := serveLog(t, slog.New(slog.NewTextHandler(&buf, nil)))
	st := open()
	for range 3 {
		if err := st.Send(usage("edge", map[string]string{"plain": "x"}, time.Second, 5, 0)); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Send(usage("", map[string]string{"open": "y"}, 0, 0, 0)); err != nil {
		t.Fatal(err)
	}
	r, err := st.Recv() // the open bucket's ALLOW_ALL: the plain one got nothing before it
	if err != nil {
		t.Fatal(err)
	}
	if r.BucketAction[0].BucketId.Bucket["open"] != "y" {
		t.Fatalf("first answer %v, want the open bucket's (the plain one is not served)", r)
	}
	out := buf.String()
	if strings.Count(out, "rlqs: bucket not served") != 1 || !strings.Contains(out, "level=WARN") || !strings.Contains(out, "tokenmesh: {strategy: quota}") {
		t.Fatalf("log:\n%s\nwant one WARN line with the hint", out)
	}
}
