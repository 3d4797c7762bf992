package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/sim"
)

// --hold reads a fixed or uniform service time and refuses anything else
// naming the flag.
func TestParseHold(t *testing.T) {
	for in, want := range map[string]sim.Hold{
		"":                   {},
		"100ms":              {Min: 100 * time.Millisecond, Max: 100 * time.Millisecond},
		"uniform:50ms-200ms": {Min: 50 * time.Millisecond, Max: 200 * time.Millisecond},
	} {
		if got, err := parseHold(in); err != nil || got != want {
			t.Errorf("--hold %q: %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, bad := range []string{"exp:100ms", "soon", "0s", "2h", "uniform:0s-0s"} {
		if _, err := parseHold(bad); err == nil || !strings.Contains(err.Error(), "--hold") {
			t.Errorf("--hold %q: %v, want an error naming --hold", bad, err)
		}
	}
}

// sim --hold with the concurrency strategy: the JSON has each result's
// permits, and concurrency never holds more than its limit for one key at
// once; without --hold there is no holds field.
func TestSimHoldConcurrency(t *testing.T) {
	args := []string{"sim", "--workload", "tenants:users=4,rate=120,duration=5s", "--nodes", "3", "--rate", "1000", "--burst", "1000",
		"--strategies", "central,concurrency", "--param", "concurrency.limit=5", "--param", "concurrency.permit_ttl=1s", "--json"}
	out, errOut, code := tokenmesh(t, append(args, "--hold", "uniform:50ms-200ms")...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var rep struct {
		Results []struct {
			Strategy string `json:"strategy"`
			Holds    *struct {
				Permits     int     `json:"permits"`
				MaxInFlight int     `json:"max_in_flight"`
				Mean        float64 `json:"mean_in_flight"`
				Limit       int64   `json:"limit"`
				RefPermits  int     `json:"reference_permits"`
				UsedPct     float64 `json:"used_pct"`
				Missed      int     `json:"missed"`
			} `json:"holds"`
		} `json:"results"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	for _, r := range rep.Results {
		switch {
		case r.Holds == nil:
			t.Errorf("%s: no holds in the JSON", r.Strategy)
		case r.Strategy == "central" && r.Holds.Permits != 0:
			t.Errorf("central (a rate limit) held %d permits", r.Holds.Permits)
		case r.Strategy == "concurrency" && (r.Holds.Permits == 0 || r.Holds.MaxInFlight > 5 || r.Holds.MaxInFlight < 1):
			t.Errorf("concurrency: %+v, want permits held, at most 5 per key at once", *r.Holds)
		case r.Strategy == "concurrency" && (r.Holds.Limit != 5 || r.Holds.RefPermits < r.Holds.Permits/2 ||
			r.Holds.UsedPct <= 0 || r.Holds.Missed < 0):
			// The semaphore sees every request at once; the strategy
			// decides after a peer's hop, so it may admit a little more
			// or less, never twice as much.
			t.Errorf("concurrency: %+v, want the semaphore of N = 5 beside it", *r.Holds)
		case r.Strategy == "central" && r.Holds.Limit != 0:
			t.Errorf("central: a semaphore reference beside a rate limit: %+v", *r.Holds)
		}
	}
	out, errOut, code = tokenmesh(t, args...)
	if code != 0 || strings.Contains(out, `"holds"`) {
		t.Errorf("without --hold: exit %d, holds in the JSON: %v (%s)", code, strings.Contains(out, `"holds"`), errOut)
	}
}
