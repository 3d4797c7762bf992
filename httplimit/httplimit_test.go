package httplimit

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	tokenmeshv1 "github.com/tokenmesh/tokenmesh/api/tokenmesh/v1"
	"github.com/tokenmesh/tokenmesh/limiter"
	"github.com/tokenmesh/tokenmesh/rule"
	"github.com/tokenmesh/tokenmesh/server"
)

// startNode starts an in-process single node with rule "api": burst 3,
// one token a minute (no refill while the test runs).
func startNode(t *testing.T) (*limiter.Node, []rule.Rule) {
	t.Helper()
	rules := []rule.Rule{{Name: "api", Rate: rule.MustRate("1/min"), Burst: 3, Strategy: "owner"}}
	node, err := limiter.Start(context.Background(), limiter.Config{Name: "t", Rules: rules})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { node.Close() })
	return node, rules
}

var ok = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("hello")) })

func get(t *testing.T, h http.Handler, path string, hdr map[string]string) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, path, nil)
	r.RemoteAddr = "192.0.2.1:1234"
	for k, v := range hdr {
		r.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func TestMiddleware429(t *testing.T) {
	node, rules := startNode(t)
	mw, err := New(Options{Rule: "api", Key: "{header:x-api-key}", Checker: Local(node.Cluster(), rules)})
	if err != nil {
		t.Fatal(err)
	}
	h := mw.Wrap(ok)
	key := map[string]string{"X-Api-Key": "k1"}
	for i := range 3 {
		w := get(t, h, "/", key)
		if w.Code != 200 || w.Body.String() != "hello" {
			t.Fatalf("request %d: %d %q", i, w.Code, w.Body)
		}
		if got, want := w.Header().Get("RateLimit"), `"api";r=`+strconv.Itoa(2-i)+`;t=`+strconv.Itoa(60*(i+1)); got != want {
			t.Errorf("request %d: RateLimit %q, want %q", i, got, want)
		}
		if got := w.Header().Get("RateLimit-Policy"); got != `"api";q=3;w=180` {
			t.Errorf("RateLimit-Policy %q", got)
		}
		if w.Header().Get("Retry-After") != "" {
			t.Errorf("Retry-After on an allowed request")
		}
	}
	w := get(t, h, "/", key)
	if w.Code != http.StatusTooManyRequests {
		t.Fatalf("4th request: %d, want 429", w.Code)
	}
	if got := w.Header().Get("Retry-After"); got != "60" {
		t.Errorf("Retry-After %q, want 60 (one token at 1/min)", got)
	}
	if got := w.Header().Get("RateLimit"); got != `"api";r=0;t=180` {
		t.Errorf("RateLimit %q", got)
	}
	// another key has its own bucket
	if w := get(t, h, "/", map[string]string{"X-Api-Key": "k2"}); w.Code != 200 {
		t.Errorf("other key: %d", w.Code)
	}
	// missing header: 400 naming it
	if w := get(t, h, "/", nil); w.Code != 400 || !strings.Contains(w.Body.String(), "header X-Api-Key is missing") {
		t.Errorf("no key: %d %q", w.Code, w.Body)
	}
}

func TestMiddlewareOverGRPC(t *testing.T) {
	node, rules := startNode(t)
	api := server.New(node, rules)
	gs := grpc.NewServer()
	api.RegisterGRPC(gs)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	mw, err := New(Options{Rule: "api", Key: "{path:2}", Checker: GRPC(tokenmeshv1.NewRateLimitServiceClient(conn))})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mw.Wrap(ok))
	t.Cleanup(srv.Close)
	codes := []int{}
	var last *http.Response
	for range 4 {
		resp, err := http.Get(srv.URL + "/users/alice/profile")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		codes = append(codes, resp.StatusCode)
		last = resp
	}
	if codes[0] != 200 || codes[1] != 200 || codes[2] != 200 || codes[3] != 429 {
		t.Errorf("codes %v, want 200 200 200 429", codes)
	}
	if last.Header.Get("Retry-After") != "60" || last.Header.Get("RateLimit") != `"api";r=0;t=180` {
		t.Errorf("429 headers %v", last.Header)
	}
	if got := last.Header.Get("RateLimit-Policy"); got != `"api";q=3;w=180` {
		t.Errorf("RateLimit-Policy over gRPC %q, want the in-process one (q = burst 3, w = 180 s to refill it)", got)
	}
	resp, err := http.Get(srv.URL + "/users/bob")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("bob: %d", resp.StatusCode)
	}
}

func TestFailOpenClosed(t *testing.T) {
	failing := CheckerFunc(func(context.Context, string, string, int64) (Result, error) { return Result{}, errors.New("down") })
	open, _ := New(Options{Rule: "api", Checker: failing})
	if w := get(t, open.Wrap(ok), "/", nil); w.Code != 200 {
		t.Errorf("fail open: %d", w.Code)
	}
	closed, _ := New(Options{Rule: "api", Checker: failing, FailClosed: true})
	if w := get(t, closed.Wrap(ok), "/", nil); w.Code != 503 {
		t.Errorf("fail closed: %d", w.Code)
	}
	skip, _ := New(Options{Rule: "api", Key: "{header:x-k}", Checker: failing, OnMissingKey: true, FailClosed: true})
	if w := get(t, skip.Wrap(ok), "/", nil); w.Code != 200 {
		t.Errorf("OnMissingKey: %d", w.Code)
	}
	if _, err := New(Options{Checker: failing}); err == nil {
		t.Error("no rule accepted")
	}
}

// batchOnly hides a node's CheckItem: Local then decides through CheckBatch.
type batchOnly struct{ batchChecker }

// Local answers the same through a node's CheckItem (the path a
// *cluster.Node takes) as through a batch of one, refusals, remaining,
// reset and retry included, and an unknown rule is an error either way.
func TestLocalCheckSameAsBatch(t *testing.T) {
	n1, rules := startNode(t)
	n2, _ := startNode(t)
	if _, isSingle := any(n1.Cluster()).(itemChecker); !isSingle {
		t.Fatal("*cluster.Node has no CheckItem: Local would always batch")
	}
	viaCheck, viaBatch := Local(n1.Cluster(), rules), Local(batchOnly{n2.Cluster()}, rules)
	ctx := context.Background()
	for i, c := range []struct {
		key  string
		hits int64
	}{{"a", 1}, {"a", 2}, {"a", 1}, {"b", 4}, {"b", 3}, {"a", 1}, {"b", 1}} {
		r1, err1 := viaCheck.Check(ctx, "api", c.key, c.hits)
		r2, err2 := viaBatch.Check(ctx, "api", c.key, c.hits)
		if err1 != nil || err2 != nil || r1 != r2 {
			t.Errorf("check %d (%s, %d hits): Check %+v %v, batch %+v %v", i, c.key, c.hits, r1, err1, r2, err2)
		}
	}
	for _, c := range []Checker{viaCheck, viaBatch} {
		if _, err := c.Check(ctx, "nope", "a", 1); err == nil {
			t.Error("unknown rule accepted")
		}
	}
}

// Options.RefusalStatus: a refusal answers it (403 for nginx
// auth_request) with the same headers; a status that is not 4xx is refused.
func TestRefusalStatus(t *testing.T) {
	node, rules := startNode(t)
	mw, err := New(Options{Rule: "api", Key: "{header:x-api-key}", Checker: Local(node.Cluster(), rules), RefusalStatus: 403})
	if err != nil {
		t.Fatal(err)
	}
	key := map[string]string{"X-Api-Key": "r1"}
	for range 3 {
		get(t, mw.Wrap(ok), "/", key)
	}
	w := get(t, mw.Wrap(ok), "/", key)
	if w.Code != 403 || w.Header().Get("Retry-After") == "" || w.Header().Get("RateLimit") == "" {
		t.Errorf("refusal: %d %v, want 403 with Retry-After and RateLimit", w.Code, w.Header())
	}
	for _, bad := range []int{200, 302, 500, -1} {
		if _, err := New(Options{Rule: "api", Checker: Local(node.Cluster(), rules), RefusalStatus: bad}); err == nil {
			t.Errorf("RefusalStatus %d accepted", bad)
		}
	}
}

// LocalNode answers as Local with the node's own rules, refuses a rule the
// node lacks, and follows a reload of the node's rules.
func TestLocalNodeReadsTheNodesRules(t *testing.T) {
	n1, rules := startNode(t)
	n2, _ := startNode(t)
	viaRules, viaNode := Local(n1.Cluster(), rules), LocalNode(n2)
	ctx := context.Background()
	for i, c := range []struct {
		key  string
		hits int64
	}{{"a", 1}, {"a", 2}, {"a", 1}, {"b", 4}, {"b", 3}, {"a", 1}} {
		r1, err1 := viaRules.Check(ctx, "api", c.key, c.hits)
		r2, err2 := viaNode.Check(ctx, "api", c.key, c.hits)
		if err1 != nil || err2 != nil || r1 != r2 {
			t.Errorf("check %d (%s, %d hits): Local %+v %v, LocalNode %+v %v", i, c.key, c.hits, r1, err1, r2, err2)
		}
	}
	if _, err := viaNode.Check(ctx, "nope", "a", 1); err == nil || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("unknown rule: %v, want an error naming it", err)
	}
	reloaded := []rule.Rule{{Name: "api", Rate: rule.MustRate("1/min"), Burst: 7, Strategy: "owner"}}
	if _, err := n2.SetRules(ctx, reloaded); err != nil {
		t.Fatal(err)
	}
	if r, err := viaNode.Check(ctx, "api", "c", 1); err != nil || r.Limit != 7 {
		t.Errorf("after a reload to burst 7: %+v %v, want Limit 7", r, err)
	}
}
