package eval

import (
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/tokenmesh/tokenmesh/workload"
)

// The one-pass envelope computation equals the brute force over all
// intervals.
func TestEnvelopeMatchesBruteForce(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(0, 60).Draw(t, "n")
		keys := []string{"a", "b", "c"}
		reqs := make([]workload.Request, n)
		allowed := make([]bool, n)
		at := time.Duration(0)
		for i := range reqs {
			at += time.Duration(rapid.IntRange(0, 2000).Draw(t, "dt_ms")) * time.Millisecond
			reqs[i] = workload.Request{Arrival: at, Key: rapid.SampledFrom(keys).Draw(t, "key"), Tokens: int64(rapid.IntRange(1, 3).Draw(t, "tokens"))}
			allowed[i] = rapid.Bool().Draw(t, "allowed")
		}
		rate := float64(rapid.IntRange(1, 5).Draw(t, "rate"))
		burst := int64(rapid.IntRange(1, 5).Draw(t, "burst"))
		want := 0.0
		for i := range reqs {
			if !allowed[i] {
				continue
			}
			sum := 0.0
			for j := i; j < n; j++ {
				if !allowed[j] || reqs[j].Key != reqs[i].Key {
					continue
				}
				sum += float64(reqs[j].Tokens)
				want = max(want, sum-float64(burst)-rate*(reqs[j].Arrival-reqs[i].Arrival).Seconds())
			}
		}
		if want < 1e-6 {
			want = 0
		}
		got := EnvelopeViolation(reqs, allowed, rate, burst)
		if d := got - want; d > 1e-6 || d < -1e-6 {
			t.Fatalf("EnvelopeViolation = %v, brute force %v", got, want)
		}
	})
}

func TestCompare(t *testing.T) {
	reqs := []workload.Request{{Key: "a", Tokens: 1}, {Key: "a", Tokens: 1}, {Key: "b", Tokens: 2}, {Key: "b", Tokens: 1}}
	central := []bool{true, false, true, false}
	c := Compare(reqs, []bool{true, true, false, true}, central)
	// a: +1 excess; b: admitted 1 vs central 2 (no excess); false rejection: request 2.
	if c.Admitted != 3 || c.Rejected != 1 || c.ExcessAdmitted != 1 || c.FalseRejections != 1 {
		t.Fatalf("got %+v", c)
	}
	if *c.Precision != 0.5 || c.ExcessPct != 100.0/3 {
		t.Fatalf("precision %v excess %v%%", *c.Precision, c.ExcessPct)
	}
	self := Compare(reqs, central, central)
	if *self.Precision != 1 || self.ExcessAdmitted != 0 || self.FalseRejections != 0 {
		t.Fatalf("central against itself: %+v", self)
	}
	none := Compare(reqs, []bool{true, false, true, true}, []bool{true, true, true, true})
	if none.Precision != nil {
		t.Fatalf("precision %v when central rejects nothing and the strategy rejects one; want undefined", *none.Precision)
	}
}

func TestPercentile(t *testing.T) {
	ds := []time.Duration{5, 1, 4, 2, 3}
	if Percentile(ds, 50) != 3 || Percentile(ds, 99) != 5 || Percentile(ds, 0) != 1 || Percentile(nil, 50) != 0 {
		t.Fatal("nearest-rank percentiles wrong")
	}
}
