package regionlease_test

import (
	"testing"
	"time"

	peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"
	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// When a tenant's load leaves a region (follow the sun), what the region
// holds goes back to the global owner at once (docs/EVALUATION.md,
// "regionlease: follow-the-sun"): us.n1, the regional owner of a key it
// offered at 500/s until 1.5 s, holds no stock from 1.6 s on: it counts
// the key idle after 20 of its arrivals' time (40 ms at 500/s, at least
// 4*lead = 40 ms; the build before waited idle = 250 ms), and a push
// that reaches it after that (the global owner pushes until a return
// tells it the region is idle, and its pushes in flight land later) goes
// back as it comes (the build before held it until its end, region_ttl
// later). Tokens are conserved throughout (the wan's step checks
// Conserved every millisecond).
func TestFollowIdleRegionGivesBackAtOnce(t *testing.T) {
	w, key := pushSetup(t)
	pushesAfter := 0
	w.seen = func(at time.Duration, _, to strategy.NodeID, m *peerv1.RegionLeaseMessage) {
		if g := m.GetGrant(); g != nil && g.Pushed && to == "us.n1" && at >= 1600*time.Millisecond && g.Tokens > 0 {
			pushesAfter++
		}
	}
	stop, end := 1500*time.Millisecond, 3*time.Second
	id := uint64(1000)
	held := time.Duration(0)
	for now := time.Second; now <= end; now += time.Millisecond {
		if now < stop && now%(2*time.Millisecond) == 0 {
			id++
			var fx strategy.Effects
			w.nodes["us.n1"].Request(now, strategy.Request{ID: id, Key: key, Tokens: 1, Arrival: now}, &fx)
			w.send(now, "us.n1", &fx)
		}
		w.step(now)
		if now >= 1600*time.Millisecond && held == 0 && w.nodes["us.n1"].FloatByKey(now)[key].Stock > 0 {
			held = now
		}
	}
	t.Logf("pushes reaching us.n1 from 1.6 s: %d", pushesAfter)
	if held != 0 {
		t.Errorf("us.n1 holds a stock of %q at %v, 100 ms after its load stopped at 1.5 s (at 500/s): want none", key, held)
	}
}

// A node whose load stopped does not ask its regional owner again when
// its renew timer (set by a dry hint) fires: us.n2 (its regional owner
// us.n1, the global owner eu.n0) is offered the key every 5 ms (200/s)
// until 1.2 s; every ask it sends is answered with no tokens and a dry
// hint of 30 ms (a region that waits for its stock). From 1.2 s + lead +
// 3/d (10 + 15 ms) it has missed 3 of its arrivals and sends no ask. The
// build before asked on every renew timer for as long as its demand
// estimate (a 1 s window) stayed up, and, in follow-the-sun, the region
// whose load had just left took period-sized leases of its stock.
func TestFollowQuietNodeDoesNotRenew(t *testing.T) {
	members := []strategy.NodeID{"eu.n0", "us.n1", "us.n2"}
	n := startedNode(t, "us.n2", members, bucket.Rate{Tokens: 1, Per: time.Millisecond}, 1000, 50*time.Millisecond)
	var fx strategy.Effects
	key := regionalKey(t, members)
	stop := 1200 * time.Millisecond
	var asks, late int
	answer := func(now time.Duration) {
		for _, m := range decoded(t, &fx) {
			a := m.GetAsk()
			if a == nil {
				continue
			}
			asks++
			if now >= stop+25*time.Millisecond {
				late++
			}
			fx.Reset()
			deliver(t, n, now+time.Millisecond, "us.n1", &peerv1.RegionLeaseMessage{Body: &peerv1.RegionLeaseMessage_Grant{Grant: &peerv1.RegionLeaseGrant{
				Key: key, Seq: a.Seq, Tokens: 0, ExpiresNs: int64(now + 200*time.Millisecond), EmptyUntilNs: int64(now + 30*time.Millisecond)}}})
		}
		fx.Reset()
	}
	id := uint64(0)
	for now := time.Second; now < 1600*time.Millisecond; now += time.Millisecond {
		if now < stop && now%(5*time.Millisecond) == 0 {
			id++
			n.Request(now, strategy.Request{ID: id, Key: key, Tokens: 1, Arrival: now}, &fx)
			answer(now)
		}
		n.Tick(now, &fx)
		answer(now)
	}
	if asks == 0 {
		t.Fatal("us.n2 never asked us.n1: the test does not reach the renew timer")
	}
	if late != 0 {
		t.Errorf("us.n2 sent %d of its %d asks of %q 25 ms or more after its load stopped at %v: want none", late, asks, key, stop)
	}
}

// A region that gave back unused tokens (its load left: the idle return)
// leaves the global owner's split until it asks again: its last reported
// demand no longer dilutes the share of the region the load moved to.
// eu.n0 owns the key (its own requests, all at 20 ms, drain it:
// contended); us.n1 and ap.n2 asked at 10 ms reporting 100/s each; us.n1
// returns its lease unused at 30 ms; ap.n2's second ask at 520 ms is lent
// its share of the level by the demands reported (askShare): 41 tokens
// with us.n1 out of the split (asserted at least 34). The build before
// this change still counted us.n1's 100/s for the window (1 s) after its
// last ask and lent 26, which fails.
func TestFollowIdleRegionLeavesTheSplit(t *testing.T) {
	members := []strategy.NodeID{"eu.n0", "us.n1", "ap.n2"}
	g := startedNode(t, "eu.n0", members, bucket.Rate{Tokens: 1, Per: 10 * time.Millisecond}, 100, 50*time.Millisecond, "min_lease=1")
	var fx strategy.Effects
	key := ownedKey(t, members, "eu.n0")
	first := askGrant(t, g, 10*time.Millisecond, "us.n1", key, 1, 5, 100_000)
	askGrant(t, g, 10*time.Millisecond, "ap.n2", key, 1, 5, 100_000)
	for id := uint64(1); ; id++ { // the owner's own requests drain the bucket: dry
		if d, _ := g.Request(20*time.Millisecond, strategy.Request{ID: id, Key: key, Tokens: 1, Arrival: 20 * time.Millisecond}, &fx); !d.Allowed {
			break
		}
	}
	if first.Tokens == 0 {
		t.Fatal("us.n1's first ask got no tokens")
	}
	deliver(t, g, 30*time.Millisecond, "us.n1", &peerv1.RegionLeaseMessage{Body: &peerv1.RegionLeaseMessage_Return{Return: &peerv1.RegionLeaseReturn{
		Key: key, Seq: 1, Unused: first.Tokens}}})
	gr := askGrant(t, g, 520*time.Millisecond, "ap.n2", key, 2, 100, 100_000)
	if gr.Tokens < 34 {
		t.Errorf("ap.n2's second ask of 100, us.n1 idle: granted %d, want at least 34 (its share with us.n1 out of the split)", gr.Tokens)
	}
}

// A regional owner whose stock is empty tells its nodes to refuse until
// its next stock is due, also before any push came (a region the load
// just moved to), and counts its ask's round trip as the shortest one
// measured lately: us.n1 (the key's regional owner in us; the global
// owner eu.n0, 200 ms latency hint: rlead 375 ms, a round trip assumed
// 400 ms until measured) asks at 1 s and is granted 2 tokens 100 ms later
// with the hint "dry until the ask + 375 ms"; us.n2's asks take the 2
// tokens, us.n1 asks again, and the grant that finds the stock empty must
// say "dry" until no later than that ask + the 100 ms measured (+ 10 ms).
// The build before said the ask + 362 ms (its moving average of round
// trips, from 400 ms; in follow-the-sun 287 ms where the WAN's was about
// 150, and the grant waited in the stock while the nodes refused), which
// fails.
func TestFollowRegionHintEndsWithItsGrant(t *testing.T) {
	members := []strategy.NodeID{"eu.n0", "us.n1", "us.n2"}
	r := startedNode(t, "us.n1", members, bucket.Rate{Tokens: 1, Per: 10 * time.Millisecond}, 100, 200*time.Millisecond, "min_lease=1")
	var fx strategy.Effects
	key := regionalKey(t, members)
	asked := func(msgs []*peerv1.RegionLeaseMessage) *peerv1.RegionLeaseAsk {
		for _, m := range msgs {
			if a := m.GetAsk(); a != nil {
				return a
			}
		}
		return nil
	}
	var regionAsk *peerv1.RegionLeaseAsk
	for i := 0; i < 10 && regionAsk == nil; i++ {
		now := time.Second + time.Duration(i)*time.Millisecond
		fx.Reset()
		r.Request(now, strategy.Request{ID: uint64(i + 1), Key: key, Tokens: 1, Arrival: now}, &fx)
		regionAsk = asked(decoded(t, &fx))
	}
	if regionAsk == nil {
		t.Fatal("us.n1 did not ask eu.n0 for a stock")
	}
	askedAt := time.Duration(regionAsk.AskedAtNs)
	deliver(t, r, askedAt+100*time.Millisecond, "eu.n0", &peerv1.RegionLeaseMessage{Body: &peerv1.RegionLeaseMessage_Grant{Grant: &peerv1.RegionLeaseGrant{
		Key: key, Seq: regionAsk.Seq, Tokens: 2, ExpiresNs: int64(askedAt + 1500*time.Millisecond), EmptyUntilNs: int64(askedAt + 375*time.Millisecond)}}})
	now := askedAt + 101*time.Millisecond
	var hint, secondAsk time.Duration
	for seq := uint64(1); seq <= 5 && hint == 0; seq++ {
		msgs := deliver(t, r, now, "us.n2", &peerv1.RegionLeaseMessage{Body: &peerv1.RegionLeaseMessage_Ask{Ask: &peerv1.RegionLeaseAsk{
			Key: key, Seq: seq, Tokens: 1, AskedAtNs: int64(now), DemandMtps: 50_000}}})
		if a := asked(msgs); a != nil && a.Seq != regionAsk.Seq && secondAsk == 0 {
			secondAsk = time.Duration(a.AskedAtNs)
		}
		for _, m := range msgs {
			if g := m.GetGrant(); g != nil && g.Seq == seq && g.Tokens == 0 {
				hint = time.Duration(g.EmptyUntilNs)
			}
		}
	}
	if hint == 0 || secondAsk == 0 {
		t.Fatalf("us.n2's asks: dry hint %v, us.n1's second ask at %v; want both", hint, secondAsk)
	}
	if limit := secondAsk + 110*time.Millisecond; hint > limit {
		t.Errorf("dry hint to us.n2 while us.n1's ask of %v is out: until %v, want no later than %v (the ask + the 100 ms round trip measured + 10 ms)", secondAsk, hint, limit)
	}
}
