package sim_test

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/eval"
	"github.com/tokenmesh/tokenmesh/sim"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/registry"
	"github.com/tokenmesh/tokenmesh/workload"
)

// conserveStrategies are the strategies that implement partition: conserve.
var conserveStrategies = []string{"static", "adaptive", "gdrl", "gcounter", "tbqueue", "owner", "lease"}

// splitRun is one partition scenario of the property test.
type splitRun struct {
	strategy        string
	nodes           int
	side            []int // node indices of the first side; the rest is the second
	ratePerS, burst int64
	keys            int
	split, heal     time.Duration
	detection       time.Duration
	jitter          time.Duration
	seed            uint64
}

func (s splitRun) scenario() string {
	var a, b []string
	for i := 0; i < s.nodes; i++ {
		if slices.Contains(s.side, i) {
			a = append(a, fmt.Sprintf("n%d", i))
		} else {
			b = append(b, fmt.Sprintf("n%d", i))
		}
	}
	return fmt.Sprintf("detection: %v\ndetection_jitter: %v\nreconnect_interval: 2s\njoin_delay: 200ms\nevents:\n  - at: %v\n    partition: [[%s], [%s]]\n  - at: %v\n    heal: true\n",
		s.detection, s.jitter, s.split, strings.Join(a, ", "), strings.Join(b, ", "), s.heal)
}

// trace offers every key about 3 times its rate, at times drawn from the
// seed, over [0, end).
func (s splitRun) trace(end time.Duration) *workload.Trace {
	g := rapidGen{state: s.seed*2654435761 + 1}
	var reqs []workload.Request
	for k := 0; k < s.keys; k++ {
		n := int(3 * s.ratePerS * int64(end/time.Second))
		for i := 0; i < n; i++ {
			reqs = append(reqs, workload.Request{Arrival: time.Duration(g.next() % uint64(end/time.Millisecond) * uint64(time.Millisecond)),
				Key: fmt.Sprintf("k%d", k), Tokens: 1})
		}
	}
	slices.SortStableFunc(reqs, func(a, b workload.Request) int { return cmp.Compare(a.Arrival, b.Arrival) }) // equal arrivals keep their order
	return &workload.Trace{Name: "split", Requests: reqs}
}

// rapidGen is a small deterministic generator (splitmix64).
type rapidGen struct{ state uint64 }

func (g *rapidGen) next() uint64 {
	g.state += 0x9e3779b97f4a7c15
	z := g.state
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// run simulates s with the partition mode given as the generic parameter
// (as --param s.partition=mode does) and returns the trace and outcomes.
func (s splitRun) run(t *rapid.T, mode string) (*workload.Trace, *sim.Result) {
	info, err := registry.Lookup(s.strategy)
	if err != nil {
		t.Fatal(err)
	}
	sc, err := sim.ParseScenario([]byte(s.scenario()))
	if err != nil {
		t.Fatal(err)
	}
	params, err := strategy.ParseParams([]string{"partition=" + mode})
	if err != nil {
		t.Fatal(err)
	}
	assign, err := workload.NewAssigner("random", s.seed)
	if err != nil {
		t.Fatal(err)
	}
	tr := s.trace(s.heal + 10*time.Second)
	res, err := sim.Run(tr, sim.Config{Name: s.strategy, New: info.New, Nodes: s.nodes,
		Rate: bucket.Rate{Tokens: s.ratePerS, Per: time.Second}, Burst: s.burst, Params: params,
		Network: fixed(time.Millisecond), Scenario: sc, Assign: assign, Seed: s.seed})
	if err != nil {
		t.Fatal(err)
	}
	return tr, res
}

// admittedIn is the tokens admitted per key for requests arriving in
// [from, to).
func admittedIn(tr *workload.Trace, res *sim.Result, from, to time.Duration) map[string]int64 {
	out := map[string]int64{}
	for i, r := range tr.Requests {
		if r.Arrival >= from && r.Arrival < to && res.Outcomes[i].Allowed {
			out[r.Key] += r.Tokens
		}
	}
	return out
}

func drawSplit(t *rapid.T) splitRun {
	nodes := rapid.IntRange(2, 5).Draw(t, "nodes")
	perm := rapid.Permutation(seq(nodes)).Draw(t, "perm")
	cut := rapid.IntRange(1, nodes-1).Draw(t, "cut")
	split := time.Duration(rapid.IntRange(5, 15).Draw(t, "split_s")) * time.Second
	return splitRun{
		strategy:  rapid.SampledFrom(conserveStrategies).Draw(t, "strategy"),
		nodes:     nodes,
		side:      perm[:cut],
		ratePerS:  int64(rapid.IntRange(1, 5).Draw(t, "rate")),
		burst:     int64(rapid.IntRange(1, 20).Draw(t, "burst")),
		keys:      rapid.IntRange(1, 3).Draw(t, "keys"),
		split:     split,
		heal:      split + time.Duration(rapid.IntRange(10, 30).Draw(t, "split_len_s"))*time.Second,
		detection: time.Duration(rapid.IntRange(500, 3000).Draw(t, "detection_ms")) * time.Millisecond,
		jitter:    time.Duration(rapid.IntRange(0, 1000).Draw(t, "jitter_ms")) * time.Millisecond,
		seed:      rapid.Uint64().Draw(t, "seed"),
	}
}

func seq(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// TestConserveSplitWithinEnvelope: with partition: conserve, once every
// node has seen the partition (detection + jitter after it, each node on
// its own schedule), the tokens admitted per key until the heal, summed
// over both sides, stay within b + r*T + 1 for a window of T. Under
// available the same runs exceed it (checked in aggregate, so the test
// can fail if conserve changes nothing). static, adaptive and gdrl never
// borrow across the cut, so for them the window starts at the partition
// itself; gcounter and tbqueue replicate one bucket, and a node that has
// not yet seen the split admits at full scale (the documented bound);
// owner's nodes forward across the cut until they see it (their
// on_timeout=local fallback splits over N, but the owner on the other
// side has the whole bucket until it sees the split).
func TestConserveSplitWithinEnvelope(t *testing.T) {
	exceededAvailable := 0
	rapid.Check(t, func(t *rapid.T) {
		s := drawSplit(t)
		from := s.split + s.detection + s.jitter
		if s.strategy == "static" || s.strategy == "adaptive" || s.strategy == "gdrl" {
			from = s.split
		}
		T := s.heal - from
		bound := s.burst + int64(float64(s.ratePerS)*T.Seconds()) + 1
		tr, res := s.run(t, "conserve")
		for key, got := range admittedIn(tr, res, from, s.heal) {
			if got > bound {
				t.Fatalf("%s, %d nodes, side %v, r=%d b=%d: key %s admitted %d tokens in [%v, %v), above b + r*T + 1 = %d",
					s.strategy, s.nodes, s.side, s.ratePerS, s.burst, key, got, from, s.heal, bound)
			}
		}
		tr, res = s.run(t, "available")
		for _, got := range admittedIn(tr, res, from, s.heal) {
			if got > bound {
				exceededAvailable++
				break
			}
		}
	})
	if exceededAvailable == 0 {
		t.Errorf("no run exceeded b + r*T + 1 under available: the test does not tell the modes apart")
	}
}

// The partition mode is parsed from the generic parameter, and a bad value
// or a strategy without conserve is refused with an error naming it.
func TestPartitionParam(t *testing.T) {
	tr := mustGen(t, "poisson:users=5,rate=1,duration=5s", 1)
	assign, err := workload.NewAssigner("hash", 1)
	if err != nil {
		t.Fatal(err)
	}
	runWith := func(name, param string) error {
		info, err := registry.Lookup(name)
		if err != nil {
			t.Fatal(err)
		}
		params, err := strategy.ParseParams([]string{param})
		if err != nil {
			t.Fatal(err)
		}
		_, err = sim.Run(tr, sim.Config{Name: name, New: info.New, Nodes: 3, Rate: bucket.Rate{Tokens: 1, Per: time.Second},
			Burst: 5, Params: params, Network: fixed(time.Millisecond), Assign: assign, Seed: 1})
		return err
	}
	for _, name := range conserveStrategies {
		for _, p := range []string{"partition=conserve", "partition=available"} {
			if err := runWith(name, p); err != nil {
				t.Errorf("%s with %s: %v", name, p, err)
			}
		}
		err := runWith(name, "partition=maybe")
		if err == nil || !strings.Contains(err.Error(), `partition="maybe"`) || !strings.Contains(err.Error(), "available or conserve") {
			t.Errorf("%s with partition=maybe: got %v, want an error naming the value and the choices", name, err)
		}
	}
	for _, name := range []string{"local"} {
		err := runWith(name, "partition=conserve")
		if err == nil || !strings.Contains(err.Error(), "does not implement partition: conserve") {
			t.Errorf("%s with partition=conserve: got %v, want a refusal", name, err)
		}
		if err := runWith(name, "partition=available"); err != nil {
			t.Errorf("%s with partition=available: %v", name, err)
		}
	}
}

// expectRecorder is recorder that also records SetExpected.
type expectRecorder struct {
	recorder
	expected map[strategy.NodeID][]viewCall
}

func (s *expectRecorder) SetExpected(now time.Duration, expected []strategy.NodeID, fx *strategy.Effects) {
	s.expected[s.self] = append(s.expected[s.self], viewCall{now, expected})
}

// A crashed node stays expected by the survivors until reconnect_timeout
// after each lost it, then is dropped; its restart makes it expected again
// (it is in the view); the restarted node starts with its view.
func TestExpectedMembersInSim(t *testing.T) {
	sc, err := sim.ParseScenario([]byte("detection: 1s\nreconnect_timeout: 5s\nevents:\n  - at: 10s\n    crash: [n2]\n  - at: 30s\n    restart: [n2]\n"))
	if err != nil {
		t.Fatal(err)
	}
	log := &viewLog{views: map[strategy.NodeID][]viewCall{}, received: map[strategy.NodeID][]receipt{}, starts: map[strategy.NodeID][]viewCall{}}
	expected := map[strategy.NodeID][]viewCall{}
	factory := func(cfg strategy.Config) (strategy.Strategy, error) {
		return &expectRecorder{recorder: recorder{self: cfg.Self, log: log}, expected: expected}, nil
	}
	assign, err := workload.NewAssigner("hash", 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sim.Run(mustGen(t, "poisson:users=5,rate=1,duration=60s", 1), sim.Config{
		Name: "recorder", New: factory, Nodes: 3, Rate: bucket.Rate{Tokens: 1, Per: time.Second}, Burst: 1,
		Network: fixed(time.Millisecond), Scenario: sc, Assign: assign, Seed: 1,
	}); err != nil {
		t.Fatal(err)
	}
	want := []viewCall{{16 * time.Second, ids("n0", "n1")}, {31 * time.Second, ids("n0", "n1", "n2")}}
	for _, n := range ids("n0", "n1") {
		got := expected[n]
		if len(got) != len(want) {
			t.Fatalf("%s: SetExpected calls %v, want %v", n, got, want)
		}
		for i := range want {
			if got[i].at != want[i].at || !slices.Equal(got[i].members, want[i].members) {
				t.Errorf("%s: SetExpected call %d = %v, want %v", n, i, got[i], want[i])
			}
		}
	}
	if got := expected["n2"]; len(got) != 0 {
		t.Errorf("n2 (restarted with its view) was told %v", got)
	}
}

// TestConserveOwnerWholeRun: owner and lease under partition: conserve
// (their default on_timeout=reject there) keep every key within b + r*T + 1 in every
// window of the whole run, the cut's detection and the heal included: no
// fallback admits while the cut is undetected, a key the side has no
// level for starts empty at the cut, and the heal's merge starts from
// what the sides had left of their shares (strategy/owner conserve.go).
// Before those, the partition-3nodes scenario on wrccdc went 5.5 tokens
// over, and issue 28's live run up to 7.
func TestConserveOwnerWholeRun(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := drawSplit(t)
		s.strategy = rapid.SampledFrom([]string{"owner", "lease"}).Draw(t, "whole_run_strategy")
		if s.strategy == "lease" && rapid.Bool().Draw(t, "hot") {
			// hot enough that holders take leases (min_lease 4 tokens a
			// period of 250 ms), and hold some across the cut
			s.ratePerS = int64(rapid.IntRange(20, 60).Draw(t, "hot_rate"))
		}
		tr, res := s.run(t, "conserve")
		byKey := map[string][]int{}
		for i, r := range tr.Requests {
			byKey[r.Key] = append(byKey[r.Key], i)
		}
		for key, idx := range byKey {
			reqs := make([]workload.Request, len(idx))
			allowed := make([]bool, len(idx))
			for j, i := range idx {
				reqs[j], allowed[j] = tr.Requests[i], res.Outcomes[i].Decided && res.Outcomes[i].Allowed
			}
			if v := eval.EnvelopeViolation(reqs, allowed, float64(s.ratePerS), s.burst); v > 1 {
				t.Fatalf("%s, %d nodes, side %v, r=%d b=%d, split [%v, %v), detection %v + %v: key %s exceeded b + r*T by %.3f tokens in some window (bound 1)",
					s.strategy, s.nodes, s.side, s.ratePerS, s.burst, s.split, s.heal, s.detection, s.jitter, key, v)
			}
		}
	})
}
