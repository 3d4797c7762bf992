package quota

import (
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
)

// raisePass on one share at a time, in a shape of 100 units and a burst
// of 100 whose reserve (10 tokens/s) holds the given whole tokens. The
// cases follow raise's rules: a first assignment is paid from the reserve
// and takes units in proportion to the part of its burst paid; a sent
// share's burst is raised beyond the hysteresis only (pass 2); a starved
// one (pass 1) takes units up to twice the part paid; each pass takes its
// own shares only; a burst not paid gets no units; a raise the reserve
// cannot pay yet says when it can.
func TestRaisePass(t *testing.T) {
	sh := shape{fill: time.Second, units: 100, burst: 100}
	now := time.Second
	rate, err := bucket.PerSecond(10)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name                   string
		s                      share // units, burst, sent, live, pinned
		reserve                int64 // whole tokens in the reserve
		heldBurst, heldUnits   int64 // held by the other shares
		units, burst           int64 // the targets
		pass                   int
		wantUnits, wantBurst   int64
		wantChanged, wantBlock bool
	}{
		{"first, paid", share{live: true}, 100, 0, 0, 40, 20, 0, 40, 20, true, false},
		{"first, part paid", share{live: true}, 5, 0, 0, 40, 20, 0, 10, 5, true, true},
		{"first, unpaid", share{live: true}, 0, 0, 0, 40, 20, 0, 0, 0, false, true},
		{"first, free burst short", share{live: true}, 100, 95, 0, 40, 20, 0, 10, 5, true, true},
		{"first, free units short", share{live: true}, 100, 0, 90, 40, 20, 0, 10, 20, true, false},
		{"first, on pass 1", share{live: true}, 100, 0, 0, 40, 20, 1, 0, 0, false, false},
		{"sent, within hysteresis", share{live: true, sent: true, units: 30, burst: 10}, 100, 0, 0, 30, 11, 2, 30, 10, false, false},
		{"sent, units only", share{live: true, sent: true, units: 5, burst: 10}, 100, 0, 0, 30, 11, 2, 30, 10, true, false},
		{"sent, beyond hysteresis", share{live: true, sent: true, units: 30, burst: 10}, 100, 0, 0, 30, 13, 2, 30, 13, true, false},
		{"sent, on pass 1", share{live: true, sent: true, units: 5, burst: 10}, 100, 0, 0, 30, 13, 1, 5, 10, false, false},
		{"starved, part paid", share{live: true, sent: true, units: 5, burst: 4}, 3, 0, 0, 50, 20, 1, 35, 7, true, true},
		{"starved, paid", share{live: true, sent: true, units: 5, burst: 4}, 100, 0, 0, 50, 20, 1, 50, 20, true, false},
		{"starved, on pass 2", share{live: true, sent: true, units: 5, burst: 4}, 100, 0, 0, 50, 20, 2, 5, 4, false, false},
		{"starved, on pass 0", share{live: true, sent: true, units: 5, burst: 4}, 100, 0, 0, 50, 20, 0, 5, 4, false, false},
		{"pinned", share{live: true, sent: true, pinned: true, units: 5, burst: 10}, 100, 0, 0, 30, 13, 2, 5, 10, false, false},
		{"not live", share{units: 5, burst: 10, sent: true}, 100, 0, 0, 30, 13, 2, 5, 10, false, false},
	} {
		s := tc.s
		a := &alloc{shares: []*share{&s}, heldBurst: tc.heldBurst + s.burst, heldUnits: tc.heldUnits + s.units,
			reserve: bucket.MustNew(rate, sh.burst, now)}
		if !a.reserve.AllowN(now, sh.burst-tc.reserve) && tc.reserve < sh.burst {
			t.Fatalf("%s: reserve not set", tc.name)
		}
		changed := []bool{false}
		blockedAt := sh.raisePass(a, now, []int64{tc.units}, []int64{tc.burst}, changed, tc.pass)
		if s.units != tc.wantUnits || s.burst != tc.wantBurst || changed[0] != tc.wantChanged || (blockedAt > now) != tc.wantBlock ||
			(blockedAt != 0 && blockedAt <= now) {
			t.Errorf("%s: units %d burst %d changed %v blocked at %v; want units %d burst %d changed %v blocked %v",
				tc.name, s.units, s.burst, changed[0], blockedAt, tc.wantUnits, tc.wantBurst, tc.wantChanged, tc.wantBlock)
		}
		if a.heldBurst != tc.heldBurst+s.burst || a.heldUnits != tc.heldUnits+s.units {
			t.Errorf("%s: held burst %d units %d, want %d and %d", tc.name, a.heldBurst, a.heldUnits, tc.heldBurst+s.burst, tc.heldUnits+s.units)
		}
		if paid := tc.s.burst + tc.reserve - s.burst; int64(a.reserve.Tokens(now)) != paid {
			t.Errorf("%s: reserve holds %v tokens, want %d (the burst raised is paid)", tc.name, a.reserve.Tokens(now), paid)
		}
	}
}
