package workload

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// genSpecString draws a small valid generator spec.
func genSpecString(t *rapid.T) string {
	kind := rapid.SampledFrom([]string{"poisson", "periodic", "batch", "heavy", "mix"}).Draw(t, "kind")
	durMs := rapid.Int64Range(1, 20000).Draw(t, "duration_ms")
	params := []string{fmt.Sprintf("duration=%dms", durMs)}
	users := rapid.IntRange(1, 300).Draw(t, "users")
	switch kind {
	case "poisson":
		params = append(params, fmt.Sprintf("users=%d", users),
			fmt.Sprintf("rate=%g", rapid.Float64Range(0.001, 20).Draw(t, "rate")))
	case "periodic":
		period := rapid.Int64Range(1, 5000).Draw(t, "period_ms")
		jitter := rapid.Int64Range(0, min(durMs, 3*period)).Draw(t, "jitter_ms")
		params = append(params, fmt.Sprintf("users=%d", min(users, 20)),
			fmt.Sprintf("period=%dms", max(period, durMs/500)), fmt.Sprintf("jitter=%dms", jitter))
	case "batch":
		params = append(params, fmt.Sprintf("users=%d", users),
			fmt.Sprintf("rate=%g", rapid.Float64Range(0.001, 2).Draw(t, "rate")),
			fmt.Sprintf("size=%d", rapid.IntRange(1, 30).Draw(t, "size")))
	case "heavy":
		params = append(params, fmt.Sprintf("users=%d", users),
			fmt.Sprintf("rate=%g", rapid.Float64Range(0.001, 500).Draw(t, "rate")),
			fmt.Sprintf("s=%g", rapid.Float64Range(0, 3).Draw(t, "s")))
	}
	return kind + ":" + strings.Join(params, ",")
}

func TestPropGenerators(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		spec := genSpecString(t)
		seed := rapid.Uint64().Draw(t, "seed")
		g, err := ParseGenerator(spec)
		if err != nil {
			t.Fatalf("%s: %v", spec, err)
		}
		dur := g.(*genSpec).duration
		a := g.Generate(seed)
		if b := g.Generate(seed); !reflect.DeepEqual(a, b) {
			t.Fatalf("%s seed %d: not deterministic", spec, seed)
		}
		for i, r := range a.Requests {
			if i > 0 && r.Arrival < a.Requests[i-1].Arrival {
				t.Fatalf("%s: not sorted at %d", spec, i)
			}
			if r.Arrival < 0 || r.Arrival >= dur || r.Arrival%time.Millisecond != 0 {
				t.Fatalf("%s: request %d at %v, outside [0, %v) or not whole ms", spec, i, r.Arrival, dur)
			}
			if r.Tokens != 1 || r.Key == "" {
				t.Fatalf("%s: request %d %+v", spec, i, r)
			}
		}
	})
}

func TestPropAssigners(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		policy := rapid.SampledFrom(Policies()).Draw(t, "policy")
		seed := rapid.Uint64().Draw(t, "seed")
		n := rapid.IntRange(1, 1<<20).Draw(t, "n")
		keys := rapid.SliceOfN(rapid.StringN(1, 20, -1), 1, 5).Draw(t, "keys")
		a, err := NewAssigner(policy, seed)
		if err != nil {
			t.Fatal(err)
		}
		sticky := map[string]int{}
		type km struct {
			key string
			ms  int64
		}
		sameMs := map[km]int{}
		for i := range rapid.IntRange(1, 200).Draw(t, "requests") {
			key := keys[rapid.IntRange(0, len(keys)-1).Draw(t, "key")]
			at := rapid.Int64Range(0, 1e9).Draw(t, "arrival_ms")
			req := &Request{Arrival: time.Duration(at) * time.Millisecond, Key: key, Tokens: 1}
			v := a.Assign(req, i, n)
			if v < 0 || v >= n {
				t.Fatalf("%s: Assign = %d, n = %d", policy, v, n)
			}
			switch policy {
			case "key":
				if prev, ok := sticky[key]; ok && prev != v {
					t.Fatalf("key policy: %q went to %d and %d", key, prev, v)
				}
				sticky[key] = v
			case "hash":
				if prev, ok := sameMs[km{key, at}]; ok && prev != v {
					t.Fatalf("hash policy: %q at %d ms went to %d and %d", key, at, prev, v)
				}
				sameMs[km{key, at}] = v
			case "roundrobin":
				if v != i%n {
					t.Fatalf("roundrobin call %d: %d, n = %d", i, v, n)
				}
			}
		}
	})
}
