package regionlease_test

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"
	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/regionlease"
)

// burstSetup builds eu.n0, a key's global owner among eu.n0, eu.n1,
// us.n2 and us.n3 (rate 100/s, burst 100, replicas=0), and a key it owns.
func burstSetup(t *testing.T, params ...string) (*regionlease.RegionLease, string) {
	t.Helper()
	return ownerSetup(t, []strategy.NodeID{"eu.n0", "eu.n1", "us.n2", "us.n3"}, bucket.Rate{Tokens: 1, Per: 10 * time.Millisecond}, 100, append([]string{"min_lease=1"}, params...)...)
}

// A remote region's first ask of a key (sized on the little demand its
// regional owner has seen so far) is granted the region's share of the
// burst by nodes (2 of 4 nodes: 50 of 100), so that the remote region
// does not spend the key's first second relaying and refusing while the
// global owner's bucket loses its refill at full capacity; its next ask
// gets what it asks. With push_every=0 (no push state: the build before)
// the first ask gets what it asks too. The build before this change
// granted 5, which fails.
func TestFirstAskGetsBurstShare(t *testing.T) {
	g, key := burstSetup(t)
	if got := ask(t, g, 10*time.Millisecond, "us.n2", key, 1, 5, 60_000); got != 50 {
		t.Errorf("first ask of 5 from us.n2: granted %d, want its region's share of the burst, 50", got)
	}
	if got := ask(t, g, 20*time.Millisecond, "us.n2", key, 2, 5, 60_000); got != 5 {
		t.Errorf("second ask of 5 from us.n2: granted %d, want 5", got)
	}
	if got := ask(t, g, 30*time.Millisecond, "eu.n1", key, 1, 5, 60_000); got != 5 {
		t.Errorf("first ask of 5 from eu.n1 (the owner's region): granted %d, want 5", got)
	}
	g0, key0 := burstSetup(t, "push_every=0")
	if got := ask(t, g0, 10*time.Millisecond, "us.n2", key0, 1, 5, 60_000); got != 5 {
		t.Errorf("push_every=0: first ask of 5 from us.n2: granted %d, want 5", got)
	}
}

// While a key is contended (its global owner's bucket was dry within
// region_ttl while another region asked within the window), a node of the
// owner's own region gets at most ceil(d*hot_period) tokens (d its
// reported demand: 200/s, hot_period 10 ms: 2) where it asked 20; before
// the bucket was dry, with hot_period=0, and when no other region asked
// (one region alone), it gets the 20 it asked. The build before this
// change granted 20 while contended, which fails. region_split=first: the
// budgets of share and demand (split.go) are TestOwnBudgetUntilNextPush's.
func TestHotLeaseBoundsOwnRegionNode(t *testing.T) {
	for _, tc := range []struct {
		name, param string
		remote      bool
		contended   int64
	}{{"hot_period=10ms", "hot_period=10ms", true, 2}, {"hot_period=0", "hot_period=0", true, 20}, {"no other region", "hot_period=10ms", false, 20}} {
		t.Run(tc.name, func(t *testing.T) {
			g, key := burstSetup(t, tc.param, "region_split=first")
			if got := ask(t, g, 10*time.Millisecond, "eu.n1", key, 1, 20, 200_000); got != 20 {
				t.Errorf("uncontended: granted %d, want 20", got)
			}
			if tc.remote {
				ask(t, g, 15*time.Millisecond, "us.n2", key, 1, 5, 60_000)
			}
			var fx strategy.Effects
			for id := uint64(1); ; id++ { // drain the bucket: dry
				if d, _ := g.Request(20*time.Millisecond, strategy.Request{ID: id, Key: key, Tokens: 1, Arrival: 20 * time.Millisecond}, &fx); !d.Allowed {
					break
				}
			}
			// 500 ms later the bucket holds 50 tokens again.
			if got := ask(t, g, 520*time.Millisecond, "eu.n1", key, 2, 20, 200_000); got != tc.contended {
				t.Errorf("contended: granted %d, want %d", got, tc.contended)
			}
		})
	}
}

// hot_period, quantum and clock_uncertainty must not be negative, and
// clock_uncertainty not above max_skew: New refuses each with an error
// naming it.
func TestNegativeTuningRefused(t *testing.T) {
	for _, set := range []string{"hot_period=-1ms", "quantum=-1ms", "clock_uncertainty=-1ms", "clock_uncertainty=150ms"} {
		name, _, _ := strings.Cut(set, "=")
		ps, _ := strategy.ParseParams([]string{set})
		_, err := regionlease.New(strategy.Config{Self: "eu.n0", Members: []strategy.NodeID{"eu.n0"}, Rate: bucket.Rate{Tokens: 1, Per: 10 * time.Millisecond},
			Burst: 100, Params: ps, Rand: rand.New(rand.NewPCG(1, 1)), LatencyHint: 50 * time.Millisecond})
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: error %v, want one naming %s", set, err, name)
		}
	}
}

// Under region_split=share (split.go; demand's budget is set the same
// way, at each push), a contended key's
// global owner lends a node of its own region nothing before the first
// push has set the region's budget (a grant of 0 with a dry hint until
// the next push, push_every later; here at 300 ms with no Tick, so the
// push timer armed at the drain has not fired, while the bucket holds 28
// tokens), then at most that budget: after the push at 520 ms (the bucket
// holds 50 tokens; us.n2 reported 60/s, eu.n1 200/s: eu's share 0.77, a
// budget of 38 plus its share of the refill) the ask gets
// ceil(d*hot_period) = 2, as under first, where the first ask gets 2 too.
func TestOwnBudgetUntilNextPush(t *testing.T) {
	for _, split := range []string{"share", "first"} {
		t.Run(split, func(t *testing.T) {
			g, key := burstSetup(t, "region_split="+split)
			ask(t, g, 10*time.Millisecond, "eu.n1", key, 1, 20, 200_000)
			ask(t, g, 15*time.Millisecond, "us.n2", key, 1, 5, 60_000)
			var fx strategy.Effects
			for id := uint64(1); ; id++ { // drain the bucket: dry, contended
				if d, _ := g.Request(20*time.Millisecond, strategy.Request{ID: id, Key: key, Tokens: 1, Arrival: 20 * time.Millisecond}, &fx); !d.Allowed {
					break
				}
			}
			gr := askGrant(t, g, 300*time.Millisecond, "eu.n1", key, 2, 20, 200_000)
			if want := map[string]int64{"share": 0, "first": 2}[split]; gr.Tokens != want {
				t.Fatalf("before the first push: granted %d, want %d", gr.Tokens, want)
			}
			if split == "share" && gr.EmptyUntilNs <= int64(300*time.Millisecond) {
				t.Errorf("before the first push: dry hint until %v, want one ahead (the next push)", time.Duration(gr.EmptyUntilNs))
			}
			g.Tick(520*time.Millisecond, &fx) // the push timer: pushes to us.n2, sets the budget
			if got := ask(t, g, 520*time.Millisecond, "eu.n1", key, 3, 20, 200_000); got != 2 {
				t.Errorf("after the push: granted %d, want ceil(d*hot_period) = 2", got)
			}
		})
	}
}

// Under region_split=demand, the share of a region that takes no pushes
// (a regional owner of an older build) stays in the bucket for its asks:
// G's own region's budget takes what the pushes could not place, but not
// that share. us.n2 asks without takes_push (200/s), eu.n1 (G's region)
// with 200/s; after the drain and the push at 520 ms (50 tokens in the
// bucket, none pushed), eu.n1 asks for all 50 (hot_period=0) and gets
// what its budget allows (none here: its share of the refill over one
// push_every is under a token, and the bucket's 50 are the other
// region's, no Tick having pushed since the drain), and us.n2's next ask
// still gets tokens (30: its share of the level by the demands, as
// askShare gives). Without unpushedShare eu.n1 got 30 and us.n2 0.
func TestDemandSplitLeavesUnpushedRegionItsShare(t *testing.T) {
	g, key := burstSetup(t, "region_split=demand", "hot_period=0")
	ask(t, g, 10*time.Millisecond, "eu.n1", key, 1, 20, 200_000)
	askWith(t, g, 15*time.Millisecond, "us.n2", &peerv1.RegionLeaseAsk{Key: key, Seq: 1, Tokens: 5, DemandMtps: 200_000})
	var fx strategy.Effects
	for id := uint64(1); ; id++ { // drain the bucket: dry, contended
		if d, _ := g.Request(20*time.Millisecond, strategy.Request{ID: id, Key: key, Tokens: 1, Arrival: 20 * time.Millisecond}, &fx); !d.Allowed {
			break
		}
	}
	g.Tick(520*time.Millisecond, &fx)
	own := ask(t, g, 520*time.Millisecond, "eu.n1", key, 2, 50, 200_000)
	remote := askWith(t, g, 521*time.Millisecond, "us.n2", &peerv1.RegionLeaseAsk{Key: key, Seq: 2, Tokens: 50, DemandMtps: 200_000}).Tokens
	t.Logf("eu.n1 %d, us.n2 %d", own, remote)
	if own >= 50 || remote < 10 {
		t.Errorf("eu.n1 (G's region) granted %d of 50, us.n2 (no pushes) %d; want us.n2 to keep its share (at least 10)", own, remote)
	}
}
