package sim_test

import (
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/sim"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/workload"
)

// viewCall is one SetMembers call a node's strategy received.
type viewCall struct {
	at      time.Duration
	members []strategy.NodeID
}

// receipt is one peer message a node's strategy received.
type receipt struct {
	at   time.Duration
	from strategy.NodeID
}

// recorder is a strategy that admits everything, sends a ping to every node
// of the cluster (its view or not) every pingEvery, and records the
// SetMembers calls and the pings it receives, per node name and across
// restarts.
type recorder struct {
	self      strategy.NodeID
	all       []strategy.NodeID
	pingEvery time.Duration
	log       *viewLog
}

type viewLog struct {
	views    map[strategy.NodeID][]viewCall
	received map[strategy.NodeID][]receipt
	starts   map[strategy.NodeID][]viewCall // the Members of each Config a node was built with
}

func (s *recorder) Start(now time.Duration, fx *strategy.Effects) {
	if s.pingEvery > 0 {
		fx.WakeAt(now + s.pingEvery)
	}
}

func (s *recorder) Request(now time.Duration, req strategy.Request, fx *strategy.Effects) (strategy.Decision, bool) {
	return strategy.Decision{RequestID: req.ID, Allowed: true}, true
}

func (s *recorder) Receive(now time.Duration, from strategy.NodeID, payload []byte, fx *strategy.Effects) error {
	s.log.received[s.self] = append(s.log.received[s.self], receipt{now, from})
	return nil
}

func (s *recorder) Tick(now time.Duration, fx *strategy.Effects) {
	for _, to := range s.all {
		if to != s.self {
			fx.Send(to, []byte("ping"))
		}
	}
	fx.WakeAt(now + s.pingEvery)
}

func (s *recorder) SetMembers(now time.Duration, members []strategy.NodeID, fx *strategy.Effects) {
	s.log.views[s.self] = append(s.log.views[s.self], viewCall{now, members})
}

func (s *recorder) StateBytes() int { return 0 }

// runViews runs the recorder over nodes nodes and a quiet 60 s workload
// under the scenario text (YAML), and returns what the nodes saw.
func runViews(t *testing.T, nodes int, scenario string, seed uint64, pingEvery time.Duration) (*viewLog, *sim.Result) {
	t.Helper()
	sc, err := sim.ParseScenario([]byte(scenario))
	if err != nil {
		t.Fatal(err)
	}
	log := &viewLog{views: map[strategy.NodeID][]viewCall{}, received: map[strategy.NodeID][]receipt{}, starts: map[strategy.NodeID][]viewCall{}}
	var all []strategy.NodeID
	for i := 0; i < nodes; i++ {
		all = append(all, strategy.NodeID(fmt.Sprintf("n%d", i)))
	}
	factory := func(cfg strategy.Config) (strategy.Strategy, error) {
		log.starts[cfg.Self] = append(log.starts[cfg.Self], viewCall{members: cfg.Members})
		return &recorder{self: cfg.Self, all: all, pingEvery: pingEvery, log: log}, nil
	}
	assign, err := workload.NewAssigner("hash", seed)
	if err != nil {
		t.Fatal(err)
	}
	res, err := sim.Run(mustGen(t, "poisson:users=5,rate=1,duration=60s", seed), sim.Config{
		Name: "recorder", New: factory, Nodes: nodes, Rate: bucket.Rate{Tokens: 1, Per: time.Second}, Burst: 1,
		Network: fixed(time.Millisecond), Scenario: sc, Assign: assign, Seed: seed,
	})
	if err != nil {
		t.Fatal(err)
	}
	return log, res
}

func ids(names ...string) []strategy.NodeID {
	out := make([]strategy.NodeID, len(names))
	for i, n := range names {
		out[i] = strategy.NodeID(n)
	}
	return out
}

func within(d, lo, hi time.Duration) bool { return d >= lo && d <= hi }

const partitionScenario = `
detection: 1s
detection_jitter: 500ms
reconnect_interval: 5s
events:
  - at: 10s
    partition: [[n0, n1], [n2, n3, n4]]
  - at: 30s
    heal: true
`

// During a partition each side's nodes are told only their side, each at
// its own time within [10s+1s, 10s+1.5s]; after the heal every node is
// told all five, within reconnect_interval + detection + jitter. Nothing
// else is told.
func TestPartitionSidesSeeTheirSide(t *testing.T) {
	log, _ := runViews(t, 5, partitionScenario, 3, 0)
	sideA, sideB, everyone := ids("n0", "n1"), ids("n2", "n3", "n4"), ids("n0", "n1", "n2", "n3", "n4")
	var splitTimes []time.Duration
	for i := 0; i < 5; i++ {
		self := strategy.NodeID(fmt.Sprintf("n%d", i))
		want := sideB
		if i < 2 {
			want = sideA
		}
		calls := log.views[self]
		if len(calls) != 2 {
			t.Fatalf("%s was told %d member lists, want 2 (split, merged): %v", self, len(calls), calls)
		}
		if !slices.Equal(calls[0].members, want) || !within(calls[0].at, 11*time.Second, 11500*time.Millisecond) {
			t.Errorf("%s: first view %v at %v, want %v within [11s, 11.5s]", self, calls[0].members, calls[0].at, want)
		}
		if !slices.Equal(calls[1].members, everyone) || !within(calls[1].at, 31*time.Second, 30*time.Second+5*time.Second+1500*time.Millisecond) {
			t.Errorf("%s: second view %v at %v, want all five within [31s, 36.5s]", self, calls[1].members, calls[1].at)
		}
		splitTimes = append(splitTimes, calls[0].at)
	}
	slices.Sort(splitTimes)
	if splitTimes[0] == splitTimes[len(splitTimes)-1] {
		t.Errorf("every node saw the partition at the same instant %v: the per-node jitter did nothing", splitTimes[0])
	}
}

// Messages across the cut are dropped from the instant of the partition to
// the instant of the heal (the network heals at once; only the views wait
// for a reconnect); within a side they flow throughout.
func TestPartitionCutsMessages(t *testing.T) {
	log, res := runViews(t, 5, partitionScenario, 3, 100*time.Millisecond)
	side := func(n strategy.NodeID) int {
		if n == "n0" || n == "n1" {
			return 0
		}
		return 1
	}
	across, acrossAfterHeal, within := 0, 0, 0
	for self, rs := range log.received {
		for _, r := range rs {
			switch {
			case side(r.from) == side(self):
				within++
			case r.at >= 10*time.Second && r.at < 30*time.Second:
				t.Fatalf("%s received a message from %s at %v, across the cut", self, r.from, r.at)
			case r.at >= 30*time.Second:
				acrossAfterHeal++
			default:
				across++
			}
		}
	}
	if across == 0 || acrossAfterHeal == 0 || within == 0 {
		t.Fatalf("received across the sides before the cut %d, after the heal %d, within a side %d: want all > 0", across, acrossAfterHeal, within)
	}
	if res.MessagesLost == 0 {
		t.Fatal("no message counted lost during a 20 s partition")
	}
}

// Each node sees a crash after its own delay, in [detection,
// detection+jitter], and not all at once; the restarted node knows the
// live members at once and the others see it back after their delay.
func TestCrashSeenPerNode(t *testing.T) {
	const scenario = `
detection: 2s
detection_jitter: 3s
events:
  - at: 10s
    crash: [n3]
  - at: 40s
    restart: [n3]
`
	log, res := runViews(t, 8, scenario, 5, 0)
	if !slices.Equal(res.Crashed, []string{"n3"}) {
		t.Fatalf("crashed %v", res.Crashed)
	}
	everyone := ids("n0", "n1", "n2", "n3", "n4", "n5", "n6", "n7")
	without := ids("n0", "n1", "n2", "n4", "n5", "n6", "n7")
	seen := map[time.Duration]bool{}
	for i := 0; i < 8; i++ {
		self := strategy.NodeID(fmt.Sprintf("n%d", i))
		calls := log.views[self]
		if self == "n3" {
			if len(calls) != 0 {
				t.Errorf("n3 was told %v: it was down or knew everyone from its restart", calls)
			}
			starts := log.starts["n3"]
			if len(starts) != 2 || !slices.Equal(starts[1].members, everyone) {
				t.Errorf("n3 was built with members %v, want a restart with all eight", starts)
			}
			continue
		}
		if len(calls) != 2 {
			t.Fatalf("%s was told %d member lists, want 2: %v", self, len(calls), calls)
		}
		if !slices.Equal(calls[0].members, without) || !within(calls[0].at, 12*time.Second, 15*time.Second) {
			t.Errorf("%s: saw %v at %v, want the crash of n3 within [12s, 15s]", self, calls[0].members, calls[0].at)
		}
		if !slices.Equal(calls[1].members, everyone) || !within(calls[1].at, 42*time.Second, 45*time.Second) {
			t.Errorf("%s: saw %v at %v, want n3 back within [42s, 45s]", self, calls[1].members, calls[1].at)
		}
		seen[calls[0].at] = true
	}
	if len(seen) < 4 {
		t.Errorf("7 nodes saw the crash at only %d distinct times; want per-node delays", len(seen))
	}
}

// The old form, detection alone, means what it always meant: every node
// sees every change exactly detection later, and a heal after detection.
func TestDetectionAloneIsExact(t *testing.T) {
	const scenario = `
detection: 1500ms
events:
  - at: 10s
    partition: [[n0], [n1, n2]]
  - at: 20s
    heal: true
`
	log, _ := runViews(t, 3, scenario, 1, 0)
	for self, calls := range log.views {
		if len(calls) != 2 || calls[0].at != 11500*time.Millisecond || calls[1].at != 21500*time.Millisecond {
			t.Errorf("%s: told %v, want at exactly 11.5s and 21.5s", self, calls)
		}
	}
	if len(log.views) != 3 {
		t.Fatalf("%d nodes were told anything, want 3", len(log.views))
	}
}

// A heal is seen within reconnect_interval + detection + jitter of it, and
// when within depends on the seeded reconnect phases: over seeds the first
// merge spreads over much of the reconnect interval.
func TestHealSeenAfterReconnect(t *testing.T) {
	const (
		heal      = 30 * time.Second
		detection = time.Second
		jitter    = 200 * time.Millisecond
		reconnect = 10 * time.Second
	)
	scenario := fmt.Sprintf("detection: %v\ndetection_jitter: %v\nreconnect_interval: %v\nevents:\n  - at: 10s\n    partition: [[n0, n1], [n2, n3]]\n  - at: %v\n    heal: true\n",
		detection, jitter, reconnect, heal)
	var firsts []time.Duration
	for seed := uint64(1); seed <= 12; seed++ {
		log, _ := runViews(t, 4, scenario, seed, 0)
		first := time.Duration(-1)
		for self, calls := range log.views {
			if len(calls) != 2 {
				t.Fatalf("seed %d: %s told %v, want split then merged", seed, self, calls)
			}
			at := calls[1].at
			if len(calls[1].members) != 4 || !within(at, heal+detection, heal+reconnect+detection+jitter) {
				t.Fatalf("seed %d: %s saw %v at %v, want all four within [%v, %v]", seed, self, calls[1].members, at, heal+detection, heal+reconnect+detection+jitter)
			}
			if first < 0 || at < first {
				first = at
			}
		}
		firsts = append(firsts, first)
	}
	slices.Sort(firsts)
	if spread := firsts[len(firsts)-1] - firsts[0]; spread < reconnect/3 {
		t.Fatalf("over 12 seeds the first merged view came within %v of each other (%v): the reconnect phase does not vary", spread, firsts)
	}
}

// A new partition before the reconnect attempt voids the heal's merge.
func TestRepartitionBeforeReconnect(t *testing.T) {
	const scenario = `
detection: 1s
reconnect_interval: 1h
events:
  - at: 5s
    partition: [[n0], [n1, n2]]
  - at: 10s
    heal: true
  - at: 11s
    partition: [[n0, n1], [n2]]
`
	log, _ := runViews(t, 3, scenario, 2, 0)
	want := map[strategy.NodeID][][]strategy.NodeID{
		"n0": {ids("n0"), ids("n0", "n1")},
		"n1": {ids("n1", "n2"), ids("n0", "n1")},
		"n2": {ids("n1", "n2"), ids("n2")},
	}
	for self, w := range want {
		var got [][]strategy.NodeID
		for _, c := range log.views[self] {
			got = append(got, c.members)
		}
		if !reflect.DeepEqual(got, w) {
			t.Errorf("%s was told %v, want %v", self, got, w)
		}
	}
}

// With faults, two runs with the same seed are identical; another seed
// gives other detection times.
func TestDeterministicWithFaults(t *testing.T) {
	tr := mustGen(t, "heavy:users=20,rate=100,duration=40s", 6)
	sc, err := sim.ParseScenario([]byte(`
detection: 1s
detection_jitter: 1s
reconnect_interval: 5s
network:
  latency: exp:1ms+1ms
  loss: 0.02
events:
  - at: 5s
    crash_owner_of_hottest: 1
  - at: 10s
    partition: [[n0, n1], [n2, n3, n4]]
  - at: 20s
    heal: true
  - at: 25s
    restart: [n0, n1, n2, n3, n4]
`))
	if err != nil {
		t.Fatal(err)
	}
	sameTwice(t, tr, sc, "with faults")
	if viewTimes(t, 5, partitionScenario, 1) == viewTimes(t, 5, partitionScenario, 2) {
		t.Fatal("seeds 1 and 2 gave the same detection times")
	}
}

// sameTwice fails t unless owner and gdrl, each run twice over 5 nodes
// with sc and the same seed, give identical results; what names the
// scenario in the failure.
func sameTwice(t *testing.T, tr *workload.Trace, sc *sim.Scenario, what string) {
	t.Helper()
	for _, name := range []string{"owner", "gdrl"} {
		a := run(t, tr, name, 5, fixed(time.Millisecond), sc)
		b := run(t, tr, name, 5, fixed(time.Millisecond), sc)
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("%s: two runs with the same seed and %s differ", name, what)
		}
	}
}

// viewTimes is every member list (and when it was told) nodes n0..n<nodes-1>
// of runViews saw, as text.
func viewTimes(t *testing.T, nodes int, scenario string, seed uint64) string {
	t.Helper()
	log, _ := runViews(t, nodes, scenario, seed, 0)
	var b strings.Builder
	for i := 0; i < nodes; i++ {
		fmt.Fprint(&b, log.views[strategy.NodeID(fmt.Sprintf("n%d", i))])
	}
	return b.String()
}

// Every example scenario parses; the ones with the per-node model set it.
func TestExampleScenarios(t *testing.T) {
	paths, err := filepath.Glob("../examples/scenarios/*.yaml")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no example scenarios found (%v)", err)
	}
	for _, p := range paths {
		sc, err := sim.LoadScenario(p)
		if err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		if len(sc.Events) > 0 && (sc.DetectionJitter == 0 || sc.ReconnectInterval == 0) {
			t.Errorf("%s: has events but not the per-node detection model (detection_jitter, reconnect_interval)", p)
		}
	}
}

// With join_delay, a restart and the merge after a heal reach each node by
// gossip within [0, join_delay] (after the reconnect for a heal), while
// failures keep the detector's delay.
func TestJoinDelay(t *testing.T) {
	const scenario = `
detection: 4s
detection_jitter: 1s
join_delay: 600ms
reconnect_interval: 3s
events:
  - at: 10s
    crash: [n1]
  - at: 20s
    restart: [n1]
  - at: 30s
    partition: [[n0, n1], [n2, n3]]
  - at: 40s
    heal: true
`
	log, _ := runViews(t, 4, scenario, 9, 0)
	ms := time.Millisecond
	bounds := map[int][2]time.Duration{ // by the index of the view change
		0: {14 * time.Second, 15 * time.Second},        // crash of n1: failure
		1: {20 * time.Second, 20*time.Second + 600*ms}, // restart: join
		2: {34 * time.Second, 35 * time.Second},        // partition: failure
		3: {40 * time.Second, 43*time.Second + 600*ms}, // heal: reconnect + join
	}
	for _, self := range ids("n0", "n2", "n3") {
		calls := log.views[self]
		if len(calls) != 4 {
			t.Fatalf("%s told %v, want 4 changes", self, calls)
		}
		for k, c := range calls {
			if !within(c.at, bounds[k][0], bounds[k][1]) {
				t.Errorf("%s: change %d (%v) at %v, want within %v", self, k, c.members, c.at, bounds[k])
			}
		}
	}
}
