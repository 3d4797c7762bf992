package quota

import (
	"math/rand/v2"
	"testing"
	"time"

	peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// FuzzReceive: any peer frame — replicas and usage reports with client ids
// among the seeds (their client_id and acked_sent_at_ns fields, the newest
// decoding) — is either refused with an error and changes nothing the
// bound rests on, or taken; it never panics, and the owner's units and
// burst stay conserved (held = shares + releases, within the key's).
func FuzzReceive(f *testing.F) {
	now := 10 * time.Second
	for _, m := range []any{
		&peerv1.QuotaReplica{Key: "k", AtNs: int64(now), FillIntervalS: 1, Units: 100, Burst: 100, ReserveTokens: 10,
			Shares: []*peerv1.QuotaReplicaShare{{Node: "n0", Client: 1, TokensPerFill: 50, MaxTokens: 40, Sent: true, Seq: 3,
				SentAtNs: int64(now - time.Second), ExpiresNs: int64(now + time.Second), Demand: 30, Live: true,
				ClientId: "envoy-1", AckedSentAtNs: int64(now - 2*time.Second)}}},
		&peerv1.QuotaReplica{Key: "k", AtNs: int64(now), Handover: true, FillIntervalS: 1, Units: 100, Burst: 100,
			Shares: []*peerv1.QuotaReplicaShare{{Node: "n2", Client: 7, TokensPerFill: 20, MaxTokens: 20, Sent: true, Seq: 1,
				SentAtNs: int64(now), ExpiresNs: int64(now + 2*time.Second), ClientId: "envoy-2", AckedSentAtNs: int64(now)}}},
		&peerv1.QuotaUsage{Key: "k", Client: 4, Allowed: 3, ElapsedNs: int64(time.Second), ClientId: "envoy-1"},
		&peerv1.QuotaUsage{Key: "k", Client: 5, ElapsedNs: int64(time.Second), ClientId: "envoy-2", Resync: true,
			HeldTokensPerFill: 10, HeldMaxTokens: 10, HeldExpiresNs: int64(now + time.Second)},
		&peerv1.QuotaAck{Key: "k", Client: 4, Seq: 1},
	} {
		f.Add(frame(m))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		// n1 owns "k" among n1 and n2 (n0, the replica's sender, has left)
		q, err := New(strategy.Config{Self: "n1", Members: []strategy.NodeID{"n1", "n2"}, Rate: bucketRate(100), Burst: 100,
			Rand: rand.New(rand.NewPCG(1, 2))})
		if err != nil {
			t.Fatal(err)
		}
		var fx strategy.Effects
		q.Start(0, &fx)
		q.changes = append(q.changes, change{at: now - 50*time.Millisecond, prev: []strategy.NodeID{"n0", "n1", "n2"}})
		records := len(q.records)
		if err := q.Receive(now, "n0", data, &fx); err != nil && len(q.records) != records {
			t.Fatalf("a refused frame (%v) changed the records", err)
		}
		q.Tick(now+time.Second, &fx)
		for key, a := range q.allocs {
			var u, b int64
			for _, s := range a.shares {
				if s.units < 0 || s.burst < 0 || len(s.cid) > strategy.MaxQuotaClientIDBytes {
					t.Fatalf("%s: share %+v", key, *s)
				}
				u += s.units
				b += s.burst
			}
			for _, r := range a.pending {
				u += r.units
				b += r.burst
			}
			if u != a.heldUnits || b != a.heldBurst || u > q.sh.units || b > q.sh.burst {
				t.Fatalf("%s: held %d units %d burst, shares and releases %d, %d (key %d, %d)", key, a.heldUnits, a.heldBurst, u, b, q.sh.units, q.sh.burst)
			}
		}
	})
}
