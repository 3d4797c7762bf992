package httplimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"google.golang.org/grpc"

	tokenmeshv1 "github.com/tokenmesh/tokenmesh/api/tokenmesh/v1"
	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/cluster"
	"github.com/tokenmesh/tokenmesh/rule"
)

func TestParseRequestStart(t *testing.T) {
	at := func(sec, ns int64) time.Time { return time.Unix(sec, ns) }
	for _, c := range []struct {
		in   string
		want time.Time
	}{
		{"t=1700000000.123", at(1700000000, 123_000_000)}, // nginx $msec
		{"1700000000.123456789", at(1700000000, 123_456_789)},
		{"t=1700000000.1234567891", at(1700000000, 123_456_789)}, // truncated to ns
		{" t=1700000000 ", at(1700000000, 0)},                    // seconds
		{"1700000000123", at(1700000000, 123_000_000)},           // milliseconds (Heroku)
		{"t=1700000000123456", at(1700000000, 123_456_000)},      // microseconds (Apache %t)
		{"1700000000123456789", at(1700000000, 123_456_789)},     // nanoseconds
		{"0", at(0, 0)},
	} {
		got, err := ParseRequestStart(c.in)
		if err != nil || !got.Equal(c.want) {
			t.Errorf("ParseRequestStart(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
	for _, in := range []string{"", "t=", "abc", "t=-5", "-5", "1.2.3", "t=1e9", "+5", "1700000000,5", "1700000000.",
		"t=.5", "12345678901234567890", "1700000000.12345678901234567890", "100000000000.5", "t=99999999999999999999"} {
		if got, err := ParseRequestStart(in); err == nil {
			t.Errorf("ParseRequestStart(%q) = %v, want an error", in, got)
		}
	}
}

// nginx is t in nginx's X-Request-Start form, to the nanosecond.
func nginx(t time.Time) string { return fmt.Sprintf("t=%d.%09d", t.Unix(), t.Nanosecond()) }

// FuzzParseRequestStart: no input panics, an error says something, and
// what parses is a time at or after 1970 that nginx's form of it reads
// back as the same time.
func FuzzParseRequestStart(f *testing.F) {
	for _, s := range []string{"t=1700000000.123", "1700000000123", "t=1700000000123456", "1700000000123456789", "", "t=", "1.2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ParseRequestStart(s)
		if err != nil {
			if err.Error() == "" {
				t.Fatalf("%q: an empty error", s)
			}
			return
		}
		if got.Before(time.Unix(0, 0)) {
			t.Fatalf("%q: %v is before 1970", s, got)
		}
		if again, err := ParseRequestStart(nginx(got)); err != nil || !again.Equal(got) {
			t.Fatalf("%q: %v; as %q read back %v, %v", s, got, nginx(got), again, err)
		}
	})
}

// edgeSeen is a Checker that records the edge time of each check.
type edgeSeen struct {
	got []time.Time
	has []bool
}

func (e *edgeSeen) Check(ctx context.Context, _, _ string, _ int64) (Result, error) {
	t, ok := EdgeTime(ctx)
	e.got, e.has = append(e.got, t), append(e.has, ok)
	return Result{Allowed: true, Remaining: -1, Reset: -1}, nil
}

// Wrap hands the Checker the time it received the request, or the
// gateway's time from EdgeHeader; a header that does not parse falls back
// to the time of receipt and is reported.
func TestMiddlewareEdgeTime(t *testing.T) {
	seen := &edgeSeen{}
	var bad []error
	own, _ := New(Options{Rule: "api", Checker: seen})
	gw, _ := New(Options{Rule: "api", Checker: seen, EdgeHeader: RequestStartHeader,
		OnEdgeHeaderError: func(_ *http.Request, err error) { bad = append(bad, err) }})

	before := time.Now()
	get(t, own.Wrap(ok), "/", map[string]string{RequestStartHeader: "t=1700000000.5"}) // not read: no EdgeHeader
	get(t, gw.Wrap(ok), "/", map[string]string{RequestStartHeader: "t=1700000000.5"})
	get(t, gw.Wrap(ok), "/", map[string]string{RequestStartHeader: "soon"})
	get(t, gw.Wrap(ok), "/", nil)
	after := time.Now()

	if len(seen.got) != 4 {
		t.Fatalf("%d checks, want 4", len(seen.got))
	}
	for i, ok := range seen.has {
		if !ok {
			t.Errorf("check %d: no edge time in the context", i)
		}
	}
	if want := time.Unix(1700000000, 500_000_000); !seen.got[1].Equal(want) {
		t.Errorf("gateway's header: edge %v, want %v", seen.got[1], want)
	}
	for _, i := range []int{0, 2, 3} {
		if g := seen.got[i]; g.Before(before) || g.After(after) {
			t.Errorf("check %d: edge %v, want the time of receipt in [%v, %v]", i, g, before, after)
		}
	}
	if len(bad) != 1 || bad[0] == nil {
		t.Errorf("malformed header reports: %v, want one", bad)
	}
}

// captureClient records the CheckRequest GRPC sends.
type captureClient struct{ req *tokenmeshv1.CheckRequest }

func (c *captureClient) Check(_ context.Context, in *tokenmeshv1.CheckRequest, _ ...grpc.CallOption) (*tokenmeshv1.CheckResponse, error) {
	c.req = in
	return &tokenmeshv1.CheckResponse{Results: []*tokenmeshv1.CheckResult{{Allowed: true}}}, nil
}

// captureNode records the BatchItem Local decides.
type captureNode struct{ it cluster.BatchItem }

func (c *captureNode) CheckBatch(context.Context, []cluster.BatchItem) ([]cluster.BatchResult, error) {
	return nil, errors.New("not used: CheckItem is")
}

func (c *captureNode) CheckItem(_ context.Context, it cluster.BatchItem) (cluster.CheckResult, error) {
	c.it = it
	return cluster.CheckResult{Allowed: true, Remaining: 1}, nil
}

// GRPC and Local send the context's edge time with the check, and none
// (0) without one.
func TestCheckersSendEdgeTime(t *testing.T) {
	edge := time.Unix(1700000000, 123_456_789)
	ctx := ContextWithEdgeTime(context.Background(), edge)
	cc := &captureClient{}
	node := &captureNode{}
	rules := []rule.Rule{{Name: "api", Rate: bucket.Rate{Tokens: 1, Per: time.Second}, Burst: 3, Strategy: "owner"}}
	for _, c := range []struct {
		ctx  context.Context
		want int64
	}{{ctx, edge.UnixNano()}, {context.Background(), 0}, {ContextWithEdgeTime(context.Background(), time.Unix(-5, 0)), 0}} {
		if _, err := (grpcChecker{cc}).Check(c.ctx, "api", "k", 1); err != nil {
			t.Fatal(err)
		}
		if got := cc.req.GetChecks()[0].GetCreatedAtUnixNs(); got != c.want {
			t.Errorf("GRPC sent created_at_unix_ns %d, want %d", got, c.want)
		}
		if _, err := Local(node, rules).Check(c.ctx, "api", "k", 1); err != nil {
			t.Fatal(err)
		}
		if node.it.CreatedAtUnixNs != c.want {
			t.Errorf("Local sent CreatedAtUnixNs %d, want %d", node.it.CreatedAtUnixNs, c.want)
		}
	}
}
