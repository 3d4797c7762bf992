// Package remtest checks strategy.Remainer implementations: exact values
// after a scripted sequence of requests, and that Remaining changes no
// state (decisions with and without calls to it are the same).
package remtest

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// Step is one scripted event on key Key (default "k"): a request of Tokens
// (> 0) at At, whose decision must be WantAllowed, then Remaining at At
// must be WantRemaining (and known). Tokens == 0 only checks Remaining.
type Step struct {
	At            time.Duration
	Key           string
	Tokens        int64
	WantAllowed   bool
	WantRemaining int64
}

// Exact runs steps on s (started at 0) and checks every decision and
// Remaining value. Requests must be decided synchronously.
func Exact(t testing.TB, s strategy.Strategy, steps []Step) {
	t.Helper()
	r, ok := s.(strategy.Remainer)
	if !ok {
		t.Fatalf("%T is not a strategy.Remainer", s)
	}
	var fx strategy.Effects
	s.Start(0, &fx)
	for i, st := range steps {
		key := st.Key
		if key == "" {
			key = "k"
		}
		fx.Reset()
		s.Tick(st.At, &fx)
		if st.Tokens > 0 {
			fx.Reset()
			d, decided := s.Request(st.At, strategy.Request{ID: uint64(i + 1), Key: key, Tokens: st.Tokens, Arrival: st.At}, &fx)
			if !decided {
				t.Fatalf("step %d: request not decided synchronously", i)
			}
			if d.Allowed != st.WantAllowed {
				t.Fatalf("step %d: %d tokens of %q at %v: allowed %v, want %v", i, st.Tokens, key, st.At, d.Allowed, st.WantAllowed)
			}
		}
		got, known := r.Remaining(st.At, key)
		if !known || got != st.WantRemaining {
			t.Fatalf("step %d: Remaining(%v, %q) = %d, %v; want %d, true", i, st.At, key, got, known, st.WantRemaining)
		}
	}
}

// Pure drives two instances built by newS with the same pseudo-random
// requests (3 keys, 1-3 tokens, at increasing times, with ticks at every
// request time), calling Remaining on the second one twice before and
// after every request (for the request's key and another key). Every
// decision, every effect and the final StateBytes must be the same.
func Pure(t testing.TB, seed uint64, newS func() strategy.Strategy) {
	t.Helper()
	a, b := newS(), newS()
	rb, ok := b.(strategy.Remainer)
	if !ok {
		t.Fatalf("%T is not a strategy.Remainer", b)
	}
	rnd := rand.New(rand.NewPCG(seed, 7))
	keys := []string{"x", "y", "z"}
	var fa, fb strategy.Effects
	a.Start(0, &fa)
	b.Start(0, &fb)
	same := func(where string) {
		if fmt.Sprint(fa) != fmt.Sprint(fb) {
			t.Fatalf("%s: effects differ with Remaining calls:\n%v\n%v", where, fa, fb)
		}
	}
	same("start")
	now := time.Duration(0)
	for i := range 3000 {
		now += time.Duration(rnd.Int64N(int64(400 * time.Millisecond)))
		key := keys[rnd.IntN(len(keys))]
		other := keys[rnd.IntN(len(keys))]
		n := 1 + rnd.Int64N(3)
		fa.Reset()
		fb.Reset()
		a.Tick(now, &fa)
		rb.Remaining(now, key)
		rb.Remaining(now, other)
		b.Tick(now, &fb)
		same(fmt.Sprintf("tick %d", i))
		rb.Remaining(now, key)
		rb.Remaining(now, key)
		fa.Reset()
		fb.Reset()
		req := strategy.Request{ID: uint64(i + 1), Key: key, Tokens: n, Arrival: now}
		da, oka := a.Request(now, req, &fa)
		db, okb := b.Request(now, req, &fb)
		if da != db || oka != okb {
			t.Fatalf("request %d (%d of %q at %v): decision %v/%v without Remaining, %v/%v with", i, n, key, now, da, oka, db, okb)
		}
		same(fmt.Sprintf("request %d", i))
		rb.Remaining(now, key)
		rb.Remaining(now, other)
	}
	if a.StateBytes() != b.StateBytes() {
		t.Fatalf("StateBytes %d without Remaining calls, %d with", a.StateBytes(), b.StateBytes())
	}
}

// Config is a test config: Self n0 among members (n0 when none), rate
// tokens per second, burst, params.
func Config(rate int64, burst int64, members []strategy.NodeID, params ...string) strategy.Config {
	if len(members) == 0 {
		members = []strategy.NodeID{"n0"}
	}
	p, err := strategy.ParseParams(params)
	if err != nil {
		panic(err)
	}
	return strategy.Config{Self: "n0", Members: members, Rate: rateOf(rate), Burst: burst,
		Rand: rand.New(rand.NewPCG(1, 2)), Params: p}
}

func rateOf(perSec int64) bucket.Rate { return bucket.Rate{Tokens: perSec, Per: time.Second} }

// Script is the exact sequence for a bucket (or a node's share) of burst 5
// at 1 token/s on key "k": 2 taken at 0 leave 3; 4 more are refused; 1.5 s
// later 4.5 are there (4 whole); taking 4 leaves 0.5 (0), 1 again at 2 s;
// long after it is full (5), and a key never seen is full too.
var Script = []Step{
	{At: 0, Tokens: 2, WantAllowed: true, WantRemaining: 3},
	{At: 0, Tokens: 4, WantAllowed: false, WantRemaining: 3},
	{At: 1500 * time.Millisecond, WantRemaining: 4},
	{At: 1500 * time.Millisecond, Tokens: 4, WantAllowed: true, WantRemaining: 0},
	{At: 1999 * time.Millisecond, WantRemaining: 0},
	{At: 2 * time.Second, WantRemaining: 1},
	{At: 10 * time.Second, WantRemaining: 5},
	{At: 10 * time.Second, Key: "new", WantRemaining: 5},
}
