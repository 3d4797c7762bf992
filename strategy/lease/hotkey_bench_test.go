package lease_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/lease"
	"github.com/tokenmesh/tokenmesh/strategy/static"
)

// benchHotKey drives 3 nodes of a strategy with one hot key, requests
// spread round-robin over the nodes 10 µs apart, messages delivered
// after 100 µs and ticks run when due: the per-request cost of a node
// (a live node's event loop does this work per check, tokenmesh bench
// --hot-key), with the messages and ticks it causes. waited/op is the
// share of requests not decided at once (forwarded to the owner, or
// queued at it). A profile of this, not of gRPC, is where lease's own
// cost per check shows.
func benchHotKey(b *testing.B, build func(strategy.Config) (strategy.Strategy, error), rate bucket.Rate, burst int64) {
	ids := []strategy.NodeID{"n0", "n1", "n2"}
	nodes := map[strategy.NodeID]strategy.Strategy{}
	fx := &strategy.Effects{}
	for i, id := range ids {
		s, err := build(strategy.Config{Self: id, Members: ids, Rate: rate, Burst: burst,
			Rand: rand.New(rand.NewPCG(1, uint64(i)))})
		if err != nil {
			b.Fatal(err)
		}
		s.Start(0, fx)
		nodes[id] = s
	}
	type inflight struct {
		at       time.Duration
		from, to strategy.NodeID
		payload  []byte
	}
	var net []inflight
	wake := map[strategy.NodeID]time.Duration{}
	const step, lat = 10 * time.Microsecond, 100 * time.Microsecond
	collect := func(now time.Duration, from strategy.NodeID) {
		for _, m := range fx.Messages {
			net = append(net, inflight{now + lat, from, m.To, m.Payload})
		}
		for _, w := range fx.Wakeups {
			if cur, ok := wake[from]; !ok || w < cur {
				wake[from] = w
			}
		}
		fx.Reset()
	}
	now := time.Second
	remote := 0
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		now += step
		for len(net) > 0 && net[0].at <= now {
			m := net[0]
			net = net[1:]
			if err := nodes[m.to].Receive(now, m.from, m.payload, fx); err != nil {
				b.Fatal(err)
			}
			collect(now, m.to)
		}
		for _, id := range ids {
			if w, ok := wake[id]; ok && w <= now {
				delete(wake, id)
				nodes[id].Tick(now, fx)
				collect(now, id)
			}
		}
		id := ids[i%3]
		if _, ok := nodes[id].Request(now, strategy.Request{ID: uint64(i + 1), Key: "hot", Tokens: 1, Arrival: now}, fx); !ok {
			remote++
		}
		collect(now, id)
	}
	b.ReportMetric(float64(remote)/float64(b.N), "waited/op")
}

func BenchmarkHotKeyLease(b *testing.B) {
	benchHotKey(b, func(c strategy.Config) (strategy.Strategy, error) { return lease.New(c) },
		bucket.Rate{Tokens: 1_000_000_000, Per: time.Second}, 1_000_000_000)
}

func BenchmarkHotKeyStatic(b *testing.B) {
	benchHotKey(b, func(c strategy.Config) (strategy.Strategy, error) { return static.New(c) },
		bucket.Rate{Tokens: 1_000_000_000, Per: time.Second}, 1_000_000_000)
}

func BenchmarkHotKeyLeaseOverloaded(b *testing.B) {
	benchHotKey(b, func(c strategy.Config) (strategy.Strategy, error) { return lease.New(c) },
		bucket.Rate{Tokens: 1000, Per: time.Second}, 1000)
}

func BenchmarkHotKeyStaticOverloaded(b *testing.B) {
	benchHotKey(b, func(c strategy.Config) (strategy.Strategy, error) { return static.New(c) },
		bucket.Rate{Tokens: 1000, Per: time.Second}, 1000)
}
