package gdrl_test

import (
	"flag"
	"os"
	"testing"
)

// ciSeed is the rapid seed the package's property tests start from unless
// -rapid.seed is given, kept so that `make test` runs the same sample on
// every run and stays a deterministic gate (rapid also replays the .fail
// files under testdata/rapid first). Wider sweeps pass: with
// -rapid.checks=300, TestConserveSplitNeverAboveC, TestSplitBrainProperty
// and TestConservationProperty passed all of seeds 1 to 60 (180 of 180
// runs, 32 minutes on the shared 2-core machine), after the fixes that the
// replays in splitbrain_test.go pin (seeds 7 to 10, 13 to 15, 18 and 21
// failed before them). Not yet everything: TestConserveSplitNeverAboveC
// at seeds 61 to 93 passed 31 of 33; seeds 79 and 90 failed, in the run
// under `partition: available` with crashes during the splits, and also
// failed before those fixes (79: a record whose burst share reached 41
// tokens, beyond the ±2B a peer accepts; 90: one default share, C/6,
// counted twice after the heal). Since the heirs of an incarnation that
// never comes back find each other (issue 11), seed 90 passes at the
// default 100 checks but its 213th run at 300 still fails, as before that
// change (C + 1,126,475 units just as the heal settles, key c, seed 137
// of the run's draws); seed 79 fails earlier (its 199th run) with capacity
// lost, never created: a stale tombstone copy given up twice (see
// "Limits" in doc.go). Explore with
// `go test ./strategy/gdrl -rapid.seed=0 -rapid.checks=1000` (a random
// seed); a failure there is a bug to fix, not noise.
const ciSeed = "20261125"

func TestMain(m *testing.M) {
	flag.Parse()
	seedSet := false
	flag.Visit(func(f *flag.Flag) { seedSet = seedSet || f.Name == "rapid.seed" })
	if !seedSet {
		_ = flag.Set("rapid.seed", ciSeed)
	}
	os.Exit(m.Run())
}
