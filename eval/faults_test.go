package eval

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/sim"
	"github.com/tokenmesh/tokenmesh/strategy/all"
	"github.com/tokenmesh/tokenmesh/workload"
)

// The report lists a scenario's events (the fault windows) and its
// membership model; a run without a scenario has neither in its JSON.
func TestReportListsFaults(t *testing.T) {
	g, err := workload.ParseGenerator("poisson:users=4,rate=2,duration=20s")
	if err != nil {
		t.Fatal(err)
	}
	strats, err := all.ParseList("static")
	if err != nil {
		t.Fatal(err)
	}
	sc, err := sim.ParseScenario([]byte("detection: 2s\ndetection_jitter: 1s\nreconnect_interval: 5s\nevents:\n  - at: 12s\n    heal: true\n  - at: 5s\n    partition: [[n0], [n1, n2]]\n"))
	if err != nil {
		t.Fatal(err)
	}
	opts := Options{Trace: g.Generate(1), Strategies: strats, Nodes: 3, Rate: bucket.Rate{Tokens: 1, Per: time.Second}, Burst: 2,
		Network:      sim.Network{Latency: sim.Latency{Kind: "fixed", Mean: time.Millisecond, Min: time.Millisecond, Max: time.Millisecond}},
		AssignPolicy: "hash", Seed: 1}
	plain, err := Run(opts)
	if err != nil {
		t.Fatal(err)
	}
	opts.Scenario, opts.ScenarioName = sc, "split.yaml"
	faulty, err := Run(opts)
	if err != nil {
		t.Fatal(err)
	}
	want := []Fault{{AtSec: 5, Event: "partition n0|n1,n2"}, {AtSec: 12, Event: "heal"}}
	if !reflect.DeepEqual(faulty.Setup.Faults, want) {
		t.Fatalf("faults %+v, want %+v", faulty.Setup.Faults, want)
	}
	if d := faulty.Setup.Detection; d != "each node after 2s + U[0, 1s]; heal after the first reconnect (every 5s)" {
		t.Fatalf("detection %q", d)
	}
	var a, b bytes.Buffer
	if err := WriteJSON(&a, plain); err != nil {
		t.Fatal(err)
	}
	if err := WriteJSON(&b, faulty); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(a.String(), `"faults"`) || strings.Contains(a.String(), `"detection"`) {
		t.Fatalf("a run without a scenario lists faults:\n%s", a.String())
	}
	if !strings.Contains(b.String(), `"faults": [`) || !strings.Contains(b.String(), `"at_s": 5`) {
		t.Fatalf("the scenario's faults are not in the JSON:\n%s", b.String())
	}
}
