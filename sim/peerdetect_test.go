package sim_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/sim"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// Per-peer detection, no jitter: the isolated n0 of a 3-node partition
// declares its two peers failed at two different times, exactly
// detection and detection + spacing after the cut, one peer each time,
// while n1 and n2 (one peer to declare each) see it at detection. Over
// seeds, both orders of n0's two peers occur (the probe order is drawn).
func TestPerPeerDetectionSpacing(t *testing.T) {
	const scenario = `
detection: 5s
detection_spacing: 3s
events:
  - at: 10s
    partition: [[n0], [n1, n2]]
  - at: 40s
    heal: true
`
	firstLost := map[strategy.NodeID]bool{}
	for seed := uint64(1); seed <= 16; seed++ {
		log, _ := runViews(t, 3, scenario, seed, 0)
		calls := log.views["n0"]
		if len(calls) != 3 {
			t.Fatalf("seed %d: n0 was told %v, want 3 lists (one peer lost, both lost, healed)", seed, calls)
		}
		if calls[0].at != 15*time.Second || calls[1].at != 18*time.Second {
			t.Fatalf("seed %d: n0 lost its peers at %v and %v, want 15s and 18s (detection, detection + spacing)", seed, calls[0].at, calls[1].at)
		}
		if len(calls[0].members) != 2 || calls[0].members[0] != "n0" {
			t.Fatalf("seed %d: n0's first list %v, want n0 and the peer not yet declared", seed, calls[0].members)
		}
		lost := ids("n1", "n2")
		lost = slices.DeleteFunc(lost, func(x strategy.NodeID) bool { return x == calls[0].members[1] })
		firstLost[lost[0]] = true
		if !slices.Equal(calls[1].members, ids("n0")) {
			t.Fatalf("seed %d: n0's second list %v, want [n0]", seed, calls[1].members)
		}
		if !slices.Equal(calls[2].members, ids("n0", "n1", "n2")) {
			t.Fatalf("seed %d: n0's third list %v, want all three after the heal", seed, calls[2].members)
		}
		for _, self := range ids("n1", "n2") {
			c := log.views[self]
			if len(c) != 2 || c[0].at != 15*time.Second || !slices.Equal(c[0].members, ids("n1", "n2")) {
				t.Fatalf("seed %d: %s was told %v, want [n1 n2] at 15s, then the heal", seed, self, c)
			}
		}
	}
	if len(firstLost) != 2 {
		t.Fatalf("over 16 seeds n0 always declared %v first: the probe order is not drawn", firstLost)
	}
}

// With jitter, the k-th declaration falls in [detection + (k-1) x
// spacing, detection + (k-1) x spacing + jitter], for every surviving node
// after a crash of three of seven nodes; the declarations of one node are
// at distinct times (spacing > jitter keeps them apart).
func TestPerPeerDetectionCrashWithJitter(t *testing.T) {
	const scenario = `
detection: 4s
detection_jitter: 1s
detection_spacing: 2s
events:
  - at: 10s
    crash: [n1, n4, n6]
`
	log, _ := runViews(t, 7, scenario, 7, 0)
	for _, self := range ids("n0", "n2", "n3", "n5") {
		calls := log.views[self]
		if len(calls) != 3 {
			t.Fatalf("%s was told %v, want 3 lists (one crashed peer at a time)", self, calls)
		}
		for k, c := range calls {
			lo := 14*time.Second + time.Duration(k)*2*time.Second
			if !within(c.at, lo, lo+time.Second) {
				t.Errorf("%s: declaration %d at %v, want within [%v, %v]", self, k+1, c.at, lo, lo+time.Second)
			}
			if len(c.members) != 7-(k+1) {
				t.Errorf("%s: declaration %d left %v, want %d members", self, k+1, c.members, 7-(k+1))
			}
		}
		if !slices.Equal(calls[2].members, ids("n0", "n2", "n3", "n5")) {
			t.Errorf("%s: final view %v", self, calls[2].members)
		}
	}
}

// A heal before a node has declared all its lost peers: the declarations
// still pending do not remove peers it can reach again.
func TestPerPeerDetectionHealCancels(t *testing.T) {
	const scenario = `
detection: 2s
detection_spacing: 10s
join_delay: 100ms
events:
  - at: 10s
    partition: [[n0], [n1, n2]]
  - at: 14s
    heal: true
`
	log, _ := runViews(t, 3, scenario, 2, 0)
	calls := log.views["n0"]
	// 12s: one peer declared; 14s..14.1s: the merge brings it back; the
	// second declaration (22s) and the full update find nothing to drop.
	if len(calls) != 2 || calls[0].at != 12*time.Second || calls[1].at > 14100*time.Millisecond || !slices.Equal(calls[1].members, ids("n0", "n1", "n2")) {
		t.Fatalf("n0 was told %v, want one peer dropped at 12s and all three back by 14.1s, nothing after", calls)
	}
}

// Same seed, same per-peer times; another seed, other times; and owner and
// gdrl runs with per-peer detection are identical twice.
func TestPerPeerDetectionDeterministic(t *testing.T) {
	const scenario = `
detection: 1s
detection_jitter: 500ms
detection_spacing: 700ms
reconnect_interval: 5s
events:
  - at: 10s
    partition: [[n0], [n1, n2, n3, n4]]
  - at: 20s
    crash: [n3, n4]
  - at: 30s
    heal: true
`
	seed4 := viewTimes(t, 5, scenario, 4)
	if again := viewTimes(t, 5, scenario, 4); seed4 != again {
		t.Fatalf("seed 4 twice gave different views:\n%s\n%s", seed4, again)
	}
	if seed4 == viewTimes(t, 5, scenario, 5) {
		t.Fatal("seeds 4 and 5 gave the same per-peer detection times")
	}
	sc, err := sim.ParseScenario([]byte(scenario))
	if err != nil {
		t.Fatal(err)
	}
	sameTwice(t, mustGen(t, "heavy:users=20,rate=100,duration=40s", 6), sc, "per-peer detection")
}

// detection_spacing is checked like the other delays, and shows in the
// model's description only when set.
func TestDetectionSpacingParse(t *testing.T) {
	for _, bad := range []string{"detection_spacing: -1s\n", "detection_spacing: 2h\n"} {
		if _, err := sim.ParseScenario([]byte(bad)); err == nil || !strings.Contains(err.Error(), "detection_spacing") {
			t.Errorf("%q: error %v, want one naming detection_spacing", bad, err)
		}
	}
	s, err := sim.ParseScenario([]byte("detection: 5s\ndetection_spacing: 35s\n"))
	if err != nil || s.DetectionSpacing != 35*time.Second {
		t.Fatalf("parsed %+v, %v", s, err)
	}
	if m := s.DetectionModel(); !strings.Contains(m, "35s apart") {
		t.Errorf("model %q does not mention the spacing", m)
	}
	s, _ = sim.ParseScenario([]byte("detection: 5s\n"))
	if m := s.DetectionModel(); strings.Contains(m, "apart") {
		t.Errorf("model %q mentions a spacing that is not set", m)
	}
}
