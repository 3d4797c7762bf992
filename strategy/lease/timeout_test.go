package lease

import (
	"github.com/tokenmesh/tokenmesh/bucket"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/strategy"
)

// timeoutDecision forwards one request of key at now to its (silent)
// owner and returns the decision the node takes when timeout passes.
func timeoutDecision(t *testing.T, l *Lease, id uint64, key string, now time.Duration) bool {
	t.Helper()
	fx := &strategy.Effects{}
	if _, decided := l.Request(now, strategy.Request{ID: id, Key: key, Tokens: 1, Arrival: now}, fx); decided {
		t.Fatal("a request for another node's key decided at once")
	}
	for at := now; at <= now+time.Second; at += 5 * time.Millisecond {
		fx.Reset()
		l.Tick(at, fx)
		for _, d := range fx.Decisions {
			if d.RequestID == id {
				return d.Allowed
			}
		}
	}
	t.Fatal("no decision within a second of a silent owner")
	return false
}

// TestOnTimeout: a forward whose owner never answers is decided by
// on_timeout: local (the default) with an (r/N, b/N) bucket that starts
// empty and refills at r/N; admit and reject as named; fail_open is the
// deprecated alias; both together, or a bad value, are errors.
func TestOnTimeout(t *testing.T) {
	key := keyOwnedBy("n1") // n0 forwards to n1, which never answers
	for _, tc := range []struct {
		params      []string
		first, late bool // the first timeout at 0; one at 1 s (3.3 tokens refilled at 10/3 per s)
	}{
		{nil, false, true},
		{[]string{"on_timeout=local"}, false, true},
		{[]string{"on_timeout=admit"}, true, true},
		{[]string{"on_timeout=reject"}, false, false},
		{[]string{"fail_open=true"}, true, true},
		{[]string{"fail_open=false"}, false, false},
	} {
		l := newNode(t, "n0", tc.params...)
		if got := timeoutDecision(t, l, 1, key, 0); got != tc.first {
			t.Errorf("%v: first timed-out forward allowed=%v, want %v", tc.params, got, tc.first)
		}
		if got := timeoutDecision(t, l, 2, key, time.Second); got != tc.late {
			t.Errorf("%v: timed-out forward at 1s allowed=%v, want %v", tc.params, got, tc.late)
		}
	}
	// The local bucket starts empty at its first use's arrival (8 s; it
	// is decided a timeout later, with r/N*timeout < 1 token refilled),
	// refills at r/N = 10/3 tokens/s and holds at most its share of the
	// burst (20/3: 7 at n0): a burst of 12 timeouts of requests that
	// arrive at 10 s, decided at 10 s + timeout, passes
	// min(7, floor((2 s + timeout) * 10/3)).
	l := newNode(t, "n0")
	if timeoutDecision(t, l, 9, key, 8*time.Second) {
		t.Error("the first local fallback was admitted; the bucket starts empty")
	}
	admitted := 0
	for i := range 12 {
		if timeoutDecision(t, l, uint64(10+i), key, 10*time.Second) {
			admitted++
		}
	}
	want := min(7, int((2*time.Second+l.timeout).Seconds()*10/3))
	if admitted != want {
		t.Errorf("a burst of 12 timed-out forwards at 10 s: %d admitted, want %d ((2 s + timeout %v) at 10/3 tokens/s, at most 7)", admitted, want, l.timeout)
	}
	for _, bad := range [][]string{{"on_timeout=maybe"}, {"on_timeout=local", "fail_open=true"}} {
		p, err := strategy.ParseParams(bad)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := New(strategy.Config{Self: "a", Members: []strategy.NodeID{"a"}, Rate: bucket.Rate{Tokens: 1, Per: time.Second}, Burst: 1, Rand: rand.New(rand.NewPCG(1, 2)), Params: p}); err == nil || !strings.Contains(err.Error(), "on_timeout") {
			t.Errorf("%v: %v, want an error naming on_timeout", bad, err)
		}
	}
}

// TestFallbackStartsAtArrival: requests that time out together (a batch,
// or many at once after a stall) find the fallback bucket refilled since
// the first one's arrival: 5 requests arrive at 8 s, their owner is silent
// for the whole timeout (1 s), and at 9 s the bucket started empty at 8 s
// holds 10/3 tokens: 3 are admitted. (Empty at 9 s instead, as before,
// all 5 were refused, even under a limit that cannot be reached.)
func TestFallbackStartsAtArrival(t *testing.T) {
	key := keyOwnedBy("n1") // n0 forwards to n1, which never answers
	l := newNode(t, "n0", "timeout=1s")
	fx := &strategy.Effects{}
	for id := uint64(1); id <= 5; id++ {
		if _, decided := l.Request(8*time.Second, strategy.Request{ID: id, Key: key, Tokens: 1, Arrival: 8 * time.Second}, fx); decided {
			t.Fatal("a request for another node's key decided at once")
		}
	}
	admitted, decided := 0, 0
	for at := 8 * time.Second; at <= 10*time.Second && decided < 5; at += 5 * time.Millisecond {
		fx.Reset()
		l.Tick(at, fx)
		for _, d := range fx.Decisions {
			decided++
			if d.Allowed {
				admitted++
			}
		}
	}
	if decided != 5 || admitted != 3 {
		t.Errorf("5 forwards timed out together after 1 s: %d decided, %d admitted; want 5 and 3 (10/3 tokens refilled since their arrival)", decided, admitted)
	}
}
