package replay

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/sim"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/topology"
	"github.com/tokenmesh/tokenmesh/workload"
)

func scenario(t *testing.T, text string) *sim.Scenario {
	t.Helper()
	sc, err := sim.ParseScenario([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

// The same YAML the simulator reads maps onto kills, partitions and heals.
func TestFromScenario(t *testing.T) {
	g, err := workload.ParseGenerator("heavy:users=20,rate=50,duration=5s")
	if err != nil {
		t.Fatal(err)
	}
	tr := g.Generate(3)
	owners := sim.OwnersOfHottest(tr, []strategy.NodeID{"n0", "n1", "n2", "n3"}, 1)
	if len(owners) != 1 {
		t.Fatalf("owners of the hottest key: %v", owners)
	}
	hot := int(owners[0][1] - '0')
	got, err := FromScenario(scenario(t, `
detection: 2s
detection_jitter: 1s
reconnect_interval: 5s
events:
  - at: 40s
    heal: true
  - at: 10s
    partition: [[n0], [n2]]
  - at: 50s
    crash_owner_of_hottest: 1
  - at: 30s
    partition: [[n0, n1, n2, n3]]
  - at: 60s
    crash: [n1, n2]
`), tr, 4, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []Event{
		{At: 10 * time.Second, Kind: Partition, Groups: [][]int{{0}, {2}, {1, 3}}},
		{At: 30 * time.Second, Kind: Heal},
		{At: 40 * time.Second, Kind: Heal},
		{At: 50 * time.Second, Kind: Kill, Node: hot},
	}
	for _, n := range []int{1, 2} {
		if n != hot {
			want = append(want, Event{At: time.Minute, Kind: Kill, Node: n})
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("events\n%v\nwant\n%v", got, want)
	}
}

func TestFromScenarioErrors(t *testing.T) {
	tr := &workload.Trace{}
	for _, c := range []struct{ yaml, want string }{
		{"events:\n  - at: 1s\n    restart: [n5]\n", `unknown node "n5"`},
		{"network:\n  loss: 0.1\n", "network"},
		{"events:\n  - at: 1s\n    crash: [n3]\n", `unknown node "n3"`},
		{"events:\n  - at: 1s\n    crash: [n01]\n", `unknown node "n01"`},
		{"events:\n  - at: 1s\n    partition: [[x], [n1]]\n", `unknown node "x"`},
		{"events:\n  - at: 1s\n    partition: [[n1], [n1]]\n", "two partition groups"},
	} {
		_, err := FromScenario(scenario(t, c.yaml), tr, 3, nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want one containing %q", c.yaml, err, c.want)
		}
	}
	if ev, err := FromScenario(nil, tr, 3, nil); ev != nil || err != nil {
		t.Errorf("nil scenario: %v, %v", ev, err)
	}
}

// Every example scenario for 3 nodes maps, and each *-speed10 variant
// (the simulator's description of a live replay at --speed 10) drives the
// live replay with the same faults as its base file.
func TestFromExampleScenarios(t *testing.T) {
	mapped := func(file string) []Event {
		t.Helper()
		sc, err := sim.LoadScenario(file)
		if err != nil {
			t.Fatal(err)
		}
		var regions []topology.Region // the regions-* files cut regions: eu:1,us:1,ap:1, as their commands say
		if strings.Contains(filepath.Base(file), "regions-") {
			regions = []topology.Region{{Name: "eu", Nodes: 1}, {Name: "us", Nodes: 1}, {Name: "ap", Nodes: 1}}
		}
		ev, err := FromScenario(sc, &workload.Trace{}, 3, regions)
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		return ev
	}
	if ev := mapped("../examples/scenarios/partition-3nodes.yaml"); len(ev) != 2 || ev[0].Kind != Partition || ev[1].Kind != Heal {
		t.Fatalf("partition-3nodes.yaml maps to %v", ev)
	}
	files, err := filepath.Glob("../examples/scenarios/*-3nodes*.yaml")
	if err != nil || len(files) < 4 {
		t.Fatalf("3-node example scenarios: %v (%v), want at least 4", files, err)
	}
	for _, f := range files {
		ev := mapped(f)
		if len(ev) == 0 {
			t.Errorf("%s maps to no events", f)
		}
		if base, ok := strings.CutSuffix(f, "-speed10.yaml"); ok {
			if want := mapped(base + ".yaml"); !reflect.DeepEqual(ev, want) {
				t.Errorf("%s maps to %v, its base file to %v", f, ev, want)
			}
		}
	}
}

// A restart maps to Restart of a killed node; restarting a live node is
// skipped, as the simulator skips it, and a node can be killed again after
// its restart.
func TestFromScenarioRestart(t *testing.T) {
	got, err := FromScenario(scenario(t, `
events:
  - at: 5s
    restart: [n2]
  - at: 10s
    crash: [n1]
  - at: 20s
    restart: [n1, n0]
  - at: 30s
    crash: [n1]
  - at: 40s
    restart: [n1]
`), &workload.Trace{}, 3, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []Event{
		{At: 10 * time.Second, Kind: Kill, Node: 1},
		{At: 20 * time.Second, Kind: Restart, Node: 1},
		{At: 30 * time.Second, Kind: Kill, Node: 1},
		{At: 40 * time.Second, Kind: Restart, Node: 1},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("events\n%v\nwant\n%v", got, want)
	}
	sc, err := sim.LoadScenario("../examples/scenarios/crash-restart-3nodes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ev, err := FromScenario(sc, &workload.Trace{}, 3, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(ev, []Event{{At: 300 * time.Second, Kind: Kill, Node: 1}, {At: 420 * time.Second, Kind: Restart, Node: 1}}) {
		t.Fatalf("crash-restart-3nodes.yaml maps to %v", ev)
	}
}

// With regions, nodes are named <region>.n<i>, a cut puts each region
// listed on its own side (the others together) and a partition group may
// name regions, as in the simulator; a scenario naming regions without
// them, an unknown region or one twice is refused. Before, a cut was
// skipped without a word (the live replay ran without the simulated cut)
// and a region's node names were refused.
func TestFromScenarioRegions(t *testing.T) {
	regions := []topology.Region{{Name: "eu", Nodes: 2}, {Name: "us", Nodes: 2}, {Name: "ap", Nodes: 2}}
	got, err := FromScenario(scenario(t, `
events:
  - at: 3s
    cut: [ap]
  - at: 13s
    heal: true
  - at: 20s
    cut: [eu, ap]
  - at: 30s
    partition: [[eu, us.n2], [ap.n4]]
  - at: 40s
    crash: [us.n3]
`), &workload.Trace{}, 6, regions)
	if err != nil {
		t.Fatal(err)
	}
	want := []Event{
		{At: 3 * time.Second, Kind: Partition, Groups: [][]int{{4, 5}, {0, 1, 2, 3}}},
		{At: 13 * time.Second, Kind: Heal},
		{At: 20 * time.Second, Kind: Partition, Groups: [][]int{{0, 1}, {4, 5}, {2, 3}}},
		{At: 30 * time.Second, Kind: Partition, Groups: [][]int{{0, 1, 2}, {4}, {3, 5}}},
		{At: 40 * time.Second, Kind: Kill, Node: 3},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("events\n%v\nwant\n%v", got, want)
	}
	for _, c := range []struct {
		yaml    string
		regions []topology.Region
		want    string
	}{
		{"events:\n  - at: 1s\n    cut: [ap]\n", nil, "the cluster has none (--regions)"},
		{"events:\n  - at: 1s\n    cut: [mars]\n", regions, `unknown region "mars"`},
		{"events:\n  - at: 1s\n    cut: [ap, ap]\n", regions, "listed twice"},
		{"events:\n  - at: 1s\n    crash: [n1]\n", regions, `unknown node "n1" (the cluster has eu.n0..ap.n5)`},
		{"events:\n  - at: 1s\n    partition: [[eu], [eu.n1]]\n", regions, "node eu.n1 is in two partition groups"},
		{"events:\n  - at: 1s\n    heal: true\n", regions[:2], "regions eu,us have 4 nodes, the cluster 6"},
	} {
		_, err := FromScenario(scenario(t, c.yaml), &workload.Trace{}, 6, c.regions)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v; want it to say %q", c.yaml, err, c.want)
		}
	}
}
