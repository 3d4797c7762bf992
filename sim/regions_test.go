package sim_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/sim"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/topology"
	"github.com/tokenmesh/tokenmesh/workload"
)

// relay is a test strategy whose requests name the path of their
// messages: the key "R>A,B" is received by node index R (receiverAssign),
// which sends it to node A, which passes it on to B, which answers R
// directly; R then admits it. The key "R>" is admitted at once. It makes
// every decision's wait hand-computable.
type relay struct{ self strategy.NodeID }

func newRelay(cfg strategy.Config) (strategy.Strategy, error) { return &relay{self: cfg.Self}, nil }

func (*relay) Start(time.Duration, *strategy.Effects) {}
func (*relay) Tick(time.Duration, *strategy.Effects)  {}
func (*relay) SetMembers(time.Duration, []strategy.NodeID, *strategy.Effects) {
}
func (*relay) StateBytes() int { return 0 }

func (r *relay) Request(_ time.Duration, req strategy.Request, fx *strategy.Effects) (strategy.Decision, bool) {
	_, path, _ := strings.Cut(req.Key, ">")
	if path == "" {
		return strategy.Decision{RequestID: req.ID, Allowed: true}, true
	}
	hops := strings.Split(path, ",")
	// q|id|origin|rest...
	fx.Send(strategy.NodeID(hops[0]), []byte("q|"+strconv.FormatUint(req.ID, 10)+"|"+string(r.self)+"|"+strings.Join(hops[1:], ",")))
	return strategy.Decision{}, false
}

func (r *relay) Receive(_ time.Duration, _ strategy.NodeID, payload []byte, fx *strategy.Effects) error {
	parts := strings.Split(string(payload), "|")
	switch parts[0] {
	case "a":
		id, err := strconv.ParseUint(parts[1], 10, 64)
		if err != nil {
			return err
		}
		fx.Decide(id, true)
	case "q":
		id, origin, rest := parts[1], parts[2], parts[3]
		if rest == "" {
			fx.Send(strategy.NodeID(origin), []byte("a|"+id))
			return nil
		}
		hops := strings.Split(rest, ",")
		fx.Send(strategy.NodeID(hops[0]), []byte("q|"+id+"|"+origin+"|"+strings.Join(hops[1:], ",")))
	default:
		return fmt.Errorf("bad payload %q", payload)
	}
	return nil
}

// receiverAssign sends a request with key "R>..." to node index R (all
// nodes are up in these tests).
type receiverAssign struct{}

func (receiverAssign) Assign(req *workload.Request, _ int, _ int) int {
	r, _, _ := strings.Cut(req.Key, ">")
	n, _ := strconv.Atoi(r)
	return n
}

func regionNet(lan, wan time.Duration) sim.Network {
	n := fixed(lan)
	n.WANLatency = sim.Latency{Kind: "fixed", Min: wan, Max: wan, Mean: wan}
	return n
}

func relayConfig(regions []topology.Region, net sim.Network) sim.Config {
	return sim.Config{Name: "relay", New: newRelay, Nodes: topology.Nodes(regions), Rate: bucket.Rate{Tokens: 1, Per: time.Second},
		Burst: 1, Network: net, Assign: receiverAssign{}, Seed: 1, Regions: regions}
}

func relayTrace(keys ...string) *workload.Trace {
	tr := &workload.Trace{Name: "relay"}
	for i, k := range keys {
		tr.Requests = append(tr.Requests, workload.Request{Arrival: time.Duration(i) * time.Second, Key: k, Tokens: 1})
	}
	return tr
}

var euUS = []topology.Region{{Name: "eu", Nodes: 2}, {Name: "us", Nodes: 2}}

// A message within a region takes --latency, one between regions the WAN
// latency; a decision is local, within the region or across the WAN by
// the messages it waited for, a WAN hop early in the chain included; the
// WAN bytes are those of the messages between regions.
func TestRegionLinkLatencies(t *testing.T) {
	tr := relayTrace("0>", "0>eu.n1", "0>us.n2", "0>us.n2,eu.n1", "3>us.n2")
	res, err := sim.Run(tr, relayConfig(euUS, regionNet(time.Millisecond, 50*time.Millisecond)))
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		lat        time.Duration
		local, wan bool
	}{
		{0, true, false},                     // at once
		{2 * time.Millisecond, false, false}, // eu.n0 -> eu.n1 -> eu.n0
		{100 * time.Millisecond, false, true},
		{101 * time.Millisecond, false, true}, // eu.n0 -> us.n2 -> eu.n1 -> eu.n0: the last hop is in eu, the chain crossed
		{2 * time.Millisecond, false, false},  // us.n3 -> us.n2 -> us.n3
	}
	for i, w := range want {
		o := res.Outcomes[i]
		if !o.Decided || o.Latency != w.lat || o.Local != w.local || o.WAN != w.wan {
			t.Errorf("request %d (%s): %+v, want latency %v local %v wan %v", i, tr.Requests[i].Key, o, w.lat, w.local, w.wan)
		}
	}
	// WAN messages: 0>us.n2 (2), the chain's eu.n0->us.n2 and us.n2->eu.n1 (2).
	if res.WANMessages != 4 || res.Messages != 9 {
		t.Errorf("messages %d, WAN %d; want 9 and 4", res.Messages, res.WANMessages)
	}
	wanBytes := int64(len("q|2|eu.n0|") + len("a|2") + len("q|3|eu.n0|eu.n1") + len("q|3|eu.n0|"))
	if res.WANBytes != wanBytes {
		t.Errorf("WAN bytes %d, want %d", res.WANBytes, wanBytes)
	}
}

// Without regions the run is the one before regions existed: node names
// n0.., one link class, no WAN outcome.
func TestNoRegionsOneLinkClass(t *testing.T) {
	tr := relayTrace("0>", "0>n1", "2>n1,n0")
	cfg := relayConfig(nil, fixed(3*time.Millisecond))
	cfg.Nodes = 3
	res, err := sim.Run(tr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i, lat := range []time.Duration{0, 6 * time.Millisecond, 9 * time.Millisecond} {
		if o := res.Outcomes[i]; o.Latency != lat || o.WAN {
			t.Errorf("request %d: %+v, want latency %v, not WAN", i, o, lat)
		}
	}
	if res.WANMessages != 0 || res.WANBytes != 0 {
		t.Errorf("WAN messages %d bytes %d without regions", res.WANMessages, res.WANBytes)
	}
}

// WANLoss applies to messages between regions only, Loss within.
func TestRegionLossPerLinkClass(t *testing.T) {
	var keys []string
	for range 200 {
		keys = append(keys, "0>eu.n1", "0>us.n2")
	}
	net := regionNet(time.Millisecond, 10*time.Millisecond)
	net.WANLoss = 1
	res, err := sim.Run(relayTrace(keys...), relayConfig(euUS, net))
	if err != nil {
		t.Fatal(err)
	}
	for i, o := range res.Outcomes {
		if o.Decided != (i%2 == 0) {
			t.Fatalf("request %d (%s): decided %v with the WAN losing everything and the LAN nothing", i, keys[i], o.Decided)
		}
	}
}

// Network.Pairs overrides the WAN latency for one pair, in both
// directions; a pair that names an unknown region is an error.
func TestRegionPairs(t *testing.T) {
	regions := []topology.Region{{Name: "eu", Nodes: 1}, {Name: "us", Nodes: 1}, {Name: "ap", Nodes: 1}}
	net := regionNet(time.Millisecond, 50*time.Millisecond)
	net.Pairs = map[string]sim.Latency{"ap/eu": {Kind: "fixed", Min: 120 * time.Millisecond, Max: 120 * time.Millisecond, Mean: 120 * time.Millisecond}}
	res, err := sim.Run(relayTrace("0>us.n1", "0>ap.n2", "2>eu.n0", "1>ap.n2"), relayConfig(regions, net))
	if err != nil {
		t.Fatal(err)
	}
	for i, lat := range []time.Duration{100, 240, 240, 100} {
		if got := res.Outcomes[i].Latency; got != lat*time.Millisecond {
			t.Errorf("request %d: latency %v, want %v ms", i, got, lat)
		}
	}
	net.Pairs = map[string]sim.Latency{"eu/mars": net.Latency}
	if _, err := sim.Run(relayTrace("0>"), relayConfig(regions, net)); err == nil || !strings.Contains(err.Error(), `"eu/mars"`) {
		t.Fatalf("unknown region in a pair: %v", err)
	}
}

// A scenario's `cut: [us]` drops the messages between us and the other
// regions, not those within a region, and each side's views lose the
// other; `heal: true` lets them through again.
func TestRegionCutAndHeal(t *testing.T) {
	sc, err := sim.ParseScenario([]byte("detection: 500ms\nevents:\n  - at: 10s\n    cut: [us]\n  - at: 20s\n    heal: true\n"))
	if err != nil {
		t.Fatal(err)
	}
	// Requests at 0..29 s, every second: 0>us.n2 crosses, 0>eu.n1 and 3>us.n2 do not.
	var keys []string
	for i := range 30 {
		keys = append(keys, []string{"0>us.n2", "0>eu.n1", "3>us.n2"}[i%3])
	}
	tr := relayTrace(keys...)
	cfg := relayConfig(euUS, regionNet(time.Millisecond, 50*time.Millisecond))
	cfg.Scenario = sc
	w, err := sim.NewWorld(tr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	w.RunUntil(15 * time.Second)
	if got, want := w.View("eu.n0"), []strategy.NodeID{"eu.n0", "eu.n1"}; !slices.Equal(got, want) {
		t.Errorf("eu.n0's view during the cut: %v, want %v", got, want)
	}
	if got, want := w.View("us.n3"), []strategy.NodeID{"us.n2", "us.n3"}; !slices.Equal(got, want) {
		t.Errorf("us.n3's view during the cut: %v, want %v", got, want)
	}
	res := w.Finish()
	for i, o := range res.Outcomes {
		crosses := tr.Requests[i].Key == "0>us.n2"
		cut := tr.Requests[i].Arrival >= 10*time.Second && tr.Requests[i].Arrival < 20*time.Second
		if o.Decided == (crosses && cut) {
			t.Errorf("request %d (%s at %v): decided %v", i, tr.Requests[i].Key, tr.Requests[i].Arrival, o.Decided)
		}
	}
	if w.View("eu.n0") == nil || len(w.View("eu.n0")) != 4 {
		t.Errorf("eu.n0's view after the heal: %v", w.View("eu.n0"))
	}
}

// World.Cut is the scenario's cut; a partition group may name regions.
func TestRegionWorldCutAndPartitionByRegion(t *testing.T) {
	regions := []topology.Region{{Name: "eu", Nodes: 2}, {Name: "us", Nodes: 1}, {Name: "ap", Nodes: 1}}
	tr := relayTrace("0>", "0>")
	w, err := sim.NewWorld(tr, relayConfig(regions, regionNet(time.Millisecond, 5*time.Millisecond)))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Cut("ap"); err != nil {
		t.Fatal(err)
	}
	w.RunUntil(5 * time.Second)
	if got, want := w.View("eu.n0"), []strategy.NodeID{"eu.n0", "eu.n1", "us.n2"}; !slices.Equal(got, want) {
		t.Errorf("after cut ap: eu.n0 sees %v, want %v", got, want)
	}
	if err := w.Partition([]string{"eu"}, []string{"us", "ap.n3"}); err != nil {
		t.Fatal(err)
	}
	w.RunUntil(10 * time.Second)
	if got, want := w.View("us.n2"), []strategy.NodeID{"ap.n3", "us.n2"}; !slices.Equal(got, want) {
		t.Errorf("after partition [eu] [us, ap.n3]: us.n2 sees %v, want %v", got, want)
	}
	for _, tc := range []struct {
		err  func() error
		want string
	}{
		{func() error { return w.Cut("mars") }, `unknown region "mars"`},
		{func() error { return w.Cut("eu", "eu") }, "listed twice"},
		{func() error { return w.Partition([]string{"eu"}, []string{"eu.n1"}) }, "eu.n1 is in two partition groups"},
		{func() error { return w.Crash("n0") }, `unknown node "n0" (the cluster has eu.n0..ap.n3; regions eu, us, ap)`},
	} {
		if err := tc.err(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("got %v, want an error with %q", err, tc.want)
		}
	}
}

// Scenario errors of regions: a cut in a cluster without regions, an
// unknown region, counts that do not sum to the nodes.
func TestRegionScenarioErrors(t *testing.T) {
	sc, err := sim.ParseScenario([]byte("events:\n  - at: 1s\n    cut: [ap]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := sc.Events[0].Action(); got != "cut ap" {
		t.Errorf("Action %q", got)
	}
	cfg := relayConfig(nil, fixed(time.Millisecond))
	cfg.Nodes, cfg.Scenario = 2, sc
	if _, err := sim.Run(relayTrace("0>"), cfg); err == nil || !strings.Contains(err.Error(), "cluster has none (--regions)") {
		t.Errorf("cut without regions: %v", err)
	}
	cfg = relayConfig(euUS, fixed(time.Millisecond))
	cfg.Scenario = sc
	if _, err := sim.Run(relayTrace("0>"), cfg); err == nil || !strings.Contains(err.Error(), `unknown region "ap" (the regions are eu, us)`) {
		t.Errorf("cut of an unknown region: %v", err)
	}
	cfg = relayConfig(euUS, fixed(time.Millisecond))
	cfg.Nodes = 5
	if _, err := sim.Run(relayTrace("0>"), cfg); err == nil || !strings.Contains(err.Error(), "have 4 nodes, the cluster 5") {
		t.Errorf("counts that do not sum: %v", err)
	}
	if _, err := sim.ParseScenario([]byte("events:\n  - at: 1s\n    cut: [ap]\n    heal: true\n")); err == nil {
		t.Error("cut and heal in one event: no error")
	}
	sc, err = sim.ParseScenario([]byte("network:\n  wan_latency: exp:60ms+20ms\n  wan_loss: 0.02\n  pairs:\n    eu/us: 90ms\n"))
	if err != nil {
		t.Fatal(err)
	}
	var n sim.Network
	n.Latency = fixed(time.Millisecond).Latency
	if err := sc.ApplyNetwork(&n); err != nil || n.WANLatency.String() != "exp:60ms+20ms" || n.WANLoss != 0.02 || n.Pairs["eu/us"].String() != "90ms" {
		t.Errorf("scenario network: %+v, %v", n, err)
	}
	if _, err := sim.ParseScenario([]byte("network:\n  wan_lost: 0.02\n")); err == nil {
		t.Error("unknown network field: no error")
	}
}

// A trace that follows the sun offers key k (k-th in sorted order) in
// region (k + floor(t / follow)) mod R: the receiving node is in that
// region, and the load moves every follow.
func TestFollowTheSun(t *testing.T) {
	tr := &workload.Trace{Name: "follow", Follow: time.Second}
	rnd := rand.New(rand.NewPCG(1, 2))
	for i := range 600 {
		tr.Requests = append(tr.Requests, workload.Request{Arrival: time.Duration(i) * 10 * time.Millisecond,
			Key: fmt.Sprintf("k%d", rnd.IntN(4)), Tokens: 1})
	}
	regions := []topology.Region{{Name: "eu", Nodes: 2}, {Name: "us", Nodes: 3}, {Name: "ap", Nodes: 1}}
	assign, _ := workload.NewAssigner("roundrobin", 1)
	cfg := relayConfig(regions, fixed(time.Millisecond))
	cfg.Assign = assign
	w, err := sim.NewWorld(tr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]map[strategy.NodeID]bool{}
	w.OnEvent(func(_ *sim.World, e sim.Event) error {
		if e.Kind != sim.EventRequest {
			return nil
		}
		req := tr.Requests[e.Request]
		rank, _ := strconv.Atoi(strings.TrimPrefix(req.Key, "k"))
		want := regions[(rank+int(req.Arrival/time.Second))%3].Name
		if got := topology.Of(e.Node); got != want {
			return fmt.Errorf("request %d (%s at %v) reached %s, want region %s", e.Request, req.Key, req.Arrival, e.Node, want)
		}
		if seen[want] == nil {
			seen[want] = map[strategy.NodeID]bool{}
		}
		seen[want][e.Node] = true
		return nil
	})
	w.Finish()
	if err := w.Err(); err != nil {
		t.Fatal(err)
	}
	for _, reg := range regions {
		if len(seen[reg.Name]) != reg.Nodes {
			t.Errorf("region %s: requests reached %v, want all its %d nodes", reg.Name, seen[reg.Name], reg.Nodes)
		}
	}
	if got := sim.FollowRegion(1, 2500*time.Millisecond, time.Second, 3); got != 0 {
		t.Errorf("FollowRegion(1, 2.5s, 1s, 3) = %d, want 0", got)
	}
}

// The nodes of a run with regions are named <region>.n<i> and carry their
// region in that name (topology.Of): what a strategy reads from its
// members.
func TestRegionNodeNames(t *testing.T) {
	var members []strategy.NodeID
	cfg := relayConfig(euUS, fixed(time.Millisecond))
	cfg.New = func(c strategy.Config) (strategy.Strategy, error) {
		if c.Self == "eu.n0" {
			members = c.Members
		}
		if c.LatencyHint != time.Millisecond {
			return nil, fmt.Errorf("hint %v", c.LatencyHint)
		}
		return newRelay(c)
	}
	if _, err := sim.Run(relayTrace("0>"), cfg); err != nil {
		t.Fatal(err)
	}
	if want := []strategy.NodeID{"eu.n0", "eu.n1", "us.n2", "us.n3"}; !slices.Equal(members, want) {
		t.Fatalf("members %v, want %v", members, want)
	}
	var regions []string
	for _, m := range members {
		regions = append(regions, topology.Of(m))
	}
	if !slices.Equal(regions, []string{"eu", "eu", "us", "us"}) {
		t.Fatalf("regions %v", regions)
	}
	if !slices.Equal(sim.RegionNodes(euUS), members) {
		t.Fatalf("RegionNodes %v", sim.RegionNodes(euUS))
	}
	// The hint is the largest link's: the WAN's.
	cfg.Network = regionNet(time.Millisecond, 40*time.Millisecond)
	cfg.New = func(c strategy.Config) (strategy.Strategy, error) {
		if c.LatencyHint != 40*time.Millisecond {
			return nil, fmt.Errorf("hint %v, want the WAN's 40ms", c.LatencyHint)
		}
		return newRelay(c)
	}
	if _, err := sim.Run(relayTrace("0>"), cfg); err != nil {
		t.Fatal(err)
	}
}
