package regionlease

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// TestConservedLostLease pins the checkers' one exception (lostLease), on
// the case TestEnvelopeUnderFaults found (its fail file of 2026-12-06
// replays it): n1 holds 4 tokens of "k0" from n2, received at 1 ms, and
// crashes at 2 ms; n2 restarts at 22 ms and its new bucket of "k0" refills
// from the restart. At 24 ms the new bucket holds 0.156 tokens: with n1's
// lease, 4.156 against a burst of 4, but no node can take a token from
// that lease (n1's incarnation is gone; its restart has no lease). The
// checks skip it while n1 is down, and still count it when n1 is up (a
// live holder of a previous incarnation's lease, which a warm-up must
// count) or when the lease is of n2's current incarnation.
func TestConservedLostLease(t *testing.T) {
	members := []strategy.NodeID{"n0", "n1", "n2"}
	node := func(self strategy.NodeID, start time.Duration) *RegionLease {
		l, err := New(strategy.Config{Self: self, Members: members, Rate: bucket.Rate{Tokens: 78, Per: time.Second}, Burst: 4,
			Rand: rand.New(rand.NewPCG(1, 2)), LatencyHint: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		l.Start(start, &strategy.Effects{})
		return l
	}
	const key = "k0"
	now := 24 * time.Millisecond
	for _, c := range []struct {
		name  string
		down  bool
		since time.Duration // when n1 received the lease
		want  bool          // an error expected
	}{
		{"holder down, previous incarnation's lease", true, time.Millisecond, false},
		{"holder up, previous incarnation's lease", false, time.Millisecond, true},
		{"holder down, current incarnation's lease", true, 23 * time.Millisecond, true},
	} {
		n1 := node("n1", 0)
		n1.keys = map[string]*holding{key: {leases: []held{{seq: 1, from: "n2", tokens: 4, expires: 246 * time.Millisecond, since: c.since}}}}
		n2 := node("n2", 22*time.Millisecond)
		n2.pools = map[string]*pool{key: {Level: 0, Last: 22 * time.Millisecond}}
		current := map[strategy.NodeID]*RegionLease{"n1": n1, "n2": n2}
		down := func(id strategy.NodeID) bool { return c.down && id == "n1" }
		if err := Conserved(current, []*RegionLease{n1, n2}, down, 4, now); (err != nil) != c.want {
			t.Errorf("%s: Conserved: %v, want an error: %v", c.name, err, c.want)
		}
		if err := ConservedKeys(current, down, 4, now); (err != nil) != c.want {
			t.Errorf("%s: ConservedKeys: %v, want an error: %v", c.name, err, c.want)
		}
	}
}
