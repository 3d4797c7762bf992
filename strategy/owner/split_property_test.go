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

// TestSplitDistinctWithinEnvelope is TestSplitWithinEnvelope under
// split_placement=distinct: with random crashes, restarts and loss, the
// sub-buckets together stay within the key's envelope plus the crash bound,
// and no peer message is refused.
func TestSplitDistinctWithinEnvelope(t *testing.T) {
	rate, burst := bucket.Rate{Tokens: 2, Per: time.Second}, int64(5)
	rapid.Check(t, func(t *rapid.T) {
		k := rapid.IntRange(2, 4).Draw(t, "split")
		c := drawCase(t, false)
		v := runCase(t, c, rate, burst, rapid.Uint64().Draw(t, "seed"), fmt.Sprintf("split=%d", k), "split_placement=distinct")
		if bound := c.bound(burst); v > bound {
			t.Fatalf("split=%d distinct: envelope violated by %.3f tokens with %d crashes (bound %v)", k, v, c.crashes, bound)
		}
	})
}

// phasedTrace is a heavy workload (4 keys, Zipf) whose total rate changes
// every phase: phase i offers rates[i] requests/s for phase.
func phasedTrace(t interface{ Fatal(...any) }, rates []int, phase time.Duration, seed uint64) *workload.Trace {
	out := &workload.Trace{Name: "phased"}
	for i, r := range rates {
		g, err := workload.ParseGenerator(fmt.Sprintf("heavy:users=4,rate=%d,duration=%v", r, phase))
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range g.Generate(seed + uint64(i)).Requests {
			q.Arrival += time.Duration(i) * phase
			out.Requests = append(out.Requests, q)
		}
	}
	return out
}

// TestSplitAutoWithinEnvelope (split=auto, autosplit.go): under demand
// that changes every few seconds (so K grows and shrinks: quotas of 1/4 to
// one rate against keys offered up to ~10 rates), random crashes with
// restarts and up to 5% loss, every key's admitted tokens in every window
// stay within b + r*T plus the bound the split tests state (one burst per
// crash, one when messages are lost; at 20/s plus the plain owner's own
// violation in the same case), and no peer message is refused: a re-split
// and the nodes' brief disagreement on K create no tokens.
func TestSplitAutoWithinEnvelope(t *testing.T) {
	burst := int64(5)
	rapid.Check(t, func(t *rapid.T) {
		c := drawCase(t, false)
		// The key's rate (2 or 20 tokens/s) scales the demand and the
		// quota: at 20/s a detection window's wrong fallback share is
		// several bursts.
		scale := rapid.SampledFrom([]int{1, 10}).Draw(t, "scale")
		rate := bucket.Rate{Tokens: int64(2 * scale), Per: time.Second}
		rates := rapid.SliceOfN(rapid.SampledFrom([]int{1, 4, 12, 30}), 4, 4).Draw(t, "phase_rates")
		for i := range rates {
			rates[i] *= scale
		}
		quota := rapid.SampledFrom([]float64{0.5, 1, 2}).Draw(t, "server_quota") * float64(scale)
		window := rapid.SampledFrom([]string{"200ms", "500ms", "1s"}).Draw(t, "split_window")
		tr := phasedTrace(t, rates, 5*time.Second, rapid.Uint64().Draw(t, "seed"))
		v := runTrace(t, c, tr, rate, burst, "split=auto", fmt.Sprintf("server_quota=%g", quota), "split_window="+window)
		bound := c.bound(burst)
		if scale > 1 {
			// At 20/s the plain owner (split=1) itself exceeds the
			// split tests' bound in some crash cases (the refill of
			// a detection window, and a key whose replicas all crashed),
			// so split=auto is held to the plain owner's violation in
			// the same case plus that bound.
			bound += runTrace(t, c, tr, rate, burst)
		}
		if v > bound {
			t.Fatalf("split=auto: envelope violated by %.3f tokens with %d crashes (bound %v)", v, c.crashes, bound)
		}
	})
}

// TestSplitAutoCoordinatorCrash: the owner of the hottest key (its
// sub-bucket 0, and the coordinator of its K) crashes and the others see
// it only 5 s later. Meanwhile the forwarders answer sub-bucket 0's
// requests by on_timeout=local, and the key's other sub-buckets keep
// deciding: the fallback must stand for sub-bucket 0 alone (r/(N K) per
// forwarder), not for the whole key (r/N), or the key admits up to twice
// its rate for the detection window (584 tokens over b + r*T at 10 nodes
// and 200/s before the fix). The bound is the split tests' one burst per
// crash.
func TestSplitAutoCoordinatorCrash(t *testing.T) {
	rate, burst := bucket.Rate{Tokens: 20, Per: time.Second}, int64(20)
	g, err := workload.ParseGenerator("heavy:users=4,rate=200,duration=20s")
	if err != nil {
		t.Fatal(err)
	}
	c := faultCase{nodes: 5, crashes: 1, scenario: &sim.Scenario{Detection: 5 * time.Second,
		Events: []sim.ScenarioEvent{{At: 8 * time.Second, CrashOwnerOfHottest: 1}}}}
	v := runTrace(t, c, g.Generate(1), rate, burst, "split=auto", "server_quota=10")
	t.Logf("envelope violation %.3f tokens (bound %v)", v, c.bound(burst))
	if v > c.bound(burst) {
		t.Fatalf("envelope violated by %.3f tokens, bound %v", v, c.bound(burst))
	}
}
