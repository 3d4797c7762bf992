package adaptive

import (
	"time"

	"github.com/tokenmesh/tokenmesh/strategy"
)

// The live driver's fast path (strategy.Allowancer; ours, as static's):
// whole tokens of this node's sub-token bucket of a key, at its applied
// share, handed to the driver, which admits the key's checks from them
// in the caller's goroutine without the node's loop. The tokens count as
// spent while the allowance is open, and the bucket refills only up to
// its burst less them (strategy.AllowanceLedger, clamped before every use
// of the bucket: Request, a re-split, Remaining), so the tokens available
// at this node stay those of one bucket (r_l, b_l). A re-split that
// lowers the share while tokens are held clamps the bucket to the new
// burst less them (in debt when they exceed it: the node admits nothing
// more until refill has repaid them); the tokens held are at most
// strategy.AllowanceCap of the share they were granted at (5 ms of its
// refill, at most a quarter of its burst), the most this node can use
// above a lowered share, once. The tokens used come back into the key's
// history window (offered tokens, virtual backlog) when the allowance
// does, at its return's time: the statistics the TB Adaptor splits by
// lag by at most the allowance's validity (strategy.AllowanceValidity),
// and the backlog's peak sees them as one arrival (at most an
// allowance's tokens). Checks an allowance cannot cover go through the
// loop (Request) as before.

// Grant hands the driver up to want whole tokens of key's sub-token bucket
// at now, at most strategy.AllowanceCap of its applied share (0 below
// 200 tokens/s with a burst of 4 or more: no fast path), valid for
// strategy.AllowanceValidity.
func (a *Adaptive) Grant(now time.Duration, key string, want int64, fx *strategy.Effects) (int64, time.Duration) {
	r, b := a.shareOf(key)
	most := strategy.AllowanceCap(r, b)
	if want <= 0 || most <= 0 {
		return 0, now
	}
	ks := a.get(key, now)
	g := a.lent.Grant(&ks.b, now, key, want, most)
	if g <= 0 {
		return 0, now
	}
	return g, now + strategy.AllowanceValidity
}

// Return closes key's allowance: its unused tokens (at most those granted)
// go back into the key's bucket, the others count as the key's offered
// tokens at now. A key with no allowance open is ignored.
func (a *Adaptive) Return(now time.Duration, key string, unused int64, fx *strategy.Effects) {
	h := a.lent.Held(key)
	if h <= 0 {
		return
	}
	ks := a.keys[key]
	if ks == nil { // not dropped while held (Tick): not expected
		a.lent.Drop(key)
		return
	}
	used := h - min(max(unused, 0), h)
	a.lent.Return(&ks.b, now, key, unused)
	if used > 0 {
		a.offer(strategy.Request{Key: key, Tokens: used, Arrival: now})
	}
}

var _ strategy.Allowancer = (*Adaptive)(nil)
