package tbqueue

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/strategy"
)

func admitAll(s strategy.Strategy, key string, from, to, step time.Duration) int {
	n := 0
	fx := &strategy.Effects{}
	for at := from; at < to; at += step {
		if d, _ := s.Request(at, strategy.Request{ID: uint64(at), Key: key, Tokens: 1, Arrival: at}, fx); d.Allowed {
			n++
		}
	}
	return n
}

// Under conserve a node that sees 1 of 3 expected members weighs each
// token 3: it admits a third of the burst at once and a third of the rate;
// under available the whole. After the heal the weight is 1 again.
func TestConserveWeighsTokens(t *testing.T) {
	all := []strategy.NodeID{"n0", "n1", "n2"}
	for _, tc := range []struct {
		mode           strategy.PartitionMode
		burst, inSplit int
	}{
		{strategy.PartitionAvailable, 9, 9 + 30}, // a refilled burst, then the rate
		{strategy.PartitionConserve, 3, 3 + 10},
	} {
		q, err := New(strategy.Config{Self: "n0", Members: all, Rate: bucket.Rate{Tokens: 1, Per: time.Second}, Burst: 9,
			Rand: rand.New(rand.NewPCG(1, 1)), Partition: tc.mode})
		if err != nil {
			t.Fatal(err)
		}
		fx := &strategy.Effects{}
		q.SetMembers(0, []strategy.NodeID{"n0"}, fx)
		q.SetExpected(0, all, fx)
		if got := admitAll(q, "k", 0, 10*time.Millisecond, time.Millisecond); got != tc.burst {
			t.Errorf("%v: admitted %d at once in the split, want %d", tc.mode, got, tc.burst)
		}
		if got := admitAll(q, "k", 10*time.Second, 40*time.Second, 100*time.Millisecond); got < tc.inSplit-2 || got > tc.inSplit {
			t.Errorf("%v: over 30 s of the split admitted %d, want about %d", tc.mode, got, tc.inSplit)
		}
		q.SetMembers(60*time.Second, all, fx)
		if got := admitAll(q, "k", 60*time.Second, 60*time.Second+10*time.Millisecond, time.Millisecond); got != 9 {
			t.Errorf("%v: after the heal admitted %d at once, want 9", tc.mode, got)
		}
	}
}
