package eval

import (
	"reflect"
	"testing"
	"time"
)

// RunParallel at any width gives Run's report: rows, setup and series.
func TestRunParallelIsRun(t *testing.T) {
	opts := smallRun(t, "mix:duration=10s", "static,local,owner,gdrl", "hash")
	want, err := Run(opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(want.Results) != 5 {
		t.Fatalf("%d rows, want central and 4 strategies", len(want.Results))
	}
	for _, workers := range []int{1, 2, 4, 9} {
		got, err := RunParallel(opts, workers)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%d workers: report differs from Run's", workers)
		}
	}
	// With the shortfall per window (its series for shortfall.png too).
	opts.ShortfallWindow = time.Second
	if want, err = Run(opts); err != nil {
		t.Fatal(err)
	}
	if n := len(want.Series.Shortfall); n != 4 {
		t.Fatalf("shortfall series of %d strategies, want 4 (central's left out)", n)
	}
	got, err := RunParallel(opts, 2)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("with a shortfall window: report differs from Run's")
	}
}
