// Package leaseshare sizes a grant of leased tokens out of a contended
// granter: the holder's fair share of what the granter can supply over a
// quantum, with its next turn, and the cut of a grant that would outlast
// the granter. These are strategy/lease's owner rules (its package doc,
// "# Contended keys": share and untilDry; ours), shared with
// strategy/regionlease's granters on the node tier (its share.go). The
// functions are pure arithmetic on what the caller measured: token
// counts, tokens per second and durations; no state, no clock.
package leaseshare

import (
	"math"
	"time"
)

// Share is the fair share of a holder asking ask tokens for a period (its
// rate ask/period) at a granter whose holders want demand tokens over a
// quantum in all and that can supply supply tokens over a quantum, whole
// of them now: ok when demand exceeds supply, n the holder's rate
// (supply/demand of its own) over a quantum, rounded, at least 1, at most
// ask and whole (0 when whole is 0), and turn the time that rate takes to
// refill max(n, 1) tokens plus lead (the holder asks again lead before its
// dry hint ends). ok is false too when the turn would end no earlier than
// maxTurn (for lease's owner: an empty bucket's dry hint, min(period,
// fill time)); the grant is then sized as if uncontended.
func Share(ask int64, demand, supply float64, whole int64, quantum, period, lead, maxTurn time.Duration) (n int64, turn time.Duration, ok bool) {
	if supply >= demand {
		return 0, 0, false
	}
	qs, ps := quantum.Seconds(), period.Seconds()
	rate := supply / demand * float64(ask) / ps // the holder's fair rate, tokens/s
	n = min(max(int64(math.Round(rate*qs)), 1), ask, whole)
	wait := float64(max(n, 1)) / rate // seconds for the share to refill
	if wait+lead.Seconds() >= maxTurn.Seconds() {
		return 0, 0, false
	}
	return n, time.Duration(wait*float64(time.Second)) + lead, true
}

// UntilDry is the part of an ask of ask tokens for a period that a granter
// holding whole tokens can cover before it runs dry, drained at drain
// tokens per second (its holders' demand less its inflow): ok when the
// whole tokens last less than a period (whole/drain seconds), until then
// ceil(ask * last/period), possibly 0 (the caller bounds it below).
func UntilDry(ask int64, drain float64, whole int64, period time.Duration) (until int64, ok bool) {
	if drain <= 0 {
		return 0, false
	}
	ps := period.Seconds()
	if last := float64(whole) / drain; last < ps {
		return int64(math.Ceil(float64(ask) * last / ps)), true
	}
	return 0, false
}
