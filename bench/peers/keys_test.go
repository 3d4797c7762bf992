package main

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/loadgen"
)

func TestParseKeysDist(t *testing.T) {
	for _, c := range []struct {
		in   string
		want keysDist
	}{
		{"uniform", keysDist{kind: distUniform}},
		{" uniform ", keysDist{kind: distUniform}},
		{"zipf", keysDist{kind: distZipf, n: 100_000, s: 1.1}},
		{"zipf:s=1.1,n=100000", keysDist{kind: distZipf, n: 100_000, s: 1.1}},
		{"zipf: n=50 , s=0.8", keysDist{kind: distZipf, n: 50, s: 0.8}},
		{"zipf:s=2", keysDist{kind: distZipf, n: 100_000, s: 2}},
		{"zipf:n=2", keysDist{kind: distZipf, n: 2, s: 1.1}},
		{"tenants", keysDist{kind: distTenants, n: 20}},
		{"tenants:20", keysDist{kind: distTenants, n: 20}},
		{"tenants:1", keysDist{kind: distTenants, n: 1}},
	} {
		got, err := parseKeysDist(c.in)
		if err != nil || got != c.want {
			t.Errorf("%q: %+v, %v; want %+v", c.in, got, err, c.want)
			continue
		}
		// String reads back
		if again, err := parseKeysDist(got.String()); err != nil || again != got {
			t.Errorf("%q: String %q reads back as %+v, %v", c.in, got.String(), again, err)
		}
	}
	for _, c := range []struct{ in, why string }{
		{"", "empty"},
		{"pareto", `unknown distribution "pareto"`},
		{"Uniform", "unknown distribution"},
		{"uniform:", "nothing after ':'"},
		{"uniform:n=5", "uniform takes no parameter"},
		{"tenants:", "nothing after ':'"},
		{"tenants:0", "0 tenants"},
		{"tenants:-3", "-3 tenants"},
		{"tenants:+3", "not a whole number"},
		{"tenants:x", "not a whole number"},
		{"tenants:2.5", "not a whole number"},
		{"tenants:10000001", "want 1..10000000"},
		{"zipf:", "nothing after ':'"},
		{"zipf:s=0", "want 0 < s <= 10"},
		{"zipf:s=-1", "want 0 < s <= 10"},
		{"zipf:s=11", "want 0 < s <= 10"},
		{"zipf:s=NaN", "want 0 < s <= 10"},
		{"zipf:s=inf", "want 0 < s <= 10"},
		{"zipf:s=0x1p0", "not a number"},
		{"zipf:s=abc", "not a number"},
		{"zipf:n=1", "want 2..10000000"},
		{"zipf:n=1e5", "not a whole number"},
		{"zipf:n=20000000", "want 2..10000000"},
		{"zipf:s", "has no value"},
		{"zipf:s=", "has no value"},
		{"zipf:s=1,s=2", "given twice"},
		{"zipf:k=3", `unknown parameter "k"`},
		{"zipf:s=1,,n=3", "empty parameter"},
	} {
		_, err := parseKeysDist(c.in)
		if err == nil {
			t.Errorf("%q accepted", c.in)
			continue
		}
		if !strings.Contains(err.Error(), c.why) || !strings.Contains(err.Error(), "--keys-dist") || !strings.Contains(err.Error(), "zipf:s=1.1,n=100000") {
			t.Errorf("%q: %v; want it to say %q, name the flag and show the forms", c.in, err, c.why)
		}
	}
}

// The parser never panics; what it accepts is in range and reads back.
func FuzzParseKeysDist(f *testing.F) {
	for _, s := range []string{"uniform", "zipf:s=1.1,n=100000", "tenants:20", "zipf", "tenants", "zipf:n=3,s=1e-3", "zipf:s=1,s=1", ":", "tenants:+1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := parseKeysDist(s)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "--keys-dist ") {
				t.Fatalf("%q: error %q does not name the flag", s, err)
			}
			return
		}
		switch d.kind {
		case distUniform:
			if d.n != 0 || d.s != 0 {
				t.Fatalf("%q: %+v", s, d)
			}
		case distTenants:
			if d.n < 1 || d.n > maxDistKeys || d.s != 0 {
				t.Fatalf("%q: %+v", s, d)
			}
		case distZipf:
			if d.n < 2 || d.n > maxDistKeys || !(d.s > 0 && d.s <= maxZipfS) {
				t.Fatalf("%q: %+v", s, d)
			}
		default:
			t.Fatalf("%q: kind %q", s, d.kind)
		}
		if again, err := parseKeysDist(d.String()); err != nil || again != d {
			t.Fatalf("%q: %+v reads back from %q as %+v, %v", s, d, d.String(), again, err)
		}
	})
}

func TestKeysDistLoad(t *testing.T) {
	u, _ := parseKeysDist("uniform")
	tn, _ := parseKeysDist("tenants:20")
	z, _ := parseKeysDist("zipf:s=1,n=4")
	if u.keys(500) != 500 || u.hottest(500) != 1.0/500 || tn.keys(500) != 20 || tn.hottest(500) != 1.0/20 || z.keys(500) != 4 {
		t.Errorf("keys %d %d %d, hottest %v %v", u.keys(500), tn.keys(500), z.keys(500), u.hottest(500), tn.hottest(500))
	}
	if h := z.hottest(500); math.Abs(h-1/(1+0.5+1.0/3+0.25)) > 1e-12 {
		t.Errorf("zipf s=1 n=4: hottest %v", h)
	}
	var o loadgen.Options
	tn.apply(&o, 500)
	if o.Keys != 20 || o.KeyPrefix != "tenant" || o.ZipfS != 0 {
		t.Errorf("tenants: %+v", o)
	}
	o = loadgen.Options{}
	z.apply(&o, 500)
	if o.Keys != 4 || o.ZipfS != 1 || o.KeyPrefix != "" {
		t.Errorf("zipf: %+v", o)
	}
	o = loadgen.Options{}
	u.apply(&o, 500)
	if o.Keys != 500 || o.ZipfS != 0 || o.KeyPrefix != "" {
		t.Errorf("uniform: %+v", o)
	}

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
	d, _ := parseKeysDist("tenants:20")
	f := &flags{workers: 32, batch: 1, keys: 10000, rounds: 2, duration: time.Second, dist: d,
		limit: limitSpec{perS: 100, burst: 100, set: true}, window: time.Second, overload: 2, offeredPerS: 4000}
	rows := []row{
		{sys: "tokenmesh owner", ref: true, n: 3, runs: []run{{checksPerS: 4000, excess: loadgen.Excess{Worst: 1}}, {checksPerS: 4000}}},
		{sys: "tokenmesh gdrl", n: 3, runs: []run{{checksPerS: 4000, excess: loadgen.Excess{Sliding: 1.5}}}},
		{sys: "gubernator global", n: 3, runs: []run{{checksPerS: 4000, excess: loadgen.Excess{Worst: 3, Sum: 10, Keys: 2, Sliding: 90}},
			{checksPerS: 4000, excess: loadgen.Excess{Worst: 7, Sum: 5, Keys: 1, Sliding: 12}}}},
	}
	var b bytes.Buffer
	printTable(&b, f, rows)
	out := b.String()
	for _, want := range []string{"keys tenants:20", "limit 100/s burst 100 per key, open loop at 4000 checks/s (2x the limit on the hottest key)",
		"| worst window excess | excess sum | keys over | sliding excess | limit kept |",
		"| 1.0 | 0 | 0 | 0.0 | yes |", "| 0.0 | 0 | 0 | 1.5 | no |", "| 7.0 | 10 | 2 | 90.0 | no |", "b 100, r 100/s, T 1s: 200"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	b.Reset()
	u, _ := parseKeysDist("uniform")
	printTable(&b, &flags{workers: 32, batch: 1, keys: 10000, rounds: 2, duration: time.Second, dist: u,
		limit: limitSpec{perS: unlimited, burst: unlimited}}, rows[:1])
	if out := b.String(); !strings.Contains(out, "10000 uniform keys, limit 10^9/s;") || strings.Contains(out, "excess") {
		t.Errorf("default table:\n%s", out)
	}
}
