package static

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// A partition n0 | n1,n2 and its heal, as n0 sees it: under available n0
// takes the whole (r, b) during the split, under conserve it keeps its
// third; at the heal both re-split over the merged membership.
func TestPartitionAndHealResplit(t *testing.T) {
	all := []strategy.NodeID{"n0", "n1", "n2"}
	for _, tc := range []struct {
		mode      strategy.PartitionMode
		splitB    int64   // n0's burst during the split
		splitPart float64 // its capacity share
	}{
		{strategy.PartitionAvailable, 9, 1},
		{strategy.PartitionConserve, 3, 1.0 / 3},
	} {
		s, err := New(strategy.Config{Self: "n0", Members: all, Rate: bucket.Rate{Tokens: 3, Per: time.Second}, Burst: 9,
			Rand: rand.New(rand.NewPCG(1, 1)), Partition: tc.mode})
		if err != nil {
			t.Fatal(err)
		}
		fx := &strategy.Effects{}
		if got, _ := s.Remaining(0, "k"); got != 3 {
			t.Fatalf("%v: before the split n0 holds %d tokens of a new key, want 3", tc.mode, got)
		}
		// The failure detector drops n1, n2; membership keeps them expected.
		s.SetMembers(time.Second, []strategy.NodeID{"n0"}, fx)
		s.SetExpected(time.Second, all, fx)
		if got, _ := s.Remaining(time.Second, "k"); got != tc.splitB {
			t.Errorf("%v: during the split n0 holds %d tokens of a new key, want %d", tc.mode, got, tc.splitB)
		}
		s.Request(time.Second, strategy.Request{ID: 1, Key: "k", Tokens: 1, Arrival: time.Second}, fx)
		if sum, keys := s.CapacityShares(); keys != 1 || sum != tc.splitPart {
			t.Errorf("%v: during the split share %v over %d keys, want %v over 1", tc.mode, sum, keys, tc.splitPart)
		}
		// The heal: the views merge.
		s.SetMembers(2*time.Second, all, fx)
		if got, _ := s.Remaining(2*time.Second, "new"); got != 3 {
			t.Errorf("%v: after the heal n0 holds %d tokens of a new key, want 3 (b/3)", tc.mode, got)
		}
		if sum, keys := s.CapacityShares(); keys != 1 || sum != 1.0/3 {
			t.Errorf("%v: after the heal share %v over %d keys, want 1/3 over 1", tc.mode, sum, keys)
		}
		if got, _ := s.Remaining(2*time.Second, "k"); got > 3 {
			t.Errorf("%v: after the heal key k holds %d tokens, above n0's burst share 3", tc.mode, got)
		}
		// A member that stops being expected (it left, or reconnect_timeout
		// passed) is split over no more, under conserve too.
		s.SetMembers(3*time.Second, []strategy.NodeID{"n0", "n1"}, fx)
		s.SetExpected(3*time.Second, []strategy.NodeID{"n0", "n1"}, fx)
		if got, _ := s.Remaining(3*time.Second, "new2"); got != 5 {
			t.Errorf("%v: with n2 gone for good n0 holds %d tokens of a new key, want 5 (9 split over 2, n0 first)", tc.mode, got)
		}
	}
}
