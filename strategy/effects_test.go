package strategy

import (
	"slices"
	"testing"
	"time"
)

// TestTakeDecision: the decision on one request is taken out of
// fx.Decisions, the others stay in order; a request without one is
// (zero, false) and changes nothing.
func TestTakeDecision(t *testing.T) {
	var fx Effects
	fx.Decide(1, true)
	fx.DecideAfter(2, true, time.Second)
	fx.Decide(3, false)
	if d, ok := fx.TakeDecision(2); !ok || d != (Decision{RequestID: 2, Allowed: true, Delay: time.Second}) {
		t.Fatalf("TakeDecision(2) = %+v, %v", d, ok)
	}
	if want := []Decision{{RequestID: 1, Allowed: true}, {RequestID: 3}}; !slices.Equal(fx.Decisions, want) {
		t.Fatalf("left %+v, want %+v", fx.Decisions, want)
	}
	if d, ok := fx.TakeDecision(2); ok || d != (Decision{}) || len(fx.Decisions) != 2 {
		t.Fatalf("TakeDecision(2) again = %+v, %v with %d left; want none and 2 left", d, ok, len(fx.Decisions))
	}
}
