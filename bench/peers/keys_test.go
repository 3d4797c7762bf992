package main

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/loadgen"
)

func TestOffered(t *testing.T) {
	tn, _ := loadgen.ParseKeysDist("tenants:20")
	u, _ := loadgen.ParseKeysDist("uniform")
	// tenants:20 at 100/s: 2x on each tenant is 4000 checks/s
	l, err := parseLimit("100/s", 0)
	if err != nil || l != (limitSpec{perS: 100, burst: 100, set: true}) {
		t.Fatalf("100/s: %+v, %v", l, err)
	}
	if c, err := offered(l, tn, 500, 2); err != nil || math.Abs(c-4000) > 1e-9 {
		t.Errorf("offered %v, %v; want 4000", c, err)
	}
	if _, err := offered(l, u, 1_000_000, 2); err == nil {
		t.Error("2e8 checks/s accepted")
	}
	for _, x := range []float64{0, -1, math.NaN(), 101} {
		if _, err := offered(l, tn, 500, x); err == nil {
			t.Errorf("--overload %v accepted", x)
		}
	}
}

func TestParseLimit(t *testing.T) {
	for _, c := range []struct {
		limit string
		burst int64
		want  limitSpec
	}{
		{"", 0, limitSpec{perS: unlimited, burst: unlimited}},
		{"100/s", 0, limitSpec{perS: 100, burst: 100, set: true}},
		{"100/s", 20, limitSpec{perS: 100, burst: 20, set: true}},
		{"6000/min", 0, limitSpec{perS: 100, burst: 100, set: true}},
		{"250", 1000, limitSpec{perS: 250, burst: 1000, set: true}},
		{"1000000000/s", 0, limitSpec{perS: unlimited, burst: unlimited, set: true}},
	} {
		got, err := parseLimit(c.limit, c.burst)
		if err != nil || got != c.want {
			t.Errorf("--limit %q --burst %d: %+v, %v; want %+v", c.limit, c.burst, got, err, c.want)
		}
	}
	for _, c := range []struct {
		limit string
		burst int64
	}{{"", 5}, {"x", 0}, {"0/s", 0}, {"1/2s", 0}, {"2.5", 0}, {"3/2s", 0}, {"2000000000/s", 0}, {"100/s", -1}, {"100/s", 2_000_000_000}} {
		if got, err := parseLimit(c.limit, c.burst); err == nil {
			t.Errorf("--limit %q --burst %d accepted: %+v", c.limit, c.burst, got)
		}
	}
	if l := (limitSpec{perS: 100}); l.rate() != "100/s" {
		t.Errorf("rate %q", l.rate())
	}
}

func TestGubernatorModes(t *testing.T) {
	if m, err := gubernatorModes("exact, global"); err != nil || len(m) != 2 || gubernatorName(m[0]) != "gubernator" || gubernatorName(m[1]) != "gubernator global" {
		t.Errorf("%v, %v", m, err)
	}
	for _, bad := range []string{"", "exact,exact", "leaky"} {
		if _, err := gubernatorModes(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// With --limit the table adds the excess columns, the worst over rounds,
// and says whether each system kept the limit; without, it is the table
// of before realistic keys.
func TestPrintTableExcess(t *testing.T) {
	d, _ := loadgen.ParseKeysDist("tenants:20")
	f := &flags{workers: 32, batch: 1, keys: 10000, rounds: 2, duration: time.Second, dist: d,
		limit: limitSpec{perS: 100, burst: 100, set: true}, window: time.Second, overload: 2, offeredPerS: 4000}
	rows := []row{
		{sys: "tokenmesh owner", ref: true, n: 3, runs: []run{{checksPerS: 4000, excess: loadgen.Excess{Worst: 1}}, {checksPerS: 4000}}},
		{sys: "tokenmesh gdrl", n: 3, runs: []run{{checksPerS: 4000, excess: loadgen.Excess{Sliding: 1.5},
			shortfall: loadgen.ShortfallResult{Exact: 2000, Admitted: 1950, Missed: 60, Extra: 10}}}},
		{sys: "gubernator global", n: 3, runs: []run{{checksPerS: 4000, excess: loadgen.Excess{Worst: 3, Sum: 10, Keys: 2, Sliding: 90}},
			{checksPerS: 4000, excess: loadgen.Excess{Worst: 7, Sum: 5, Keys: 1, Sliding: 12}}}},
	}
	var b bytes.Buffer
	printTable(&b, f, rows)
	out := b.String()
	for _, want := range []string{"keys tenants:20", "limit 100/s burst 100 per key, open loop at 4000 checks/s (2x the limit on the hottest key)",
		"| worst window excess | excess sum | keys over | sliding excess | limit kept | missed % | extra % |",
		"| 1.0 | 0 | 0 | 0.0 | yes | 0.00 | 0.00 |", "| 0.0 | 0 | 0 | 1.5 | no | 3.00 | 0.50 |", "missed % / extra %: the same checks", "| 7.0 | 10 | 2 | 90.0 | no |", "b 100, r 100/s, T 1s: 200"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	b.Reset()
	u, _ := loadgen.ParseKeysDist("uniform")
	printTable(&b, &flags{workers: 32, batch: 1, keys: 10000, rounds: 2, duration: time.Second, dist: u,
		limit: limitSpec{perS: unlimited, burst: unlimited}}, rows[:1])
	if out := b.String(); !strings.Contains(out, "10000 uniform keys, limit 10^9/s;") || strings.Contains(out, "excess") || strings.Contains(out, "missed") {
		t.Errorf("default table:\n%s", out)
	}
}
