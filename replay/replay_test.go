package replay

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/eval"
	"github.com/tokenmesh/tokenmesh/workload"
)

// marginTrace is keys requests for span of trace time whose decisions
// under (1/s, burst 2) do not depend on timing jitter below 250 ms of trace
// time: each key's first request arrives at t0 (its bucket full), the
// others at t0 + 250ms + k*500ms, so its bucket holds a whole number of
// tokens plus 0.25 or 0.75 at every request (two requests per second
// against a refill of one: the bucket never fills again). About half are
// rejected.
func marginTrace(keys int, span time.Duration) *workload.Trace {
	var reqs []workload.Request
	for k := range keys {
		key := fmt.Sprintf("k%d", k)
		t0 := time.Duration(k) * 37 * time.Millisecond
		reqs = append(reqs, workload.Request{Arrival: t0, Key: key, Tokens: 1})
		for t := t0 + 250*time.Millisecond; t < span; t += 500 * time.Millisecond {
			reqs = append(reqs, workload.Request{Arrival: t, Key: key, Tokens: 1})
		}
	}
	slices.SortStableFunc(reqs, func(a, b workload.Request) int { return int(a.Arrival - b.Arrival) })
	return &workload.Trace{Name: "margin", Requests: reqs}
}

var (
	onePerSec = bucket.Rate{Tokens: 1, Per: time.Second}
	testBurst = int64(2)
)

func runInProcess(t *testing.T, strat string, nodes int, speed float64, tr *workload.Trace) *Result {
	t.Helper()
	ctx := context.Background()
	target, err := StartInProcess(ctx, nodes, "replay", ScaledRate(onePerSec, speed), testBurst, strat, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	res, err := Run(ctx, Options{Trace: tr, Strategy: strat, Rate: onePerSec, Burst: testBurst, Speed: speed,
		AssignPolicy: "hash", Seed: 1}, target)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// runPunctual is runInProcess on a fresh cluster until every request was
// sent less than 150 ms of trace time after its due time (150ms/speed of
// wall time): marginTrace's decisions do not depend on timing errors below
// 250 ms of trace time, but a loaded machine (other builds and tests on two
// cores) can stall the scheduler for hundreds of ms. After 5 tries it skips
// the test.
func runPunctual(t *testing.T, strat string, nodes int, speed float64, tr *workload.Trace) *Result {
	t.Helper()
	limit := time.Duration(float64(150*time.Millisecond) / speed)
	var res *Result
	for try := 0; try < 5; try++ {
		if res = runInProcess(t, strat, nodes, speed, tr); res.MaxLateness < limit {
			return res
		}
		t.Logf("%s at speed %g: %d late sends, max lateness %v > %v: machine loaded, trying again", strat, speed, res.Late, res.MaxLateness, limit)
	}
	t.Skipf("%s at speed %g: max lateness %v > %v in 5 tries: machine too loaded for an exact comparison", strat, speed, res.MaxLateness, limit)
	return nil
}

func TestOwnerMatchesCentralInProcess(t *testing.T) {
	tr := marginTrace(6, 3*time.Second)
	res := runPunctual(t, "owner", 3, 1, tr)
	r := res.Row
	if r.ExcessAdmitted != 0 || r.FalseRejections != 0 || r.Undecided != 0 {
		t.Fatalf("owner on 3 nodes: excess %d tokens, %d false rejections, %d undecided; want 0 (late sends %d, max lateness %v)",
			r.ExcessAdmitted, r.FalseRejections, r.Undecided, res.Late, res.MaxLateness)
	}
	if r.Rejected == 0 || r.Admitted == 0 {
		t.Fatalf("trace should admit and reject: %+v", r)
	}
	if r.Messages == 0 || r.Bytes == 0 {
		t.Fatalf("owner on 3 nodes forwards, but messages %d bytes %d", r.Messages, r.Bytes)
	}
	if r.DecisionLatencyP99Ms <= 0 {
		t.Fatalf("latency p99 %v", r.DecisionLatencyP99Ms)
	}
}

func TestLocalOverAdmitsInProcess(t *testing.T) {
	tr := marginTrace(6, 3*time.Second)
	res := runInProcess(t, "local", 3, 1, tr)
	if res.Row.ExcessAdmitted == 0 || res.Row.ExcessAdmittedPct <= 0 {
		t.Fatalf("local on 3 nodes: excess %d tokens (%v%%); want > 0", res.Row.ExcessAdmitted, res.Row.ExcessAdmittedPct)
	}
}

// At speed 3 the rule serves 3 tokens per wall second: the decisions must
// still be central's on the trace timeline (1 token per trace second), and
// the replay must take span/3 of wall time.
func TestSpeedScaling(t *testing.T) {
	tr := marginTrace(4, 6*time.Second)
	for _, tc := range []struct {
		strat string
		nodes int
	}{{"local", 1}, {"owner", 3}} {
		res := runPunctual(t, tc.strat, tc.nodes, 3, tr)
		r := res.Row
		if r.ExcessAdmitted != 0 || r.FalseRejections != 0 || r.Undecided != 0 {
			t.Errorf("%s on %d nodes at speed 3: excess %d, false rejections %d, undecided %d; want 0",
				tc.strat, tc.nodes, r.ExcessAdmitted, r.FalseRejections, r.Undecided)
		}
		want := tr.Span() / 3
		if res.Wall < want || res.Wall > want+time.Second {
			t.Errorf("%s at speed 3: wall %v, want about %v", tc.strat, res.Wall, want)
		}
	}
	// The same trace at speed 1 with the rule not scaled up (4/s served
	// while replaying in trace time) is a different limit: it must differ.
	ctx := context.Background()
	target, err := StartInProcess(ctx, 1, "replay", 4, testBurst, "local", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	short := marginTrace(4, 2*time.Second)
	res, err := Run(ctx, Options{Trace: short, Strategy: "local", Rate: onePerSec, Burst: testBurst, Speed: 1, AssignPolicy: "hash"}, target)
	if err != nil {
		t.Fatal(err)
	}
	if res.Row.ExcessAdmitted == 0 {
		t.Errorf("an unscaled 4/s rule replayed at speed 1 should over-admit against 1/s")
	}
}

// fakeTarget records what Run asks of it; every check is admitted.
type fakeTarget struct {
	n     int
	start time.Time

	mu     sync.Mutex
	checks []fakeCheck
	kills  []fakeKill
	bytes  int
}

type fakeCheck struct {
	node    int
	key     string
	at      time.Duration // since start
	created time.Time     // the edge time sent with it (zero: none)
	got     time.Time     // when the check came
}

type fakeKill struct {
	node   int
	before int // checks received before the kill
}

func (f *fakeTarget) Nodes() int { return f.n }

func (f *fakeTarget) Check(_ context.Context, node int, key string, _ int64, created time.Time) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, k := range f.kills {
		if k.node == node {
			return false, errors.New("connection refused")
		}
	}
	f.checks = append(f.checks, fakeCheck{node, key, time.Since(f.start), created, time.Now()})
	return true, nil
}

func (f *fakeTarget) Bytes(context.Context) (int64, int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.bytes++
	return 7, 700, nil
}

func (f *fakeTarget) Kill(node int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.kills = append(f.kills, fakeKill{node, len(f.checks)})
	return nil
}

func (f *fakeTarget) Partition(...[]int) error { return nil }
func (f *fakeTarget) Heal() error              { return nil }

// With EdgeTimes each check carries its request's due time: the trace's
// spacing divided by the speed, never after the check was sent; without,
// none.
func TestEdgeTimesAreDueTimes(t *testing.T) {
	var reqs []workload.Request
	for i := range 12 {
		reqs = append(reqs, workload.Request{Arrival: time.Duration(i*i) * 7 * time.Millisecond, Key: fmt.Sprintf("k%d", i%3), Tokens: 1})
	}
	tr := &workload.Trace{Name: "edge", Requests: reqs}
	const speed = 4
	for _, edge := range []bool{true, false} {
		f := &fakeTarget{n: 2, start: time.Now()}
		if _, err := Run(context.Background(), Options{Trace: tr, Strategy: "fake", Rate: onePerSec, Burst: 100, Speed: speed,
			AssignPolicy: "roundrobin", EdgeTimes: edge, Senders: 1}, f); err != nil {
			t.Fatal(err)
		}
		if len(f.checks) != len(reqs) {
			t.Fatalf("edge times %v: %d checks, want %d", edge, len(f.checks), len(reqs))
		}
		for i, c := range f.checks {
			switch {
			case !edge && !c.created.IsZero():
				t.Errorf("without edge times, check %d carried %v", i, c.created)
			case edge && c.created.After(c.got):
				t.Errorf("check %d: edge time %v after the check came (%v)", i, c.created, c.got)
			case edge && c.created.Sub(f.checks[0].created) != reqs[i].Arrival/speed:
				t.Errorf("check %d: edge time %v after the first's, want %v (its trace time / speed)", i, c.created.Sub(f.checks[0].created), reqs[i].Arrival/speed)
			}
		}
	}
}

func TestKillStopsSendingToNode(t *testing.T) {
	// 20 requests in [0, 0.95 s], 20 in [1.5 s, 2.45 s]; node 1 killed at
	// 1.2 s. At speed 4 the kill is 62 ms of wall time away from requests.
	var reqs []workload.Request
	for i := range 40 {
		at := time.Duration(i) * 50 * time.Millisecond
		if i >= 20 {
			at += 500 * time.Millisecond
		}
		reqs = append(reqs, workload.Request{Arrival: at, Key: fmt.Sprintf("k%d", i%7), Tokens: 1})
	}
	tr := &workload.Trace{Name: "kill", Requests: reqs}
	f := &fakeTarget{n: 3, start: time.Now()}
	kill, err := ParseKill("1@1.2s")
	if err != nil {
		t.Fatal(err)
	}
	const speed = 4
	res, err := Run(context.Background(), Options{Trace: tr, Strategy: "fake", Rate: onePerSec, Burst: 100, Speed: speed,
		AssignPolicy: "roundrobin", Events: []Event{kill}}, f)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.kills) != 1 || f.kills[0].node != 1 {
		t.Fatalf("kills %+v, want node 1 once", f.kills)
	}
	// The assigner's sequence: round robin over 3 nodes, then over the live 0 and 2.
	for i, o := range res.Outcomes {
		want := i % 3
		if i >= 20 {
			want = []int{0, 2}[i%2]
		}
		if o.Node != want {
			t.Fatalf("request %d went to node %d, want %d", i, o.Node, want)
		}
		if !o.Sent {
			t.Fatalf("request %d not sent", i)
		}
	}
	if res.MaxLateness < 50*time.Millisecond {
		// Punctual: the kill fell between the two halves.
		if f.kills[0].before != 20 || res.Errors != 0 {
			t.Errorf("kill after %d checks with %d errors, want 20 and 0", f.kills[0].before, res.Errors)
		}
	} else {
		t.Logf("machine loaded (max lateness %v): not checking when the kill fell", res.MaxLateness)
	}
	if !slices.Equal(res.Row.CrashedNodes, []string{"1"}) || !slices.Equal(res.EventNames(), []string{"kill 1@1.2s"}) {
		t.Errorf("crashed %v events %v", res.Row.CrashedNodes, res.EventNames())
	}
	if res.Row.Messages != 7 || res.Row.Bytes != 700 {
		t.Errorf("messages %d bytes %d, want the target's 7 and 700", res.Row.Messages, res.Row.Bytes)
	}
	// Requests are never sent before arrival/speed (after the lead).
	for i, o := range res.Outcomes {
		if o.Lateness < 0 {
			t.Errorf("request %d sent %v early", i, -o.Lateness)
		}
	}
	wall := DefaultLead + tr.Span()/speed
	if first, last := f.checks[0].at, f.checks[len(f.checks)-1].at; first < DefaultLead || last < wall {
		t.Errorf("first send at %v (want >= %v), last at %v (want >= %v)", first, DefaultLead, last, wall)
	}
}

func TestKillEveryNodeLeavesRequestsUndecided(t *testing.T) {
	reqs := []workload.Request{{Arrival: 0, Key: "a", Tokens: 1}, {Arrival: 400 * time.Millisecond, Key: "a", Tokens: 1},
		{Arrival: 500 * time.Millisecond, Key: "a", Tokens: 1}}
	tr := &workload.Trace{Name: "x", Requests: reqs}
	f := &fakeTarget{n: 1, start: time.Now()}
	res, err := Run(context.Background(), Options{Trace: tr, Strategy: "fake", Rate: onePerSec, Burst: 100, Speed: 1,
		AssignPolicy: "hash", Events: []Event{{At: 400 * time.Millisecond, Kind: Kill, Node: 0}}}, f)
	if err != nil {
		t.Fatal(err)
	}
	if res.Row.Undecided != 2 || res.Outcomes[1].Err != ErrNoLiveNode || res.Outcomes[2].Err != ErrNoLiveNode {
		t.Fatalf("undecided %d outcomes %+v", res.Row.Undecided, res.Outcomes)
	}
	if res.Row.FalseRejections < 2 {
		t.Fatalf("false rejections %d, want at least 2", res.Row.FalseRejections)
	}
}

// noFaults is a Target without FaultInjector.
type noFaults struct{ f *fakeTarget }

func (n noFaults) Nodes() int { return n.f.Nodes() }
func (n noFaults) Check(ctx context.Context, node int, key string, hits int64, created time.Time) (bool, error) {
	return n.f.Check(ctx, node, key, hits, created)
}
func (n noFaults) Bytes(ctx context.Context) (int64, int64, error) { return n.f.Bytes(ctx) }

func TestRunErrors(t *testing.T) {
	tr := marginTrace(1, time.Second)
	ok := Options{Trace: tr, Rate: onePerSec, Burst: 2, Speed: 1, AssignPolicy: "hash"}
	for name, tc := range map[string]struct {
		mod    func(*Options)
		target Target
		want   string
	}{
		"speed":     {func(o *Options) { o.Speed = 0 }, &fakeTarget{n: 1}, "speed"},
		"assign":    {func(o *Options) { o.AssignPolicy = "nope" }, &fakeTarget{n: 1}, "assignment policy"},
		"kill node": {func(o *Options) { o.Events = []Event{{Kind: Kill, Node: 3}} }, &fakeTarget{n: 3}, "no node 3"},
		"twice":     {func(o *Options) { o.Events = []Event{{Kind: Kill, Node: 0}, {Kind: Kill, Node: 0}} }, &fakeTarget{n: 3}, "twice"},
		"no faults": {func(o *Options) { o.Events = []Event{{Kind: Heal}} }, noFaults{&fakeTarget{n: 1}}, "cannot inject"},
		"empty":     {func(o *Options) { o.Trace = &workload.Trace{} }, &fakeTarget{n: 1}, "no requests"},
	} {
		o := ok
		tc.mod(&o)
		_, err := Run(context.Background(), o, tc.target)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", name, err, tc.want)
		}
	}
}

func TestParseEvents(t *testing.T) {
	e, err := ParseKill("2@1m30s")
	if err != nil || e.Kind != Kill || e.Node != 2 || e.At != 90*time.Second {
		t.Errorf("ParseKill: %+v %v", e, err)
	}
	e, err = ParsePartition("0,1|2@30s")
	if err != nil || e.Kind != Partition || e.At != 30*time.Second || fmt.Sprint(e.Groups) != "[[0 1] [2]]" || e.String() != "partition 0,1|2@30s" {
		t.Errorf("ParsePartition: %+v %v", e, err)
	}
	e, err = ParseHeal("45s")
	if err != nil || e.Kind != Heal || e.At != 45*time.Second {
		t.Errorf("ParseHeal: %+v %v", e, err)
	}
	for _, bad := range []string{"1", "x@1s", "1@soon", "-1@1s", "1@-1s"} {
		if _, err := ParseKill(bad); err == nil {
			t.Errorf("ParseKill(%q) succeeded", bad)
		}
	}
	for _, bad := range []string{"0,1@1s", "0|0@1s", "0|a@1s", "0|1"} {
		if _, err := ParsePartition(bad); err == nil {
			t.Errorf("ParsePartition(%q) succeeded", bad)
		}
	}
}

func TestSumCounter(t *testing.T) {
	text := `# HELP tokenmesh_peer_bytes_total Peer payload bytes.
# TYPE tokenmesh_peer_bytes_total counter
tokenmesh_peer_bytes_total{direction="received",rule="replay"} 100
tokenmesh_peer_bytes_total{direction="sent",rule="replay"} 1234
tokenmesh_peer_bytes_total{direction="sent",rule="other"} 5
tokenmesh_peer_bytes_total_extra{direction="sent",rule="replay"} 9
tokenmesh_peer_bytes_total{rule="re\"play",direction="sent"} 2e3
tokenmesh_peer_messages_total 3
# TYPE tokenmesh_state_bytes gauge
tokenmesh_state_bytes{rule="replay"} 42
tokenmesh_state_bytes{rule="other"} 7
`
	got, ok := SumCounter(text, "tokenmesh_peer_bytes_total", map[string]string{"rule": "replay", "direction": "sent"})
	if !ok || got != 1234 {
		t.Errorf("got %v %v, want 1234", got, ok)
	}
	got, _ = SumCounter(text, "tokenmesh_peer_bytes_total", map[string]string{"rule": `re"play`})
	if got != 2000 {
		t.Errorf("escaped label: got %v", got)
	}
	got, _ = SumCounter(text, "tokenmesh_peer_bytes_total", map[string]string{"direction": "sent"})
	if got != 1234+5+2000 {
		t.Errorf("sum over rules: got %v", got)
	}
	if got, ok := SumCounter(text, "tokenmesh_peer_messages_total", nil); !ok || got != 3 {
		t.Errorf("unlabelled: got %v %v", got, ok)
	}
	if got, ok := SumCounter(text, "tokenmesh_state_bytes", map[string]string{"rule": "replay"}); !ok || got != 42 {
		t.Errorf("gauge: got %v %v, want 42", got, ok)
	}
	if _, ok := SumCounter(text, "tokenmesh_decisions_total", nil); ok {
		t.Error("found a missing metric")
	}
}

// reportRun replays marginTrace(2, 2 s) with strat on 2 in-process nodes
// at speed 4 and returns the trace, central's decisions on it, the run,
// and the setup and live facts NewReport takes for it.
func reportRun(t *testing.T, strat string) (*workload.Trace, []bool, *Result, eval.Setup, Live) {
	t.Helper()
	tr := marginTrace(2, 2*time.Second)
	central, err := eval.Central(tr, onePerSec, testBurst)
	if err != nil {
		t.Fatal(err)
	}
	res := runInProcess(t, strat, 2, 4, tr)
	return tr, central, res, eval.Setup{Nodes: 2, RatePerSec: 1, Burst: testBurst, Assign: "hash", Seed: 1},
		Live{Cluster: "in-process", Nodes: 2, Speed: 4}
}

func TestNewReport(t *testing.T) {
	tr, central, res, setup, live := reportRun(t, "owner")
	rep := NewReport(tr, setup, live, central, []*Result{res})
	if len(rep.Results) != 2 || rep.Results[0].Strategy != "central" || rep.Results[1].Strategy != "owner" {
		t.Fatalf("results %+v", rep.Results)
	}
	if c := rep.Results[0]; c.ExcessAdmitted != 0 || c.FalseRejections != 0 || c.Rejected == 0 {
		t.Errorf("central row %+v", c)
	}
	if !strings.Contains(rep.Setup.Scenario, "speed 4x") || len(rep.Live.Runs) != 1 {
		t.Errorf("setup %+v live %+v", rep.Setup, rep.Live)
	}
	var b strings.Builder
	if err := eval.WriteTableWidth(&b, &rep.Report, 0); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	// local % is not measured: n/a, explained, and the latency is measured;
	// the hash note names only the strategies that ran (owner: none).
	var ownerRow string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "  owner ") {
			ownerRow = l
		}
	}
	if o := rep.Results[1]; !slices.Contains(o.NotMeasured, "local_decision_pct") || !strings.Contains(ownerRow, " n/a ") {
		t.Errorf("owner's local %% is not n/a (not measured %v):\n%s", o.NotMeasured, out)
	}
	for _, want := range []string{"decision latency percentiles, measured", "p50 ms, p99 ms of central; local % of owner (a replay computes central"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	for _, bad := range []string{"simulated milliseconds", "FLATTERS", "gcounter"} {
		if strings.Contains(out, bad) {
			t.Errorf("table says %q:\n%s", bad, out)
		}
	}
}

// With a shortfall window every row gets its shortfall against central
// (central's 0), as sim's do, and the plots the runs' shortfall per
// window; without one, none.
func TestNewReportShortfall(t *testing.T) {
	tr, central, res, setup, live := reportRun(t, "static")
	if rep := NewReport(tr, setup, live, central, []*Result{res}); rep.Results[1].ShortfallPct != nil || rep.Series.Shortfall != nil {
		t.Fatalf("no window: shortfall %v, series %v", rep.Results[1].ShortfallPct, rep.Series.Shortfall)
	}
	setup.ShortfallWindowS = 1
	rep := NewReport(tr, setup, live, central, []*Result{res})
	c, s := rep.Results[0], rep.Results[1]
	if c.ShortfallTokens == nil || *c.ShortfallTokens != 0 || *c.ShortfallPct != 0 || *c.ShortfallAfterBirthPct != 0 {
		t.Fatalf("central's shortfall %v %v %v, want 0", c.ShortfallTokens, c.ShortfallPct, c.ShortfallAfterBirthPct)
	}
	// The same numbers as the simulator's scoring of these decisions;
	// static's half of the burst and rate per node is short of central.
	short, centralTokens := eval.Shortfall(tr.Requests, res.allowed, central, time.Second)
	if short == 0 {
		t.Fatalf("static admitted as much as central in every window (%d tokens): the test proves nothing", centralTokens)
	}
	if s.ShortfallTokens == nil || *s.ShortfallTokens != short || s.ShortfallAfterBirthPct == nil {
		t.Fatalf("static's shortfall %v (after birth %v), want %d of %d", s.ShortfallTokens, s.ShortfallAfterBirthPct, short, centralTokens)
	}
	byWindow := rep.Series.Shortfall["static"]
	var sum int64
	for _, w := range byWindow {
		sum += w
	}
	if rep.Series.ShortfallWindow != time.Second || sum != short || rep.Series.Shortfall["central"] != nil {
		t.Fatalf("series: window %v, static %v (sum %d, want %d), central %v", rep.Series.ShortfallWindow, byWindow, sum, short, rep.Series.Shortfall["central"])
	}
	if res.Row.ShortfallTokens != nil {
		t.Errorf("NewReport changed the run's own row")
	}
}

// fakeCluster serves canned /metrics texts; killed nodes answer none.
type fakeCluster struct {
	sent   []int64 // bytes sent per node
	killed []bool
}

func (c *fakeCluster) Kill(i int) error         { c.killed[i] = true; return nil }
func (c *fakeCluster) Partition(...[]int) error { return nil }
func (c *fakeCluster) Heal() error              { return nil }
func (c *fakeCluster) Metrics(_ context.Context, i int) (string, error) {
	if c.killed[i] {
		return "", errors.New("connection refused")
	}
	return fmt.Sprintf("tokenmesh_peer_bytes_total{rule=\"replay\",direction=\"sent\"} %d\n"+
		"tokenmesh_peer_bytes_total{rule=\"replay\",direction=\"received\"} 999\n"+
		"tokenmesh_peer_messages_total{rule=\"replay\",direction=\"sent\"} %d\n", c.sent[i], c.sent[i]/10), nil
}

func TestLiveTargetBytesKeepsKilledNodes(t *testing.T) {
	c := &fakeCluster{sent: []int64{100, 200, 300}, killed: make([]bool, 3)}
	// gRPC clients connect lazily: nothing listens at these addresses.
	l, err := NewLiveTarget(c, []string{"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"}, "replay")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	if msgs, bytes, err := l.Bytes(ctx); err != nil || msgs != 60 || bytes != 600 {
		t.Fatalf("Bytes: %d %d %v; want 60 600", msgs, bytes, err)
	}
	c.sent[1] = 250
	if err := l.Kill(1); err != nil {
		t.Fatal(err)
	}
	c.sent[0], c.sent[2] = 110, 310
	if msgs, bytes, err := l.Bytes(ctx); err != nil || bytes != 110+250+310 || msgs != 11+25+31 {
		t.Fatalf("after kill: %d %d %v; want 67 670 (node 1 as read at its kill)", msgs, bytes, err)
	}
}

// restartTarget is a fakeTarget that can restart a node: a killed node
// refuses checks until its Restart, which takes restartTakes of wall time.
type restartTarget struct {
	*fakeTarget
	restartTakes time.Duration
	restarts     []int
	fail         error
}

func (r *restartTarget) Restart(node int) error {
	time.Sleep(r.restartTakes)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail != nil {
		return r.fail
	}
	r.restarts = append(r.restarts, node)
	r.kills = slices.DeleteFunc(r.kills, func(k fakeKill) bool { return k.node == node })
	return nil
}

func TestRestartSendsToNodeAgainOnceItServes(t *testing.T) {
	// Requests every 50 ms of trace time over 3 s, at speed 2; node 1 is
	// killed at 0.5 s and restarted at 1 s; its restart takes 300 ms of
	// wall time (0.6 s of trace time), during which node 1 gets nothing.
	var reqs []workload.Request
	for i := range 60 {
		reqs = append(reqs, workload.Request{Arrival: time.Duration(i) * 50 * time.Millisecond, Key: fmt.Sprintf("k%d", i%5), Tokens: 1})
	}
	tr := &workload.Trace{Name: "restart", Requests: reqs}
	f := &restartTarget{fakeTarget: &fakeTarget{n: 3, start: time.Now()}, restartTakes: 300 * time.Millisecond}
	kill, _ := ParseKill("1@500ms")
	restart, err := ParseRestart("1@1s")
	if err != nil || restart.Kind != Restart || restart.Node != 1 || restart.At != time.Second {
		t.Fatalf("ParseRestart: %+v %v", restart, err)
	}
	res, err := Run(context.Background(), Options{Trace: tr, Strategy: "fake", Rate: onePerSec, Burst: 100, Speed: 2,
		AssignPolicy: "roundrobin", Events: []Event{restart, kill}}, f)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(f.restarts, []int{1}) || !slices.Equal(res.EventNames(), []string{"kill 1@500ms", "restart 1@1s"}) || len(res.EventTimes) != 2 {
		t.Fatalf("restarts %v, events %v at %v", f.restarts, res.EventNames(), res.EventTimes)
	}
	if res.Errors != 0 {
		t.Errorf("%d errors (first %s): no request should reach node 1 while it is down", res.Errors, res.FirstError)
	}
	var during, after int
	for i, o := range res.Outcomes {
		at := reqs[i].Arrival
		switch {
		case at >= 500*time.Millisecond && at < time.Second+400*time.Millisecond && o.Node == 1:
			during++ // down, or restarting (300 ms wall = 600 ms trace)
		case at >= 2*time.Second && o.Node == 1:
			after++
		}
	}
	if during != 0 {
		t.Errorf("%d requests went to node 1 while it was down or restarting", during)
	}
	if res.MaxLateness < 50*time.Millisecond && after == 0 {
		t.Errorf("no request went to node 1 after its restart")
	}
}

func TestRestartErrors(t *testing.T) {
	tr := &workload.Trace{Name: "t", Requests: []workload.Request{{Arrival: 0, Key: "k", Tokens: 1}, {Arrival: 100 * time.Millisecond, Key: "k", Tokens: 1}}}
	opts := func(evs ...Event) Options {
		return Options{Trace: tr, Strategy: "fake", Rate: onePerSec, Burst: 10, Speed: 10, AssignPolicy: "hash", Events: evs}
	}
	kill := Event{At: 0, Kind: Kill, Node: 1}
	restart := Event{At: 50 * time.Millisecond, Kind: Restart, Node: 1}
	for name, c := range map[string]struct {
		o    Options
		t    Target
		want string
	}{
		"not killed":     {opts(restart), &restartTarget{fakeTarget: &fakeTarget{n: 3}}, "not down"},
		"restart first":  {opts(Event{At: 0, Kind: Restart, Node: 1}, Event{At: 50 * time.Millisecond, Kind: Kill, Node: 1}), &restartTarget{fakeTarget: &fakeTarget{n: 3}}, "not down"},
		"no node":        {opts(kill, Event{At: 50 * time.Millisecond, Kind: Restart, Node: 4}), &restartTarget{fakeTarget: &fakeTarget{n: 3}}, "no node 4"},
		"cannot restart": {opts(kill, restart), &fakeTarget{n: 3}, "cannot restart"},
		"restart failed": {opts(kill, restart), &restartTarget{fakeTarget: &fakeTarget{n: 3}, fail: errors.New("port in use")}, "port in use"},
		"kill twice":     {opts(kill, Event{At: 50 * time.Millisecond, Kind: Kill, Node: 1}), &restartTarget{fakeTarget: &fakeTarget{n: 3}}, "killed twice"},
	} {
		if ft, ok := c.t.(*restartTarget); ok {
			ft.start = time.Now()
		}
		_, err := Run(context.Background(), c.o, c.t)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", name, err, c.want)
		}
	}
	// Kill, restart, kill again is fine.
	f := &restartTarget{fakeTarget: &fakeTarget{n: 3, start: time.Now()}}
	if _, err := Run(context.Background(), opts(kill, restart, Event{At: 100 * time.Millisecond, Kind: Kill, Node: 1}), f); err != nil {
		t.Errorf("kill, restart, kill: %v", err)
	}
}

func (c *fakeCluster) Restart(_ context.Context, i int) error {
	if !c.killed[i] {
		return errors.New("still running")
	}
	c.killed[i] = false
	return nil
}

func TestLiveTargetRestartKeepsEarlierCounts(t *testing.T) {
	c := &fakeCluster{sent: []int64{100, 200, 300}, killed: make([]bool, 3)}
	l, err := NewLiveTarget(c, []string{"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"}, "replay")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := l.Restart(1); err == nil || !strings.Contains(err.Error(), "not killed") {
		t.Errorf("restart of a live node: %v", err)
	}
	if err := l.Restart(7); err == nil || !strings.Contains(err.Error(), "no node 7") {
		t.Errorf("restart of node 7: %v", err)
	}
	c.sent[1] = 250
	if err := l.Kill(1); err != nil {
		t.Fatal(err)
	}
	if err := l.Restart(1); err != nil {
		t.Fatal(err)
	}
	c.sent[1] = 40 // the new process counts from 0
	if msgs, bytes, err := l.Bytes(context.Background()); err != nil || bytes != 100+250+40+300 || msgs != 10+25+4+30 {
		t.Fatalf("after restart: %d %d %v; want 69 690 (node 1's two lives)", msgs, bytes, err)
	}
}

func TestMeasureDetection(t *testing.T) {
	t0 := time.Date(2026, 11, 24, 23, 0, 0, 0, time.UTC)
	line := func(d time.Duration, msg, node string) string {
		return fmt.Sprintf("time=%s level=INFO msg=\"membership: %s\" member=x node=%s gossip=10.0.0.1:7946\n", t0.Add(d).Format(time.RFC3339Nano), msg, node)
	}
	logs := []string{
		line(-time.Second, "member joined", "n1") + line(5*time.Second, "member failed", "n1") + "garbage line\n" +
			line(7*time.Second, "member failed", "n2") + line(22*time.Second, "member joined", "n2") + line(23*time.Second, "member joined", "n1"),
		line(6*time.Second, "member failed", "n0") + line(21*time.Second, "member joined", "n0"),
		line(5500*time.Millisecond, "member failed", "n0"), // n2 never logs the heal
	}
	events := []Event{{Kind: Partition, Groups: [][]int{{0}, {1, 2}}}, {Kind: Heal}}
	ds, err := MeasureDetection(3, events, []time.Time{t0, t0.Add(20 * time.Second)}, logs)
	if err != nil {
		t.Fatal(err)
	}
	want := []Detection{
		{Event: "partition 0|1,2@0s", Kind: Partition, Observer: 0, Expected: 2, Seen: 2, First: 5 * time.Second, Last: 7 * time.Second},
		{Event: "partition 0|1,2@0s", Kind: Partition, Observer: 1, Expected: 1, Seen: 1, First: 6 * time.Second, Last: 6 * time.Second},
		{Event: "partition 0|1,2@0s", Kind: Partition, Observer: 2, Expected: 1, Seen: 1, First: 5500 * time.Millisecond, Last: 5500 * time.Millisecond},
		{Event: "heal@0s", Kind: Heal, Observer: 0, Expected: 2, Seen: 2, First: 2 * time.Second, Last: 3 * time.Second},
		{Event: "heal@0s", Kind: Heal, Observer: 1, Expected: 1, Seen: 1, First: time.Second, Last: time.Second},
		{Event: "heal@0s", Kind: Heal, Observer: 2, Expected: 1},
	}
	if !reflect.DeepEqual(ds, want) {
		t.Fatalf("detections\n%+v\nwant\n%+v", ds, want)
	}
	// A kill and a restart: the survivors lose and regain the node; the
	// restarted node itself is not measured.
	logs = []string{line(4*time.Second, "member failed", "n1") + line(12*time.Second, "member joined", "n1"), "", ""}
	ds, err = MeasureDetection(3, []Event{{Kind: Kill, Node: 1}, {Kind: Restart, Node: 1}}, []time.Time{t0, t0.Add(10 * time.Second)}, logs)
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 4 || ds[0].Observer != 0 || ds[0].First != 4*time.Second || ds[2].Observer != 0 || ds[2].First != 2*time.Second || ds[3].Observer != 2 || ds[3].Seen != 0 {
		t.Fatalf("kill/restart detections %+v", ds)
	}
	if _, err := MeasureDetection(3, events, []time.Time{t0}, logs); err == nil {
		t.Error("MeasureDetection with fewer times than events succeeded")
	}
}

// slowTarget answers every check after delay.
type slowTarget struct {
	*fakeTarget
	delay time.Duration
}

func (s *slowTarget) Check(ctx context.Context, node int, key string, hits int64, created time.Time) (bool, error) {
	time.Sleep(s.delay)
	return s.fakeTarget.Check(ctx, node, key, hits, created)
}

// A kill waits for the answers of the requests already sent to the node:
// they were due while it lived.
func TestKillWaitsForInflightRequests(t *testing.T) {
	var reqs []workload.Request
	for i := range 30 {
		reqs = append(reqs, workload.Request{Arrival: time.Duration(i) * 10 * time.Millisecond, Key: fmt.Sprintf("k%d", i), Tokens: 1})
	}
	tr := &workload.Trace{Name: "slow", Requests: reqs}
	f := &slowTarget{fakeTarget: &fakeTarget{n: 2, start: time.Now()}, delay: 100 * time.Millisecond}
	res, err := Run(context.Background(), Options{Trace: tr, Strategy: "fake", Rate: onePerSec, Burst: 100, Speed: 1,
		AssignPolicy: "roundrobin", Events: []Event{{At: 195 * time.Millisecond, Kind: Kill, Node: 1}}}, f)
	if err != nil {
		t.Fatal(err)
	}
	if res.Errors != 0 {
		t.Fatalf("%d requests failed (first: %s): the kill did not wait for the node's answers", res.Errors, res.FirstError)
	}
	if len(f.kills) != 1 || f.kills[0].node != 1 {
		t.Errorf("kills %+v, want node 1 once", f.kills)
	}
}

// ParseMembershipLog reads the membership lines of a node's slog text
// log, with plain node names (n2) and with a region's (ap.n2, `replay
// --regions`), and skips the rest. Before, region names were skipped, so
// a replay with --regions reported that no node saw any fault.
func TestParseMembershipLog(t *testing.T) {
	log := strings.Join([]string{
		`time=2026-12-06T12:37:18.685Z level=INFO msg="membership: member failed" node=n2 gossip=10.0.0.3:7946`,
		`time=2026-12-06T12:37:19.000Z level=INFO msg="membership: member left" node=ap.n2 gossip=10.0.0.3:7946`,
		`time=2026-12-06T12:37:20.5Z level=INFO msg="membership: member joined" node=eu.n0 gossip=10.0.0.1:7946 peer=10.0.0.1:9000`,
		`time=2026-12-06T12:37:21Z level=INFO msg="serving" node=n1`,
		`time=2026-12-06T12:37:22Z level=INFO msg="membership: member joined" node=x1 gossip=a`,
		`time=bad level=INFO msg="membership: member joined" node=n1 gossip=a`,
	}, "\n")
	got := ParseMembershipLog(log)
	at := func(s string) time.Time {
		tm, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatal(err)
		}
		return tm
	}
	want := []MembershipChange{
		{At: at("2026-12-06T12:37:18.685Z"), Node: 2},
		{At: at("2026-12-06T12:37:19Z"), Node: 2},
		{At: at("2026-12-06T12:37:20.5Z"), Joined: true, Node: 0},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
}
