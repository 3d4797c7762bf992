package logthrottle

import (
	"testing"
	"time"
)

// One event per key per interval passes; the next one after the interval
// reports how many were held back; keys do not share their budget.
func TestAllow(t *testing.T) {
	now := time.Unix(1000, 0)
	th := Throttle{Every: 10 * time.Second, Now: func() time.Time { return now }}
	if s, ok := th.Allow("a"); !ok || s != 0 {
		t.Fatalf("first event: %d, %v", s, ok)
	}
	for range 5 {
		if _, ok := th.Allow("a"); ok {
			t.Fatal("an event within the interval passed")
		}
	}
	if _, ok := th.Allow("b"); !ok {
		t.Fatal("another key's first event was held back")
	}
	now = now.Add(9 * time.Second)
	if _, ok := th.Allow("a"); ok {
		t.Fatal("an event 9 s later passed (interval 10 s)")
	}
	now = now.Add(time.Second)
	if s, ok := th.Allow("a"); !ok || s != 6 {
		t.Fatalf("event after the interval: suppressed %d, ok %v; want 6, true", s, ok)
	}
}
