package server

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	tokenmeshv1 "github.com/tokenmesh/tokenmesh/api/tokenmesh/v1"
	"github.com/tokenmesh/tokenmesh/cluster"
	"github.com/tokenmesh/tokenmesh/limiter"
	"github.com/tokenmesh/tokenmesh/rendezvous"
	"github.com/tokenmesh/tokenmesh/rule"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// scrape GETs /metrics from s's handler and parses the text exposition.
func scrape(t *testing.T, s *Server) map[string]*dto.MetricFamily {
	t.Helper()
	rec := do(s, "GET", "/metrics", "")
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", rec.Code, rec.Body)
	}
	if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Errorf("GET /metrics Content-Type %q", ct)
	}
	var p expfmt.TextParser
	fams, err := p.TextToMetricFamilies(rec.Body)
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	return fams
}

// series finds the series of family name with exactly labels ("k=v"...).
func series(fams map[string]*dto.MetricFamily, name string, labels ...string) (*dto.Metric, bool) {
	f, ok := fams[name]
	if !ok {
		return nil, false
	}
	want := append([]string(nil), labels...)
	sort.Strings(want)
	for _, m := range f.GetMetric() {
		var got []string
		for _, lp := range m.GetLabel() {
			got = append(got, lp.GetName()+"="+lp.GetValue())
		}
		sort.Strings(got)
		if strings.Join(got, ",") == strings.Join(want, ",") {
			return m, true
		}
	}
	return nil, false
}

// value is a counter's or gauge's value; the test fails when it is missing.
func value(t *testing.T, fams map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	t.Helper()
	m, ok := series(fams, name, labels...)
	if !ok {
		t.Fatalf("no series %s%v in /metrics", name, labels)
	}
	switch {
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	}
	t.Fatalf("%s%v is neither a counter nor a gauge", name, labels)
	return 0
}

func TestMetrics(t *testing.T) {
	s := newTestServer(t)
	ctx := context.Background()
	// rule api (owner, burst 3): 3 allowed, then 1 refused (burst used) and
	// 1 refused (hits above the burst). rule loc: 1 allowed.
	for range 3 {
		if _, err := s.Check(ctx, req(item("api", "k", 1))); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := s.Check(ctx, req(item("api", "k", 1), item("api", "k2", 4), item("loc", "k", 5)))
	if err != nil {
		t.Fatal(err)
	}
	if r := resp.GetResults(); r[0].Allowed || r[1].Allowed || !r[2].Allowed {
		t.Fatalf("results %v, want refused, refused, allowed", r)
	}
	// Invalid calls count once each and decide nothing, over gRPC (here,
	// directly) and HTTP alike.
	if _, err := s.Check(ctx, req(item("api", "k", 1), item("api", "k", 0))); err == nil {
		t.Fatal("hits 0 accepted")
	}
	if rec := do(s, "POST", "/v1/check", `{"checks":[]}`); rec.Code != http.StatusBadRequest {
		t.Fatalf("empty batch: %d", rec.Code)
	}
	// A body the gateway cannot decode never reaches Check: not counted.
	if rec := do(s, "POST", "/v1/check", `{"checks":[`); rec.Code != http.StatusBadRequest {
		t.Fatalf("malformed body: %d", rec.Code)
	}

	fams := scrape(t, s)
	for _, tc := range []struct {
		rule, strat, result string
		want                float64
	}{
		{"api", "owner", "allowed", 3},
		{"api", "owner", "refused", 2},
		{"api", "owner", "error", 0},
		{"loc", "local", "allowed", 1},
		{"loc", "local", "refused", 0},
		{"loc", "local", "error", 0},
	} {
		if got := value(t, fams, "tokenmesh_decisions_total", "rule="+tc.rule, "strategy="+tc.strat, "result="+tc.result); got != tc.want {
			t.Errorf("tokenmesh_decisions_total{rule=%s,result=%s} = %v, want %v", tc.rule, tc.result, got, tc.want)
		}
	}
	if got := value(t, fams, "tokenmesh_invalid_requests_total"); got != 2 {
		t.Errorf("tokenmesh_invalid_requests_total = %v, want 2", got)
	}
	for rule, want := range map[string]uint64{"api": 5, "loc": 1} {
		m, ok := series(fams, "tokenmesh_decision_seconds", "rule="+rule)
		if !ok || m.Histogram == nil {
			t.Fatalf("no histogram tokenmesh_decision_seconds{rule=%s}", rule)
		}
		h := m.GetHistogram()
		if h.GetSampleCount() != want {
			t.Errorf("tokenmesh_decision_seconds{rule=%s} count %d, want %d decisions", rule, h.GetSampleCount(), want)
		}
		var b []*dto.Bucket // the finite ones (the parser adds +Inf)
		for _, x := range h.GetBucket() {
			if !math.IsInf(x.GetUpperBound(), 1) {
				b = append(b, x)
			}
		}
		if len(b) != 16 || math.Abs(b[0].GetUpperBound()-50e-6) > 1e-12 || b[len(b)-1].GetUpperBound() != 1 {
			t.Errorf("tokenmesh_decision_seconds buckets %v, want 16 from 50us to 1s", b)
		}
		// Local decisions take well under a second.
		if b[len(b)-1].GetCumulativeCount() != want {
			t.Errorf("tokenmesh_decision_seconds{rule=%s}: %d of %d decisions within 1s", rule, b[len(b)-1].GetCumulativeCount(), want)
		}
	}
	if got := value(t, fams, "tokenmesh_members"); got != 1 {
		t.Errorf("tokenmesh_members = %v, want 1", got)
	}
	for _, rule := range []string{"api", "loc"} {
		if got := value(t, fams, "tokenmesh_state_bytes", "rule="+rule); got <= 0 {
			t.Errorf("tokenmesh_state_bytes{rule=%s} = %v, want > 0 after checks of its keys", rule, got)
		}
		for _, dir := range []string{"sent", "received"} {
			if got := value(t, fams, "tokenmesh_peer_messages_total", "rule="+rule, "direction="+dir); got != 0 {
				t.Errorf("single node: tokenmesh_peer_messages_total{rule=%s,direction=%s} = %v", rule, dir, got)
			}
			if got := value(t, fams, "tokenmesh_peer_bytes_total", "rule="+rule, "direction="+dir); got != 0 {
				t.Errorf("single node: tokenmesh_peer_bytes_total{rule=%s,direction=%s} = %v", rule, dir, got)
			}
		}
		for _, name := range []string{"tokenmesh_peer_send_errors_total", "tokenmesh_peer_receive_errors_total", "tokenmesh_pending_checks"} {
			if got := value(t, fams, name, "rule="+rule); got != 0 {
				t.Errorf("%s{rule=%s} = %v, want 0", name, rule, got)
			}
		}
		// Neither owner nor local splits the rate.
		if _, ok := series(fams, "tokenmesh_capacity_share_ratio", "rule="+rule); ok {
			t.Errorf("tokenmesh_capacity_share_ratio{rule=%s} exported for a strategy without shares", rule)
		}
	}
	if got := value(t, fams, "tokenmesh_inbox_dropped_total"); got != 0 {
		t.Errorf("tokenmesh_inbox_dropped_total = %v", got)
	}
	for _, name := range []string{"go_goroutines", "process_cpu_seconds_total"} {
		if _, ok := fams[name]; !ok {
			t.Errorf("no %s in /metrics", name)
		}
	}
	// Registry is the one served.
	if mfs, err := s.Registry().Gather(); err != nil || len(mfs) != len(fams) {
		t.Errorf("Registry().Gather: %d families, %v; /metrics has %d", len(mfs), err, len(fams))
	}
}

// An item the cluster could not decide counts as result="error" and not
// in the histogram; peer traffic shows in the peer counters.
func TestMetricsUndecided(t *testing.T) {
	net := cluster.NewMemNetwork()
	rules := []rule.Rule{{Name: "api", Rate: slow, Burst: 3, Strategy: "owner", Params: []string{"hold=0s", "timeout=10s"}}}
	node, err := limiter.Start(context.Background(), limiter.Config{Name: "n1", Rules: rules,
		InProcess: &limiter.InProcess{Network: net, Members: []string{"n1", "n2"}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = node.Close() })
	s := New(node, rules)
	var remote string
	for i := 0; remote == ""; i++ {
		if k := fmt.Sprintf("k%d", i); rendezvous.Owner(k, []strategy.NodeID{"n1", "n2"}) == "n2" {
			remote = k
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	resp, err := s.Check(ctx, req(item("api", remote, 1)))
	if err != nil || resp.GetResults()[0].Error == "" {
		t.Fatalf("check of a key owned by the absent n2: %v %v, want an undecided item", resp, err)
	}
	fams := scrape(t, s)
	if got := value(t, fams, "tokenmesh_decisions_total", "rule=api", "strategy=owner", "result=error"); got != 1 {
		t.Errorf("result=error: %v, want 1", got)
	}
	if m, _ := series(fams, "tokenmesh_decision_seconds", "rule=api"); m.GetHistogram().GetSampleCount() != 0 {
		t.Errorf("undecided item observed in the histogram")
	}
	// The forward to n2 (not attached) failed to send; it is still pending.
	if got := value(t, fams, "tokenmesh_peer_messages_total", "rule=api", "direction=sent"); got < 1 {
		t.Errorf("peer messages sent: %v, want the forward", got)
	}
	if got := value(t, fams, "tokenmesh_peer_send_errors_total", "rule=api"); got < 1 {
		t.Errorf("peer send errors: %v, want the forward to the absent n2", got)
	}
	if got := value(t, fams, "tokenmesh_pending_checks", "rule=api"); got != 1 {
		t.Errorf("pending checks: %v, want 1", got)
	}
	if got := value(t, fams, "tokenmesh_members"); got != 1 {
		t.Errorf("tokenmesh_members without gossip: %v, want 1", got)
	}
}

func TestMetricsNoNode(t *testing.T) {
	s := New(nil, nil)
	_, _ = s.Check(context.Background(), req(item("api", "k", 1))) // Unavailable: not counted
	fams := scrape(t, s)
	if got := value(t, fams, "tokenmesh_invalid_requests_total"); got != 0 {
		t.Errorf("tokenmesh_invalid_requests_total = %v", got)
	}
	for _, name := range []string{"tokenmesh_members", "tokenmesh_decisions_total", "tokenmesh_state_bytes"} {
		if _, ok := fams[name]; ok {
			t.Errorf("%s exported without a node", name)
		}
	}
	if _, ok := fams["go_goroutines"]; !ok {
		t.Error("no go_goroutines without a node")
	}
}

// fakeShares is a strategy reporting capacity shares (as gdrl will).
type fakeShares struct {
	strategy.Strategy // nil: only the methods below are called
	sum               float64
	keys              int
}

func (f fakeShares) StateBytes() int                      { return 42 }
func (f fakeShares) CapacityShares() (sum float64, n int) { return f.sum, f.keys }

type fakeView struct {
	stats   cluster.Stats
	inspect func(ctx context.Context, f func(time.Duration, rule.Rule, strategy.Strategy)) error
	members int
}

func (v fakeView) Stats() cluster.Stats { return v.stats }
func (v fakeView) Inspect(ctx context.Context, f func(time.Duration, rule.Rule, strategy.Strategy)) error {
	return v.inspect(ctx, f)
}
func (v fakeView) Members() int { return v.members }

// gatherFake collects view's metrics as /metrics would.
func gatherFake(t *testing.T, view nodeView) map[string]*dto.MetricFamily {
	t.Helper()
	m := newMetrics(view)
	mfs, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	fams := map[string]*dto.MetricFamily{}
	for _, f := range mfs {
		fams[f.GetName()] = f
	}
	return fams
}

func TestMetricsCapacityShares(t *testing.T) {
	view := fakeView{
		stats: cluster.Stats{Rules: map[string]cluster.RuleStats{
			"g": {MessagesSent: 7, BytesSent: 700, MessagesReceived: 5, BytesReceived: 500, SendErrors: 1, ReceiveErrors: 2, Pending: 3, Deferred: 17, RefusedInWindows: 19},
		}, InboxDropped: 9, UnknownRuleFrames: 11, BadSender: 13},
		members: 4,
		inspect: func(_ context.Context, f func(time.Duration, rule.Rule, strategy.Strategy)) error {
			f(0, rule.Rule{Name: "g"}, fakeShares{sum: 1.5, keys: 6})
			f(0, rule.Rule{Name: "empty"}, fakeShares{})
			return nil
		},
	}
	fams := gatherFake(t, view)
	for _, tc := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"tokenmesh_peer_messages_total", []string{"rule=g", "direction=sent"}, 7},
		{"tokenmesh_peer_messages_total", []string{"rule=g", "direction=received"}, 5},
		{"tokenmesh_peer_bytes_total", []string{"rule=g", "direction=sent"}, 700},
		{"tokenmesh_peer_bytes_total", []string{"rule=g", "direction=received"}, 500},
		{"tokenmesh_peer_send_errors_total", []string{"rule=g"}, 1},
		{"tokenmesh_peer_receive_errors_total", []string{"rule=g"}, 2},
		{"tokenmesh_pending_checks", []string{"rule=g"}, 3},
		{"tokenmesh_deferred_checks_total", []string{"rule=g"}, 17},
		{"tokenmesh_refusal_window_checks_total", []string{"rule=g"}, 19},
		{"tokenmesh_inbox_dropped_total", nil, 9},
		{"tokenmesh_peer_unknown_rule_frames_total", nil, 11},
		{"tokenmesh_peer_bad_sender_frames_total", nil, 13},
		{"tokenmesh_members", nil, 4},
		{"tokenmesh_state_bytes", []string{"rule=g"}, 42},
		{"tokenmesh_keys", []string{"rule=g"}, 6},
		{"tokenmesh_capacity_share_ratio", []string{"rule=g"}, 0.25},
		{"tokenmesh_keys", []string{"rule=empty"}, 0},
	} {
		if got := value(t, fams, tc.name, tc.labels...); got != tc.want {
			t.Errorf("%s%v = %v, want %v", tc.name, tc.labels, got, tc.want)
		}
	}
	if fams["tokenmesh_peer_messages_total"].GetType() != dto.MetricType_COUNTER || fams["tokenmesh_pending_checks"].GetType() != dto.MetricType_GAUGE {
		t.Error("wrong metric types")
	}
	if _, ok := series(fams, "tokenmesh_capacity_share_ratio", "rule=empty"); ok {
		t.Error("a share ratio exported for a rule with no keys")
	}

	// When the node does not answer Inspect, the state gauges are left out
	// and the rest is still served.
	view.inspect = func(ctx context.Context, _ func(time.Duration, rule.Rule, strategy.Strategy)) error {
		if _, ok := ctx.Deadline(); !ok {
			t.Error("Inspect without a deadline")
		}
		return errors.New("busy")
	}
	fams = gatherFake(t, view)
	for _, name := range []string{"tokenmesh_state_bytes", "tokenmesh_keys", "tokenmesh_capacity_share_ratio"} {
		if _, ok := fams[name]; ok {
			t.Errorf("%s exported after Inspect failed", name)
		}
	}
	if got := value(t, fams, "tokenmesh_members"); got != 4 {
		t.Errorf("tokenmesh_members = %v after Inspect failed", got)
	}

	// Once read, the state gauges do not vanish from a scrape of a node
	// too busy to answer: they keep the values last read.
	busy := false
	view.inspect = func(_ context.Context, f func(time.Duration, rule.Rule, strategy.Strategy)) error {
		if busy {
			return errors.New("busy")
		}
		f(0, rule.Rule{Name: "g"}, fakeShares{sum: 1.5, keys: 6})
		return nil
	}
	m := newMetrics(view)
	for _, b := range []bool{false, true} {
		busy = b
		mfs, err := m.reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		fams := map[string]*dto.MetricFamily{}
		for _, f := range mfs {
			fams[f.GetName()] = f
		}
		if got := value(t, fams, "tokenmesh_state_bytes", "rule=g"); got != 42 {
			t.Errorf("busy=%v: tokenmesh_state_bytes{rule=g} = %v, want 42", b, got)
		}
	}
}

// refusingView is a fakeView whose peer transport reports refusals.
type refusingView struct {
	fakeView
	refusals map[string]int64
}

func (v refusingView) PeerRefusals() map[string]int64 { return v.refusals }

func TestMetricsRefusedFrames(t *testing.T) {
	noop := func(context.Context, func(time.Duration, rule.Rule, strategy.Strategy)) error { return nil }
	base := fakeView{stats: cluster.Stats{Rules: map[string]cluster.RuleStats{"a": {ReceiveErrors: 2}, "b": {ReceiveErrors: 3}}},
		members: 3, inspect: noop}
	view := refusingView{fakeView: base, refusals: map[string]int64{"bad_mac": 7, "replay": 4, "unknown_sender": 1}}
	fams := gatherFake(t, view)
	for reason, want := range map[string]float64{"bad_mac": 7, "replay": 4, "unknown_sender": 1, "bad_certificate": 0, "out_of_bounds": 5} {
		if got := value(t, fams, "tokenmesh_peer_refused_frames_total", "reason="+reason); got != want {
			t.Errorf("tokenmesh_peer_refused_frames_total{reason=%s} = %v, want %v", reason, got, want)
		}
	}
	// Without a peer transport, the transport's reasons are 0.
	fams = gatherFake(t, base)
	if got := value(t, fams, "tokenmesh_peer_refused_frames_total", "reason=bad_mac"); got != 0 {
		t.Errorf("bad_mac = %v without a transport", got)
	}
}

// BenchmarkCheckMetrics measures a one-item Check, counting included.
func BenchmarkCheckMetrics(b *testing.B) {
	s := newTestServer(b)
	ctx := context.Background()
	r := &tokenmeshv1.CheckRequest{Checks: []*tokenmeshv1.CheckItem{item("loc", "k", 1)}}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Check(ctx, r); err != nil {
			b.Fatal(err)
		}
	}
}

// TestBuildInfo: the build_info gauge is exported with its three labels
// (an empty revision as "unknown"), and registering it twice fails.
func TestBuildInfo(t *testing.T) {
	s := New(nil, nil)
	if err := s.SetBuildInfo(BuildInfo{Version: "v1.2.3", GoVersion: "go1.99"}); err != nil {
		t.Fatal(err)
	}
	mfs, err := s.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, mf := range mfs {
		if mf.GetName() != "tokenmesh_build_info" {
			continue
		}
		found = true
		m := mf.GetMetric()
		if len(m) != 1 || m[0].GetGauge().GetValue() != 1 {
			t.Fatalf("build_info: %v, want one series of value 1", m)
		}
		got := map[string]string{}
		for _, l := range m[0].GetLabel() {
			got[l.GetName()] = l.GetValue()
		}
		want := map[string]string{"version": "v1.2.3", "revision": "unknown", "goversion": "go1.99"}
		if len(got) != len(want) {
			t.Errorf("labels %v, want %v", got, want)
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("label %s = %q, want %q", k, got[k], v)
			}
		}
	}
	if !found {
		t.Fatal("no tokenmesh_build_info in the registry")
	}
	if err := s.SetBuildInfo(BuildInfo{Version: "v1.2.3", GoVersion: "go1.99"}); err == nil {
		t.Error("a second identical SetBuildInfo succeeded")
	}
}

// tokenmesh_edge_lateness_seconds counts the checks that carry an edge
// time, unbatched and batched, each with the time from it to the call: an
// edge time ahead of the node's clock counts as 0; checks without one are
// not counted.
func TestEdgeLatenessMetric(t *testing.T) {
	s := newTestServer(t)
	ctx := context.Background()
	ago := time.Now().Add(-30 * time.Millisecond).UnixNano()
	ahead := time.Now().Add(time.Hour).UnixNano()
	one := &tokenmeshv1.CheckItem{Rule: "api", Key: "e", Hits: 1, CreatedAtUnixNs: ago}
	if _, err := s.Check(ctx, req(one)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Check(ctx, req(item("api", "e", 1), &tokenmeshv1.CheckItem{Rule: "api", Key: "e2", Hits: 1, CreatedAtUnixNs: ahead},
		&tokenmeshv1.CheckItem{Rule: "loc", Key: "e", Hits: 1, CreatedAtUnixNs: ago})); err != nil {
		t.Fatal(err)
	}
	fams := scrape(t, s)
	for rule, want := range map[string]struct {
		n        uint64
		min, max float64
	}{"api": {2, 0.030, 1}, "loc": {1, 0.030, 1}} {
		m, ok := series(fams, "tokenmesh_edge_lateness_seconds", "rule="+rule)
		if !ok || m.Histogram == nil {
			t.Fatalf("no histogram tokenmesh_edge_lateness_seconds{rule=%s}", rule)
		}
		h := m.GetHistogram()
		if h.GetSampleCount() != want.n || h.GetSampleSum() < want.min || h.GetSampleSum() > want.max {
			t.Errorf("tokenmesh_edge_lateness_seconds{rule=%s}: count %d, sum %v s; want %d checks summing to [%v, %v] s",
				rule, h.GetSampleCount(), h.GetSampleSum(), want.n, want.min, want.max)
		}
	}
}

// fakeMemory is a strategy with a heap estimate whose wire size would
// walk every key: the scrape must not ask for it.
type fakeMemory struct {
	strategy.Strategy // nil: only the methods below are called
	walked            *int
}

func (f fakeMemory) StateBytes() int  { *f.walked++; return 1 }
func (f fakeMemory) MemoryBytes() int { return 4096 }

// TestMetricsStateBytesNoWalk: a strategy.MemoryReporter's state_bytes is
// its MemoryBytes (kept incrementally), and its StateBytes (a walk of
// every key, 90-135 ms at 1M gcounter keys in the node's loop: issue 28)
// is not called by a scrape.
func TestMetricsStateBytesNoWalk(t *testing.T) {
	walked := 0
	view := fakeView{members: 1, inspect: func(_ context.Context, f func(time.Duration, rule.Rule, strategy.Strategy)) error {
		f(0, rule.Rule{Name: "m"}, fakeMemory{walked: &walked})
		return nil
	}}
	fams := gatherFake(t, view)
	if got := value(t, fams, "tokenmesh_state_bytes", "rule=m"); got != 4096 {
		t.Errorf("tokenmesh_state_bytes{rule=m} = %v, want MemoryBytes 4096", got)
	}
	if walked != 0 {
		t.Errorf("the scrape called StateBytes %d times on a strategy.MemoryReporter", walked)
	}
}
