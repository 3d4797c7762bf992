package main

import (
	"errors"
	"strings"
	"testing"
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
	if r := f.reproduce(); !strings.Contains(r, "--seed 3") || !strings.Contains(r, "--strategy owner,gdrl") {
		t.Fatalf("reproduce: %s", r)
	}
}
