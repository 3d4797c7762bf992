package eval

import (
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/local"
	"github.com/tokenmesh/tokenmesh/strategy/registry"
)

// GDRL eq. (16): 1 when equal, 1/N when one node holds everything.
func TestJFI(t *testing.T) {
	for _, c := range []struct {
		q    []float64
		want float64
	}{{[]float64{2, 2, 2}, 1}, {[]float64{1, 0, 0, 0}, 0.25}, {[]float64{1, 3}, 16.0 / 20}, {[]float64{-1, -1}, 1}, {nil, 1}, {[]float64{0, 0}, 1}} {
		if got := JFI(c.q); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("JFI(%v) = %v, want %v", c.q, got, c.want)
		}
	}
}

// fakeIndicators is a node whose indicators are given (indicatorSource).
type fakeIndicators struct {
	strategy.Strategy
	q map[string]float64
}

func (f fakeIndicators) Keys() []string {
	var ks []string
	for k := range f.q {
		ks = append(ks, k)
	}
	return ks
}
func (f fakeIndicators) Indicator(k string) float64 { return f.q[k] }

// The sampler averages the per-key JFI over the union of keys (a node
// without a key contributes its indicator for it, here 0), and skips
// strategies without indicators.
func TestJFISamplerObserve(t *testing.T) {
	var j jfiSampler
	a := fakeIndicators{q: map[string]float64{"x": 1, "y": 1}}
	b := fakeIndicators{q: map[string]float64{"x": 1}}
	j.observe(time.Second, []strategy.Strategy{a, b})
	// x: JFI(1, 1) = 1; y: JFI(1, 0) = 1/2; mean 0.75.
	if len(j.samples) != 1 || j.samples[0].at != time.Second || math.Abs(j.samples[0].jfi-0.75) > 1e-12 {
		t.Fatalf("samples %+v, want one of 0.75 at 1s", j.samples)
	}
	j.observe(2*time.Second, []strategy.Strategy{a, &local.Local{}})
	if len(j.samples) != 1 {
		t.Fatal("a strategy without indicators was sampled")
	}
}

// JFI convergence on a known series: one sample a second, below the
// threshold in [20 s, 35 s): it is back at 35 s and stays 10 s. From an
// event up to 30 s (the horizon) before 20 s the drop counts as the
// event's; an event at 51 s has less than the 10 s hold left: never.
func TestJFIConvergenceKnown(t *testing.T) {
	j := &jfiSampler{step: time.Second}
	for s := 0; s < 60; s++ {
		v := 1.0
		if s >= 20 && s < 35 {
			v = 0.5
		}
		j.samples = append(j.samples, jfiSample{time.Duration(s) * time.Second, v})
	}
	got := j.timesAfter([]time.Duration{0, 10 * time.Second, 11 * time.Second, 20 * time.Second, 20500 * time.Millisecond, 50 * time.Second, 51 * time.Second}, 10*time.Second, 30*time.Second)
	want := []time.Duration{35 * time.Second, 25 * time.Second, 24 * time.Second, 15 * time.Second, 14500 * time.Millisecond, 0, Never}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	if got := j.timesAfter([]time.Duration{0}, 10*time.Second, 20*time.Second); got[0] != 0 {
		t.Fatalf("horizon 20 s, event at 0: %v, want 0 (the drop at 20 s is not its)", got[0])
	}
	st := j.stats([]time.Duration{20 * time.Second}, nil, 10*time.Second, 30*time.Second)
	if st.Samples != 60 || st.Mean != round((45+15*0.5)/60, 4) || st.P10 != 0.5 || *st.AfterFaults.MedianS != 15 {
		t.Fatalf("stats %+v", st)
	}
}

// In a report gdrl has a JFI and static none; the observer changes no
// decision: gdrl's simulated result is the same with it and without it.
func TestJFIInReport(t *testing.T) {
	opts := smallRun(t, "poisson:users=4,rate=3,duration=30s", "gdrl,static", "roundrobin")
	rep, err := Run(opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rep.Results {
		if has := r.Convergence.JFI != nil; has != (r.Strategy == "gdrl") {
			t.Errorf("%s: JFI present %v", r.Strategy, has)
		}
	}
	g, err := registry.Lookup("gdrl")
	if err != nil {
		t.Fatal(err)
	}
	var j jfiSampler
	with, _, _, err := simulate(opts, g, delayed{}, nil, j.observe)
	if err != nil {
		t.Fatal(err)
	}
	without, _, _, err := simulate(opts, g, delayed{}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(j.samples) == 0 || !reflect.DeepEqual(with, without) {
		t.Fatalf("%d samples; results equal: %v", len(j.samples), reflect.DeepEqual(with, without))
	}
}
