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

// Alone on its side of a partition, n0 (1 of 3 expected), the owner of
// key "e" in the last agreed view, admits a third of the burst and a third
// of the rate under conserve, the whole of both under available; once the
// others are no longer expected its key's bucket decides again, from no
// more than what the side had left of its share (capLevels: the other
// side may have spent its own).
func TestConserveScalesTheSide(t *testing.T) {
	alone := []strategy.NodeID{"n0"}
	for _, tc := range []struct {
		mode                     strategy.PartitionMode
		atCut, after10s, dropped int
	}{
		{strategy.PartitionAvailable, 9, 9, 9},
		// burst 9/3; 10 s at 1/3 token/s, capped at 3; at 21 s the side's
		// conserve bucket holds 3.67, and the key's bucket is capped to 3
		{strategy.PartitionConserve, 3, 3, 3},
	} {
		o := conserveNode(t, tc.mode)
		var id uint64
		fx := &strategy.Effects{}
		o.SetMembers(time.Second, alone, fx)
		o.SetExpected(time.Second, members, fx)
		if got := admitted(o, "e", time.Second, 20, &id); got != tc.atCut {
			t.Errorf("%v: admitted %d at the cut, want %d", tc.mode, got, tc.atCut)
		}
		if got := admitted(o, "e", 11*time.Second, 20, &id); got != tc.after10s {
			t.Errorf("%v: admitted %d 10 s later, want %d", tc.mode, got, tc.after10s)
		}
		// The others are no longer expected (reconnect_timeout): n0 is the
		// whole cluster and decides on the key's bucket, conserve_delay (2
		// s) later: a larger share waits for the other side to see it too.
		o.SetExpected(21*time.Second, alone, fx)
		if tc.mode == strategy.PartitionConserve && (o.scaled == nil || o.healAt != 23*time.Second) {
			t.Fatalf("conserve buckets dropped at once (heal at %v), want them kept until 23s", o.healAt)
		}
		o.Tick(23*time.Second, fx)
		if o.scaled != nil && tc.mode == strategy.PartitionConserve {
			t.Fatal("conserve buckets kept after conserve_delay while k == N")
		}
		if got := admitted(o, "e", 23*time.Second, 20, &id); got != tc.dropped {
			t.Errorf("%v: admitted %d after the others were dropped, want %d", tc.mode, got, tc.dropped)
		}
	}
}

// TestConserveChargesTheKeysBucket: what a side admits under conserve is
// taken from the key's own bucket too, and when the conserve buckets are
// dropped the key's bucket holds no more than the side's conserve bucket
// (capLevels): 3 of 9 taken at the cut leave the side 0 of its 3, so the
// key's bucket (6 left) is capped to 0 — the other side may have spent its
// 6. Before capLevels the node went on from 6, and at a heal each side's
// key bucket, refilled at the whole rate, merged into a fresh burst.
func TestConserveChargesTheKeysBucket(t *testing.T) {
	o := conserveNode(t, strategy.PartitionConserve)
	var id uint64
	fx := &strategy.Effects{}
	o.SetMembers(time.Second, []strategy.NodeID{"n0"}, fx)
	o.SetExpected(time.Second, members, fx)
	if got := admitted(o, "e", time.Second, 20, &id); got != 3 {
		t.Fatalf("admitted %d at the cut, want 3 (a third of the burst)", got)
	}
	o.SetExpected(time.Second, []strategy.NodeID{"n0"}, fx)
	if got := admitted(o, "e", time.Second, 20, &id); got != 0 {
		t.Fatalf("admitted %d once the others were dropped, want 0 (the side's share was spent)", got)
	}
	// The conserve bucket decides until conserve_delay (2 s) has passed:
	// at 4 s it holds 1 (3 s at 1/3 token/s), and the key's bucket is
	// capped to that as it is dropped; then the whole rate refills it.
	if got := admitted(o, "e", 4*time.Second, 20, &id); got != 1 {
		t.Fatalf("admitted %d at 4 s, want 1 (the side's share refilled since 1 s)", got)
	}
	if got := admitted(o, "e", 7*time.Second, 20, &id); got != 3 {
		t.Fatalf("admitted %d at 7 s, want 3 (refilled at the whole rate since 4 s)", got)
	}
}

// TestConserveTakenOverStartsEmpty: n0, alone on its side, takes over key
// "k" (owned by n2 in the last agreed view). The other side's owner may
// decide it in full until its own detector sees the cut, so n0 refuses it
// until conserve_delay (default 2 s) after it saw the cut, then earns its
// share of the rate from there: empty at 3 s, 1/3 token/s, whatever level
// it held (a replica's is as of the cut). Before, it started at a third of
// a full bucket.
func TestConserveTakenOverStartsEmpty(t *testing.T) {
	o := conserveNode(t, strategy.PartitionConserve)
	var id uint64
	fx := &strategy.Effects{}
	o.SetMembers(time.Second, []strategy.NodeID{"n0"}, fx)
	o.SetExpected(time.Second, members, fx)
	for _, tc := range []struct {
		at   time.Duration
		want int
	}{
		{time.Second, 0},
		{2900 * time.Millisecond, 0},
		{3 * time.Second, 0},  // conserve_delay after the cut: empty
		{9 * time.Second, 2},  // 6 s at 1/3 token/s
		{12 * time.Second, 1}, // 3 s more
	} {
		if got := admitted(o, "k", tc.at, 20, &id); got != tc.want {
			t.Errorf("at %v: admitted %d, want %d", tc.at, got, tc.want)
		}
	}
}
