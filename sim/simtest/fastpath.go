package simtest

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/tokenmesh/tokenmesh/strategy"
)

// FastPath plays the live node's fast path (cluster/fastpath.go) at one
// node incarnation of a simulated run, for the property tests of a
// strategy.Allowancer that may also be a strategy.Refuser (the simulator
// itself never grants allowances nor opens refusal windows).
//
// Allowances: after a request it asks for an allowance of the key at
// random (half of the time, up to a random 1..MaxWant tokens), admits the
// key's later plain requests from it while it covers them and the clock
// reads before its until (the simulator records them as the node's
// decisions), returns it before any other call about the key and before
// a membership change, and returns open ones at random sweeps.
//
// Refusal windows: after a plain request (no wait, no charge) refused at
// once it asks RefusedUntil and, until then (capped at a random 1-50 ms
// ahead; the live node's cap is 5 ms) or an Effects.EndRefusal of the key,
// either refuses the key's plain requests itself, counting them, or, at
// random, hands them to the strategy, which must refuse them at once (the
// window's promise: After reports it otherwise); the counts go back with
// Refused before any other call about the key, before a membership
// change, and at random sweeps once the window is over.
//
// A test's wrapper of the strategy calls Before and After around every
// Request and RequestWait, Sweep before every Tick, Ended after every call
// that may end windows (Receive, Tick), and CloseAll before SetMembers and
// SetExpected. Every random draw comes from the Rand given, in a fixed
// order, so a run replays. Ours.
type FastPath struct {
	rnd     *rand.Rand
	maxWant int
	a       strategy.Allowancer
	r       strategy.Refuser // nil: no windows
	open    map[string]*fastAllowance
	windows map[string]*fastWindow
	// Admitted counts the requests admitted from allowances, Refused those
	// the driver refused in windows, and Kept those handed to the
	// strategy in a window that it refused, as promised.
	Admitted, Refused, Kept int
}

type fastAllowance struct {
	tokens int64
	until  time.Duration
}

// fastWindow is a key's refusal window and the requests the driver
// refused in it, not reported yet.
type fastWindow struct {
	until            time.Duration
	requests, tokens int64
}

// NewFastPath is the emulated fast path of a (a strategy.Refuser too, or
// not), drawing from rnd, with allowances asked for up to maxWant tokens.
func NewFastPath(a strategy.Allowancer, rnd *rand.Rand, maxWant int) *FastPath {
	r, _ := a.(strategy.Refuser)
	return &FastPath{rnd: rnd, maxWant: maxWant, a: a, r: r, open: map[string]*fastAllowance{}, windows: map[string]*fastWindow{}}
}

// Before is called with req before the strategy sees it (maxWait its
// wait, 0 for Request). done is true when the fast path decided it (d:
// admitted from an allowance, or refused in a window); otherwise the key's
// window is reported and its allowance returned, and inWindow says req came
// in a window, so the strategy must refuse it at once (After checks).
func (f *FastPath) Before(now time.Duration, req strategy.Request, maxWait time.Duration, fx *strategy.Effects) (d strategy.Decision, done, inWindow bool) {
	plain := maxWait == 0 && !req.Charge
	if a := f.open[req.Key]; plain && a != nil && a.tokens >= req.Tokens && now < a.until {
		a.tokens -= req.Tokens
		f.Admitted++
		return strategy.Decision{RequestID: req.ID, Allowed: true}, true, false
	}
	if w := f.windows[req.Key]; plain && w != nil && now < w.until {
		if f.rnd.IntN(2) == 0 {
			w.requests++
			w.tokens += req.Tokens
			f.Refused++
			return strategy.Decision{RequestID: req.ID}, true, false
		}
		inWindow = true
	}
	f.Close(now, req.Key, fx)
	return strategy.Decision{}, false, inWindow
}

// After is called with the strategy's decision d (ok: taken at once) of
// req, which Before did not decide: it fails when req came in a window
// and was not refused at once, ends the windows fx ends, opens req's
// key's window after a plain refusal, and asks for an allowance at random.
func (f *FastPath) After(now time.Duration, req strategy.Request, maxWait time.Duration, d strategy.Decision, ok, inWindow bool, fx *strategy.Effects) error {
	if inWindow {
		if !ok || d.Allowed {
			return fmt.Errorf("key %q at %v: in a refusal window, but Request decided (done %v, allowed %v)", req.Key, now, ok, d.Allowed)
		}
		f.Kept++
	}
	f.Ended(fx)
	if f.r != nil && maxWait == 0 && !req.Charge && ok && !d.Allowed {
		f.openWindow(now, req.Key)
	}
	if f.open[req.Key] == nil && f.rnd.IntN(2) != 0 {
		if g, until := f.a.Grant(now, req.Key, int64(1+f.rnd.IntN(f.maxWant)), fx); g > 0 {
			f.open[req.Key] = &fastAllowance{tokens: g, until: until}
		}
	}
	return nil
}

// openWindow opens key's window after the strategy refused a plain
// request of it at once at now.
func (f *FastPath) openWindow(now time.Duration, key string) {
	until := min(f.r.RefusedUntil(now, key), now+time.Duration(1+f.rnd.IntN(50))*time.Millisecond)
	if until <= now {
		return
	}
	w := f.windows[key]
	if w == nil {
		w = &fastWindow{}
		f.windows[key] = w
	}
	w.until = until
}

// Ended stops refusing the keys whose windows fx ends (their counts stay
// until the next report).
func (f *FastPath) Ended(fx *strategy.Effects) {
	for _, k := range fx.RefusalsEnded {
		if w := f.windows[k]; w != nil {
			w.until = 0
		}
	}
}

// Close reports key's window, if any, and returns its allowance, if any,
// with what it holds.
func (f *FastPath) Close(now time.Duration, key string, fx *strategy.Effects) {
	if w := f.windows[key]; w != nil {
		delete(f.windows, key)
		if w.requests > 0 {
			f.r.Refused(now, key, w.requests, w.tokens, fx)
		}
	}
	if a := f.open[key]; a != nil {
		delete(f.open, key)
		f.a.Return(now, key, a.tokens, fx)
	}
}

// Sweep returns each open allowance, and reports each window over, at
// random (a quarter of them): the live node's idle sweep.
func (f *FastPath) Sweep(now time.Duration, fx *strategy.Effects) {
	for _, k := range slices.Sorted(maps.Keys(f.open)) {
		if f.rnd.IntN(4) == 0 {
			a := f.open[k]
			delete(f.open, k)
			f.a.Return(now, k, a.tokens, fx)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(f.windows)) {
		if w := f.windows[k]; now >= w.until && f.rnd.IntN(4) == 0 {
			delete(f.windows, k)
			if w.requests > 0 {
				f.r.Refused(now, k, w.requests, w.tokens, fx)
			}
		}
	}
}

// CloseAll returns every allowance and reports every window (before a
// membership change).
func (f *FastPath) CloseAll(now time.Duration, fx *strategy.Effects) {
	for _, k := range slices.Sorted(maps.Keys(f.open)) {
		a := f.open[k]
		delete(f.open, k)
		f.a.Return(now, k, a.tokens, fx)
	}
	for _, k := range slices.Sorted(maps.Keys(f.windows)) {
		w := f.windows[k]
		delete(f.windows, k)
		if w.requests > 0 {
			f.r.Refused(now, k, w.requests, w.tokens, fx)
		}
	}
}
