package membership

import (
	"sync"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/cluster"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// OnRTT receives memberlist's probe round trips, named by the probed
// member, and they feed a LatencyEstimator.
func TestOnRTTReportsProbes(t *testing.T) {
	key := []byte("0123456789abcdef")
	var mu sync.Mutex
	seen := map[strategy.NodeID]int{}
	est := cluster.NewLatencyEstimator(0)
	cfg := testConfig("a", key, nil, nil)
	cfg.OnRTT = func(peer strategy.NodeID, rtt time.Duration, at time.Time) {
		mu.Lock()
		seen[peer]++
		mu.Unlock()
		if rtt <= 0 || rtt > time.Second {
			t.Errorf("probe of %s: RTT %v, want within (0, 1s] on loopback", peer, rtt)
		}
		est.Observe(peer, rtt, at)
	}
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Shutdown() })
	start(t, "b", key, []string{a.LocalAddr()}, nil)
	waitFor(t, 10*time.Second, "a never reported a probe of b", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return seen["b"] >= 3
	})
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 1 {
		t.Fatalf("probes reported for %v, want only b", seen)
	}
	if h := est.PeerLatency(time.Now())["b"]; h <= 0 {
		t.Fatalf("estimated one-way latency to b: %v, want > 0", h)
	}
}
