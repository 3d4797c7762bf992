package sim_test

import (
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/eval"
	"github.com/tokenmesh/tokenmesh/sim"
	"github.com/tokenmesh/tokenmesh/sim/simtest"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/registry"
	"github.com/tokenmesh/tokenmesh/topology"
	"github.com/tokenmesh/tokenmesh/workload"
)

var (
	mustGen = simtest.Gen
	allowed = simtest.Allowed
	fixed   = simtest.Fixed
)

// run simulates the registered strategy name at 1 token/s, burst 5.
func run(t testing.TB, tr *workload.Trace, name string, nodes int, net sim.Network, sc *sim.Scenario, params ...string) *sim.Result {
	t.Helper()
	info, err := registry.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	return simtest.Run(t, tr, name, info.New, simtest.Options{Nodes: nodes, Net: net, Scenario: sc, Params: params})
}

// With a fixed latency and no loss, owner decides every request exactly as
// central does (the ordering buffer of strategy/owner), including requests
// of one key at the same millisecond on different nodes.
func TestOwnerMatchesCentralExactly(t *testing.T) {
	tr := mustGen(t, "mix:duration=30s", 3)
	central := allowed(run(t, tr, "central", 1, fixed(time.Millisecond), nil))
	for _, lat := range []time.Duration{0, time.Millisecond, 20 * time.Millisecond} {
		res := run(t, tr, "owner", 7, fixed(lat), nil)
		got := allowed(res)
		for i := range got {
			if got[i] != central[i] {
				t.Fatalf("latency %v: request %d (%s at %v): owner %v, central %v", lat, i, tr.Requests[i].Key, tr.Requests[i].Arrival, got[i], central[i])
			}
		}
		if res.Messages == 0 && lat > 0 {
			t.Fatalf("latency %v: owner sent no messages over 7 nodes", lat)
		}
		if res.Undecided != 0 {
			t.Fatalf("latency %v: %d undecided", lat, res.Undecided)
		}
	}
}

func TestDeterministic(t *testing.T) {
	tr := mustGen(t, "mix:duration=20s", 1)
	net := sim.Network{Latency: sim.Latency{Kind: "exponential", Min: 0, Mean: 3 * time.Millisecond}, Loss: 0.1, Duplicate: 0.05, Reorder: 0.1}
	a := run(t, tr, "owner", 5, net, nil)
	b := run(t, tr, "owner", 5, net, nil)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("two runs with the same seed differ")
	}
	if a.MessagesLost == 0 {
		t.Fatal("10% loss lost no message")
	}
}

// static splits (r, b) exactly, so the cluster never admits beyond the
// envelope; local admits beyond it.
func TestStaticConformsLocalExceeds(t *testing.T) {
	tr := mustGen(t, "heavy:users=20,rate=200,duration=20s", 5)
	rate := bucket.Rate{Tokens: 1, Per: time.Second}
	static := run(t, tr, "static", 4, fixed(time.Millisecond), nil)
	if v := eval.EnvelopeViolation(tr.Requests, allowed(static), rate.PerSec(), 5); v != 0 {
		t.Fatalf("static violated the envelope by %v tokens", v)
	}
	local := run(t, tr, "local", 4, fixed(time.Millisecond), nil)
	if v := eval.EnvelopeViolation(tr.Requests, allowed(local), rate.PerSec(), 5); v <= 0 {
		t.Fatal("local over 4 nodes did not exceed the envelope on heavy hitters")
	}
}

// Crashing a hot key's owner: the requests forwarded to it are answered by
// on_timeout (admit: more admissions than reject); the next owner then
// takes over.
func TestOwnerCrashFailover(t *testing.T) {
	tr := mustGen(t, "heavy:users=10,rate=100,duration=30s", 2)
	sc, err := sim.ParseScenario([]byte("detection: 2s\nevents:\n  - at: 10s\n    crash_owner_of_hottest: 1\n"))
	if err != nil {
		t.Fatal(err)
	}
	open := run(t, tr, "owner", 5, fixed(time.Millisecond), sc, "on_timeout=admit")
	closed := run(t, tr, "owner", 5, fixed(time.Millisecond), sc, "on_timeout=reject")
	if len(open.Crashed) != 1 {
		t.Fatalf("crashed %v, want one node", open.Crashed)
	}
	na, nc := 0, 0
	for i := range open.Outcomes {
		if open.Outcomes[i].Allowed {
			na++
		}
		if closed.Outcomes[i].Allowed {
			nc++
		}
	}
	if na <= nc {
		t.Fatalf("fail-open admitted %d, fail-closed %d: timeouts should admit more when open", na, nc)
	}
}

func TestScenarioErrors(t *testing.T) {
	for _, bad := range []string{
		"events:\n  - at: 1s\n    crash: [n1]\n    heal: true\n",
		"events:\n  - at: 1s\n    explode: [n1]\n",
		"detection: -1s\n",
		"events:\n  - at: -1s\n    heal: true\n",
		"detection_jitter: -1ms\n",
		"reconnect_interval: -5s\n",
		"reconnect_interval: 2h\n",
		"join_delay: -1s\n",
		"reconnect_timeout: -1s\n",
		"reconnect_timeout: 2h\n",
		"detection: 1000h\n",
		"detection_jitter: soon\n",
		"events:\n  - at: 2000000h\n    heal: true\n",
	} {
		if _, err := sim.ParseScenario([]byte(bad)); err == nil {
			t.Errorf("scenario accepted:\n%s", bad)
		}
	}
	sc, err := sim.ParseScenario([]byte("events:\n  - at: 1s\n    crash: [n9]\n"))
	if err != nil {
		t.Fatal(err)
	}
	info, _ := registry.Lookup("static")
	assign, _ := workload.NewAssigner("hash", 1)
	_, err = sim.Run(mustGen(t, "poisson:users=2,duration=2s", 1), sim.Config{Name: "static", New: info.New, Nodes: 3,
		Rate: bucket.Rate{Tokens: 1, Per: time.Second}, Burst: 1, Network: fixed(0), Scenario: sc, Assign: assign})
	if err == nil {
		t.Fatal("a scenario naming n9 in a 3-node cluster ran")
	}
}

func FuzzParseLatency(f *testing.F) {
	for _, s := range []string{"1ms", "uniform:1ms-5ms", "exp:2ms", "exp:1ms+2ms", "uniform:5ms-1ms", "bogus:1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if strings.HasPrefix(strings.TrimSpace(s), "samples:") {
			return // reads a file: FuzzReadLatencySamples
		}
		l, err := sim.ParseLatency(s)
		if err != nil {
			return
		}
		if l.Min < 0 || l.Mean < l.Min || l.Hint() < 0 {
			t.Fatalf("%q parsed to %+v", s, l)
		}
		if _, err := sim.ParseLatency(l.String()); err != nil {
			t.Fatalf("%q parsed, but its String %q does not: %v", s, l.String(), err)
		}
	})
}

func FuzzReadLatencySamples(f *testing.F) {
	for _, s := range []string{"1ms\n2ms\n", "# c\n\n0.5ms", "-1ms", "", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		l, err := sim.ReadLatencySamples("in", strings.NewReader(s))
		if err != nil {
			return
		}
		if l.Min < 0 || l.Mean < l.Min || l.Max < l.Mean || l.Hint() < l.Min || l.Hint() > l.Max || l.String() != "samples:in" {
			t.Fatalf("%q read as %+v (hint %v)", s, l, l.Hint())
		}
		r := rand.New(rand.NewPCG(1, 2))
		for range 10 {
			if d := l.Sample(r); d < l.Min || d > l.Max {
				t.Fatalf("%q: drew %v outside [%v, %v]", s, d, l.Min, l.Max)
			}
		}
	})
}

var (
	fuzzTrace *workload.Trace
	fuzzOwner registry.Info
)

func FuzzParseScenario(f *testing.F) {
	fuzzTrace = mustGen(f, "poisson:users=3,rate=5,duration=3s", 1)
	fuzzOwner, _ = registry.Lookup("owner")
	f.Add([]byte("detection: 1s\nevents:\n  - at: 2s\n    crash: [n1]\n  - at: 3s\n    heal: true\n"))
	f.Add([]byte("network:\n  latency: exp:2ms\n  loss: 0.5\n"))
	f.Add([]byte("events:\n  - at: 1s\n    partition: [[n0], [n1, n2]]\n"))
	f.Add([]byte("detection: 1s\ndetection_jitter: 500ms\nreconnect_interval: 5s\nevents:\n  - at: 1s\n    partition: [[n0], [n1]]\n  - at: 9s\n    heal: true\n"))
	f.Add([]byte("detection_jitter: 1h\nreconnect_interval: 0s\nevents:\n  - at: 3s\n    restart: [n2]\n"))
	f.Add([]byte("reconnect_interval: 61m\n"))
	f.Add([]byte("join_delay: 800ms\nreconnect_interval: 2s\nevents:\n  - at: 1s\n    crash: [n0]\n  - at: 2s\n    restart: [n0]\n"))
	f.Add([]byte("detection: 5s\ndetection_spacing: 3s\nevents:\n  - at: 1s\n    partition: [[n0], [n1, n2]]\n  - at: 2s\n    heal: true\n"))
	f.Add([]byte("detection_jitter: 2s\ndetection_spacing: 1s\nevents:\n  - at: 1s\n    crash: [n1, n2]\n  - at: 1500ms\n    restart: [n1]\n"))
	f.Add([]byte("detection_spacing: -1s\n"))
	f.Add([]byte("detection_spacing: 1h1s\n"))
	f.Add([]byte("events:\n  - at: 1s\n    cut: [a]\n  - at: 2s\n    heal: true\n"))
	f.Add([]byte("network:\n  wan_latency: 5ms\n  wan_loss: 0.2\n  pairs:\n    a/b: 9ms\nevents:\n  - at: 1s\n    partition: [[a], [b.n1]]\n  - at: 2s\n    crash: [b.n2]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := sim.ParseScenario(data)
		if err != nil {
			return
		}
		if s.Detection <= 0 || s.Detection > sim.MaxScenarioDelay {
			t.Fatalf("detection %v", s.Detection)
		}
		for _, d := range []time.Duration{s.DetectionJitter, s.ReconnectInterval, s.JoinDelay, s.DetectionSpacing, s.ReconnectTimeout} {
			if d < 0 || d > sim.MaxScenarioDelay {
				t.Fatalf("detection_jitter %v, reconnect_interval %v, join_delay %v, detection_spacing %v, reconnect_timeout %v: want each in [0, %v]",
					s.DetectionJitter, s.ReconnectInterval, s.JoinDelay, s.DetectionSpacing, s.ReconnectTimeout, sim.MaxScenarioDelay)
			}
		}
		for i, e := range s.Events {
			if e.At < 0 || e.At > sim.MaxScenarioTime {
				t.Fatalf("event at %v", e.At)
			}
			if i > 0 && e.At < s.Events[i-1].At {
				t.Fatal("events not sorted")
			}
			if !strings.HasSuffix(e.String(), "@"+e.At.String()) {
				t.Fatalf("event %+v prints as %q", e, e.String())
			}
		}
		// Any scenario that parses runs (or is refused with an error, e.g.
		// for a node the cluster lacks) without a panic.
		assign, _ := workload.NewAssigner("hash", 1)
		_, _ = sim.Run(fuzzTrace, sim.Config{Name: "owner", New: fuzzOwner.New, Nodes: 3, Rate: bucket.Rate{Tokens: 1, Per: time.Second},
			Burst: 2, Network: fixed(time.Millisecond), Scenario: s, Assign: assign})
		// And over two regions (a: a.n0; b: b.n1, b.n2), where events may name them.
		assign, _ = workload.NewAssigner("hash", 1)
		_, _ = sim.Run(fuzzTrace, sim.Config{Name: "owner", New: fuzzOwner.New, Nodes: 3, Rate: bucket.Rate{Tokens: 1, Per: time.Second},
			Burst: 2, Network: fixed(time.Millisecond), Scenario: s, Assign: assign,
			Regions: []topology.Region{{Name: "a", Nodes: 1}, {Name: "b", Nodes: 2}}})
	})
}

func BenchmarkStatic(b *testing.B) {
	tr := mustGen(b, "heavy:users=5000,rate=20000,duration=60s", 1)
	info, _ := registry.Lookup("static")
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		assign, _ := workload.NewAssigner("hash", 1)
		if _, err := sim.Run(tr, sim.Config{Name: "static", New: info.New, Nodes: 10, Rate: bucket.Rate{Tokens: 1, Per: time.Second},
			Burst: 10, Network: fixed(time.Millisecond), Assign: assign}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(tr.Requests))*float64(b.N)/b.Elapsed().Seconds(), "requests/s")
}

// Duplicated messages must not be decided twice: owner still matches central.
func TestOwnerExactUnderDuplication(t *testing.T) {
	tr := mustGen(t, "mix:duration=30s", 4)
	central := allowed(run(t, tr, "central", 1, fixed(time.Millisecond), nil))
	net := fixed(time.Millisecond)
	net.Duplicate = 0.3
	got := allowed(run(t, tr, "owner", 5, net, nil))
	for i := range got {
		if got[i] != central[i] {
			t.Fatalf("request %d: owner %v, central %v under 30%% duplication", i, got[i], central[i])
		}
	}
}

// Retransmissions recover lost forwards and verdicts: with 10% loss, owner
// with retries admits far fewer requests beyond central than without.
func TestOwnerRetriesUnderLoss(t *testing.T) {
	tr := mustGen(t, "heavy:users=20,rate=100,duration=30s", 4)
	central := allowed(run(t, tr, "central", 1, fixed(time.Millisecond), nil))
	net := fixed(time.Millisecond)
	net.Loss = 0.1
	excess := func(params ...string) int {
		got := allowed(run(t, tr, "owner", 5, net, nil, params...))
		return eval.Compare(tr.Requests, got, central).ExcessAdmitted
	}
	// on_timeout=admit: every lost attempt becomes an uncharged admission,
	// so the excess counts what retries did not recover.
	none, some := excess("retries=0", "on_timeout=admit"), excess("on_timeout=admit")
	if none == 0 || some*5 > none {
		t.Fatalf("excess tokens with no retries %d, with 2 retries %d: want retries to cut it at least 5x", none, some)
	}
}

func BenchmarkOwner(b *testing.B) {
	tr := mustGen(b, "heavy:users=5000,rate=20000,duration=10s", 1)
	info, _ := registry.Lookup("owner")
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		assign, _ := workload.NewAssigner("hash", 1)
		if _, err := sim.Run(tr, sim.Config{Name: "owner", New: info.New, Nodes: 10, Rate: bucket.Rate{Tokens: 1, Per: time.Second},
			Burst: 10, Network: fixed(time.Millisecond), Assign: assign}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(tr.Requests))*float64(b.N)/b.Elapsed().Seconds(), "requests/s")
}

// localShare is the fraction of res's requests decided locally.
func localShare(res *sim.Result) float64 {
	n := 0
	for _, o := range res.Outcomes {
		if o.Decided && o.Local {
			n++
		}
	}
	return float64(n) / float64(len(res.Outcomes))
}

// Outcome.Local: static decides everything at once; owner decides locally
// only what reaches the key's owner (about 1/N of the requests, through its
// ordering buffer, at a wake-up), and the rest on the owner's verdict.
func TestLocalDecisions(t *testing.T) {
	tr := mustGen(t, "poisson:users=200,rate=1,duration=20s", 2)
	if got := localShare(run(t, tr, "static", 4, fixed(time.Millisecond), nil)); got != 1 {
		t.Fatalf("static: local share %v, want 1", got)
	}
	info, _ := registry.Lookup("owner")
	res := simtest.Run(t, tr, "owner", info.New, simtest.Options{Nodes: 4, Net: fixed(time.Millisecond), Assign: "roundrobin"})
	if got := localShare(res); got < 0.2 || got > 0.3 {
		t.Fatalf("owner over 4 nodes, round-robin: local share %v, want about 1/4", got)
	}
	for i, o := range res.Outcomes {
		if o.Local && o.Latency > time.Millisecond { // hold = the 1ms latency
			t.Fatalf("request %d decided locally after %v", i, o.Latency)
		}
	}
}

// sim.Config.EdgeTimes: owner (a strategy.ArrivalOrderer) decides a key's
// requests in the order of their edge times, here the reverse of the order
// they reached the nodes; without edge times, and under local, the first to
// reach a node takes the key's one token. A length that does not match the
// trace is an error.
func TestEdgeTimesOrderOwner(t *testing.T) {
	ms := time.Millisecond
	// Delivered at 10 ms (B, edge 9 ms) and 11 ms (A, edge 0): A reached
	// the edge first.
	tr := &workload.Trace{Name: "edge", Requests: []workload.Request{{Arrival: 10 * ms, Key: "k", Tokens: 1}, {Arrival: 11 * ms, Key: "k", Tokens: 1}}}
	edge := []time.Duration{9 * ms, 0}
	for _, tc := range []struct {
		name  string
		edge  []time.Duration
		want  []bool
		strat string
	}{
		{"owner, edge times", edge, []bool{false, true}, "owner"},
		{"owner, no edge times", nil, []bool{true, false}, "owner"},
		{"static on one node ignores edge times", edge, []bool{true, false}, "static"},
	} {
		info, err := registry.Lookup(tc.strat)
		if err != nil {
			t.Fatal(err)
		}
		assign, _ := workload.NewAssigner("roundrobin", 1)
		res, err := sim.Run(tr, sim.Config{Name: tc.strat, New: info.New, Nodes: 1, Rate: bucket.Rate{Tokens: 1, Per: time.Hour}, Burst: 1,
			Params: mustParams(t, "hold=20ms", tc.strat), Network: fixed(ms), Assign: assign, EdgeTimes: tc.edge})
		if err != nil {
			t.Fatal(err)
		}
		if got := allowed(res); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: allowed %v, want %v", tc.name, got, tc.want)
		}
	}
	info, _ := registry.Lookup("owner")
	assign, _ := workload.NewAssigner("hash", 1)
	if _, err := sim.Run(tr, sim.Config{Name: "owner", New: info.New, Nodes: 1, Rate: bucket.Rate{Tokens: 1, Per: time.Second}, Burst: 1,
		Network: fixed(ms), Assign: assign, EdgeTimes: edge[:1]}); err == nil || !strings.Contains(err.Error(), "1 edge times for 2 requests") {
		t.Errorf("one edge time for two requests: %v, want an error", err)
	}
}

// mustParams is params for strategy strat: only owner takes hold here.
func mustParams(t *testing.T, hold, strat string) strategy.Params {
	t.Helper()
	if strat != "owner" {
		return strategy.Params{}
	}
	p, err := strategy.ParseParams([]string{hold})
	if err != nil {
		t.Fatal(err)
	}
	return p
}
