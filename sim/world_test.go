package sim_test

import (
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/sim"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/registry"
	"github.com/tokenmesh/tokenmesh/workload"
)

func worldConfig(t *testing.T, name string, nodes int, sc *sim.Scenario) sim.Config {
	t.Helper()
	info, err := registry.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	assign, err := workload.NewAssigner("roundrobin", 7)
	if err != nil {
		t.Fatal(err)
	}
	return sim.Config{Name: name, New: info.New, Nodes: nodes, Rate: bucket.Rate{Tokens: 1, Per: time.Second}, Burst: 5,
		Network: fixed(time.Millisecond), Scenario: sc, Assign: assign, Seed: 7}
}

// TestWorldStepMatchesRun: a World stepped to the end gives Run's Result
// bit for bit (its Outcomes already before Finish), its hook sees every
// event Run counts, its Now never goes back, and Nodes names n0..n3.
func TestWorldStepMatchesRun(t *testing.T) {
	tr := mustGen(t, "poisson:users=8,rate=2,duration=20s", 2)
	for _, name := range []string{"owner", "gdrl", "gcounter"} {
		for seed := uint64(1); seed <= 3; seed++ {
			sc, err := sim.RandomScenario(seed, 4, 20*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			want, err := sim.Run(tr, worldConfig(t, name, 4, sc)) // a fresh assigner each: round-robin counts
			if err != nil {
				t.Fatal(err)
			}
			w, err := sim.NewWorld(tr, worldConfig(t, name, 4, sc))
			if err != nil {
				t.Fatal(err)
			}
			if ids := w.Nodes(); !reflect.DeepEqual(ids, []strategy.NodeID{"n0", "n1", "n2", "n3"}) {
				t.Fatalf("%s seed %d: Nodes() = %v, want n0..n3", name, seed, ids)
			}
			var seen int64
			var last time.Duration
			w.OnEvent(func(w *sim.World, _ sim.Event) error {
				seen++
				now := w.Now()
				if now < last {
					return fmt.Errorf("Now() went back from %v to %v", last, now)
				}
				last = now
				return nil
			})
			for w.Step() {
			}
			if err := w.Err(); err != nil {
				t.Fatalf("%s seed %d: %v", name, seed, err)
			}
			if !reflect.DeepEqual(w.Outcomes(), want.Outcomes) {
				t.Fatalf("%s seed %d: Outcomes() after the last step differ from Run's", name, seed)
			}
			got := w.Finish()
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("%s seed %d: stepped World differs from Run", name, seed)
			}
			if seen != got.Events {
				t.Fatalf("%s seed %d: hook saw %d events, Result counts %d", name, seed, seen, got.Events)
			}
		}
	}
}

// TestWorldInjectMatchesScenario: a crash, restart, partition and heal
// injected between events equal the same faults in the scenario file,
// when no other event shares their instant.
func TestWorldInjectMatchesScenario(t *testing.T) {
	tr := mustGen(t, "poisson:users=8,rate=2,duration=30s", 3)
	base := func() *sim.Scenario {
		return &sim.Scenario{Detection: 700 * time.Millisecond, DetectionJitter: 300 * time.Millisecond, ReconnectInterval: time.Second}
	}
	odd := func(s float64) time.Duration { return time.Duration(s*float64(time.Second)) + 12345 }
	faults := []sim.ScenarioEvent{
		{At: odd(3), Crash: []string{"n1"}},
		{At: odd(8), Restart: []string{"n1"}},
		{At: odd(12), Partition: [][]string{{"n0", "n2"}, {"n1", "n3"}}},
		{At: odd(20), Heal: true},
	}
	for _, name := range []string{"owner", "gdrl"} {
		sc := base()
		sc.Events = faults
		want, err := sim.Run(tr, worldConfig(t, name, 4, sc))
		if err != nil {
			t.Fatal(err)
		}
		w, err := sim.NewWorld(tr, worldConfig(t, name, 4, base()))
		if err != nil {
			t.Fatal(err)
		}
		var injected []string
		w.OnEvent(func(_ *sim.World, e sim.Event) error {
			if e.Kind == sim.EventInjected {
				injected = append(injected, e.Fault)
			}
			return nil
		})
		for _, f := range faults {
			w.RunUntil(f.At)
			var err error
			switch {
			case len(f.Crash) > 0:
				err = w.Crash(f.Crash...)
			case len(f.Restart) > 0:
				err = w.Restart(f.Restart...)
			case len(f.Partition) > 0:
				err = w.Partition(f.Partition...)
			default:
				err = w.Heal()
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		got := w.Finish()
		if !reflect.DeepEqual(got.Outcomes, want.Outcomes) || got.Messages != want.Messages || got.MessagesLost != want.MessagesLost ||
			!reflect.DeepEqual(got.Crashed, want.Crashed) {
			t.Fatalf("%s: injected faults differ from the scenario's (messages %d/%d lost %d/%d)", name, got.Messages, want.Messages, got.MessagesLost, want.MessagesLost)
		}
		if fmt.Sprint(injected) != "[crash n1 restart n1 partition n0,n2|n1,n3 heal]" {
			t.Fatalf("%s: hook saw injected faults %v", name, injected)
		}
		if !w.Alive("n1") || len(w.View("n0")) != 4 {
			t.Fatalf("%s: after the heal n1 alive=%v, n0's view %v", name, w.Alive("n1"), w.View("n0"))
		}
	}
}

// TestWorldHookStopsAndErrors: a hook's error stops the world with the
// event named; bad injections are refused and change nothing.
func TestWorldHookStopsAndErrors(t *testing.T) {
	tr := mustGen(t, "poisson:users=4,rate=2,duration=10s", 1)
	w, err := sim.NewWorld(tr, worldConfig(t, "owner", 3, nil))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Crash("n9"); err == nil {
		t.Fatal("crash of an unknown node accepted")
	}
	if err := w.Partition([]string{"n0", "n1"}, []string{"n1"}); err == nil {
		t.Fatal("a node in two partition groups accepted")
	}
	boom := errors.New("invariant broken")
	n := 0
	w.OnEvent(func(w *sim.World, e sim.Event) error {
		if n++; n == 25 {
			return boom
		}
		return nil
	})
	for w.Step() {
	}
	if !errors.Is(w.Err(), boom) || !errors.Is(w.Err(), sim.ErrStopped) || n != 25 {
		t.Fatalf("after %d events: Err() = %v", n, w.Err())
	}
	if w.Step() || w.RunUntil(time.Hour) || w.Crash("n0") == nil {
		t.Fatal("a stopped world went on")
	}
	if res := w.Finish(); res.Events != 25 {
		t.Fatalf("stopped world's result counts %d events, want 25", res.Events)
	}
	var _ strategy.Strategy = w.Strategy("n0")
}

// TestRandomScenario: generated scenarios are valid, deterministic, and
// round-trip through their YAML.
func TestRandomScenario(t *testing.T) {
	for seed := uint64(0); seed < 50; seed++ {
		a, err := sim.RandomScenario(seed, 5, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := sim.RandomScenario(seed, 5, time.Minute)
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("seed %d: two draws differ", seed)
		}
		back, err := sim.ParseScenario([]byte(a.String()))
		if err != nil {
			t.Fatalf("seed %d: generated YAML does not parse: %v\n%s", seed, err, a)
		}
		if !reflect.DeepEqual(back, a) {
			t.Fatalf("seed %d: YAML round trip differs:\n%s\n%+v\n%+v", seed, a, back, a)
		}
		if len(a.Events) == 0 {
			t.Fatalf("seed %d: no faults", seed)
		}
	}
	if _, err := sim.RandomScenario(1, 0, time.Minute); err == nil {
		t.Fatal("0 nodes accepted")
	}
}
