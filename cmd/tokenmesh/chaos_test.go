package main

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/chaos"
)

// The command line is checked before anything starts: every error is a
// usage error naming its flag; a good one gives the seed's schedule and a
// bounded load.
func TestChaosPlanFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--seed", "1"}, "--random"},
		{[]string{"--random", "--nodes", "1"}, "--nodes"},
		{[]string{"--random", "--strategy", "central"}, "--strategy"},
		{[]string{"--random", "--strategy", "owner,owner"}, "twice"},
		{[]string{"--random", "--strategy", "nope"}, "--strategy"},
		{[]string{"--random", "--duration", "5s"}, "--duration"},
		{[]string{"--random", "--max-fault", "1s"}, "--max-fault"},
		{[]string{"--random", "--faults", "clock"}, "clock"},
		{[]string{"--random", "--param", "owner.bogus=1"}, "--param"},
		{[]string{"--random", "--burst", "0"}, "--burst"},
		{[]string{"--random", "--keys", "0"}, "--keys"},
		{[]string{"--random", "--rate", "0"}, "--rate"},
		{[]string{"--random", "--rate", "+Inf"}, "--rate"},
		{[]string{"--random", "--offered", "0"}, "--offered"},
		{[]string{"--random", "--offered", "1001"}, "--offered"},
		{[]string{"--random", "--settle", "-1s"}, "--settle"},
		{[]string{"--random", "--slack", "-1"}, "--slack"},
		{[]string{"--random", "--idle", "-1s"}, "--idle"},
		{[]string{"--random", "--timeout", "0s"}, "--timeout"},
		{[]string{"--random", "--max-excess-run", "-1"}, "--settle"},
		{[]string{"--random", "--nodes", "1", "--keys", "0"}, "--nodes"}, // the first bad flag is named
		{[]string{"--random", "--burst", "0", "--duration", "5s"}, "--burst"},
		{[]string{"--random", "--duration", "5s", "--timeout", "0s"}, "--duration"},
	} {
		f := &chaosFlags{}
		cmd := newChaosCmdWith(f)
		if err := cmd.ParseFlags(append(tc.args, "--binary", binary)); err != nil {
			t.Fatal(err)
		}
		_, err := f.plan()
		if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err %v, want a usage error naming %q", tc.args, err, tc.want)
		}
	}
	f := &chaosFlags{}
	cmd := newChaosCmdWith(f)
	if err := cmd.ParseFlags([]string{"--random", "--seed", "3", "--duration", "1m", "--strategy", "owner,gdrl", "--binary", binary}); err != nil {
		t.Fatal(err)
	}
	p, err := f.plan()
	if err != nil {
		t.Fatal(err)
	}
	if p.schedule.Seed != 3 || len(p.schedule.Faults) == 0 || len(p.strategies) != 2 {
		t.Fatalf("plan: %+v", p)
	}
	if p.load.MaxChecks != 3*100*60+1 {
		t.Fatalf("load bound %d checks, want 18001", p.load.MaxChecks)
	}
	if p.load.PerKeyPerSec != 3 || p.load.Keys != 100 || p.load.Timeout != time.Second || p.env.RatePerSec != 1 || p.env.Burst != 5 || p.rate.PerSec() != 1 {
		t.Fatalf("load %+v, envelope %+v, rate %v", p.load, p.env, p.rate)
	}
	if p.schedule.Settle != 10*time.Second || p.binary != binary {
		t.Fatalf("settle %v, binary %s", p.schedule.Settle, p.binary)
	}
	if r := f.reproduce(); !strings.Contains(r, "--seed 3") || !strings.Contains(r, "--strategy owner,gdrl") {
		t.Fatalf("reproduce: %s", r)
	}
	// --settle 0 stays 0 (not NewSchedule's default); --param goes to its
	// strategy; --faults are trimmed and limit the kinds drawn.
	f = &chaosFlags{}
	cmd = newChaosCmdWith(f)
	if err := cmd.ParseFlags([]string{"--random", "--seed", "5", "--duration", "1m", "--strategy", "owner, lease", "--settle", "0s",
		"--param", "owner.on_timeout=admit", "--faults", "kill, pause", "--binary", binary}); err != nil {
		t.Fatal(err)
	}
	if p, err = f.plan(); err != nil {
		t.Fatal(err)
	}
	if p.schedule.Settle != time.Nanosecond || !slices.Equal(p.strategies, []string{"owner", "lease"}) ||
		!slices.Equal(p.params["owner"], []string{"on_timeout=admit"}) || len(p.params["lease"]) != 0 ||
		!slices.Equal(p.kinds, []chaos.FaultKind{chaos.FaultKill, chaos.FaultPause}) {
		t.Fatalf("plan: settle %v, strategies %q, params %q, kinds %q", p.schedule.Settle, p.strategies, p.params, p.kinds)
	}
	for _, fl := range p.schedule.Faults {
		if fl.Kind != chaos.FaultKill && fl.Kind != chaos.FaultPause {
			t.Fatalf("fault %v drawn, only kill and pause asked for", fl)
		}
	}
	// The reproduce line, parsed again, plans the same run (strategies
	// and faults given with spaces, --idle kept).
	f.idle = 3 * time.Second
	line := f.reproduce()
	again := &chaosFlags{}
	args := append(strings.Fields(line)[2:], "--binary", binary)
	if err := newChaosCmdWith(again).ParseFlags(args); err != nil {
		t.Fatalf("reproduce line %q: %v", line, err)
	}
	q, err := again.plan()
	if err != nil {
		t.Fatalf("reproduce line %q: %v", line, err)
	}
	if !reflect.DeepEqual(q.schedule, p.schedule) || !slices.Equal(q.strategies, p.strategies) || !reflect.DeepEqual(q.params, p.params) ||
		!slices.Equal(q.kinds, p.kinds) || again.idle != 3*time.Second {
		t.Fatalf("reproduce line %q plans another run: %+v, idle %v", line, q, again.idle)
	}
}

// chaosFailures names each failure with its strategy: keys over in the
// quiet windows (the worst one), faults not applied, and only when asked
// for, an excess during the run beyond --max-excess-run and a node grown
// after the load (--check-flat). A clean result fails nothing.
func TestChaosFailures(t *testing.T) {
	over := chaos.RandomResult{
		Quiet:      chaos.Report{Over: 2, Keys: []chaos.KeyReport{{Key: "k7", Violation: 3.5}, {Key: "k1", Violation: 1.5}}},
		Whole:      chaos.Report{MaxViolation: 12, Keys: []chaos.KeyReport{{Key: "k3", Violation: 12, WorstFrom: 2 * time.Second, WorstTo: 3 * time.Second}}},
		StepErrors: []error{errors.New("10s kill n1: no such process")},
		Warm:       []chaos.ProcSample{{RSS: 10 << 20, Goroutines: 40}},
		After:      []chaos.ProcSample{{RSS: 10 << 20, Goroutines: 90}},
	}
	clean := chaos.RandomResult{Whole: chaos.Report{MaxViolation: 12, Keys: over.Whole.Keys}, Warm: over.Warm, After: over.Warm}
	f := &chaosFlags{slack: 1}
	got := chaosFailures(f, []string{"owner", "lease"}, []chaos.RandomResult{over, clean})
	want := []string{"owner: 2 keys beyond b + r*T + 1 in the quiet windows (worst k7 by 3.50 tokens)",
		"owner: fault not applied: 10s kill n1: no such process"}
	if !slices.Equal(got, want) {
		t.Fatalf("without --max-excess-run and --check-flat:\n%q\nwant\n%q", got, want)
	}
	f = &chaosFlags{slack: 1, runBound: 11, checkFlat: true}
	got = chaosFailures(f, []string{"owner", "lease"}, []chaos.RandomResult{over, clean})
	if len(got) != 5 || !strings.HasPrefix(got[2], "owner: key k3 12.00 tokens over b + r*T during the run (checks sent in [2s, 3s]), beyond --max-excess-run 11") ||
		!strings.HasPrefix(got[3], "owner: grew after the load: n0: goroutines") || !strings.HasPrefix(got[4], "lease: key k3") {
		t.Fatalf("with --max-excess-run 11 and --check-flat:\n%q", got)
	}
	if got := chaosFailures(&chaosFlags{runBound: 12, checkFlat: true}, []string{"lease"}, []chaos.RandomResult{clean}); len(got) != 0 {
		t.Fatalf("a clean result within --max-excess-run 12 failed: %q", got)
	}
}
