package eval

import (
	"reflect"
	"strings"
	"testing"

	"github.com/tokenmesh/tokenmesh/sim"
)

// The report lists a scenario's events (the fault windows) and its
// membership model; a run without a scenario has neither in its JSON.
func TestReportListsFaults(t *testing.T) {
	sc, err := sim.ParseScenario([]byte("detection: 2s\ndetection_jitter: 1s\nreconnect_interval: 5s\nevents:\n  - at: 12s\n    heal: true\n  - at: 5s\n    partition: [[n0], [n1, n2]]\n"))
	if err != nil {
		t.Fatal(err)
	}
	opts := smallRun(t, "poisson:users=4,rate=2,duration=20s", "static", "hash")
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
	a, b := jsonText(t, plain), jsonText(t, faulty)
	if strings.Contains(a, `"faults"`) || strings.Contains(a, `"detection"`) {
		t.Fatalf("a run without a scenario lists faults:\n%s", a)
	}
	if !strings.Contains(b, `"faults": [`) || !strings.Contains(b, `"at_s": 5`) {
		t.Fatalf("the scenario's faults are not in the JSON:\n%s", b)
	}
}
