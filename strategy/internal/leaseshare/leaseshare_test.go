package leaseshare

import (
	"testing"
	"time"
)

// Share and UntilDry on worked numbers (quantum 50 ms, period 100 ms, lead
// 10 ms): a share of a supply short of the demand, none with enough
// supply or a turn past maxTurn, 0 tokens (and the turn of one) from an
// empty granter; the cut of an ask whose granter runs dry within a
// period, none beyond it or without a drain.
func TestShareAndUntilDry(t *testing.T) {
	const q, per, lead = 50 * time.Millisecond, 100 * time.Millisecond, 10 * time.Millisecond
	// 61.5 of 100 wanted: the rate is 61.5% of the ask's 1,000/s, 30.75
	// -> 31 tokens over a quantum, the turn 31/615 s + lead = 60.41 ms.
	if n, turn, ok := Share(100, 100, 61.5, 60, q, per, lead, per); !ok || n != 31 || turn < 60_400*time.Microsecond || turn > 60_420*time.Microsecond {
		t.Errorf("share of 61.5/100: %d, %v, %v; want 31, 60.41 ms, true", n, turn, ok)
	}
	if _, _, ok := Share(100, 100, 61.5, 60, q, per, lead, 50*time.Millisecond); ok {
		t.Error("a turn of 60.41 ms within maxTurn 50 ms: a share, want none")
	}
	if _, _, ok := Share(100, 100, 100, 60, q, per, lead, per); ok {
		t.Error("supply equal to the demand: a share, want none")
	}
	// nothing now, 20 over the quantum: 20% of 1,000/s, 10 tokens, but 0
	// held; the turn is that of one token, 1/200 s + lead = 15 ms.
	if n, turn, ok := Share(100, 100, 20, 0, q, per, lead, per); !ok || n != 0 || turn != 15*time.Millisecond {
		t.Errorf("share from an empty granter: %d, %v, %v; want 0, 15 ms, true", n, turn, ok)
	}
	// 100 tokens drained at 1,500/s last 66.7 ms: ceil(100 * 0.667) = 67
	if until, ok := UntilDry(100, 1500, 100, per); !ok || until != 67 {
		t.Errorf("100 tokens at 1,500/s: %d, %v; want 67, true", until, ok)
	}
	if _, ok := UntilDry(100, 1500, 150, per); ok {
		t.Error("150 tokens at 1,500/s last a whole period: cut, want none")
	}
	if _, ok := UntilDry(100, 0, 0, per); ok {
		t.Error("no drain: cut, want none")
	}
	if until, ok := UntilDry(100, 1500, 0, per); !ok || until != 0 {
		t.Errorf("an empty granter: %d, %v; want 0, true", until, ok)
	}
}
