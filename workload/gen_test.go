package workload

import (
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

func mustGen(t testing.TB, spec string) Generator {
	t.Helper()
	g, err := ParseGenerator(spec)
	if err != nil {
		t.Fatalf("ParseGenerator(%q): %v", spec, err)
	}
	return g
}

func TestParseGeneratorCanonical(t *testing.T) {
	tests := []struct{ spec, want string }{
		{"poisson", "poisson:users=50,rate=1,duration=60s"},
		{"poisson:", "poisson:users=50,rate=1,duration=60s"},
		{" poisson : users = 100 , rate=0.5,duration=60s,seed=1 ", "poisson:users=100,rate=0.5,duration=60s,seed=1"},
		{"periodic", "periodic:users=50,period=1s,jitter=0s,duration=60s"},
		{"periodic:period=250ms,jitter=10ms,duration=1m30s", "periodic:users=50,period=250ms,jitter=10ms,duration=90s"},
		{"batch", "batch:users=10,rate=0.2,size=10,duration=60s"},
		{"heavy", "heavy:users=200,rate=200,s=1.2,duration=60s"},
		{"heavy:s=0,users=1", "heavy:users=1,rate=200,s=0,duration=60s"},
		{"mix", "mix:duration=60s"},
		{"mix:duration=2s,seed=18446744073709551615", "mix:duration=2s,seed=18446744073709551615"},
	}
	for _, tc := range tests {
		g := mustGen(t, tc.spec)
		if g.String() != tc.want {
			t.Errorf("%q: String() = %q, want %q", tc.spec, g.String(), tc.want)
		}
		if again := mustGen(t, g.String()); again.String() != g.String() {
			t.Errorf("%q does not round-trip: %q", g.String(), again.String())
		}
	}
	if Default().String() != "mix:duration=60s" {
		t.Errorf("Default() = %q", Default())
	}
}

func TestParseGeneratorErrors(t *testing.T) {
	tests := []struct{ spec, want string }{
		{"", `workload: unknown generator kind "" in "" (want poisson, periodic, batch, heavy, mix, tenants)`},
		{"zipf:users=3", `workload: unknown generator kind "zipf" in "zipf:users=3" (want poisson, periodic, batch, heavy, mix, tenants)`},
		{"poisson:user=3", `workload: generator poisson: unknown parameter "user" (allowed: users, rate, duration, seed)`},
		{"mix:users=3", `workload: generator mix: unknown parameter "users" (allowed: duration, seed)`},
		{"poisson:users=0", `workload: generator poisson: users "0" must be a whole number from 1 to 1000000`},
		{"poisson:users=-3", `workload: generator poisson: users "-3" must be a whole number from 1 to 1000000`},
		{"poisson:users=2.5", `workload: generator poisson: users "2.5" must be a whole number from 1 to 1000000`},
		{"poisson:users=1000001", `workload: generator poisson: users "1000001" must be a whole number from 1 to 1000000`},
		{"poisson:rate=0", `workload: generator poisson: rate "0" must be a positive number (per second)`},
		{"poisson:rate=-1", `workload: generator poisson: rate "-1" must be a positive number (per second)`},
		{"poisson:rate=NaN", `workload: generator poisson: rate "NaN" must be a positive number (per second)`},
		{"poisson:rate=inf", `workload: generator poisson: rate "inf" must be a positive number (per second)`},
		{"poisson:rate=fast", `workload: generator poisson: rate "fast" must be a positive number (per second)`},
		{"poisson:duration=60", `workload: generator poisson: duration "60" is not a duration like 60s, 1500ms or 2m`},
		{"poisson:duration=-1s", `workload: generator poisson: duration "-1s" must be positive`},
		{"poisson:duration=0s", `workload: generator poisson: duration "0s" must be positive`},
		{"poisson:duration=1.5ms", `workload: generator poisson: duration "1.5ms" is not a whole number of milliseconds`},
		{"periodic:period=0s", `workload: generator periodic: period "0s" must be positive`},
		{"periodic:jitter=-1ms", `workload: generator periodic: jitter "-1ms" must be positive`},
		{"periodic:jitter=2m", `workload: generator periodic: jitter 120s is longer than duration 60s`},
		{"batch:size=0", `workload: generator batch: size "0" must be a whole number from 1 to 1000000`},
		{"heavy:s=-1", `workload: generator heavy: s "-1" must be a number from 0 to 100`},
		{"heavy:seed=-1", `workload: generator heavy: seed "-1" must be an unsigned 64-bit integer`},
		{"poisson:users=3,users=4", `workload: generator poisson: parameter "users" given twice`},
		{"poisson:users", `workload: generator poisson: parameter "users" has no value (want users=VALUE)`},
		{"poisson:users=", `workload: generator poisson: parameter "users" has no value (want users=VALUE)`},
		{"poisson:users=3,", `workload: generator poisson: empty parameter in "poisson:users=3," (want name=value,...; allowed: users, rate, duration, seed)`},
		{"poisson:users=1000000,rate=1,duration=11s", `workload: generator poisson: about 11000000 requests expected, more than the limit of 10000000; lower users, rate, size or duration, or raise period`},
		{"periodic:period=1ms,users=1000,duration=3h", `workload: generator periodic: about 10800001000 requests expected, more than the limit of 10000000; lower users, rate, size or duration, or raise period`},
	}
	for _, tc := range tests {
		g, err := ParseGenerator(tc.spec)
		if err == nil {
			t.Errorf("%q: no error, got %v", tc.spec, g)
			continue
		}
		if err.Error() != tc.want {
			t.Errorf("%q:\n got  %s\n want %s", tc.spec, err, tc.want)
		}
	}
}

func TestGenerateDeterministic(t *testing.T) {
	for _, spec := range []string{"poisson", "periodic:jitter=100ms", "batch", "heavy", "mix"} {
		g := mustGen(t, spec)
		a, b, c := g.Generate(1), g.Generate(1), g.Generate(2)
		if !reflect.DeepEqual(a, b) {
			t.Errorf("%s: two runs with seed 1 differ", spec)
		}
		if reflect.DeepEqual(a.Requests, c.Requests) {
			t.Errorf("%s: seeds 1 and 2 give the same trace", spec)
		}
		if a.Name != g.String() {
			t.Errorf("%s: Name %q", spec, a.Name)
		}
		checkTrace(t, a, false)
		if last := a.Requests[len(a.Requests)-1].Arrival; last >= time.Minute {
			t.Errorf("%s: request at %v, after the 60s duration", spec, last)
		}
		// seed= in the spec overrides the argument.
		gs := mustGen(t, g.String()+",seed=2") // every canonical spec has a ':'.
		if !reflect.DeepEqual(gs.Generate(99).Requests, c.Requests) {
			t.Errorf("%s: seed=2 in the spec does not give the seed-2 trace", spec)
		}
	}
}

// within checks that got is within k standard deviations of a Poisson count with mean.
func within(t *testing.T, what string, got int, mean, k float64) {
	t.Helper()
	if math.Abs(float64(got)-mean) > k*math.Sqrt(mean) {
		t.Errorf("%s: %d, want about %.0f (±%.0f)", what, got, mean, k*math.Sqrt(mean))
	}
}

func TestGeneratorShapes(t *testing.T) {
	// Poisson: count and per-user spread.
	tr := mustGen(t, "poisson:users=100,rate=0.5,duration=60s").Generate(7)
	within(t, "poisson requests", len(tr.Requests), 3000, 5)
	if tr.Keys() < 95 || tr.Keys() > 100 {
		t.Errorf("poisson keys %d", tr.Keys())
	}
	for k := range tr.KeyCounts() {
		if len(k) != 5 || k[0] != 'u' || k < "u0001" || k > "u0100" {
			t.Errorf("poisson key %q", k)
		}
	}

	// Periodic without jitter: each user exactly every period.
	tr = mustGen(t, "periodic:users=5,period=250ms,duration=60s").Generate(3)
	if len(tr.Requests) != 5*240 {
		t.Errorf("periodic requests %d, want 1200", len(tr.Requests))
	}
	last := map[string]time.Duration{}
	for _, r := range tr.Requests {
		if p, ok := last[r.Key]; ok && r.Arrival-p != 250*ms {
			t.Fatalf("periodic %s: gap %v", r.Key, r.Arrival-p)
		}
		last[r.Key] = r.Arrival
	}
	// With jitter: gaps within period ± 2*jitter, count within the edges.
	tr = mustGen(t, "periodic:users=5,period=250ms,jitter=20ms,duration=60s").Generate(3)
	if n := len(tr.Requests); n < 1190 || n > 1205 {
		t.Errorf("periodic with jitter: %d requests", n)
	}

	// Batch: groups of size requests of one key at one ms.
	tr = mustGen(t, "batch:users=3,rate=0.2,size=20,duration=600s").Generate(5)
	if len(tr.Requests)%20 != 0 {
		t.Errorf("batch requests %d not a multiple of 20", len(tr.Requests))
	}
	within(t, "batches", len(tr.Requests)/20, 360, 5)
	for i := 0; i < len(tr.Requests); i += 20 {
		for j := i + 1; j < i+20; j++ {
			if tr.Requests[j].Arrival != tr.Requests[i].Arrival || tr.Requests[j].Key != tr.Requests[i].Key {
				t.Fatalf("batch at %d broken at %d: %+v vs %+v", i, j, tr.Requests[i], tr.Requests[j])
			}
		}
	}

	// Heavy: Zipf shares; user 1 gets 2^1.2 times user 2's requests.
	tr = mustGen(t, "heavy:users=200,rate=200,s=1.2,duration=60s").Generate(11)
	within(t, "heavy requests", len(tr.Requests), 12000, 5)
	c := tr.KeyCounts()
	var h float64
	for k := 1; k <= 200; k++ {
		h += math.Pow(float64(k), -1.2)
	}
	within(t, "heavy u0001", c["u0001"], 12000/h, 5)
	within(t, "heavy u0002", c["u0002"], 12000/h/math.Pow(2, 1.2), 5)
	within(t, "heavy u0010", c["u0010"], 12000/h/math.Pow(10, 1.2), 5)

	// Key names widen past 9999 users.
	tr = mustGen(t, "poisson:users=12345,rate=0.01,duration=60s").Generate(1)
	if k := tr.Requests[0].Key; len(k) != 6 {
		t.Errorf("key %q for 12345 users, want 5 digits", k)
	}
}

func TestDefaultMix(t *testing.T) {
	tr := Default().Generate(1)
	checkTrace(t, tr, false)
	counts := map[byte]int{}
	keys := map[byte]map[string]bool{}
	for _, r := range tr.Requests {
		p := r.Key[0]
		counts[p]++
		if keys[p] == nil {
			keys[p] = map[string]bool{}
		}
		keys[p][r.Key] = true
		if r.Arrival >= time.Minute {
			t.Fatalf("request at %v", r.Arrival)
		}
	}
	within(t, "mix poisson", counts['p'], 3000, 5)
	if counts['t'] < 1190 || counts['t'] > 1200 {
		t.Errorf("mix periodic %d, want about 1200", counts['t'])
	}
	if counts['b']%20 != 0 {
		t.Errorf("mix batch %d not a multiple of 20", counts['b'])
	}
	within(t, "mix batches", counts['b']/20, 36, 5)
	within(t, "mix heavy", counts['h'], 1200, 5)
	if len(counts) != 4 || len(keys['t']) != 5 || len(keys['b']) != 3 || len(keys['h']) > 20 || len(keys['p']) > 100 {
		t.Errorf("mix keys: %d kinds, %d t, %d b, %d h, %d p", len(counts), len(keys['t']), len(keys['b']), len(keys['h']), len(keys['p']))
	}
	// Ties are in component order: p before t before b before h.
	order := map[byte]int{'p': 0, 't': 1, 'b': 2, 'h': 3}
	for i := 1; i < len(tr.Requests); i++ {
		a, b := tr.Requests[i-1], tr.Requests[i]
		if a.Arrival == b.Arrival && order[a.Key[0]] > order[b.Key[0]] {
			t.Fatalf("tie at %v: %s before %s", a.Arrival, a.Key, b.Key)
		}
	}
}

// TestTenants: the tenant workload is a few keys at high Poisson rates, with
// its defaults spelled out in its canonical spec.
func TestTenants(t *testing.T) {
	g, err := ParseGenerator("tenants:duration=2s")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := g.String(), "tenants:users=20,rate=2000,duration=2s"; got != want {
		t.Fatalf("String() = %q, want %q", got, want)
	}
	tr := g.Generate(1)
	counts := tr.KeyCounts()
	if len(counts) != 20 {
		t.Fatalf("%d keys, want 20", len(counts))
	}
	for k, n := range counts {
		if !strings.HasPrefix(k, "tenant") || n < 3600 || n > 4400 { // 4000 expected, sd ~63
			t.Errorf("key %s: %d requests, want about 4000", k, n)
		}
	}
	if _, err := ParseGenerator("tenants:users=20,rate=2000,duration=600s"); err == nil {
		t.Fatal("24,000,000 expected requests accepted")
	}
}

// TestTenantsFollow: follow=D marks the trace as following the sun
// (Trace.Follow) and changes no request; it is in the canonical spec only
// when set; bad values are errors, and the other kinds refuse it.
func TestTenantsFollow(t *testing.T) {
	g, err := ParseGenerator("tenants:users=3,rate=50,duration=2s,follow=500ms")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := g.String(), "tenants:users=3,rate=50,duration=2s,follow=500ms"; got != want {
		t.Fatalf("String() = %q, want %q", got, want)
	}
	tr := g.Generate(1)
	plain, _ := ParseGenerator("tenants:users=3,rate=50,duration=2s")
	if tr.Follow != 500*time.Millisecond || !slices.Equal(tr.Requests, plain.Generate(1).Requests) {
		t.Fatalf("Follow %v; the requests should be the tenants' without follow", tr.Follow)
	}
	if plain.Generate(1).Follow != 0 {
		t.Fatal("a trace without follow follows the sun")
	}
	for spec, want := range map[string]string{
		"tenants:follow=x":      `follow "x" is not a duration`,
		"tenants:follow=-1s":    `follow "-1s" must be positive`,
		"tenants:follow=1500us": "not a whole number of milliseconds",
		"poisson:follow=20s":    `unknown parameter "follow"`,
	} {
		if _, err := ParseGenerator(spec); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error with %q", spec, err, want)
		}
	}
}
