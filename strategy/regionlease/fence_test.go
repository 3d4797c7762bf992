package regionlease_test

import (
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"
	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// TestSlowKeyFencedAtItsFirstLease: the global owner ships a key's fence
// to its replica (another region's node here) when it first decides the
// key only for a rule whose regions hold stocks (1,000/s: r * 2 *
// latency_hint is 100 tokens, at least min_lease); a slower rule's key (1/s:
// 0.1 token), decided at G through its ordering buffer, ships none then,
// and its fence goes out with its first lease (here a node of G's region
// asking for one).
func TestSlowKeyFencedAtItsFirstLease(t *testing.T) {
	members := []strategy.NodeID{"eu.n0", "eu.n1", "us.n2"}
	for _, tc := range []struct {
		name  string
		rate  bucket.Rate
		fence bool // a fence at the key's first request
	}{{"1000/s", bucket.Rate{Tokens: 1, Per: time.Millisecond}, true}, {"1/s", bucket.Rate{Tokens: 1, Per: time.Second}, false}} {
		t.Run(tc.name, func(t *testing.T) {
			// only G is driven: what it sends is the test
			g := startedNode(t, "eu.n0", members, tc.rate, 10, 50*time.Millisecond, "replicas=1")
			key := ownedKey(t, members, "eu.n0")
			fences := func(fx *strategy.Effects) (n int) {
				for _, m := range fx.Messages {
					var pm peerv1.RegionLeaseMessage
					if err := proto.Unmarshal(m.Payload, &pm); err != nil {
						t.Fatal(err)
					}
					if pm.GetReplica() != nil {
						n++
					}
				}
				return n
			}
			var fx strategy.Effects
			g.Request(time.Second, strategy.Request{ID: 1, Key: key, Tokens: 1, Arrival: time.Second}, &fx)
			g.Tick(time.Second, &fx)
			if got := fences(&fx) > 0; got != tc.fence {
				t.Fatalf("fence shipped at the key's first request: %v, want %v", got, tc.fence)
			}
			if tc.fence {
				return
			}
			// a node of G's region asks for a lease of the slow key: the
			// fence goes out with it (in G's first incarnation the first
			// fence shipped covers the lease: the replica holds it, a later
			// one or none, and with none takes the key over only after the
			// whole takeover)
			b, _ := proto.Marshal(&peerv1.RegionLeaseMessage{Body: &peerv1.RegionLeaseMessage_Ask{Ask: &peerv1.RegionLeaseAsk{
				Key: key, Seq: 1, Tokens: 4, AskedAtNs: int64(20 * time.Second), DemandMtps: 50_000}}})
			fx = strategy.Effects{}
			if err := g.Receive(20*time.Second, "eu.n1", b, &fx); err != nil {
				t.Fatal(err)
			}
			g.Tick(20*time.Second, &fx)
			if fences(&fx) == 0 {
				t.Fatal("a lease asked for: no fence shipped to the replica")
			}
		})
	}
}
