package quota

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/rendezvous"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// crashAt crashes id at now and delivers the view without it to every
// live node detect later (a failure detector's delay).
func (w *world) crashAt(now time.Duration, id strategy.NodeID, detect time.Duration) {
	w.down[id] = true
	for _, c := range w.clients {
		if c.node == id {
			c.broken = true
		}
	}
	for _, n := range w.live() {
		w.at(event{at: now + detect, kind: 6, to: n})
	}
}

// reassigned runs w from..until in steps and returns, per client, how long
// after from it first applied a token bucket (-1: never).
func (w *world) reassigned(key string, from, until, report time.Duration, fail func(string, ...any)) []time.Duration {
	got := make([]time.Duration, len(w.clients))
	for i := range got {
		got[i] = -1
	}
	for now := from; now <= until; now += 10 * time.Millisecond {
		w.run(key, now, report, 0, fail)
		for i, c := range w.clients {
			if got[i] < 0 && c.assignedAt > from {
				got[i] = c.assignedAt - from
			}
		}
	}
	return got
}

// The owner of the skewed fleet's key is killed at 20 s and the others see
// it gone 1.5 s later (memberlist at a 250 ms probe interval, as in
// cmd/tokenmesh's TestRLQSClusterE2E). With replicas (the default 2) the
// successor adopts the owner's replica replica_wait after it sees the
// crash and renews every client whose node reports it still holds its
// assignment; without (replicas=1) it freezes the key for ttl + apply_lag
// + max_skew. The fleet stays within b + r*T exactly either way; the
// clients of the surviving nodes are assigned again when their node sees
// the crash (with replicas), and the clients of the killed node once
// their old shares, still counted, have expired or been cut around.
func TestOwnerCrashTakeover(t *testing.T) {
	const key, crash, detect = "tenant", 20 * time.Second, 1500 * time.Millisecond
	for _, report := range []time.Duration{time.Second, 5 * time.Second} {
		worst := map[int]time.Duration{}
		for _, replicas := range []int{1, 2} {
			t.Run(fmt.Sprintf("report_%v_replicas_%d", report, replicas), func(t *testing.T) {
				rates := []float64{150, 150, 10, 10, 10, 10}
				w := newWorld(t, 3, 100, 100, rates, 7, fmt.Sprintf("replicas=%d", replicas), "ttl=3s", "apply_lag=1s")
				w.run(key, crash, report, 0, t.Fatalf)
				owner := rendezvous.Owner(key, w.ids)
				var onOwner []int
				for i, c := range w.clients {
					if c.node == owner {
						onOwner = append(onOwner, i)
					}
				}
				w.crashAt(crash, owner, detect)
				got := w.reassigned(key, crash, crash+20*time.Second, report, t.Fatalf)
				w.tally()
				var parts []string
				for i, d := range got {
					parts = append(parts, fmt.Sprintf("client %d: %v", i+1, d.Round(time.Millisecond)))
					if d < 0 {
						d = time.Hour
					}
					worst[replicas] = max(worst[replicas], d)
				}
				v := envelope(w.admitted, 100, 100)
				t.Logf("assigned again after the owner's crash (clients %v were on it; detection %v): %s; %d replicas adopted; excess %.6f",
					plusOne(onOwner), detect, strings.Join(parts, ", "), w.adoptedReplicas, v)
				if v > 1e-6 {
					t.Errorf("the fleet exceeded b + r*T by %.6f tokens", v)
				}
				if replicas == 1 {
					return
				}
				if w.adoptedReplicas != 1 {
					t.Errorf("%d replicas adopted, want 1", w.adoptedReplicas)
				}
				if worst[2] > detect+2*time.Second || (worst[1] > 0 && worst[2] >= worst[1]) {
					t.Errorf("a client assigned again %v after the crash, want within detection + 2 s and sooner than without replicas (%v)", worst[2], worst[1])
				}
			})
		}
	}
}

func containsInt(xs []int, x int) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

func plusOne(xs []int) []int {
	out := make([]int, len(xs))
	for i, x := range xs {
		out[i] = x + 1
	}
	return out
}

// burst sends n requests of key checked at node at now, decided there (it
// must own the key), and returns how many were admitted.
func (w *world) burst(now time.Duration, node strategy.NodeID, key string, n int) int {
	got := 0
	for range n {
		w.reqID++
		var fx strategy.Effects
		d, ok := w.nodes[node].Request(now, strategy.Request{ID: w.reqID, Key: key, Tokens: 1, Arrival: now}, &fx)
		if !ok {
			w.t.Fatalf("request at %s not decided there", node)
		}
		if d.Allowed {
			got++
			w.admitted = append(w.admitted, now)
		}
		w.effects(now, node, &fx)
	}
	return got
}

// A crashed owner may have emptied its reserve after the replica its
// successor adopts (requests checked at the nodes are not replicated one by
// one): the successor starts the reserve empty at the change. Here the key
// is idle until 19.95 s (its reserve full, replicated so), the owner
// admits a whole burst then and crashes at 20 s; the successor, which sees
// the crash at 20.2 s, admits only what refilled since.
func TestCrashTakeoverReserveEmpty(t *testing.T) {
	const key = "tenant"
	w := newWorld(t, 3, 10, 50, nil, 7)
	owner := rendezvous.Owner(key, w.ids)
	w.burst(time.Second, owner, key, 1)
	w.run(key, 19950*time.Millisecond, time.Second, 0, t.Fatalf)
	if got := w.burst(19950*time.Millisecond, owner, key, 60); got != 50 {
		t.Fatalf("the owner admitted %d of its full burst of 50", got)
	}
	w.crashAt(20*time.Second, owner, 200*time.Millisecond)
	w.run(key, 20500*time.Millisecond, time.Second, 0, t.Fatalf)
	w.tally()
	next := rendezvous.Owner(key, w.live())
	got := w.burst(20500*time.Millisecond, next, key, 60)
	t.Logf("the successor %s admitted %d at 20.5 s (%d replicas adopted)", next, got, w.adoptedReplicas)
	if w.adoptedReplicas != 1 {
		t.Errorf("%d replicas adopted, want 1", w.adoptedReplicas)
	}
	if v := envelope(w.admitted, 10, 50); v > 1e-6 {
		t.Errorf("the key exceeded b + r*T by %.6f tokens", v)
	}
}
