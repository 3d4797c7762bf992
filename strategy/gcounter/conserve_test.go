package gcounter

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// admitAll offers one token of key every step from..to and counts the
// admitted ones.
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

// Under conserve a node that sees 1 of 3 expected members holds its known
// bucket to a third of the burst at once and refills at a third of the
// rate; under available it keeps the whole bucket. At the heal it is back
// to the whole rate and burst.
func TestConserveScalesBucket(t *testing.T) {
	all := []strategy.NodeID{"n0", "n1", "n2"}
	for _, tc := range []struct {
		mode            strategy.PartitionMode
		burst, inSplit  int // admitted at once at the split; over the next 30 s at 10 requests/s
		afterHealWithin int // admitted in the 30 s after the heal
	}{
		{strategy.PartitionAvailable, 9, 30, 30},
		{strategy.PartitionConserve, 3, 10, 30},
	} {
		g, err := New(strategy.Config{Self: "n0", Members: all, Rate: bucket.Rate{Tokens: 1, Per: time.Second}, Burst: 9,
			Rand: rand.New(rand.NewPCG(1, 1)), Partition: tc.mode})
		if err != nil {
			t.Fatal(err)
		}
		fx := &strategy.Effects{}
		if got := admitAll(g, "old", 0, 10*time.Millisecond, time.Millisecond); got != 9 {
			t.Fatalf("%v: a new key admitted %d at once before the split, want 9", tc.mode, got)
		}
		// 9 s later "old" has refilled; the split comes.
		g.SetMembers(9*time.Second, []strategy.NodeID{"n0"}, fx)
		g.SetExpected(9*time.Second, all, fx)
		if got := admitAll(g, "old", 9*time.Second, 9*time.Second+10*time.Millisecond, time.Millisecond); got != tc.burst {
			t.Errorf("%v: key held before the split admitted %d at once, want %d", tc.mode, got, tc.burst)
		}
		if got := admitAll(g, "new", 9*time.Second, 9*time.Second+10*time.Millisecond, time.Millisecond); got != tc.burst {
			t.Errorf("%v: a new key admitted %d at once in the split, want %d", tc.mode, got, tc.burst)
		}
		if got := admitAll(g, "old", 10*time.Second, 40*time.Second, 100*time.Millisecond); got != tc.inSplit {
			t.Errorf("%v: over 30 s of the split admitted %d, want %d (the rate times k/N)", tc.mode, got, tc.inSplit)
		}
		g.SetMembers(40*time.Second, all, fx)
		if got := admitAll(g, "old", 40*time.Second, 70*time.Second, 100*time.Millisecond); got < tc.afterHealWithin-1 || got > tc.afterHealWithin+9 {
			t.Errorf("%v: over 30 s after the heal admitted %d, want about %d (the whole rate)", tc.mode, got, tc.afterHealWithin)
		}
	}
}
