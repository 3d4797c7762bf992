package strategy

import "fmt"

// OnTimeout is what a forwarder answers when the owner of a request gives
// no verdict in time: the enum parameter on_timeout (admit | reject |
// local) of the strategies that forward (owner, lease), with its
// deprecated bool alias fail_open. Ours (the seeds' forwarder waits, seed
// 003; the fallback is a design choice, docs/DESIGN.md).
type OnTimeout uint8

const (
	// TimeoutLocal (the default) decides with a local bucket of (r/N,
	// b/N) per key (N the live members in this node's view): while an
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
