package eval

import (
	"slices"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/workload"
)

func TestCanonicalize(t *testing.T) {
	ms := time.Millisecond
	reqs := []workload.Request{
		{Arrival: 0, Key: "a", Tokens: 1}, {Arrival: 0, Key: "b", Tokens: 1}, {Arrival: 0, Key: "a", Tokens: 1},
		{Arrival: 0, Key: "a", Tokens: 2}, {Arrival: 0, Key: "a", Tokens: 1},
		{Arrival: ms, Key: "a", Tokens: 1}, {Arrival: 2 * ms, Key: "a", Tokens: 1},
	}
	allowed := []bool{false, true, true, false, true, false, true}
	// a/1 at 0: requests 0, 2, 4 with 2 admitted -> 0 and 2; the others
	// differ in key, tokens or arrival and keep their decisions.
	want := []bool{true, true, true, false, false, false, true}
	if moved := Canonicalize(reqs, allowed); moved != 2 || !slices.Equal(allowed, want) {
		t.Errorf("moved %d, decisions %v; want 2, %v", moved, allowed, want)
	}
}
