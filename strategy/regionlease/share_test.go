package regionlease_test

import (
	"testing"
	"time"

	peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"
	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/regionlease"
)

// shareSetup builds eu.n0, the global owner of a key among eu.n0-eu.n3
// (one region; rate 1000/s, burst 1000, latency hint 50 ms: lan_latency
// 5 ms, lead 10 ms; period 100 ms; replicas=0; the tests set quantum).
func shareSetup(t *testing.T, params ...string) (*regionlease.RegionLease, string) {
	t.Helper()
	return ownerSetup(t, []strategy.NodeID{"eu.n0", "eu.n1", "eu.n2", "eu.n3"}, bucket.Rate{Tokens: 1, Per: time.Millisecond}, 1000, params...)
}

// The global owner's grants to the nodes of its own region while no other
// region asks (share.go): lease's untilDry and share. Step by step (rate
// 1000/s, burst 1000, quantum 20 ms, lead 10 ms):
//
//  1. at 10 ms eu.n1 asks 600 at 6,000/s: the demand (6,000/s) drains
//     5,000/s, the bucket (1,000) lasts 200 ms, more than a period: 600;
//  2. at 10 ms eu.n2 asks 400 at 9,000/s: the demands drain 14,000/s and
//     the 400 left last 28.6 ms, so the grant is that part of the ask,
//     ceil(400 * 0.2857) = 115 (untilDry; the build before: 400);
//  3. at 30 ms eu.n1 reports its first lease spent and asks 600 at
//     12,000/s: the bucket holds the 285 left at 10 ms (it was at its
//     capacity, the burst less its leases, until the spent report), and
//     the demands over a quantum (21,000/s * 20 ms = 420) exceed the
//     supply (285 + 20 of refill = 305), so eu.n1's share is 305/420 of
//     its ask's rate (600 per 100 ms): 4,357.1/s, 87 tokens for a
//     quantum, and its turn 87/4,357.1 s + lead = 29.97 ms, its dry hint
//     to 59.97 ms (the build before: nothing left after step 2's 400,
//     dry to 130 ms).
//
// quantum=0 and push_every=0 (no demands recorded) grant as before.
func TestOwnRegionShareAndUntilDry(t *testing.T) {
	for _, tc := range []struct {
		name, param      string
		second, third    int64
		thirdEmptyUntil  time.Duration
		thirdHintSlackNs time.Duration
	}{
		{"quantum=20ms", "quantum=20ms", 115, 87, 59_967_213, 2},
		{"quantum=0", "quantum=0", 400, 0, 130 * time.Millisecond, 0},
		{"push_every=0", "push_every=0", 400, 0, 130 * time.Millisecond, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, key := shareSetup(t, tc.param)
			if got := askWith(t, g, 10*time.Millisecond, "eu.n1", &peerv1.RegionLeaseAsk{Key: key, Seq: 1, Tokens: 600, DemandMtps: 6_000_000}); got.Tokens != 600 || got.EmptyUntilNs != 0 {
				t.Fatalf("first ask: granted %d (dry to %d ns), want 600 and no hint", got.Tokens, got.EmptyUntilNs)
			}
			got := askWith(t, g, 10*time.Millisecond, "eu.n2", &peerv1.RegionLeaseAsk{Key: key, Seq: 1, Tokens: 400, DemandMtps: 9_000_000})
			if got.Tokens != tc.second || got.EmptyUntilNs != 0 {
				t.Errorf("second ask: granted %d (dry to %d ns), want %d and no hint", got.Tokens, got.EmptyUntilNs, tc.second)
			}
			got = askWith(t, g, 30*time.Millisecond, "eu.n1", &peerv1.RegionLeaseAsk{Key: key, Seq: 2, Tokens: 600, DemandMtps: 12_000_000, Spent: []uint64{1}})
			if d := time.Duration(got.EmptyUntilNs) - tc.thirdEmptyUntil; got.Tokens != tc.third || d < -tc.thirdHintSlackNs || d > tc.thirdHintSlackNs {
				t.Errorf("third ask: granted %d, dry to %s; want %d, dry to %s", got.Tokens, time.Duration(got.EmptyUntilNs), tc.third, tc.thirdEmptyUntil)
			}
		})
	}
}
