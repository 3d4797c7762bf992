package eval

import (
	"reflect"
	"testing"
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
}
