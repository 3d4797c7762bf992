package main

import (
	"os"
	"testing"
)

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{5, 1}, 3}, {[]float64{9, 1, 4}, 4}, {[]float64{4, 1, 9, 2}, 3}} {
		if got := median(c.in); got != c.want {
			t.Errorf("median(%v) = %v, want %v", c.in, got, c.want)
		}
	}
}

// cpuTicks reads this process's CPU time, which grows while it works, and
// names a process that does not exist.
func TestCPUTicks(t *testing.T) {
	if _, err := cpuTicks([]int{1 << 30}); err == nil {
		t.Error("a missing process was read")
	}
	t0, err := cpuTicks([]int{os.Getpid()})
	if err != nil {
		t.Fatal(err)
	}
	x := 0
	for i := range 2_000_000_000 { // a few seconds at most; a tick is 10 ms
		x += i % 7
		if i%1_000_000 == 0 {
			if t1, _ := cpuTicks([]int{os.Getpid()}); t1 > t0 {
				return
			}
		}
	}
	t.Errorf("no CPU time counted (%d)", x)
}

func TestStrategyList(t *testing.T) {
	got, err := strategyList("--s", " owner, lease ,gdrl")
	if err != nil || len(got) != 3 || got[0] != "owner" || got[1] != "lease" || got[2] != "gdrl" {
		t.Errorf("got %v, %v", got, err)
	}
	for _, bad := range []string{"", "owner,", "owner,,gdrl", "owner,owner"} {
		if _, err := strategyList("--s", bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
