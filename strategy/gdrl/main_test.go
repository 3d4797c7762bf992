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
// failed before them). TestConserveSplitNeverAboveC at seeds 61 to 93
// passed 31 of 33; 79 (two inheritances given up twice, C - 52%) and 90
// (a stale record inherited under conserve, C + 452,447) failed, and pass
// since the records gained the fields that close them (doc.go, "Split brain"; TestSplitBrainCopyFencedIntoLaterHeir,
// TestConserveHeldRecordOfCrashedHolder). At -rapid.checks=3000 seed 79
// then found two more (TestSplitBrainRetiredCopyOfCrashedHeir,
// TestConserveHeldRecordOfDeadHolderInheritedOnce); after their fixes
// seeds 79 and 90 and this seed pass 3,000 checks of
// TestConserveSplitNeverAboveC, and this seed 3,000 of each of the other
// property tests (TestSplitBrainProperty, TestConservationProperty,
// TestLeaveConservesProperty). `make soak` runs them at 1,000: at this
// seed TestConserveSplitNeverAboveC then failed after 173 runs (a late
// answer to an heir's query, TestConserveLateNoLaterHeirAnswer); since
// its fix this seed passes 1,000 checks of each of the four (3,000 of
// TestConserveSplitNeverAboveC and TestSplitBrainProperty), and seeds 1
// to 6 pass 300 each (1 and 2 of all four). Explore with `go test ./strategy/gdrl -rapid.seed=0 -rapid.checks=1000` (a
// random seed); a failure there is a bug to fix, not noise.
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
