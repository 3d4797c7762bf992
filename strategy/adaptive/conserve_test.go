package adaptive

import (
	"math/rand/v2"
	"testing"
	"time"

	peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"
	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// A partition n0 | n1,n2 and its heal, as n0 sees it. Under conserve, a
// share above the static split that n0 held from an epoch is lowered to
// it while members are missing, and no epoch is sent; at the heal (both
// modes) n0 falls back to the static split over the merged membership.
func TestPartitionAndHealResplit(t *testing.T) {
	all := []strategy.NodeID{"n0", "n1", "n2"}
	for _, mode := range []strategy.PartitionMode{strategy.PartitionAvailable, strategy.PartitionConserve} {
		a, err := New(strategy.Config{Self: "n0", Members: all, Rate: bucket.Rate{Tokens: 3, Per: time.Second}, Burst: 9,
			Rand: rand.New(rand.NewPCG(1, 1)), Partition: mode})
		if err != nil {
			t.Fatal(err)
		}
		fx := &strategy.Effects{}
		a.Request(0, strategy.Request{ID: 1, Key: "hot", Tokens: 1}, fx)
		// An epoch gave n0 most of "hot".
		a.shares["hot"] = share{rate: bucket.Rate{Tokens: 2, Per: time.Second}, burst: 7}
		a.refresh(0, "hot", &strategy.Effects{})

		a.SetMembers(time.Second, []strategy.NodeID{"n0"}, fx)
		a.SetExpected(time.Second, all, fx)
		r, b := a.shareOf("hot")
		_, nb := a.shareOf("new")
		switch mode {
		case strategy.PartitionAvailable:
			if b != 7 || nb != 9 {
				t.Errorf("available, split: hot burst %d (want 7, kept), new key %d (want 9, all of b)", b, nb)
			}
		case strategy.PartitionConserve:
			if b != 3 || r != (bucket.Rate{Tokens: 1, Per: time.Second}) || nb != 3 {
				t.Errorf("conserve, split: hot (%v, %d) (want (1/s, 3): the static third), new key %d (want 3)", r, b, nb)
			}
			// The adaptor (n0, its side's smallest) sends no epoch while
			// members are missing.
			fx.Reset()
			a.reports[a.self] = &peerv1.AdaptiveReport{}
			a.resplit(2*time.Second, fx)
			if len(fx.Messages) != 0 || a.lastSent != 0 {
				t.Errorf("conserve, split: the adaptor sent an epoch (%d messages, last %d)", len(fx.Messages), a.lastSent)
			}
		}
		// The heal: every node falls back to the static split over all.
		a.SetMembers(3*time.Second, all, fx)
		r, b = a.shareOf("hot")
		if b != 3 || r != (bucket.Rate{Tokens: 1, Per: time.Second}) {
			t.Errorf("%v, heal: hot (%v, %d), want the static (1/s, 3)", mode, r, b)
		}
		if got, _ := a.Remaining(3*time.Second, "hot"); got > 3 {
			t.Errorf("%v, heal: hot holds %d tokens, above the static burst 3", mode, got)
		}
	}
}
