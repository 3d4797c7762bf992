package main

import (
	"errors"
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
}
