package strategy

import (
	"fmt"
	"time"
)

// OnTimeout is what a forwarder answers when the owner of a request gives
// no verdict in time: the enum parameter on_timeout (admit | reject |
// local) of the strategies that forward (owner, lease), with its
// deprecated bool alias fail_open. Ours (the seeds' forwarder waits, seed
// 003; the fallback is a design choice, docs/DESIGN.md).
type OnTimeout uint8

const (
	// TimeoutLocal (the default) decides with a local bucket of (r/N,
	// b/N) per key (N the live members in this node's view), empty at
	// the first timed-out request's arrival (FallbackStart): while an
	// owner is unreachable the forwarders admit together at most one more
	// envelope.
	TimeoutLocal OnTimeout = iota
	// TimeoutAdmit admits (fail open): unbounded while the owner is
	// unreachable.
	TimeoutAdmit
	// TimeoutReject refuses (fail closed): the envelope holds exactly, at
	// the price of refusing the owner's keys until detection.
	TimeoutReject
)

// String is the parameter value: "local", "admit" or "reject".
func (m OnTimeout) String() string {
	switch m {
	case TimeoutLocal:
		return "local"
	case TimeoutAdmit:
		return "admit"
	case TimeoutReject:
		return "reject"
	}
	return fmt.Sprintf("OnTimeout(%d)", uint8(m))
}

// ReadOnTimeout reads the parameters on_timeout (an enum admit | reject |
// local, declared with default local) and fail_open (a bool, the
// deprecated alias: true = admit, false = reject) from v; both must be
// declared. Error: both given.
func ReadOnTimeout(v *Values) (OnTimeout, error) {
	alias := v.Has("fail_open")
	failOpen := v.BoolOr("fail_open", true)
	set := v.Has("on_timeout")
	mode := v.Enum("on_timeout")
	switch {
	case set && alias:
		return 0, fmt.Errorf("%s: parameters on_timeout and fail_open (its deprecated alias) are both set", v.strategy)
	case alias && failOpen:
		return TimeoutAdmit, nil
	case alias:
		return TimeoutReject, nil
	}
	switch mode {
	case "admit":
		return TimeoutAdmit, nil
	case "reject":
		return TimeoutReject, nil
	}
	return TimeoutLocal, nil
}

// FallbackStart is the time at which a forwarder's on_timeout=local
// fallback bucket for req's key starts empty, when req is the first
// request it decides: the request's arrival (at most now). The owner may
// have drained the key just before it stopped answering, which is before
// the request came; from then on the fallback refills at r/N, so a
// request that waited out the timeout finds r/N*timeout tokens (capped at
// b/N) rather than none. Starting at now instead would refuse every
// request that timed out at the same instant (a batch, or many at once
// after a stall) even under a limit that cannot be reached. Either way
// the forwarders admit together at most one more envelope while the owner
// is unreachable (N buckets of (r/N, b/N)). A negative or future arrival
// (a bad stamp) starts at now.
func FallbackStart(now time.Duration, req Request) time.Duration {
	if req.Arrival < 0 || req.Arrival > now {
		return now
	}
	return req.Arrival
}

// ConserveOnTimeout is the on_timeout of a strategy read as m from v: under
// partition: conserve (conserve true) without on_timeout or fail_open set,
// TimeoutReject; m otherwise. The local fallback would admit r/N per
// forwarder while a cut is not yet detected, beside the owner's whole
// bucket on the other side: beyond this side's share (strategy/owner's
// conserve.go). A rule that sets on_timeout=local keeps it, with that
// bound.
func ConserveOnTimeout(m OnTimeout, conserve bool, v *Values) OnTimeout {
	if conserve && !v.Has("on_timeout") && !v.Has("fail_open") {
		return TimeoutReject
	}
	return m
}
