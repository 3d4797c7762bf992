package loadgen

import (
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/tokenmesh/tokenmesh/bucket"
)

// exactLog is checks of keys at times decided by an exact bucket (r, b)
// per key, full at each key's first check: what an exact limiter answers.
func exactLog(checks []Answered, ratePerS int64, burst int64) []Answered {
	r := bucket.Rate{Tokens: ratePerS, Per: time.Second}
	origin := checks[0].At
	bs := map[string]*bucket.Bucket{}
	out := make([]Answered, len(checks))
	for i, c := range checks {
		b := bs[c.Key]
		if b == nil {
			nb := bucket.MustNew(r, burst, c.At-origin)
			b = &nb
			bs[c.Key] = b
		}
		c.Admitted = b.AllowN(c.At-origin, c.Tokens)
		out[i] = c
	}
	return out
}

// TestShortfallByHand: 2 keys at 10/s burst 5, checks every 50 ms for 1 s
// of warmup and 2 s measured (20/s: twice the limit). The exact buckets
// drain in the warmup and then admit 10/s: 20 tokens each in the 2 s
// (one at each 100 ms refill). A system that admits them all shows them
// as Extra; one that refuses all as Missed; the exact log neither.
func TestShortfallByHand(t *testing.T) {
	var checks []Answered
	for at := -time.Second; at < 2*time.Second; at += 50 * time.Millisecond {
		for _, k := range []string{"a", "b"} {
			checks = append(checks, Answered{At: at, Key: k, Tokens: 1})
		}
	}
	exact := exactLog(checks, 10, 5)
	s, err := Shortfall(exact, 10, 5)
	if err != nil {
		t.Fatal(err)
	}
	if s.Exact != 40 || s.Admitted != 40 || s.Missed != 0 || s.Extra != 0 || s.KeysMissed != 0 {
		t.Fatalf("exact system: %+v; want 40 exact and admitted, nothing missed or extra", s)
	}
	all := make([]Answered, len(checks))
	none := make([]Answered, len(checks))
	for i, c := range checks {
		c.Admitted = true
		all[i] = c
		c.Admitted = false
		none[i] = c
	}
	if s, _ := Shortfall(all, 10, 5); s.Exact != 40 || s.Admitted != 80 || s.Extra != 40 || s.Missed != 0 {
		t.Errorf("admit-all: %+v; want 80 admitted, 40 extra", s)
	}
	if s, _ := Shortfall(none, 10, 5); s.Missed != 40 || s.KeysMissed != 2 || s.MissedPct() != 100 || s.Extra != 0 {
		t.Errorf("refuse-all: %+v; want 40 missed on 2 keys (100%%)", s)
	}
	// Without the warmup the buckets start full in the measured time: 5
	// each, and 19 refilled by the last check at 1.95 s.
	if s, _ := Shortfall(exactLog(checks[40:], 10, 5), 10, 5); s.Exact != 48 || s.Missed != 0 {
		t.Errorf("no warmup: %+v; want 48 exact", s)
	}
}

func TestShortfallErrors(t *testing.T) {
	a := []Answered{{At: 0, Key: "k", Tokens: 1}}
	for _, c := range []struct {
		ans   []Answered
		rate  float64
		burst int64
	}{
		{a, -1, 5},
		{a, 10, -1},
		{[]Answered{{At: 0, Key: "k", Tokens: 0}}, 10, 5},
	} {
		if _, err := Shortfall(c.ans, c.rate, c.burst); err == nil {
			t.Errorf("rate %v burst %d %+v: no error", c.rate, c.burst, c.ans)
		}
	}
	if s, err := Shortfall(nil, 10, 5); err != nil || s != (ShortfallResult{}) {
		t.Errorf("no checks: %+v, %v", s, err)
	}
}

// TestShortfallProperty: for any log, Missed and Extra are not negative,
// Missed - Extra = Exact - Admitted, Admitted counts the measured admitted
// tokens, and the exact limiter's own answers show nothing missed or
// extra.
func TestShortfallProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(1, 200).Draw(t, "n")
		rate := float64(rapid.IntRange(1, 50).Draw(t, "rate"))
		burst := rapid.Int64Range(1, 10).Draw(t, "burst")
		var at time.Duration = -time.Duration(rapid.IntRange(0, 2000).Draw(t, "warmup_ms")) * time.Millisecond
		checks := make([]Answered, n)
		var admitted int64
		for i := range checks {
			at += time.Duration(rapid.IntRange(0, 100).Draw(t, "gap_ms")) * time.Millisecond
			c := Answered{At: at, Key: rapid.SampledFrom([]string{"a", "b", "c"}).Draw(t, "key"),
				Tokens: rapid.Int64Range(1, 3).Draw(t, "tokens"), Admitted: rapid.Bool().Draw(t, "admitted")}
			if c.Admitted && c.At >= 0 {
				admitted += c.Tokens
			}
			checks[i] = c
		}
		s, err := Shortfall(checks, rate, burst)
		if err != nil {
			t.Fatal(err)
		}
		if s.Missed < 0 || s.Extra < 0 || s.Missed-s.Extra != s.Exact-s.Admitted || s.Admitted != admitted {
			t.Fatalf("%+v (admitted %d)", s, admitted)
		}
		if s, _ := Shortfall(exactLog(checks, int64(rate), burst), rate, burst); s.Missed != 0 || s.Extra != 0 {
			t.Fatalf("the exact limiter's answers: %+v", s)
		}
	})
}
