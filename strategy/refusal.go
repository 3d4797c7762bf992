package strategy

import "time"

// Refusals the driver takes itself (ours). A strategy that refuses a key
// from local knowledge for a while (lease: a holder whose leases are empty
// while the key's owner said its bucket is spoken for, the dry hint) is
// asked for that while once, and its driver refuses the key's plain
// requests (no wait, no charge) in the caller's goroutine until then,
// without a call: a key far over its limit then costs a clock read and a
// counter per check instead of a hand-off to the node's loop. The
// simulator never asks, so a strategy run without such windows behaves
// exactly as before.
//
// Only refusals are taken this way: a window can make the driver refuse a
// request the strategy would have admitted (a lease that arrived and was
// not yet reported with EndRefusal), never admit one, so no window can
// break the envelope. What it can cost is accuracy, bounded by the
// window's length; the driver caps every window (the live node at 5 ms:
// cluster's fastRefusalSlice) so that the requests it refused are
// reported as the key's demand within that time.
//
// The driver keeps at most one window per key, reports the requests it
// refused with Refused before any other call about that key (Request,
// RequestWait, an Allowancer's Grant or Return), and ends every window
// (reporting or dropping its counts) before SetMembers, SetExpected or
// Leave.
type Refuser interface {
	// RefusedUntil is asked right after Request refused a plain request
	// of key at now (synchronously: a decision Request returned). It
	// returns until > now when Request would refuse every plain request
	// of key arriving in [now, until) the same way, whatever their tokens
	// (>= 1), as long as no other call changes the key's state first;
	// the strategy ends a window sooner, on a call that changes that
	// state (a lease arriving), with Effects.EndRefusal. It returns a
	// time <= now for none.
	RefusedUntil(now time.Duration, key string) (until time.Duration)
	// Refused reports requests the driver refused of key on its own (in
	// a window) since the last report: requests of tokens in all (both
	// >= 1), as if each had been refused by Request by now (the strategy
	// counts them as the key's demand).
	Refused(now time.Duration, key string, requests, tokens int64, fx *Effects)
}

// EndRefusal asks the driver to end key's refusal window now (Refuser):
// the strategy may admit its requests again. A key with no window is
// ignored by the driver.
func (fx *Effects) EndRefusal(key string) { fx.RefusalsEnded = append(fx.RefusalsEnded, key) }
