package envoyrls

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"pgregory.net/rapid"

	"github.com/tokenmesh/tokenmesh/cluster"
)

// fakeChecker is a bucket per (rule, key) that never refills: it starts at
// the rule's burst, an allowed check takes its tokens, a refused one none.
type fakeChecker struct {
	burst  map[string]int64
	left   map[string]int64
	calls  [][]cluster.BatchItem
	remote bool // answer Remaining -1, as a forwarded decision
	err    error
}

func newFake(c *Config) *fakeChecker {
	f := &fakeChecker{burst: map[string]int64{}, left: map[string]int64{}}
	for _, r := range c.Rules(time.Time{}) {
		f.burst[r.Name] = r.Burst
	}
	return f
}

func (f *fakeChecker) CheckBatch(_ context.Context, items []cluster.BatchItem) ([]cluster.BatchResult, error) {
	f.calls = append(f.calls, items)
	out := make([]cluster.BatchResult, len(items))
	for i, it := range items {
		if f.err != nil {
			out[i].Err = f.err
			continue
		}
		b, ok := f.burst[it.Rule]
		if !ok {
			out[i].Err = errors.New("unknown rule " + it.Rule)
			continue
		}
		k := it.Rule + "\x00" + it.Key
		if _, seen := f.left[k]; !seen {
			f.left[k] = b
		}
		if it.Tokens <= f.left[k] {
			f.left[k] -= it.Tokens
			out[i].Allowed = true
		}
		out[i].Remaining = f.left[k]
		if f.remote {
			out[i].Remaining = -1
		}
	}
	return out, nil
}

// EnsureDerived gives a derived rule (a limit override's) its bucket of
// the rule's burst, as the node would (without the level carried over).
func (f *fakeChecker) EnsureDerived(_ context.Context, d cluster.Derived) error {
	if _, ok := f.burst[d.Rule.Name]; !ok {
		f.burst[d.Rule.Name] = d.Rule.Burst
	}
	return nil
}

func desc(kv ...string) *ratelimitv3.RateLimitDescriptor {
	d := &ratelimitv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

type want struct {
	code      rlsv3.RateLimitResponse_Code
	limit     uint32 // requests_per_unit; 0: no current_limit
	remaining uint32
}

func check(t *testing.T, s *Service, req *rlsv3.RateLimitRequest, overall rlsv3.RateLimitResponse_Code, ws ...want) *rlsv3.RateLimitResponse {
	t.Helper()
	resp, err := s.ShouldRateLimit(context.Background(), req)
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	if resp.OverallCode != overall {
		t.Errorf("overall_code %v, want %v", resp.OverallCode, overall)
	}
	if len(resp.Statuses) != len(ws) {
		t.Fatalf("%d statuses, want %d", len(resp.Statuses), len(ws))
	}
	for i, w := range ws {
		st := resp.Statuses[i]
		var lim uint32
		if st.CurrentLimit != nil {
			lim = st.CurrentLimit.RequestsPerUnit
		}
		if st.Code != w.code || lim != w.limit || st.LimitRemaining != w.remaining {
			t.Errorf("statuses[%d] = %v limit %d remaining %d; want %v limit %d remaining %d", i, st.Code, lim, st.LimitRemaining, w.code, w.limit, w.remaining)
		}
	}
	return resp
}

const (
	OK   = rlsv3.RateLimitResponse_OK
	OVER = rlsv3.RateLimitResponse_OVER_LIMIT
)

func TestShouldRateLimitSemantics(t *testing.T) {
	c := mustParse(t, exampleYAML)
	f := newFake(c)
	s := New(c, f, nil)
	req := func(hits uint32, ds ...*ratelimitv3.RateLimitDescriptor) *rlsv3.RateLimitRequest {
		return &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: ds, HitsAddend: hits}
	}
	// remote_address: 10 per second; hits_addend 0 counts as 1
	for i := range 10 {
		check(t, s, req(0, desc("remote_address", "a")), OK, want{OK, 10, uint32(9 - i)})
	}
	resp := check(t, s, req(0, desc("remote_address", "a")), OVER, want{OVER, 10, 0})
	if h := resp.ResponseHeadersToAdd; len(h) != 3 || h[0].Key != HeaderLimit || h[0].Value != "10" || h[1].Value != "0" || h[2].Value != "1" {
		t.Errorf("headers %v", h)
	}
	// another address has its own bucket; hits_addend > 1
	check(t, s, req(4, desc("remote_address", "b")), OK, want{OK, 10, 6})
	check(t, s, req(7, desc("remote_address", "b")), OVER, want{OVER, 10, 0})
	check(t, s, req(6, desc("remote_address", "b")), OK, want{OK, 10, 0})
	// unknown domain, unmatched descriptor: OK, no limit, no headers
	resp = check(t, s, &rlsv3.RateLimitRequest{Domain: "nope", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("remote_address", "a")}}, OK, want{OK, 0, 0})
	if len(resp.ResponseHeadersToAdd) != 0 {
		t.Errorf("headers without a limit: %v", resp.ResponseHeadersToAdd)
	}
	check(t, s, req(1, desc("nothing", "x")), OK, want{OK, 0, 0})
	// unlimited
	for range 3 {
		check(t, s, req(1000, desc("remote_address_vip", "10.0.0.1")), OK, want{OK, 0, math.MaxUint32})
	}
	// shadow_mode: decided and counted, never refused
	check(t, s, req(1, desc("api", "x")), OK, want{OK, 2, 1})
	check(t, s, req(1, desc("api", "x")), OK, want{OK, 2, 0})
	check(t, s, req(1, desc("api", "x")), OK, want{OK, 2, 0})
	// nested
	for i := range 4 {
		check(t, s, req(1, desc("message_type", "marketing", "to_number", "1")), OK, want{OK, 4, uint32(3 - i)})
	}
	check(t, s, req(1, desc("message_type", "marketing", "to_number", "1")), OVER, want{OVER, 4, 0})
	check(t, s, req(1, desc("to_number", "1")), OK, want{OK, 100, 99})
	// several descriptors: one over makes the overall over
	check(t, s, req(1, desc("to_number", "1"), desc("message_type", "marketing", "to_number", "1"), desc("nothing", "y")),
		OVER, want{OK, 100, 98}, want{OVER, 4, 0}, want{OK, 0, 0})
	// requests_per_unit 0: always over
	check(t, s, req(1, desc("closed", "x")), OVER, want{OVER, 0, 0}) // current_limit says requests_per_unit 0
}

func TestReplaces(t *testing.T) {
	c := mustParse(t, exampleYAML)
	f := newFake(c)
	s := New(c, f, nil)
	r := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("tenant", "gold"), desc("user", "u1")}}
	// gold replaces per_user: only the gold limit is checked, 50 times.
	for i := range 50 {
		check(t, s, r, OK, want{OK, 50, uint32(49 - i)}, want{OK, 0, 0})
	}
	// without the gold descriptor, per_user applies (3 per minute).
	alone := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("user", "u1")}}
	for i := range 3 {
		check(t, s, alone, OK, want{OK, 3, uint32(2 - i)})
	}
	check(t, s, alone, OVER, want{OVER, 3, 0})
}

func TestWildcardShare(t *testing.T) {
	c := mustParse(t, exampleYAML)
	s := New(c, newFake(c), nil)
	req := func(path string) *rlsv3.RateLimitRequest {
		return &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("path", path)}}
	}
	// without share_threshold every value has 5
	for _, p := range []string{"/files/a", "/files/b"} {
		for i := range 5 {
			check(t, s, req(p), OK, want{OK, 5, uint32(4 - i)})
		}
		check(t, s, req(p), OVER, want{OVER, 5, 0})
	}
	// with share_threshold the values share 7
	for i := range 7 {
		check(t, s, req([]string{"/shared/a", "/shared/b"}[i%2]), OK, want{OK, 7, uint32(6 - i)})
	}
	check(t, s, req("/shared/zzz"), OVER, want{OVER, 7, 0})
}

func TestPerDescriptorHitsAddend(t *testing.T) {
	c := mustParse(t, exampleYAML)
	s := New(c, newFake(c), nil)
	d := desc("remote_address", "c")
	d.HitsAddend = wrapperspb.UInt64(3)
	check(t, s, &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: 5, Descriptors: []*ratelimitv3.RateLimitDescriptor{d, desc("remote_address", "c")}},
		OK, want{OK, 10, 7}, want{OK, 10, 2})
}

func TestRemoteDecisionRemainingUnknown(t *testing.T) {
	c := mustParse(t, exampleYAML)
	f := newFake(c)
	f.remote = true
	s := New(c, f, nil)
	resp := check(t, s, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("remote_address", "z")}}, OK, want{OK, 10, 0})
	if d := resp.Statuses[0].DurationUntilReset.AsDuration(); d.Seconds() != 1 {
		t.Errorf("reset %v, want one unit (1s) when the count is unknown", d)
	}
}

func TestInvalidRequests(t *testing.T) {
	c := mustParse(t, exampleYAML)
	f := newFake(c)
	s := New(c, f, nil)
	long := make([]byte, 5000)
	for i := range long {
		long[i] = 'x'
	}
	many := &rlsv3.RateLimitRequest{Domain: "edge"}
	for range MaxDescriptors + 1 {
		many.Descriptors = append(many.Descriptors, desc("a", "b"))
	}
	for _, x := range []struct {
		req  *rlsv3.RateLimitRequest
		want codes.Code
	}{
		{&rlsv3.RateLimitRequest{Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("a", "b")}}, codes.InvalidArgument},
		{&rlsv3.RateLimitRequest{Domain: "edge"}, codes.InvalidArgument},
		{many, codes.InvalidArgument},
		{&rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("remote_address", string(long))}}, codes.InvalidArgument},
		{&rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("remote_address", "\xff")}}, codes.InvalidArgument},
	} {
		_, err := s.ShouldRateLimit(context.Background(), x.req)
		if status.Code(err) != x.want {
			t.Errorf("%v: want %v", err, x.want)
		}
	}
	if len(f.calls) != 0 {
		t.Errorf("invalid requests reached the cluster: %v", f.calls)
	}
	f.err = errors.New("node closed")
	_, err := s.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("remote_address", "a")}})
	if status.Code(err) != codes.Unavailable {
		t.Errorf("undecided: %v, want UNAVAILABLE", err)
	}
}

// The global shadow mode (envoyproxy/ratelimit's SHADOW_MODE): every
// check is decided and counted (the bucket drains, the observer is told
// "answered OK"), the statuses keep OVER_LIMIT, the overall code is OK
// and counted in Shadowed; off again, the drained bucket refuses.
func TestGlobalShadowMode(t *testing.T) {
	c := mustParse(t, exampleYAML)
	var observed []bool
	s := New(c, newFake(c), func(_ string, _ cluster.BatchResult, ok bool, _ time.Duration) { observed = append(observed, ok) })
	s.SetShadowMode(true)
	if !s.ShadowMode() {
		t.Fatal("ShadowMode() false after SetShadowMode(true)")
	}
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{
		desc("message_type", "marketing", "to_number", "9"), desc("to_number", "9")}}
	for i := range 4 {
		check(t, s, req, OK, want{OK, 4, uint32(3 - i)}, want{OK, 100, uint32(99 - i)})
	}
	resp := check(t, s, req, OK, want{OVER, 4, 0}, want{OK, 100, 95})
	if h := resp.ResponseHeadersToAdd; len(h) != 3 || h[0].Value != "4" || h[1].Value != "0" {
		t.Errorf("headers %v: want those of the descriptor over its limit", h)
	}
	if n := s.Shadowed(); n != 1 {
		t.Errorf("Shadowed() = %d, want 1", n)
	}
	for i, ok := range observed {
		if !ok {
			t.Errorf("observation %d: ok false in the global shadow mode, want true (answered OK)", i)
		}
	}
	s.SetShadowMode(false)
	check(t, s, req, OVER, want{OVER, 4, 0}, want{OK, 100, 94})
	if n := s.Shadowed(); n != 1 {
		t.Errorf("Shadowed() = %d after the mode went off, want 1", n)
	}
}

// SetConfig swaps the limits for the calls that follow: a changed limit,
// a new domain, a removed one.
func TestSetConfig(t *testing.T) {
	old := mustParse(t, "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1}\n")
	next := mustParse(t, "domain: b\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 3}\n")
	f := newFake(old)
	for _, r := range next.Rules(time.Time{}) {
		f.burst[r.Name] = r.Burst
	}
	s := New(old, f, nil)
	req := func(domain string) *rlsv3.RateLimitRequest {
		return &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("k", "v")}}
	}
	check(t, s, req("a"), OK, want{OK, 1, 0})
	check(t, s, req("b"), OK, want{OK, 0, 0})
	s.SetConfig(next)
	s.SetConfig(nil) // ignored
	if s.Config() != next {
		t.Fatal("Config() is not the config set")
	}
	check(t, s, req("a"), OK, want{OK, 0, 0})
	check(t, s, req("b"), OK, want{OK, 3, 2})
}

// fixed_window: duration_until_reset is envoyproxy/ratelimit's whole
// seconds to the end of the clock-aligned window.
func TestFixedWindowReset(t *testing.T) {
	c := mustParse(t, "domain: fw\ntokenmesh: {algorithm: fixed_window}\ndescriptors:\n  - key: a\n    rate_limit: {unit: minute, requests_per_unit: 5}\n")
	s := New(c, newFake(c), nil)
	s.clock = func() time.Time { return time.Unix(1_700_000_040+42, 500) } // 42.0000005 s into a minute
	resp := check(t, s, &rlsv3.RateLimitRequest{Domain: "fw", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("a", "x")}}, OK, want{OK, 5, 4})
	if d := resp.Statuses[0].DurationUntilReset.AsDuration(); d != 18*time.Second {
		t.Errorf("reset %v, want 18s", d)
	}
}

// FuzzShouldRateLimit: any request a peer (Envoy) can send, as wire bytes,
// is answered or refused with a status, never a panic; an answer has one
// status per descriptor and never counts an unbounded number of hits.
func FuzzShouldRateLimit(f *testing.F) {
	c := mustParse(f, exampleYAML)
	seed := &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: 2, Descriptors: []*ratelimitv3.RateLimitDescriptor{
		desc("message_type", "marketing", "to_number", "1"), desc("path", "/shared/x"), desc("tenant", "gold"), desc("user", "u")}}
	b, _ := proto.Marshal(seed)
	f.Add(b)
	withLimit := desc("remote_address", "a")
	withLimit.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 3, Unit: typev3.RateLimitUnit_MINUTE}
	seed.Descriptors = append(seed.Descriptors, withLimit, withLimit)
	b, _ = proto.Marshal(seed)
	f.Add(b)
	f.Fuzz(func(t *testing.T, data []byte) {
		var req rlsv3.RateLimitRequest
		if proto.Unmarshal(data, &req) != nil {
			return
		}
		fk := newFake(c)
		resp, err := New(c, fk, nil).ShouldRateLimit(context.Background(), &req)
		if err != nil {
			if _, ok := status.FromError(err); !ok {
				t.Fatalf("error without a status: %v", err)
			}
			return
		}
		if len(resp.Statuses) != len(req.Descriptors) {
			t.Fatalf("%d statuses for %d descriptors", len(resp.Statuses), len(req.Descriptors))
		}
		// A descriptor with a limit override of a known domain is decided
		// against it.
		for i, d := range req.Descriptors {
			if d.GetLimit() != nil && req.Domain == "edge" && len(d.GetEntries()) > 0 &&
				resp.Statuses[i].GetCurrentLimit().GetRequestsPerUnit() != d.GetLimit().GetRequestsPerUnit() {
				t.Fatalf("descriptor %d with limit %v answered with %v", i, d.GetLimit(), resp.Statuses[i].GetCurrentLimit())
			}
		}
		for _, call := range fk.calls {
			for _, it := range call {
				if it.Tokens < 1 || it.Tokens > MaxHits {
					t.Fatalf("item %+v", it)
				}
			}
		}
	})
}

// singleFake is a fakeChecker that is also a SingleChecker: CheckItem is
// a batch of one of the same fake, counted apart.
type singleFake struct {
	*fakeChecker
	singles int
}

func (f *singleFake) CheckItem(ctx context.Context, it cluster.BatchItem) (cluster.CheckResult, error) {
	f.singles++
	res, err := f.CheckBatch(ctx, []cluster.BatchItem{it})
	if err != nil {
		return cluster.CheckResult{}, err
	}
	return res[0].CheckResult, res[0].Err
}

// A SingleChecker's CheckItem decides requests of one check (and nothing
// else), and every answer, headers and statuses included, is the one the
// batch path gives on the same sequence of requests; a failed check fails
// the call the same way.
func TestSingleCheckerSameAnswers(t *testing.T) {
	c := mustParse(t, exampleYAML)
	pool := []*ratelimitv3.RateLimitDescriptor{
		desc("remote_address", "a"), desc("remote_address", "b"), desc("remote_address_vip", "10.0.0.1"),
		desc("api", "x"), desc("message_type", "marketing", "to_number", "1"), desc("to_number", "1"),
		desc("nothing", "y"), desc("closed", "x"), desc("path", "/shared/x"), desc("tenant", "gold"), desc("user", "u"),
	}
	rapid.Check(t, func(rt *rapid.T) {
		batch := newFake(c)
		single := &singleFake{fakeChecker: newFake(c)}
		sb, ss := New(c, batch, nil), New(c, single, nil)
		for range rapid.IntRange(1, 30).Draw(rt, "requests") {
			n := rapid.IntRange(1, 6).Draw(rt, "descriptors")
			req := &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: uint32(rapid.IntRange(0, 12).Draw(rt, "hits"))}
			for range n {
				req.Descriptors = append(req.Descriptors, pool[rapid.IntRange(0, len(pool)-1).Draw(rt, "d")])
			}
			callsBefore, singlesBefore := len(batch.calls), single.singles
			rb, errB := sb.ShouldRateLimit(context.Background(), req)
			rs, errS := ss.ShouldRateLimit(context.Background(), req)
			if status.Code(errB) != status.Code(errS) || !proto.Equal(rb, rs) {
				rt.Fatalf("request %v:\nbatch  %v %v\nsingle %v %v", req, rb, errB, rs, errS)
			}
			checks := 0
			if len(batch.calls) > callsBefore {
				checks = len(batch.calls[len(batch.calls)-1])
			}
			if usedSingle := single.singles > singlesBefore; usedSingle != (checks == 1) {
				rt.Fatalf("request of %d checks: Check used %v", checks, usedSingle)
			}
		}
	})
	// A check the cluster could not decide fails the call as a batch does.
	for _, f := range []Checker{&fakeChecker{err: errors.New("node closed")}, &singleFake{fakeChecker: &fakeChecker{err: errors.New("node closed")}}} {
		_, err := New(c, f, nil).ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge",
			Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("remote_address", "a")}})
		if status.Code(err) != codes.Unavailable {
			t.Errorf("%T with a failing check: %v, want Unavailable", f, err)
		}
	}
}
