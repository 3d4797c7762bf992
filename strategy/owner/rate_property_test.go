package owner_test

import (
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/sim"
	"github.com/tokenmesh/tokenmesh/workload"
)

// drawRule draws a key's rule: rate 2-50 tokens/s, burst 1-50.
func drawRule(t *rapid.T) (bucket.Rate, int64) {
	r := rapid.IntRange(2, 50).Draw(t, "rate_per_s")
	b := rapid.IntRange(1, 50).Draw(t, "burst")
	return bucket.Rate{Tokens: int64(r), Per: time.Second}, int64(b)
}

// runHot runs owner over a hot workload offered about 6 times the rule's
// rate (4 keys, Zipf), as runCase does at 2/s (12 req/s).
func runHot(t *rapid.T, c faultCase, rate bucket.Rate, burst int64, seed uint64, params ...string) float64 {
	g, err := workload.ParseGenerator(fmt.Sprintf("heavy:users=4,rate=%d,duration=20s", 6*rate.Tokens))
	if err != nil {
		t.Fatal(err)
	}
	return runTrace(t, c, g.Generate(seed), rate, burst, params...)
}

// TestRateCrashEnvelopeProperty is TestCrashRestartEnvelopeProperty at a
// drawn rule (2-50 tokens/s, burst 1-50): the bound, one burst per crash
// and one when messages are lost, does not grow with the rate (the refill
// during a detection is within r*T).
func TestRateCrashEnvelopeProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		rate, burst := drawRule(t)
		c := drawCase(t, false)
		v := runHot(t, c, rate, burst, rapid.Uint64().Draw(t, "seed"))
		if bound := c.bound(burst); v > bound {
			t.Fatalf("envelope violated by %.3f tokens with %d crashes (bound %v)", v, c.crashes, bound)
		}
	})
}

// TestRatePartitionEnvelopeProperty is TestPartitionHealEnvelopeProperty
// at a drawn rule.
func TestRatePartitionEnvelopeProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		rate, burst := drawRule(t)
		c := drawCase(t, true)
		v := runHot(t, c, rate, burst, rapid.Uint64().Draw(t, "seed"))
		bound := c.bound(burst)
		if c.partition > 0 {
			bound += float64(burst) + rate.PerSec()*(c.partition+c.scenario.Detection).Seconds()
		}
		if v > bound {
			t.Fatalf("envelope violated by %.3f tokens with %d crashes and a %v partition (bound %.3f)", v, c.crashes, c.partition, bound)
		}
	})
}

// TestRateSplitEnvelopeProperty is TestSplitWithinEnvelope at a drawn
// rule, under both split placements (distinct moves a sub-bucket's owner
// when a node joins the rendezvous order, restart.go).
func TestRateSplitEnvelopeProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		rate, burst := drawRule(t)
		k := rapid.IntRange(2, 4).Draw(t, "split")
		burst = max(burst, int64(k))
		placement := rapid.SampledFrom([]string{"independent", "distinct"}).Draw(t, "placement")
		c := drawCase(t, false)
		v := runHot(t, c, rate, burst, rapid.Uint64().Draw(t, "seed"), fmt.Sprintf("split=%d", k), "split_placement="+placement)
		if bound := c.bound(burst); v > bound {
			t.Fatalf("split=%d %s: envelope violated by %.3f tokens with %d crashes (bound %v)", k, placement, v, c.crashes, bound)
		}
	})
}

// TestDoubleCrashEnvelopeProperty: two of three nodes crash together,
// one restarts soon after (before the survivors detect the crash), the
// other later; the rule's rate is high, so the refill during a detection
// is many bursts.
func TestDoubleCrashEnvelopeProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		rate, burst := drawRule(t)
		split := rapid.IntRange(1, 2).Draw(t, "split")
		burst = max(burst, int64(split))
		at := time.Duration(rapid.IntRange(1, 150).Draw(t, "crash_at_100ms")) * 100 * time.Millisecond
		soon := time.Duration(rapid.IntRange(1, 20).Draw(t, "restart_after_100ms")) * 100 * time.Millisecond
		late := time.Duration(rapid.IntRange(1, 50).Draw(t, "second_restart_after_100ms")) * 100 * time.Millisecond
		perm := rapid.Permutation([]string{"n0", "n1", "n2"}).Draw(t, "nodes")
		c := faultCase{nodes: 3, crashes: 2, scenario: &sim.Scenario{
			Detection: time.Duration(rapid.IntRange(1, 20).Draw(t, "detection_100ms")) * 100 * time.Millisecond,
			Events:    []sim.ScenarioEvent{{At: at, Crash: perm[:2]}, {At: at + soon, Restart: perm[:1]}, {At: at + late, Restart: perm[1:2]}}}}
		v := runHot(t, c, rate, burst, rapid.Uint64().Draw(t, "seed"), fmt.Sprintf("split=%d", split), "split_placement=distinct")
		if bound := c.bound(burst); v > bound {
			t.Fatalf("split=%d: envelope violated by %.3f tokens with 2 crashes (bound %v)", split, v, bound)
		}
	})
}

// TestRestartShrunkCases are the cases rapid shrank the properties above
// to (restart.go): a restarted node deciding beside the owner in the
// views that did not see it yet (1, 3), a restarted node deferring to a
// peer that saw it all along (2: 7.633 tokens over b + r*T with the first
// form of the deferral, before shipToDeferring), a node that did not see
// a restarted owner sending its key to a third node that decided it
// beside the owner (4), fallback admissions charged to a crashed owner
// while a restarted node decided the key (5), and a node deciding a
// key's forwards from its bucket and its own requests for the key from
// its fallback bucket (6: 7.500 tokens over b + r*T, bound 6, before
// fallbackActing), and a stale forward taken as a sign that its sender
// sees the restarted node (7, restart.go's sawUs). Envelope violation
// before restart.go (b805607): 1.630 (bound 1), 0.411 (4), 4.833 (3),
// 2.098 (2), 4.406 (4), 22.450 (6), 34.652 (6) tokens. Not fixed: three
// views in a cycle for a detection (r = 6/s, b = 2, 3 nodes, detection
// 1.7 s, n1 down 1.1-4.0 s, n2 down 4.0-4.1 s: n0 routes u0001 to n2, the
// restarted n2 defers it to n1, the restarted n1 defers it to n0; each
// decides the forwards it gets and charges the next), 4.018 (bound 4;
// 6.108 at b805607).
func TestRestartShrunkCases(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	for i, tc := range []struct {
		rate, burst int64
		nodes       int
		detection   time.Duration
		events      []sim.ScenarioEvent
		crashes     int
		seed        uint64
		params      []string
	}{
		{5, 1, 2, ms(1200), []sim.ScenarioEvent{{At: ms(100), Crash: []string{"n1"}}, {At: ms(1400), Restart: []string{"n1"}}}, 1, 0, nil},
		{19, 2, 3, ms(2000), []sim.ScenarioEvent{{At: ms(100), Crash: []string{"n0"}}, {At: ms(200), Restart: []string{"n0"}},
			{At: ms(8500), Crash: []string{"n1"}}, {At: ms(9900), Restart: []string{"n1"}}}, 2, 7, nil},
		{17, 3, 4, ms(1200), []sim.ScenarioEvent{{At: ms(15000), Crash: []string{"n1"}}, {At: ms(16900), Restart: []string{"n1"}}}, 1, 0,
			[]string{"split=3", "split_placement=distinct"}},
		{6, 1, 3, ms(1000), []sim.ScenarioEvent{{At: ms(200), Crash: []string{"n0", "n1"}}, {At: ms(300), Restart: []string{"n0"}},
			{At: ms(300), Restart: []string{"n1"}}}, 2, 9, nil},
		{34, 2, 3, ms(900), []sim.ScenarioEvent{{At: ms(100), Crash: []string{"n1", "n2"}}, {At: ms(200), Restart: []string{"n2"}},
			{At: ms(1000), Restart: []string{"n1"}}}, 2, 0, nil},
		{50, 3, 3, ms(1800), []sim.ScenarioEvent{{At: ms(100), Crash: []string{"n0", "n1"}}, {At: ms(200), Restart: []string{"n0"}},
			{At: ms(900), Restart: []string{"n1"}}}, 2, 31, nil},
		{43, 2, 4, ms(1800), []sim.ScenarioEvent{{At: ms(2800), Crash: []string{"n1"}}, {At: ms(2900), Restart: []string{"n1"}},
			{At: ms(5100), Crash: []string{"n0"}}, {At: ms(5300), Restart: []string{"n0"}},
			{At: ms(6900), Crash: []string{"n1"}}, {At: ms(7100), Restart: []string{"n1"}}}, 3, 1, nil},
	} {
		rate := bucket.Rate{Tokens: tc.rate, Per: time.Second}
		c := faultCase{nodes: tc.nodes, crashes: tc.crashes, scenario: &sim.Scenario{Detection: tc.detection, Events: tc.events}}
		g, err := workload.ParseGenerator(fmt.Sprintf("heavy:users=4,rate=%d,duration=20s", 6*tc.rate))
		if err != nil {
			t.Fatal(err)
		}
		v := runTrace(t, c, g.Generate(tc.seed), rate, tc.burst, tc.params...)
		t.Logf("case %d: envelope violation %.3f tokens (bound %.0f)", i+1, v, c.bound(tc.burst))
		if v > c.bound(tc.burst) {
			t.Errorf("case %d: envelope violated by %.3f tokens, bound %.0f", i+1, v, c.bound(tc.burst))
		}
	}
}
