package regionlease_test

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"
	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/rendezvous"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/regionlease"
)

// Helpers the scripted tests share: one node driven by hand, its messages
// delivered and decoded one at a time.

// startedNode builds self's RegionLease among members (parameters
// replicas=0 and params; rate and burst per key; the latency hint hint,
// the WAN's one-way latency) and starts it at 0.
func startedNode(t *testing.T, self strategy.NodeID, members []strategy.NodeID, rate bucket.Rate, burst int64, hint time.Duration, params ...string) *regionlease.RegionLease {
	t.Helper()
	ps, err := strategy.ParseParams(append([]string{"replicas=0"}, params...))
	if err != nil {
		t.Fatal(err)
	}
	n, err := regionlease.New(strategy.Config{Self: self, Members: members, Rate: rate,
		Burst: burst, Params: ps, Rand: rand.New(rand.NewPCG(1, 1)), LatencyHint: hint})
	if err != nil {
		t.Fatal(err)
	}
	var fx strategy.Effects
	n.Start(0, &fx)
	return n
}

// ownedKey is the first of ka, kb, ... whose global owner among members
// is owner.
func ownedKey(t *testing.T, members []strategy.NodeID, owner strategy.NodeID) string {
	t.Helper()
	for i := 0; i < 100; i++ {
		if k := "k" + string(rune('a'+i)); rendezvous.Owner(k, members) == owner {
			return k
		}
	}
	t.Fatalf("no key owned by %s", owner)
	return ""
}

// ownerSetup starts members[0] (startedNode, latency hint 50 ms) and
// returns it with a key it is the global owner of (ownedKey).
func ownerSetup(t *testing.T, members []strategy.NodeID, rate bucket.Rate, burst int64, params ...string) (*regionlease.RegionLease, string) {
	t.Helper()
	return startedNode(t, members[0], members, rate, burst, 50*time.Millisecond, params...), ownedKey(t, members, members[0])
}

// regionalKey is the first of kaa, kba, ... whose global owner among
// members is members[0] and whose regional owner, among members[1:] (one
// region), is members[1].
func regionalKey(t *testing.T, members []strategy.NodeID) string {
	t.Helper()
	for i := 0; i < 200; i++ {
		k := "k" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		if rendezvous.Owner(k, members) == members[0] && rendezvous.Owner(k, members[1:]) == members[1] {
			return k
		}
	}
	t.Fatalf("no key owned by %s with %s its regional owner", members[0], members[1])
	return ""
}

// deliver hands n the message m from `from` at now and returns the
// messages n sends in answer.
func deliver(t *testing.T, n *regionlease.RegionLease, now time.Duration, from strategy.NodeID, m *peerv1.RegionLeaseMessage) []*peerv1.RegionLeaseMessage {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var fx strategy.Effects
	if err := n.Receive(now, from, b, &fx); err != nil {
		t.Fatal(err)
	}
	return decoded(t, &fx)
}

// decoded is fx's messages, decoded (their recipients dropped).
func decoded(t *testing.T, fx *strategy.Effects) []*peerv1.RegionLeaseMessage {
	t.Helper()
	var out []*peerv1.RegionLeaseMessage
	for _, m := range fx.Messages {
		var pm peerv1.RegionLeaseMessage
		if err := proto.Unmarshal(m.Payload, &pm); err != nil {
			t.Fatal(err)
		}
		out = append(out, &pm)
	}
	return out
}

// askGrant sends g an ask of tokens of key from `from` at now (seq, the
// demand mtps it reports in milli-tokens per second, taking pushes unless
// from is in eu) and returns g's grant to it (not a push).
func askGrant(t *testing.T, g *regionlease.RegionLease, now time.Duration, from strategy.NodeID, key string, seq uint64, tokens int64, mtps uint64) *peerv1.RegionLeaseGrant {
	t.Helper()
	return askWith(t, g, now, from, &peerv1.RegionLeaseAsk{Key: key, Seq: seq, Tokens: tokens, DemandMtps: mtps, TakesPush: !strings.HasPrefix(string(from), "eu.")})
}

// askWith has g receive ask a from node from at now (AskedAtNs set to
// now) and returns g's grant of it.
func askWith(t *testing.T, g *regionlease.RegionLease, now time.Duration, from strategy.NodeID, a *peerv1.RegionLeaseAsk) *peerv1.RegionLeaseGrant {
	t.Helper()
	a.AskedAtNs = int64(now)
	b, err := proto.Marshal(&peerv1.RegionLeaseMessage{Body: &peerv1.RegionLeaseMessage_Ask{Ask: a}})
	if err != nil {
		t.Fatal(err)
	}
	var fx strategy.Effects
	if err := g.Receive(now, from, b, &fx); err != nil {
		t.Fatal(err)
	}
	for _, m := range fx.Messages {
		var pm peerv1.RegionLeaseMessage
		if err := proto.Unmarshal(m.Payload, &pm); err != nil {
			t.Fatal(err)
		}
		if gr := pm.GetGrant(); gr != nil && !gr.Pushed && m.To == from && gr.Seq == a.Seq {
			return gr
		}
	}
	t.Fatalf("no grant for %s's ask %d", from, a.Seq)
	return nil
}

// ask is askGrant's tokens.
func ask(t *testing.T, g *regionlease.RegionLease, now time.Duration, from strategy.NodeID, key string, seq uint64, tokens int64, mtps uint64) int64 {
	t.Helper()
	return askGrant(t, g, now, from, key, seq, tokens, mtps).Tokens
}
