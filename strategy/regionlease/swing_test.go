package regionlease_test

import (
	"testing"
	"time"

	peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"
	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// A regional owner that receives pushes tells its region's nodes to
// refuse only until the next push is expected, not until the end of the
// global owner's last dry hint to the region (rlead after its ask): a
// push that lands meanwhile is lent at once instead of waiting in the
// stock for the nodes' hints to end (docs/EVALUATION.md, "the steady-state
// swing"). us.n1 (the key's regional owner in us; the global owner eu.n0,
// 200 ms latency hint: rlead 375 ms, push_every 25 ms, lan_latency 5 ms)
// asks at 1 s, is granted 2 tokens with the hint "dry until the ask +
// 375 ms" at 1.200 s, is pushed 3 tokens at 1.205 s; us.n2's asks then
// empty the stock, and the grant that finds it empty must say "dry" until
// no later than the next push (1.205 s + 25 ms; at least 4*lan_latency
// from now). The build before this change said 1.375 s (the global
// owner's hint), which fails.
func TestRegionHintEndsWithPush(t *testing.T) {
	members := []strategy.NodeID{"eu.n0", "us.n1", "us.n2"}
	r := startedNode(t, "us.n1", members, bucket.Rate{Tokens: 1, Per: 10 * time.Millisecond}, 100, 200*time.Millisecond, "min_lease=1")
	var fx strategy.Effects
	key := regionalKey(t, members)
	// us.n1's own requests: it asks eu.n0 for a stock.
	const start = time.Second
	var regionAsk *peerv1.RegionLeaseAsk
	for i := 0; i < 10 && regionAsk == nil; i++ {
		now := start + time.Duration(i)*time.Millisecond
		fx.Reset()
		r.Request(now, strategy.Request{ID: uint64(i + 1), Key: key, Tokens: 1, Arrival: now}, &fx)
		for _, m := range decoded(t, &fx) {
			if a := m.GetAsk(); a != nil {
				regionAsk = a
			}
		}
	}
	if regionAsk == nil {
		t.Fatal("us.n1 did not ask eu.n0 for a stock")
	}
	askedAt := time.Duration(regionAsk.AskedAtNs)
	dryUntil := askedAt + 375*time.Millisecond // the global owner's dry hint: the ask + rlead
	deliver(t, r, askedAt+200*time.Millisecond, "eu.n0", &peerv1.RegionLeaseMessage{Body: &peerv1.RegionLeaseMessage_Grant{Grant: &peerv1.RegionLeaseGrant{
		Key: key, Seq: regionAsk.Seq, Tokens: 2, ExpiresNs: int64(askedAt + 1500*time.Millisecond), EmptyUntilNs: int64(dryUntil)}}})
	pushAt := askedAt + 205*time.Millisecond
	deliver(t, r, pushAt, "eu.n0", &peerv1.RegionLeaseMessage{Body: &peerv1.RegionLeaseMessage_Grant{Grant: &peerv1.RegionLeaseGrant{
		Key: key, Seq: 1<<63 | 1, Tokens: 3, ExpiresNs: int64(pushAt + 1500*time.Millisecond), Pushed: true}}})
	now := pushAt + time.Millisecond
	var hint time.Duration
	var lent int64
	for seq := uint64(1); seq <= 5 && hint == 0; seq++ {
		for _, m := range deliver(t, r, now, "us.n2", &peerv1.RegionLeaseMessage{Body: &peerv1.RegionLeaseMessage_Ask{Ask: &peerv1.RegionLeaseAsk{
			Key: key, Seq: seq, Tokens: 20, AskedAtNs: int64(now), DemandMtps: 50_000}}}) {
			if g := m.GetGrant(); g != nil && g.Seq == seq {
				lent += g.Tokens
				hint = time.Duration(g.EmptyUntilNs)
			}
		}
	}
	if lent == 0 || hint == 0 {
		t.Fatalf("us.n2's asks: lent %d tokens, last dry hint %v; want the push's tokens lent, then a dry hint", lent, hint)
	}
	if limit := pushAt + 25*time.Millisecond + 20*time.Millisecond; hint > limit {
		t.Errorf("dry hint to us.n2 after the push: until %v, want no later than the next push (%v); the global owner's hint ends at %v", hint, limit, dryUntil)
	}
}

// While a key is contended, a remote regional owner that takes pushes
// is lent, on an ask after its first, at most its share of the level by
// the demands reported (as a push splits it), with a dry hint, instead of
// the whole level: the global owner's own requests drained its bucket at
// 20 ms (51 in 500 ms: about 102/s), us.n2 reports 100/s, the bucket holds
// 50 tokens at 520 ms, us.n2 asks 100: about 50*100/202 rounded up, 25
// tokens (asserted as 20 to 30: the owner's own demand is measured over
// its window). Without pushes (push_every=0) and before the bucket was dry
// it gets the whole level. The build before this change lent 50, which
// fails.
func TestRegionAskGetsItsShareWhileContended(t *testing.T) {
	for _, tc := range []struct {
		name, param string
		dry         bool
		lo, hi      int64
	}{{"contended", "", true, 20, 30}, {"push_every=0", "push_every=0", true, 50, 51}, {"not dry", "", false, 50, 51}} {
		t.Run(tc.name, func(t *testing.T) {
			var params []string
			if tc.param != "" {
				params = append(params, tc.param)
			}
			g, key := burstSetup(t, params...)
			askGrant(t, g, 10*time.Millisecond, "us.n2", key, 1, 5, 100_000) // first ask: the burst's share
			if tc.dry {
				var fx strategy.Effects
				for id := uint64(1); ; id++ { // the owner's own requests drain the bucket: dry
					if d, _ := g.Request(20*time.Millisecond, strategy.Request{ID: id, Key: key, Tokens: 1, Arrival: 20 * time.Millisecond}, &fx); !d.Allowed {
						break
					}
				}
			}
			now := 520 * time.Millisecond
			if !tc.dry {
				now = 20 * time.Millisecond
			}
			gr := askGrant(t, g, now, "us.n2", key, 2, 100, 100_000)
			if gr.Tokens < tc.lo || gr.Tokens > tc.hi {
				t.Errorf("us.n2's second ask of 100: granted %d, want %d to %d", gr.Tokens, tc.lo, tc.hi)
			}
			if tc.name == "contended" && gr.EmptyUntilNs == 0 {
				t.Errorf("us.n2's grant cut to its share carries no dry hint")
			}
		})
	}
}
