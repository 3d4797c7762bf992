package workload

import (
	"testing"
	"time"
)

// Per key: b tokens at once, then r per second; one more is the excess.
func TestEnvelopeExcess(t *testing.T) {
	at := func(ms int, key string) Request {
		return Request{Arrival: time.Duration(ms) * time.Millisecond, Key: key, Tokens: 1}
	}
	reqs := []Request{at(0, "a"), at(0, "a"), at(0, "b"), at(0, "a"), at(500, "a"), at(1000, "a"), at(1000, "a")}
	allowed := []bool{true, true, true, false, true, true, true}
	// a: 2 at 0 (burst 2), 1 at 0.5 s and 2 at 1 s at 2/s: over [0, 1 s] 5 admitted against 2 + 2 = 4.
	if got := EnvelopeExcess(reqs, allowed, 2, 2); got != 1 {
		t.Errorf("EnvelopeExcess = %v, want 1", got)
	}
	if got := EnvelopeExcess(reqs, allowed, 2, 3); got != 0 {
		t.Errorf("with burst 3: %v, want 0", got)
	}
}
