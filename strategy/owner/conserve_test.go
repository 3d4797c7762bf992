package owner

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// conserveNode is n0 of {n0, n1, n2} with rate 1/s, burst 9, hold 0 and
// no warm-up, under mode.
func conserveNode(t *testing.T, mode strategy.PartitionMode) *Owner {
	t.Helper()
	p, err := strategy.ParseParams([]string{"hold=0s", "warmup=0s"})
	if err != nil {
		t.Fatal(err)
	}
	o, err := New(strategy.Config{Self: "n0", Members: members, Rate: bucket.Rate{Tokens: 1, Per: time.Second}, Burst: 9,
		Rand: rand.New(rand.NewPCG(1, 2)), Params: p, Partition: mode})
	if err != nil {
		t.Fatal(err)
	}
	o.Start(0, &strategy.Effects{})
	return o
}

// admitted counts the admissions of n one-token requests of key at now.
func admitted(o *Owner, key string, now time.Duration, n int, id *uint64) int {
	got := 0
	for range n {
		*id++
		fx := &strategy.Effects{}
		d, decided := o.Request(now, strategy.Request{ID: *id, Key: key, Tokens: 1, Arrival: now}, fx)
		if !decided {
			for _, dd := range fx.Decisions {
				if dd.RequestID == *id && dd.Allowed {
					got++
				}
			}
			continue
		}
		if d.Allowed {
			got++
		}
	}
	return got
}

// Alone on its side of a partition, n0 (1 of 3 expected) admits a third
// of the burst and a third of the rate under conserve, the whole of both
// under available; once the others are back (or no longer expected) the
// key's own bucket decides again, and it remembers what the side took.
func TestConserveScalesTheSide(t *testing.T) {
	alone := []strategy.NodeID{"n0"}
	for _, tc := range []struct {
		mode            strategy.PartitionMode
		atCut, after10s int
	}{
		{strategy.PartitionAvailable, 9, 9},
		{strategy.PartitionConserve, 3, 3}, // burst 9/3; 10 s at 1/3 token/s, capped at 3
	} {
		o := conserveNode(t, tc.mode)
		var id uint64
		fx := &strategy.Effects{}
		o.SetMembers(time.Second, alone, fx)
		o.SetExpected(time.Second, members, fx)
		if got := admitted(o, "k", time.Second, 20, &id); got != tc.atCut {
			t.Errorf("%v: admitted %d at the cut, want %d", tc.mode, got, tc.atCut)
		}
		if got := admitted(o, "k", 11*time.Second, 20, &id); got != tc.after10s {
			t.Errorf("%v: admitted %d 10 s later, want %d", tc.mode, got, tc.after10s)
		}
		// The others are no longer expected (reconnect_timeout): n0 is the
		// whole cluster and decides on the key's bucket, which refilled
		// for 10 s since.
		o.SetExpected(21*time.Second, alone, fx)
		if o.scaled != nil && tc.mode == strategy.PartitionConserve {
			t.Fatal("conserve buckets kept while k == N")
		}
		// The key's bucket saw every admission (6 of 9 under conserve
		// by 11 s, refilled to 9 by 21 s).
		if got := admitted(o, "k", 21*time.Second, 20, &id); got != 9 {
			t.Errorf("%v: admitted %d after the others were dropped, want 9", tc.mode, got)
		}
	}
}

// TestConserveChargesTheKeysBucket: what a side admits under conserve is
// taken from the key's own bucket too (the one replicated and merged at
// the heal), so when the missing members stop being expected the node
// continues from what is left of it, not from a full bucket: 3 of 9 taken
// at the cut leave 6 (TestConserveScalesTheSide cannot tell, its bucket
// refills to the burst before it looks).
func TestConserveChargesTheKeysBucket(t *testing.T) {
	o := conserveNode(t, strategy.PartitionConserve)
	var id uint64
	fx := &strategy.Effects{}
	o.SetMembers(time.Second, []strategy.NodeID{"n0"}, fx)
	o.SetExpected(time.Second, members, fx)
	if got := admitted(o, "k", time.Second, 20, &id); got != 3 {
		t.Fatalf("admitted %d at the cut, want 3 (a third of the burst)", got)
	}
	o.SetExpected(time.Second, []strategy.NodeID{"n0"}, fx)
	if got := admitted(o, "k", time.Second, 20, &id); got != 6 {
		t.Fatalf("admitted %d once the others were dropped, want 6 (9 less the 3 the side took)", got)
	}
}
