package strategy

import "time"

// LatencyHinter is implemented by strategies that derive timers from
// Config.LatencyHint (owner's ordering buffer `hold` and forward
// `timeout`, lease's likewise, adaptive's `raise_after`, fixedwindow's
// `timeout`) and can take a new hint while they run.
//
// The live runtime measures the one-way peer latency (cluster.LatencyEstimator,
// from memberlist's probe round trips) and calls SetLatencyHint from the
// node's event loop when the measured hint moved by more than a factor
// (cluster.HintFactor), never per request; the simulator never calls it (it
// passes its network model's Hint() once, in Config). The strategy only
// receives the value: it measures nothing, so it stays deterministic.
//
// SetLatencyHint recomputes every timer the strategy derived from the hint
// at construction with the same formula as New, except a timer set
// explicitly by a parameter: a parameter always wins. It must be safe at
// any time: requests already buffered are neither lost nor decided twice
// (a shorter hold decides those now due at once; a longer one waits
// longer), deadlines already set stay, and de-duplication windows only
// grow. hint is a one-way latency, >= 0; the driver bounds it. Ours (no
// source document prescribes re-deriving timers at run time).
type LatencyHinter interface {
	SetLatencyHint(now time.Duration, hint time.Duration, fx *Effects)
}

// HintTimeout is the default time a strategy waits for a peer's answer
// (owner's and lease's forward timeout, fixedwindow's) derived from the
// latency hint: 3*hint + 100ms, a round trip with room for retransmission
// plus a fixed margin for the nodes' own scheduling. New and
// SetLatencyHint use it alike, so the two cannot drift apart. Ours.
func HintTimeout(hint time.Duration) time.Duration { return 3*hint + 100*time.Millisecond }

// ForwardTimers is what SetLatencyHint of a strategy that forwards to a
// key's owner (owner, lease) needs from New: whether the parameters hold,
// timeout and sync were given (a parameter always wins over the hint, so
// those keep their value) and the forward retries (the retransmission
// interval is timeout/(Retries+1)). Ours.
type ForwardTimers struct {
	HoldSet, TimeoutSet, SyncSet bool
	Retries                      int
}

// ReadForwardTimers records from v which of hold, timeout and sync were
// given (all three must be declared), with retries.
func ReadForwardTimers(v *Values, retries int) ForwardTimers {
	return ForwardTimers{HoldSet: v.Has("hold"), TimeoutSet: v.Has("timeout"), SyncSet: v.Has("sync"), Retries: retries}
}

// DefaultSync is owner's and lease's sync interval (how often a node ships
// what changed to the key's replicas) without a sync parameter, from the
// ordering buffer's hold: max(hold, 10ms). New and SetLatencyHint use it
// alike. Ours.
func DefaultSync(hold time.Duration) time.Duration { return max(hold, 10*time.Millisecond) }
