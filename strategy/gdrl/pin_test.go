package gdrl_test

import (
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
)

// An heir that inherits a record listing a key at zero (the ward had
// given its share of the key away) makes the key explicit at its own
// amount and adds the ward's default share to its default. The key must
// go into its replicated record then: its buddy's record shows a key it
// was never sent at the default share, so it took the key for the new,
// larger default, and when the heir crashed in turn its heir added that
// and created capacity. The rapid case of TestConservationProperty that
// found this: three nodes, n2 crashes and restarts faster than the failure
// detector (n0 inherits its old incarnation, whose record lists key c at
// zero), then n0 crashes and n1 inherits n0's record (sum C_i of key c was
// 4/3 of C).
func TestInheritedZeroKeyReplicated(t *testing.T) {
	r := &conservationRun{
		n: 3, seed: 0,
		net:   hnet{loss: 0.0625, dup: 0.0625, reorder: 0.2},
		graph: "ring", indicator: "spare", maxKeys: 1,
		rate: bucket.Rate{Tokens: 1, Per: time.Second}, burst: 1,
		demand: [][]float64{{0, 0, 8}, {30, 0, 10}, {0, 0, 0}},
		crashes: []crashPlan{
			{at: 4 * time.Second, node: 2, restart: 50 * time.Millisecond},
			{at: 7 * time.Second, node: 0},
		},
	}
	r.run(t.Fatalf)
}

// The same for a graceful leave's hand-over, which lists the leaver's
// explicit shares (some of them zero) and its default share: the
// receiver keeps the listed keys at their amounts when it adds the
// default share. The rapid case of TestLeaveConservesProperty that found
// this: six nodes, the leaver's buddy crashes 250 ms before the leave
// and restarts 51 ms later, and the new incarnation, which holds nothing,
// credits the hand-over (sum C_i of key c was C plus the leaver's
// default share).
func TestHandOverZeroKeyKept(t *testing.T) {
	r := &leaveRun{
		n: 6, seed: 1,
		net:  hnet{loss: 0.25, dup: 0.00390625, reorder: 0.000123241263835297, minDelay: time.Millisecond, maxDelay: 2 * time.Millisecond},
		rate: bucket.Rate{Tokens: 4, Per: time.Second}, burst: 3,
		demand: [][]float64{{24, 16, 30}, {6, 3, 1}, {3, 3, 0}, {0, 23, 0}, {3, 2, 6}, {9, 0, 26}},
		leaver: 2, leaveAt: 5 * time.Second, graph: "full",
		crashBuddy: 250 * time.Millisecond, before: true, restart: 51 * time.Millisecond,
	}
	r.run(t.Fatalf)
}
