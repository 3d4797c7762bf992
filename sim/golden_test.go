package sim_test

import (
	"crypto/sha256"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tokenmesh/tokenmesh/sim"
	"github.com/tokenmesh/tokenmesh/workload"
)

var updateGolden = flag.Bool("update-golden", false, "rewrite testdata/scenario-results.sha256 from this build")

// The example scenarios that do not set detection_spacing give, on the
// real wrccdc trace, results identical bit for bit to those of the
// simulator before per-peer detection (testdata/scenario-results.sha256
// was written by the commit before it, 0847d67, with -update-golden): the
// new field at 0 changes nothing, nor draws anything more from the seed.
func TestScenarioResultsUnchanged(t *testing.T) {
	path := filepath.Join("..", "..", "shared", "data", "traces", "wrccdc-2018-dns.csv.gz")
	if _, err := os.Stat(path); err != nil {
		t.Skipf("real trace not available (%v); it lives outside the repo in shared/data/traces", err)
	}
	tr, err := workload.ReadFile(path, workload.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var got strings.Builder
	for _, file := range []string{"crash-hot-owner.yaml", "crash-restart-3nodes.yaml", "loss-5pct.yaml", "partition-3nodes.yaml", "partition.yaml"} {
		sc, err := sim.LoadScenario(filepath.Join("..", "examples", "scenarios", file))
		if err != nil {
			t.Fatal(err)
		}
		if sc.DetectionSpacing != 0 {
			t.Fatalf("%s sets detection_spacing: not a scenario of the old model", file)
		}
		for _, name := range []string{"owner", "gdrl"} {
			nodes := 10
			if strings.Contains(file, "3nodes") {
				nodes = 3
			}
			res := run(t, tr, name, nodes, fixed(1e6), sc)
			b, err := json.Marshal(res)
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&got, "%s %s %x\n", file, name, sha256.Sum256(b))
		}
	}
	golden := filepath.Join("testdata", "scenario-results.sha256")
	if *updateGolden {
		if err := os.WriteFile(golden, []byte(got.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if got.String() != string(want) {
		t.Fatalf("results changed:\ngot\n%swant\n%s", got.String(), want)
	}
}
