package adaptive

import (
	"math/big"
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/strategy"
)

type inflight struct {
	at       time.Duration
	seq      int
	from, to strategy.NodeID
	payload  []byte
}

// overcommit drives n nodes by hand for d with one-way latencies uniform in
// [1ms, maxLat] and traffic whose hot node moves every 3 s, and returns the
// largest excess of the summed applied shares of any key over (r, b)
// seen at any millisecond: rate in tokens/s and burst in tokens.
func overcommit(t *testing.T, n int, maxLat time.Duration, params ...string) (rateExcess float64, burstExcess int64, epochs uint64) {
	names := nodeNames(n)
	nodes := map[strategy.NodeID]*Adaptive{}
	for _, m := range names {
		nodes[strategy.NodeID(m)] = newNode(t, m, names, testRate, 10, params...)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	var q []inflight
	seq := 0
	var fx strategy.Effects
	flush := func(from strategy.NodeID, now time.Duration) {
		for _, m := range fx.Messages {
			lat := time.Millisecond + time.Duration(rng.Int64N(int64(maxLat-time.Millisecond)+1))
			q = append(q, inflight{at: now + lat, seq: seq, from: from, to: m.To, payload: m.Payload})
			seq++
		}
		fx.Reset()
	}
	for _, m := range names {
		nodes[strategy.NodeID(m)].Start(0, &fx)
		flush(strategy.NodeID(m), 0)
	}
	keys := []string{"k0", "k1", "k2"}
	r := new(big.Rat).SetFrac64(testRate.Tokens*int64(time.Second), int64(testRate.Per))
	id := uint64(0)
	for now := time.Duration(0); now < 30*time.Second; now += time.Millisecond {
		sort.Slice(q, func(i, j int) bool { return q[i].at < q[j].at || (q[i].at == q[j].at && q[i].seq < q[j].seq) })
		for len(q) > 0 && q[0].at <= now {
			m := q[0]
			q = q[1:]
			if err := nodes[m.to].Receive(now, m.from, m.payload, &fx); err != nil {
				t.Fatal(err)
			}
			flush(m.to, now)
		}
		for i, k := range keys {
			if now%(10*time.Millisecond) == 0 {
				hot := names[(i+int(now/(3*time.Second)))%n]
				id++
				nodes[strategy.NodeID(hot)].Request(now, strategy.Request{ID: id, Key: k, Tokens: 1, Arrival: now}, &fx)
			}
		}
		for _, m := range names {
			nodes[strategy.NodeID(m)].Tick(now, &fx)
			flush(strategy.NodeID(m), now)
		}
		for _, k := range keys {
			sum, bsum := new(big.Rat), int64(0)
			for _, a := range nodes {
				rr, b := a.shareOf(k)
				if rr.Tokens != 0 {
					sum.Add(sum, new(big.Rat).SetFrac64(rr.Tokens*int64(time.Second), int64(rr.Per)))
				}
				bsum += b
			}
			ex, _ := new(big.Rat).Sub(sum, r).Float64()
			rateExcess = max(rateExcess, ex)
			burstExcess = max(burstExcess, bsum-10)
		}
	}
	return rateExcess, burstExcess, nodes["n0"].epoch
}

// With latencies spread less than raise_after, every node lowers before
// any raises: the summed shares never exceed (r, b). With raise_after=0
// and the same latencies they do, for a moment.
func TestNoOverCommitWithinRaiseAfter(t *testing.T) {
	re, be, epochs := overcommit(t, 4, 8*time.Millisecond, "raise_after=10ms")
	t.Logf("raise_after=10ms, latency 1-8ms: %d epochs, max over-commit rate %.4f/s, burst %d", epochs, re, be)
	if epochs < 20 {
		t.Fatalf("only %d epochs", epochs)
	}
	if re > 0 || be > 0 {
		t.Fatalf("over-commit: rate %.4f/s, burst %d", re, be)
	}
	re0, be0, _ := overcommit(t, 4, 8*time.Millisecond, "raise_after=0s")
	t.Logf("raise_after=0: max over-commit rate %.4f/s, burst %d", re0, be0)
	if re0 <= 0 && be0 <= 0 {
		t.Fatal("raise_after=0 did not over-commit: the test does not exercise the skew")
	}
}
