package rlqs

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tokenmesh/tokenmesh/envoyrls"
	"github.com/tokenmesh/tokenmesh/rlqs/quotamsg"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// recNode is a Node that records the reports it is handed.
type recNode struct {
	mu     sync.Mutex
	next   strategy.QuotaClient
	usages []strategy.QuotaUsage
	rule   string
}

func (n *recNode) NewQuotaClient() strategy.QuotaClient {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.next++
	return n.next
}

func (n *recNode) QuotaUsage(_ context.Context, rule string, u strategy.QuotaUsage) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.usages, n.rule = append(n.usages, u), rule
	return nil
}

func (n *recNode) QuotaDetach(context.Context, string, strategy.QuotaClient, string) error {
	return nil
}
func (n *recNode) QuotaDelivered(context.Context, string, strategy.QuotaAssignment) error { return nil }

func (n *recNode) ids() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []string
	for _, u := range n.usages {
		out = append(out, u.ID)
	}
	return out
}

// The tokenmesh-client-id header of a stream goes with every report of it
// (strategy.QuotaUsage.ID); a stream without it reports none; the header
// twice, or longer than strategy.MaxQuotaClientIDBytes, ends the stream
// with InvalidArgument; Drain leaves the buckets of a stream with an id
// assigned (its next stream takes its share over) and expires the others'.
func TestStreamClientID(t *testing.T) {
	cfg, err := envoyrls.Parse("edge.yaml", []byte(limitsYAML))
	if err != nil {
		t.Fatal(err)
	}
	node := &recNode{}
	srv, err := New(node, cfg, nil, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	open := listen(t, srv)
	withID, without := open(quotamsg.ClientIDHeader, "envoy-7"), open()
	for _, st := range []rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasClient{withID, without} {
		if err := st.Send(usage("edge", map[string]string{"tenant": "acme"}, time.Second, 3, 0)); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(node.ids()) < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := node.ids(); len(got) != 2 || !(got[0] == "envoy-7" && got[1] == "" || got[0] == "" && got[1] == "envoy-7") {
		t.Fatalf("the reports carried ids %q, want envoy-7 and none", got)
	}
	// both buckets assigned (as the quota strategy would)
	node.mu.Lock()
	rule := node.rule
	node.mu.Unlock()
	for c := strategy.QuotaClient(1); c <= 2; c++ {
		srv.Assigned(rule, strategy.QuotaAssignment{Client: c, Key: "acme", MaxTokens: 10, TokensPerFill: 10, FillInterval: time.Second, TTL: 2 * time.Second})
	}
	for _, st := range []rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasClient{withID, without} {
		if _, err := st.Recv(); err != nil {
			t.Fatal(err)
		}
	}
	if n := srv.Drain(); n != 1 {
		t.Errorf("Drain expired %d buckets, want 1 (the stream without an id)", n)
	}
	for _, c := range []struct {
		name string
		kv   []string
	}{
		{"twice", []string{quotamsg.ClientIDHeader, "a", quotamsg.ClientIDHeader, "b"}},
		{"too long", []string{quotamsg.ClientIDHeader, strings.Repeat("x", strategy.MaxQuotaClientIDBytes+1)}},
	} {
		st := open(c.kv...)
		_ = st.Send(usage("edge", map[string]string{"tenant": "acme"}, 0, 0, 0))
		if _, err := st.Recv(); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), quotamsg.ClientIDHeader) {
			t.Errorf("%s: %v, want InvalidArgument naming the header", c.name, err)
		}
	}
}
