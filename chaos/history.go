// Package chaos runs Jepsen-style fault experiments on real tokenmesh
// processes and checks what they admitted: a History records every
// decision a client saw, with the time it was sent, and Check measures, per
// key, how far the admitted tokens in any window of length T exceed the
// token bucket's envelope b + r*T (SRTM §1.1: "the number of
// messages that can leave the token bucket in any time interval of
// duration Δt is upper-bounded by b + r·Δt").
//
// The checker is ours. It is the live counterpart of the evaluator's
// envelope violation (eval.EnvelopeViolation), per key and restricted to a
// time range, so a run can ask "from 10 s after the heal on, did any key
// leave its envelope?" A decision counts at the time the client sent the
// request, and the cluster decides somewhere between that and the time the
// answer came back: a window of checks sent in [t_i, t_j] was decided inside
// [t_i, E_j], E_j the latest answer among the admitted checks sent up to
// t_j, so Check holds it to b + r*(E_j - t_i). A busy client machine (the
// client's scheduling, its clock read before the send) therefore never
// shows up as excess, and the allowance it took is reported
// (KeyReport.WorstEnd).
package chaos

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/tokenmesh/tokenmesh/eval"
)

// Decision is one check as a client saw it: Tokens tokens of Key, sent
// At (since the run's start), and the answer. Err is set when the check
// failed (no answer: an unreachable node, a timeout); such checks admit
// nothing.
type Decision struct {
	At      time.Duration
	Key     string
	Tokens  int64
	Allowed bool
	Latency time.Duration // from send to answer
	Node    int           // index of the node the check was sent to
	Err     error
}

// History is a concurrency-safe log of decisions. The zero value is ready.
type History struct {
	mu  sync.Mutex
	log []Decision
}

// Add records d. Safe for concurrent use.
func (h *History) Add(d Decision) {
	h.mu.Lock()
	h.log = append(h.log, d)
	h.mu.Unlock()
}

// Decisions returns a copy of the log sorted by At (stable).
func (h *History) Decisions() []Decision {
	h.mu.Lock()
	out := slices.Clone(h.log)
	h.mu.Unlock()
	sort.SliceStable(out, func(i, j int) bool { return out[i].At < out[j].At })
	return out
}

// Envelope is a token bucket's (r, b): RatePerSec tokens per second, Burst
// tokens.
type Envelope struct {
	RatePerSec float64
	Burst      int64
}

// Validate reports a negative or non-finite rate or a negative burst.
func (e Envelope) Validate() error {
	if math.IsNaN(e.RatePerSec) || math.IsInf(e.RatePerSec, 0) || e.RatePerSec < 0 {
		return fmt.Errorf("chaos: envelope rate %v tokens/s is not a finite non-negative number", e.RatePerSec)
	}
	if e.Burst < 0 {
		return fmt.Errorf("chaos: envelope burst %d is negative", e.Burst)
	}
	return nil
}

// KeyReport is one key's outcome over a range of a run.
type KeyReport struct {
	Key      string
	Checks   int   // decisions in range
	Admitted int64 // tokens admitted in range
	Errors   int   // checks that got no answer
	// Violation is the largest excess, in tokens, of the tokens admitted in
	// any window [t1, t2] inside the range over b + r*(t2 - t1); 0 when the
	// key stayed within its envelope.
	Violation float64
	// WorstFrom and WorstTo delimit the window of the largest excess, by
	// send time; WorstEnd is the latest answer of that window's admitted
	// checks, the end of the window the envelope was applied to (all zero
	// when Violation is 0).
	WorstFrom, WorstTo, WorstEnd time.Duration
}

// Report is a range of a run, checked.
type Report struct {
	From, To time.Duration
	Keys     []KeyReport // sorted by Violation, largest first, then Key
	Checks   int
	Admitted int64
	Errors   int
	// MaxViolation is the largest KeyReport.Violation; Over counts the keys
	// whose Violation is above the slack Check was given.
	MaxViolation float64
	Over         int
	// P50 and P99 are the decision latencies of the answered checks in
	// range (nearest rank, eval.Percentile).
	P50, P99 time.Duration
	// ErrorKinds counts the failed checks by error text, for at most
	// maxErrorKinds distinct texts (the rest count under "other").
	ErrorKinds map[string]int
}

// maxErrorKinds bounds Report.ErrorKinds.
const maxErrorKinds = 8

// ErrEmptyRange is returned by Check when to < from.
var ErrEmptyRange = errors.New("chaos: range ends before it starts")

// keyState is one key's running state in Check.
type keyState struct {
	rep    KeyReport
	sum    int64
	minPre float64
	minAt  time.Duration
	end    time.Duration // E_j: the latest answer so far
}

// admit adds the admitted decision d and updates the key's worst window
// against env.
func (st *keyState) admit(d Decision, env Envelope) {
	t := d.At.Seconds()
	if pre := float64(st.sum) - env.RatePerSec*t; pre < st.minPre {
		st.minPre, st.minAt = pre, d.At
	}
	st.sum += d.Tokens
	st.rep.Admitted += d.Tokens
	st.end = max(st.end, d.At+max(d.Latency, 0))
	v := float64(st.sum) - env.RatePerSec*st.end.Seconds() - st.minPre - float64(env.Burst)
	if v > st.rep.Violation+1e-9 {
		st.rep.Violation, st.rep.WorstFrom, st.rep.WorstTo, st.rep.WorstEnd = v, st.minAt, d.At, st.end
	}
}

// countError counts a decision's error err by kind (at most
// maxErrorKinds kinds, then "other").
func (rep *Report) countError(err error) {
	rep.Errors++
	rep.addErrorKind(err.Error(), 1)
}

// addErrorKind counts n errors of kind msg, under "other" once
// ErrorKinds holds maxErrorKinds kinds and msg is not one of them.
func (rep *Report) addErrorKind(msg string, n int) {
	if rep.ErrorKinds == nil {
		rep.ErrorKinds = map[string]int{}
	}
	if _, ok := rep.ErrorKinds[msg]; !ok && len(rep.ErrorKinds) >= maxErrorKinds {
		msg = "other"
	}
	rep.ErrorKinds[msg] += n
}

// addKey adds one key's outcome k to rep: to Keys (unsorted), to
// MaxViolation, and to Over when k's Violation is above slack (tokens).
func (rep *Report) addKey(k KeyReport, slack float64) {
	rep.Keys = append(rep.Keys, k)
	rep.MaxViolation = math.Max(rep.MaxViolation, k.Violation)
	if k.Violation > slack {
		rep.Over++
	}
}

// sortKeys sorts keys by Violation, largest first, then by Key.
func sortKeys(keys []KeyReport) {
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		if a.Violation != b.Violation {
			return a.Violation > b.Violation
		}
		return a.Key < b.Key
	})
}

// Check measures the decisions sent in [from, to] against env, per key:
// only windows inside the range count, so the admissions before from do
// not weigh on the windows after it. slack (tokens) is what the caller
// allows beyond the envelope (the strategy's documented bound for the
// fault, plus the clock slack described in the package doc); keys above it
// are counted in Report.Over. Errors: a bad envelope, ErrEmptyRange.
//
// For one key with admissions sent at t_1 <= ... <= t_n of n_k tokens,
// answered at a_k = t_k + latency_k, prefix sums S_k and E_j = max(a_1..a_j),
// the excess over the checks sent in [t_i, t_j] is S_j - S_{i-1} - b -
// r(E_j - t_i): those checks were decided inside [t_i, E_j]. The maximum
// over i <= j is found in one pass by keeping the minimum of S_{i-1} -
// r*t_i seen so far (as eval.EnvelopeViolation does for the simulator,
// where a decision's time is known exactly and E_j = t_j).
func (h *History) Check(env Envelope, from, to time.Duration, slack float64) (Report, error) {
	if err := env.Validate(); err != nil {
		return Report{}, err
	}
	if to < from {
		return Report{}, fmt.Errorf("%w: [%v, %v]", ErrEmptyRange, from, to)
	}
	keys := map[string]*keyState{}
	rep := Report{From: from, To: to}
	var lat []time.Duration
	for _, d := range h.Decisions() {
		if d.At < from || d.At > to {
			continue
		}
		st := keys[d.Key]
		if st == nil {
			st = &keyState{rep: KeyReport{Key: d.Key}, minPre: math.Inf(1)}
			keys[d.Key] = st
		}
		st.rep.Checks++
		rep.Checks++
		if d.Err != nil {
			st.rep.Errors++
			rep.countError(d.Err)
			continue
		}
		lat = append(lat, d.Latency)
		if !d.Allowed || d.Tokens <= 0 {
			continue
		}
		st.admit(d, env)
		rep.Admitted += d.Tokens
	}
	for _, st := range keys {
		if st.rep.Violation < 1e-6 { // float rounding of r*t
			st.rep.Violation, st.rep.WorstFrom, st.rep.WorstTo, st.rep.WorstEnd = 0, 0, 0, 0
		}
		rep.addKey(st.rep, slack)
	}
	sortKeys(rep.Keys)
	rep.P50, rep.P99 = eval.Percentile(lat, 50), eval.Percentile(lat, 99)
	return rep, nil
}
