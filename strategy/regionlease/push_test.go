package regionlease_test

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"
	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/regionlease"
)

// wan is a two-node network for the push tests: every message takes
// oneWay; drop, when set, loses the messages it reports true for.
type wan struct {
	t      *testing.T
	nodes  map[strategy.NodeID]*regionlease.RegionLease
	all    []*regionlease.RegionLease
	oneWay time.Duration
	queue  []wanMsg
	drop   func(from strategy.NodeID, m *peerv1.RegionLeaseMessage) bool
	// mutate, when set, may change a message before it is sent (true:
	// changed); unchecked turns the invariant's check off (a holder made
	// to break it on purpose).
	mutate    func(m *peerv1.RegionLeaseMessage) bool
	unchecked bool
	seen      func(at time.Duration, from, to strategy.NodeID, m *peerv1.RegionLeaseMessage)
	// ahead is how far a node's clock runs ahead of the test's (none:
	// the clocks agree); messages travel in the test's time.
	ahead map[strategy.NodeID]time.Duration
}

// clock is node id's time at the test's time now.
func (w *wan) clock(id strategy.NodeID, now time.Duration) time.Duration { return now + w.ahead[id] }

type wanMsg struct {
	at       time.Duration
	from, to strategy.NodeID
	payload  []byte
}

func (w *wan) send(now time.Duration, from strategy.NodeID, fx *strategy.Effects) {
	for _, m := range fx.Messages {
		var pm peerv1.RegionLeaseMessage
		if err := proto.Unmarshal(m.Payload, &pm); err != nil {
			w.t.Fatal(err)
		}
		if w.drop != nil && w.drop(from, &pm) {
			continue
		}
		payload := m.Payload
		if w.mutate != nil && w.mutate(&pm) {
			b, err := proto.Marshal(&pm)
			if err != nil {
				w.t.Fatal(err)
			}
			payload = b
		}
		w.queue = append(w.queue, wanMsg{at: now + w.oneWay, from: from, to: m.To, payload: payload})
	}
	fx.Reset()
}

// step delivers the messages due at now, ticks every node, and checks the
// envelope's invariant (Conserved).
func (w *wan) step(now time.Duration) {
	var fx strategy.Effects
	var due []wanMsg
	rest := w.queue[:0:0]
	for _, m := range w.queue {
		if m.at > now {
			rest = append(rest, m)
		} else {
			due = append(due, m)
		}
	}
	w.queue = rest
	for _, m := range due {
		if w.seen != nil {
			var pm peerv1.RegionLeaseMessage
			_ = proto.Unmarshal(m.payload, &pm)
			w.seen(now, m.from, m.to, &pm)
		}
		if err := w.nodes[m.to].Receive(w.clock(m.to, now), m.from, m.payload, &fx); err != nil {
			w.t.Fatal(err)
		}
		w.send(now, m.to, &fx)
	}
	for _, id := range []strategy.NodeID{"eu.n0", "us.n1"} {
		w.nodes[id].Tick(w.clock(id, now), &fx)
		w.send(now, id, &fx)
	}
	if w.unchecked {
		return
	}
	if err := regionlease.Conserved(w.nodes, w.all, nil, 10, now); err != nil {
		w.t.Fatal(err)
	}
}

// pushSetup builds the global owner eu.n0 and the regional owner us.n1
// (70 ms apart; rate 100/s, burst 10, replicas=0) and a key eu.n0 owns,
// whose bucket eu.n0 has drained at 1 s.
func pushSetup(t *testing.T, params ...string) (*wan, string) {
	t.Helper()
	members := []strategy.NodeID{"eu.n0", "us.n1"}
	ps, err := strategy.ParseParams(append([]string{"replicas=0", "min_lease=1"}, params...))
	if err != nil {
		t.Fatal(err)
	}
	w := &wan{t: t, nodes: map[strategy.NodeID]*regionlease.RegionLease{}, oneWay: 70 * time.Millisecond}
	for _, id := range members {
		l, err := regionlease.New(strategy.Config{Self: id, Members: members, Rate: bucket.Rate{Tokens: 1, Per: 10 * time.Millisecond},
			Burst: 10, Params: ps, Rand: rand.New(rand.NewPCG(1, 1)), LatencyHint: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		var fx strategy.Effects
		l.Start(0, &fx)
		w.nodes[id], w.all = l, append(w.all, l)
	}
	g := w.nodes["eu.n0"]
	var key string
	for i := 0; key == ""; i++ {
		k := "k" + string(rune('a'+i))
		var fx strategy.Effects
		if _, ok := g.Request(time.Millisecond, strategy.Request{ID: uint64(i + 1), Key: k, Tokens: 1, Arrival: time.Millisecond}, &fx); ok {
			key = k
		}
	}
	for id := uint64(100); ; id++ {
		var fx strategy.Effects
		if d, _ := g.Request(time.Second, strategy.Request{ID: id, Key: key, Tokens: 1, Arrival: time.Second}, &fx); !d.Allowed {
			break
		}
	}
	return w, key
}

// run offers key at us.n1 (one request every 2 ms, from 1 s) and steps the
// network every millisecond until end.
func (w *wan) run(key string, end time.Duration) {
	id := uint64(1000)
	for now := time.Second; now <= end; now += time.Millisecond {
		if now%(2*time.Millisecond) == 0 {
			id++
			var fx strategy.Effects
			w.nodes["us.n1"].Request(now, strategy.Request{ID: id, Key: key, Tokens: 1, Arrival: now}, &fx)
			w.send(now, "us.n1", &fx)
		}
		w.step(now)
	}
}

// runBoth offers key at both eu.n0 and us.n1 (one request each every 2
// ms, from 1 s to 3 s of the test's time: 500/s each), steps the network
// every millisecond, and calls admitted with each admitted request's time
// (the test's) and node.
func (w *wan) runBoth(key string, admitted func(now time.Duration, n strategy.NodeID)) {
	id := uint64(1000)
	for now := time.Second; now <= 3*time.Second; now += time.Millisecond {
		if now%(2*time.Millisecond) == 0 {
			for _, n := range []strategy.NodeID{"eu.n0", "us.n1"} {
				id++
				var fx strategy.Effects
				at := w.clock(n, now)
				d, ok := w.nodes[n].Request(at, strategy.Request{ID: id, Key: key, Tokens: 1, Arrival: at}, &fx)
				w.send(now, n, &fx)
				if ok && d.Allowed {
					admitted(now, n)
				}
			}
		}
		w.step(now)
	}
}

// A region whose demand rises while the key is contended receives the
// global owner's refill as pushes, one WAN one-way delay after each push,
// instead of once per round trip as the grant of its next ask: from 1.5 s
// to 2.5 s of an overload at us.n1 (500/s against 100/s), the longest
// time between two arrivals of tokens at us.n1 (grants and pushes, each
// seq once) is
// under one round trip (2 x 70 ms). With push_every=0 (what the build
// before pushed grants did) it is at least one round trip: the test
// checks that too, so that it fails on a build without pushes. The
// envelope's invariant (Conserved) is checked at every millisecond.
func TestPushReachesRegionWithinOneWay(t *testing.T) {
	gap := func(params ...string) (time.Duration, int) {
		w, key := pushSetup(t, params...)
		var last, most time.Duration
		pushes := 0
		seen := map[uint64]bool{} // a resent ask's grant comes again
		w.seen = func(at time.Duration, from, to strategy.NodeID, m *peerv1.RegionLeaseMessage) {
			g := m.GetGrant()
			if g == nil || to != "us.n1" || g.Tokens == 0 || seen[g.Seq] || at < 1500*time.Millisecond || at > 2500*time.Millisecond {
				return
			}
			seen[g.Seq] = true
			if g.Pushed {
				pushes++
			}
			if last > 0 {
				most = max(most, at-last)
			}
			last = at
		}
		w.run(key, 2500*time.Millisecond)
		return most, pushes
	}
	rtt := 140 * time.Millisecond
	with, pushes := gap()
	without, _ := gap("push_every=0")
	t.Logf("longest gap between tokens arriving at us.n1: %v with pushes (%d pushes), %v without", with, pushes, without)
	if pushes == 0 || with >= rtt {
		t.Errorf("with pushes: longest gap %v (%d pushes), want under a round trip (%v)", with, pushes, rtt)
	}
	if without < rtt {
		t.Errorf("without pushes: longest gap %v, want at least a round trip (%v): the test does not tell the builds apart", without, rtt)
	}
}

// A push lost on the WAN is taken with the next push to the same holder,
// which carries it again (prev_seq): every pushed lease reaches us.n1
// though the first push is lost.
func TestPushLostIsCarriedByTheNext(t *testing.T) {
	w, key := pushSetup(t)
	dropped := uint64(0)
	w.drop = func(from strategy.NodeID, m *peerv1.RegionLeaseMessage) bool {
		if g := m.GetGrant(); g != nil && g.Pushed && dropped == 0 {
			dropped = g.Seq
			return true
		}
		return false
	}
	carried := false
	w.seen = func(_ time.Duration, _, _ strategy.NodeID, m *peerv1.RegionLeaseMessage) {
		if g := m.GetGrant(); g != nil && g.Pushed && dropped != 0 && g.PrevSeq == dropped {
			carried = true
		}
	}
	w.run(key, 2*time.Second)
	if dropped == 0 {
		t.Fatal("no push was sent")
	}
	if !carried {
		t.Errorf("the lost push (seq %#x) was not carried by the next one", dropped)
	}
}

// A mixed cluster: an ask without takes_push (a regional owner of a build
// without pushes) gets its grant and never a pushed one; push_every=0
// turns pushes off.
func TestNoPushWithoutTakesPush(t *testing.T) {
	for _, tc := range []struct {
		name   string
		takes  bool
		params []string
	}{{"old holder", false, nil}, {"push_every=0", true, []string{"push_every=0"}}} {
		t.Run(tc.name, func(t *testing.T) {
			w, key := pushSetup(t, tc.params...)
			pushed := len(pushedGrants(t, w.nodes["eu.n0"], key, &peerv1.RegionLeaseAsk{TakesPush: tc.takes}, false))
			if pushed != 0 {
				t.Errorf("%d pushed grants, want none", pushed)
			}
		})
	}
}

// pushedGrants has g (the key's global owner) receive 10 asks of key from
// us.n1, 100 ms apart from 1 s (ask's flags, 10 tokens, 200/s reported),
// ticking g every millisecond (with one request of its own each
// millisecond when own, so that the key stays contended), and returns
// the pushed grants g sent.
func pushedGrants(t *testing.T, g *regionlease.RegionLease, key string, ask *peerv1.RegionLeaseAsk, own bool) []*peerv1.RegionLeaseGrant {
	t.Helper()
	var out []*peerv1.RegionLeaseGrant
	for i := 0; i < 10; i++ {
		now := time.Second + time.Duration(i)*100*time.Millisecond
		a := proto.Clone(ask).(*peerv1.RegionLeaseAsk)
		a.Key, a.Seq, a.Tokens, a.AskedAtNs, a.DemandMtps = key, uint64(i+1), 10, int64(now), 200_000
		b, err := proto.Marshal(&peerv1.RegionLeaseMessage{Body: &peerv1.RegionLeaseMessage_Ask{Ask: a}})
		if err != nil {
			t.Fatal(err)
		}
		var fx strategy.Effects
		if err := g.Receive(now, "us.n1", b, &fx); err != nil {
			t.Fatal(err)
		}
		for at := now; at < now+100*time.Millisecond; at += time.Millisecond {
			if own {
				var mine strategy.Effects
				g.Request(at, strategy.Request{ID: uint64(at), Key: key, Tokens: 1, Arrival: at}, &mine)
			}
			g.Tick(at, &fx)
		}
		for _, p := range pushesIn(t, &fx) {
			out = append(out, p.grant)
		}
	}
	return out
}

// sentPush is a pushed grant and the node it was sent to.
type sentPush struct {
	to    strategy.NodeID
	grant *peerv1.RegionLeaseGrant
}

// pushesIn is the pushed grants among fx's messages, in order.
func pushesIn(t *testing.T, fx *strategy.Effects) []sentPush {
	t.Helper()
	var out []sentPush
	for _, m := range fx.Messages {
		var pm peerv1.RegionLeaseMessage
		if err := proto.Unmarshal(m.Payload, &pm); err != nil {
			t.Fatal(err)
		}
		if gr := pm.GetGrant(); gr != nil && gr.Pushed {
			out = append(out, sentPush{m.To, gr})
		}
	}
	return out
}

// How a contended key's refill is divided between the global owner's own
// region and the other regions (region_split, split.go): G (eu.n0)
// offered its own requests at 500/s and the regional owner us.n1 500/s,
// against r = 100/s, from 1 s to 3 s; the tokens each admits from 1.5 s
// on (about 150 in all). Under first, eu.n0's own requests take the refill
// as it comes and us.n1 gets none (the measured split: 151 and 0); under
// share, us.n1 gets a part (92 and 41: eu's share s of the demand takes
// about s(2-s), and at 100/s a push every 6 ms carries under a token); under
// demand, each gets about half (61 and 86: eu's own demand is measured
// over a window that starts with its load at 1 s), also when every push
// is below min_lease (67 and 58). The envelope's
// invariant (Conserved) is checked at every millisecond.
func TestRegionSplit(t *testing.T) {
	for _, tc := range []struct {
		split                string
		extra                []string
		remoteMin, remoteMax int64
		ownMin               int64
	}{
		{"first", nil, 0, 10, 120},
		{"share", nil, 30, 70, 70},
		{"demand", nil, 55, 110, 40},
		// Pushes of made tokens (push_ahead=0: dated pushes skip no
		// share) of 2.5 tokens, below min_lease: the shares they skip
		// stay in the bucket for the next push, not in G's region's
		// budget (belowMin): us.n1 got 9 and eu.n0 139 without it.
		{"demand", []string{"min_lease=4", "push_every=50ms", "push_ahead=0"}, 45, 110, 40},
	} {
		t.Run(strings.Join(append([]string{tc.split}, tc.extra...), ","), func(t *testing.T) {
			w, key := pushSetup(t, append([]string{"region_split=" + tc.split}, tc.extra...)...)
			var own, remote int64
			w.runBoth(key, func(now time.Duration, n strategy.NodeID) {
				if now >= 1500*time.Millisecond {
					if n == "eu.n0" {
						own++
					} else {
						remote++
					}
				}
			})
			t.Logf("eu.n0 %d, us.n1 %d", own, remote)
			if own+remote < 120 || own+remote > 160 || remote < tc.remoteMin || remote > tc.remoteMax || own < tc.ownMin {
				t.Errorf("from 1.5 s to 3 s eu.n0 (G's region) admitted %d, us.n1 %d; want 120-160 in all, us.n1 %d-%d, eu.n0 at least %d",
					own, remote, tc.remoteMin, tc.remoteMax, tc.ownMin)
			}
		})
	}
}
