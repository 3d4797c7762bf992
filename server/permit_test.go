package server

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	tokenmeshv1 "github.com/tokenmesh/tokenmesh/api/tokenmesh/v1"
	"github.com/tokenmesh/tokenmesh/rule"
)

// permitServer serves a single node with a concurrency rule "conc" of
// limit 2 (permit_ttl 50ms: it grants nothing in its first 50 ms) and the
// owner rule "api".
func permitServer(t *testing.T) *Server {
	t.Helper()
	rules := append(testRules(), rule.Rule{Name: "conc", Rate: slow, Burst: 1, Strategy: "concurrency", Params: []string{"limit=2", "permit_ttl=50ms"}})
	s := New(startTestNode(t, rules), rules)
	time.Sleep(110 * time.Millisecond) // permit_ttl + join_wait (default: permit_ttl)
	return s
}

// TestAcquireReleaseGRPC: two permits of limit 2, a third refused, a
// release lets one more in; bad input is INVALID_ARGUMENT naming the field.
func TestAcquireReleaseGRPC(t *testing.T) {
	c := tokenmeshv1.NewRateLimitServiceClient(grpcClient(t, permitServer(t)))
	ctx := ctxT(t)
	var ids []uint64
	for i, want := range []bool{true, true, false} {
		r, err := c.Acquire(ctx, &tokenmeshv1.AcquireRequest{Rule: "conc", Key: "db"})
		if err != nil {
			t.Fatal(err)
		}
		if r.Granted != want || r.Limit != 2 || (want && (r.Permit == 0 || r.ExpiresUnixMs < time.Now().UnixMilli())) {
			t.Fatalf("acquire %d: %v, want granted %v with a permit and an expiry", i, r, want)
		}
		ids = append(ids, r.Permit)
	}
	if _, err := c.Release(ctx, &tokenmeshv1.ReleaseRequest{Rule: "conc", Key: "db", Permit: ids[0]}); err != nil {
		t.Fatal(err)
	}
	if r, err := c.Acquire(ctx, &tokenmeshv1.AcquireRequest{Rule: "conc", Key: "db"}); err != nil || !r.Granted || r.Remaining != 0 {
		t.Fatalf("after a release: %v %v, want granted with remaining 0", r, err)
	}
	for _, tc := range []struct {
		req  *tokenmeshv1.AcquireRequest
		want string
	}{
		{&tokenmeshv1.AcquireRequest{Key: "db"}, "rule: is required"},
		{&tokenmeshv1.AcquireRequest{Rule: "nope", Key: "db"}, `rule: "nope" is not a rule`},
		{&tokenmeshv1.AcquireRequest{Rule: "conc"}, "key: is required"},
		{&tokenmeshv1.AcquireRequest{Rule: "conc", Key: "db", Weight: -1}, "weight: -1"},
		{&tokenmeshv1.AcquireRequest{Rule: "api", Key: "db"}, "hands out no permits"},
	} {
		_, err := c.Acquire(ctx, tc.req)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Acquire(%v): %v, want INVALID_ARGUMENT naming %q", tc.req, err, tc.want)
		}
	}
	if _, err := c.Release(ctx, &tokenmeshv1.ReleaseRequest{Rule: "conc", Key: "db"}); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "permit") {
		t.Errorf("Release of permit 0: %v", err)
	}
}

// TestAcquireReleaseHTTP: the same over POST /v1/acquire and /v1/release.
func TestAcquireReleaseHTTP(t *testing.T) {
	s := permitServer(t)
	acquire := func() *tokenmeshv1.AcquireResponse {
		rec := do(s, "POST", "/v1/acquire", `{"rule":"conc","key":"db"}`)
		if rec.Code != http.StatusOK {
			t.Fatalf("POST /v1/acquire: %d %s", rec.Code, rec.Body)
		}
		var r tokenmeshv1.AcquireResponse
		if err := protojson.Unmarshal(rec.Body.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		return &r
	}
	a, b := acquire(), acquire()
	if !a.Granted || !b.Granted || acquire().Granted {
		t.Fatalf("want two permits then a refusal: %v %v", a, b)
	}
	body := `{"rule":"conc","key":"db","permit":"` + strconv.FormatUint(a.Permit, 10) + `"}`
	if rec := do(s, "POST", "/v1/release", body); rec.Code != http.StatusOK {
		t.Fatalf("POST /v1/release: %d %s", rec.Code, rec.Body)
	}
	if !acquire().Granted {
		t.Fatal("refused after a release")
	}
	if rec := do(s, "POST", "/v1/acquire", `{"rule":"conc"}`); rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "key: is required") {
		t.Fatalf("acquire without a key: %d %s", rec.Code, rec.Body)
	}
}
