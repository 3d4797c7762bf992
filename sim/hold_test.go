package sim_test

import (
	"fmt"
	"reflect"
	"sort"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/sim"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/registry"
	"github.com/tokenmesh/tokenmesh/workload"
)

// holdTrace is keys x perSec requests per second for d, evenly spaced.
func holdTrace(keys int, perSec int, d time.Duration) *workload.Trace {
	tr := &workload.Trace{Name: "hold"}
	every := time.Second / time.Duration(perSec)
	for at := time.Duration(0); at < d; at += every {
		for k := range keys {
			tr.Requests = append(tr.Requests, workload.Request{Arrival: at, Key: fmt.Sprintf("k%d", k), Tokens: 1})
		}
	}
	return tr
}

// maxInFlight is, per key, the most requests holding a permit at once
// (intervals [HeldFrom, HeldUntil)) among those held from before until,
// and the in-flight time of all keys.
func maxInFlight(tr *workload.Trace, res *sim.Result, until time.Duration) (map[string]int, time.Duration) {
	type ev struct {
		at time.Duration
		d  int
	}
	byKey := map[string][]ev{}
	var total time.Duration
	for i, o := range res.Outcomes {
		if o.HeldUntil > o.HeldFrom && o.HeldFrom < until {
			k := tr.Requests[i].Key
			byKey[k] = append(byKey[k], ev{o.HeldFrom, 1}, ev{o.HeldUntil, -1})
			total += o.HeldUntil - o.HeldFrom
		}
	}
	out := map[string]int{}
	for k, evs := range byKey {
		sort.Slice(evs, func(i, j int) bool {
			if evs[i].at != evs[j].at {
				return evs[i].at < evs[j].at
			}
			return evs[i].d < evs[j].d
		})
		n := 0
		for _, e := range evs {
			n += e.d
			out[k] = max(out[k], n)
		}
	}
	return out, total
}

// TestHoldConcurrency: the simulator runs concurrency with service times
// (Config.Hold, 50 to 200 ms): 3 nodes, N = 5, 4 keys offered 3x capacity
// (120 requests/s per key against 5 / 125 ms = 40), n1 crashed at 8 s and
// restarted at 14 s (the others see it back 1 s later). Per key, never
// more than N held at once, the restart included: the restarted node waits
// permit_ttl + join_wait (default permit_ttl) before it grants. With
// join_wait=0 the restart is a split (the others still grant n1's keys
// until they see it): at most 2N (measured: 8). The capacity is mostly
// used; two runs with one seed are identical; without Hold no outcome
// holds anything.
func TestHoldConcurrency(t *testing.T) {
	info, err := registry.Lookup("concurrency")
	if err != nil {
		t.Fatal(err)
	}
	tr := holdTrace(4, 120, 20*time.Second)
	assign, err := workload.NewAssigner("roundrobin", 1)
	if err != nil {
		t.Fatal(err)
	}
	p, err := strategy.ParseParams([]string{"limit=5", "permit_ttl=1s"})
	if err != nil {
		t.Fatal(err)
	}
	cfg := sim.Config{Name: info.Name, New: info.New, Nodes: 3, Rate: bucket.Rate{Tokens: 1, Per: time.Second}, Burst: 5,
		Params: p, Network: sim.Network{Latency: sim.Latency{Kind: "fixed", Min: time.Millisecond, Max: time.Millisecond, Mean: time.Millisecond}},
		Assign: assign, Seed: 3, Hold: sim.Hold{Min: 50 * time.Millisecond, Max: 200 * time.Millisecond},
		Scenario: &sim.Scenario{Detection: time.Second, Events: []sim.ScenarioEvent{{At: 8 * time.Second, Crash: []string{"n1"}}, {At: 14 * time.Second, Restart: []string{"n1"}}}}}
	res, err := sim.Run(tr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	crash, _ := maxInFlight(tr, res, 14*time.Second)
	for k, n := range crash {
		if n > 5 {
			t.Errorf("key %s: %d held at once before the restart, above N = 5", k, n)
		}
	}
	most, held := maxInFlight(tr, res, time.Hour)
	for k, n := range most {
		if n > 5 {
			t.Errorf("key %s: %d held at once, above N = 5 (the restart)", k, n)
		}
	}
	used := float64(held) / float64(5*4*20*time.Second)
	t.Logf("max held per key until the restart %v, over the run %v; capacity used %.1f%% over 20 s (the start's wait and the crash of n1 from 8 s to 14 s included)", crash, most, 100*used)
	noWait := cfg
	if noWait.Params, err = strategy.ParseParams([]string{"limit=5", "permit_ttl=1s", "join_wait=0s"}); err != nil {
		t.Fatal(err)
	}
	if noWait.Assign, err = workload.NewAssigner("roundrobin", 1); err != nil {
		t.Fatal(err)
	}
	split, err := sim.Run(tr, noWait)
	if err != nil {
		t.Fatal(err)
	}
	splitMost, _ := maxInFlight(tr, split, time.Hour)
	for k, n := range splitMost {
		if n > 10 {
			t.Errorf("join_wait=0: key %s: %d held at once, above 2N = 10 (the split of a restart)", k, n)
		}
	}
	t.Logf("join_wait=0: max held per key %v", splitMost)
	if used < 0.7 {
		t.Errorf("capacity used %.1f%%, want most of it", 100*used)
	}
	if cfg.Assign, err = workload.NewAssigner("roundrobin", 1); err != nil { // an assigner keeps its place
		t.Fatal(err)
	}
	again, err := sim.Run(tr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(res.Outcomes, again.Outcomes) {
		for i := range res.Outcomes {
			if res.Outcomes[i] != again.Outcomes[i] {
				t.Errorf("two runs with one seed differ, first at request %d (%v): %+v, then %+v", i, tr.Requests[i], res.Outcomes[i], again.Outcomes[i])
				break
			}
		}
	}
	cfg.Hold = sim.Hold{}
	cfg.Scenario = nil
	plain, err := sim.Run(tr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i, o := range plain.Outcomes {
		if o.HeldFrom != 0 || o.HeldUntil != 0 {
			t.Fatalf("request %d held %v-%v without Config.Hold", i, o.HeldFrom, o.HeldUntil)
		}
	}
	cfg.Hold = sim.Hold{Min: time.Second, Max: time.Millisecond}
	if _, err := sim.Run(tr, cfg); err == nil {
		t.Error("a hold with min above max accepted")
	}
}
