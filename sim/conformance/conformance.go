// Package conformance checks every registered strategy (strategy/registry)
// against the contract of package strategy, through the simulator (sim):
// one node decides exactly as central, a run is a function of its seed,
// garbage peer frames and the read-only calls (Remaining, StateBytes,
// Snapshot, ...) change no state, and random fault scenarios (crashes,
// restarts, partitions, heals, loss) keep each strategy within the bound
// its package documents. The tests are in this package's _test files; this
// file holds the generators and the twin driver they share. All of it is
// ours (docs/ARCHITECTURE.md, "Where faults are handled"). It lives beside
// sim, not under strategy/, because it drives the strategies through the
// simulator, and nothing under strategy/ imports a driver (the layering
// test, internal/archtest).
package conformance

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"time"

	"github.com/tokenmesh/tokenmesh/sim"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/workload"
)

// Workload generates a trace of about perSec requests per second (Poisson
// arrivals) over duration on keys "k0".."k{keys-1}", skewed (key i drawn
// with weight 1/(i+1)), of 1 token mostly and up to 3. The same seed gives
// the same trace.
func Workload(seed uint64, keys int, perSec float64, duration time.Duration) *workload.Trace {
	rnd := rand.New(rand.NewPCG(seed, 0x776b6c64))
	weights := make([]float64, keys)
	total := 0.0
	for i := range weights {
		weights[i] = 1 / float64(i+1)
		total += weights[i]
	}
	tr := &workload.Trace{Name: fmt.Sprintf("conformance:seed=%d,keys=%d,rate=%g,duration=%v", seed, keys, perSec, duration)}
	at := time.Duration(0)
	for {
		at += time.Duration(rnd.ExpFloat64() / perSec * float64(time.Second))
		if at >= duration {
			return tr
		}
		x := rnd.Float64() * total
		k := 0
		for k < keys-1 && x >= weights[k] {
			x -= weights[k]
			k++
		}
		tokens := int64(1)
		if rnd.IntN(5) == 0 {
			tokens = 1 + rnd.Int64N(3)
		}
		tr.Requests = append(tr.Requests, workload.Request{Arrival: at, Key: fmt.Sprintf("k%d", k), Tokens: tokens})
	}
}

// Shifting is a workload.Assigner that sends each key's requests to one
// node, which moves to the next node every Every (by arrival time): the
// traffic of a key shifts across the cluster.
type Shifting struct{ Every time.Duration }

// Assign implements workload.Assigner.
func (s Shifting) Assign(req *workload.Request, _ int, n int) int {
	h := uint64(14695981039346656037)
	for i := 0; i < len(req.Key); i++ {
		h = (h ^ uint64(req.Key[i])) * 1099511628211
	}
	return int((h + uint64(req.Arrival/s.Every)) % uint64(n))
}

// FaultCounts counts a scenario's events by kind.
type FaultCounts struct {
	Crashes, Restarts, Partitions, Heals int
}

// Events is the number of fault events.
func (f FaultCounts) Events() int { return f.Crashes + f.Restarts + f.Partitions + f.Heals }

// RandomScenario draws up to maxEvents fault events for a cluster of nodes
// nodes ("n0".."n{nodes-1}") at times in [1 s, end): crashes of a live node
// (at least one stays up), restarts of a crashed one, partitions of the
// nodes into two non-empty groups, and heals, each drawn only when it
// applies. Detection is 200 ms-1 s with up to 500 ms of jitter; joins take
// up to 300 ms. The network has loss, duplication and reordering with
// probability 1/2 (each up to 5 %). The same seed gives the same scenario.
func RandomScenario(seed uint64, nodes, maxEvents int, end time.Duration) (*sim.Scenario, FaultCounts) {
	rnd := rand.New(rand.NewPCG(seed, 0x7363656e))
	sc := &sim.Scenario{
		Detection:       200*time.Millisecond + time.Duration(rnd.Int64N(int64(800*time.Millisecond))),
		DetectionJitter: time.Duration(rnd.Int64N(int64(500 * time.Millisecond))),
		JoinDelay:       time.Duration(rnd.Int64N(int64(300 * time.Millisecond))),
	}
	if rnd.IntN(2) == 0 {
		loss, dup, reorder := rnd.Float64()*0.05, rnd.Float64()*0.05, rnd.Float64()*0.05
		sc.Network = &sim.ScenarioNet{Latency: "uniform:1ms-5ms", Loss: &loss, Duplicate: &dup, Reorder: &reorder}
	}
	var f FaultCounts
	alive := make([]bool, nodes)
	for i := range alive {
		alive[i] = true
	}
	split := false
	at := time.Second
	n := rnd.IntN(maxEvents + 1)
	for range n {
		at += time.Duration(rnd.Int64N(int64(end-at) / 2))
		if at >= end {
			break
		}
		live, dead := liveDead(alive)
		kinds := faultKinds(len(live), len(dead), nodes, split)
		if len(kinds) == 0 {
			break
		}
		e := sim.ScenarioEvent{At: at}
		switch kinds[rnd.IntN(len(kinds))] {
		case "crash":
			i := live[rnd.IntN(len(live))]
			alive[i] = false
			e.Crash = []string{nodeName(i)}
			f.Crashes++
		case "restart":
			i := dead[rnd.IntN(len(dead))]
			alive[i] = true
			e.Restart = []string{nodeName(i)}
			f.Restarts++
		case "partition":
			e.Partition = randomCut(rnd, nodes)
			split = true
			f.Partitions++
		case "heal":
			e.Heal = true
			split = false
			f.Heals++
		}
		sc.Events = append(sc.Events, e)
	}
	return sc, f
}

// nodeName is the name of node i in the scenarios RandomScenario draws.
func nodeName(i int) string { return fmt.Sprintf("n%d", i) }

// liveDead lists the nodes alive and those not, in order.
func liveDead(alive []bool) (live, dead []int) {
	for i, a := range alive {
		if a {
			live = append(live, i)
		} else {
			dead = append(dead, i)
		}
	}
	return live, dead
}

// faultKinds lists the kinds of fault that apply with live and dead nodes
// of nodes, the cluster split or not: a crash while more than one node is
// up, a restart while one is down, a partition of a whole cluster of two
// or more, a heal of a split one.
func faultKinds(live, dead, nodes int, split bool) []string {
	var kinds []string
	if live > 1 {
		kinds = append(kinds, "crash")
	}
	if dead > 0 {
		kinds = append(kinds, "restart")
	}
	if nodes > 1 && !split {
		kinds = append(kinds, "partition")
	}
	if split {
		kinds = append(kinds, "heal")
	}
	return kinds
}

// randomCut draws a partition of nodes nodes into two non-empty groups,
// each sorted by name.
func randomCut(rnd *rand.Rand, nodes int) [][]string {
	perm := rnd.Perm(nodes)
	cut := 1 + rnd.IntN(nodes-1)
	var a, b []string
	for j, i := range perm {
		if j < cut {
			a = append(a, nodeName(i))
		} else {
			b = append(b, nodeName(i))
		}
	}
	slices.Sort(a)
	slices.Sort(b)
	return [][]string{a, b}
}

// Garbage returns a payload that should not decode: random bytes, or a
// received frame truncated, with a byte flipped, or with bytes appended.
// Any of them may happen to decode (a protobuf prefix can be a valid
// message); Twin copes with that.
func Garbage(rnd *rand.Rand, seen [][]byte) []byte {
	if len(seen) == 0 || rnd.IntN(4) == 0 {
		b := make([]byte, rnd.IntN(64))
		for i := range b {
			b[i] = byte(rnd.UintN(256))
		}
		return b
	}
	src := seen[rnd.IntN(len(seen))]
	b := bytes.Clone(src)
	switch rnd.IntN(3) {
	case 0:
		if len(b) > 0 {
			b = b[:rnd.IntN(len(b))]
		}
	case 1:
		if len(b) > 0 {
			b[rnd.IntN(len(b))] ^= byte(1 + rnd.UintN(255))
		}
	default:
		for range 1 + rnd.IntN(8) {
			b = append(b, byte(rnd.UintN(256)))
		}
	}
	return b
}

// Twin is a strategy.Strategy that drives two instances of one strategy,
// built from the same configuration and the same random seed, with the
// same calls, and feeds the second one (Probed) besides: garbage frames
// (Garbage, from a garbage sender) before every call, and the calls that
// must change no state (Remaining, StateBytes, Snapshot, CapacityShares,
// Ready). A garbage frame that Probed accepts (Receive returns nil: it
// happened to decode) is delivered to the first one too, so the two stay
// twins; one it refuses must change nothing. After every call the two
// must have returned the same thing and asked for the same effects; the
// first difference is recorded in Err (the simulator cannot be stopped
// from inside a strategy). Ours.
type Twin struct {
	Plain, Probed strategy.Strategy
	rnd           *rand.Rand
	seen          [][]byte // well-formed frames received, for Garbage
	fx            strategy.Effects
	keys          []string
	members       []strategy.NodeID
	self          strategy.NodeID
	// Err is the first divergence or contract breach, nil if none.
	Err error
	// Garbage counts frames fed to Probed; Refused those it refused.
	Garbage, Refused int
}

// garbageSender is the NodeID garbage frames come from: a peer in the
// strategy's view (its last member) when it has one, so that the frame is
// not refused for its sender alone.
func garbageSender(members []strategy.NodeID, self strategy.NodeID) strategy.NodeID {
	for i := len(members) - 1; i >= 0; i-- {
		if members[i] != self {
			return members[i]
		}
	}
	return self
}

// NewTwin builds a Twin with newS, giving each instance a random source
// seeded with seed (cfg.Rand is not used).
func NewTwin(newS sim.Factory, cfg strategy.Config, seed uint64) (*Twin, error) {
	t := &Twin{rnd: rand.New(rand.NewPCG(seed, 0x74776e))}
	c := cfg
	c.Rand = rand.New(rand.NewPCG(seed, 1))
	a, err := newS(c)
	if err != nil {
		return nil, err
	}
	c.Rand = rand.New(rand.NewPCG(seed, 1))
	b, err := newS(c)
	if err != nil {
		return nil, err
	}
	t.Plain, t.Probed = a, b
	t.keys = []string{"k0", "k1", "never-requested"}
	t.members = slices.Clone(cfg.Members)
	t.self = cfg.Self
	return t, nil
}

func (t *Twin) fail(format string, args ...any) {
	if t.Err == nil {
		t.Err = fmt.Errorf(format, args...)
	}
}

// Inject gives Probed the frame payload from from at now, as garbage: if
// Probed refuses it (an error), it must ask for no effects, and Plain
// does not get it; if Probed accepts it (it decoded), Plain gets it too
// and the two must answer alike. Either way the twins stay twins, which
// the next calls check. The effects of an accepted frame are dropped.
func (t *Twin) Inject(now time.Duration, from strategy.NodeID, payload []byte) {
	t.Garbage++
	t.fx.Reset()
	if err := t.Probed.Receive(now, from, payload, &t.fx); err != nil {
		t.Refused++
		if len(t.fx.Messages)+len(t.fx.Decisions)+len(t.fx.Wakeups) > 0 {
			t.fail("at %v: Receive of a refused frame (%v) asked for effects %+v", now, err, t.fx)
		}
		return
	}
	probed := cloneFx(&t.fx)
	t.fx.Reset()
	if err := t.Plain.Receive(now, from, payload, &t.fx); err != nil {
		t.fail("at %v: a frame Probed accepted was refused by its twin: %v", now, err)
	}
	t.same(fmt.Sprintf("garbage frame accepted at %v", now), probed)
}

// probe feeds Probed garbage and read-only calls at now.
func (t *Twin) probe(now time.Duration) {
	if t.Err != nil {
		return
	}
	for range t.rnd.IntN(3) {
		t.Inject(now, garbageSender(t.members, t.self), Garbage(t.rnd, t.seen))
	}
	if r, ok := t.Probed.(strategy.Remainer); ok {
		for _, k := range t.keys {
			r.Remaining(now, k)
		}
	}
	if r, ok := t.Probed.(strategy.KeyLeveler); ok {
		for _, k := range t.keys {
			r.KeyLevel(now, k)
		}
	}
	t.Probed.StateBytes()
	if s, ok := t.Probed.(strategy.Snapshotter); ok {
		s.Snapshot(now, func(strategy.KeyState) {})
	}
	if s, ok := t.Probed.(strategy.ShareReporter); ok {
		s.CapacityShares()
	}
	if s, ok := t.Probed.(strategy.Readier); ok {
		s.Ready(now)
	}
	if s, ok := t.Probed.(strategy.MemoryReporter); ok {
		s.MemoryBytes()
	}
}

func cloneFx(fx *strategy.Effects) strategy.Effects {
	return strategy.Effects{Messages: slices.Clone(fx.Messages), Decisions: slices.Clone(fx.Decisions), Wakeups: slices.Clone(fx.Wakeups)}
}

// same compares Plain's effects (in t.fx) with Probed's (probed).
func (t *Twin) same(where string, probed strategy.Effects) {
	plain := cloneFx(&t.fx)
	norm := func(e *strategy.Effects) {
		if len(e.Messages) == 0 {
			e.Messages = nil
		}
		if len(e.Decisions) == 0 {
			e.Decisions = nil
		}
		if len(e.Wakeups) == 0 {
			e.Wakeups = nil
		}
	}
	norm(&plain)
	norm(&probed)
	if !reflect.DeepEqual(plain, probed) {
		t.fail("%s: effects differ after garbage and read-only calls:\nplain  %+v\nprobed %+v", where, plain, probed)
	}
	if a, b := t.Plain.StateBytes(), t.Probed.StateBytes(); a != b {
		t.fail("%s: StateBytes %d, twin %d", where, a, b)
	}
}

// both runs call on Probed and then on Plain with a fresh Effects each,
// leaves Plain's in fx and compares them.
func (t *Twin) both(now time.Duration, where string, fx *strategy.Effects, call func(s strategy.Strategy, fx *strategy.Effects)) {
	t.probe(now)
	t.fx.Reset()
	call(t.Probed, &t.fx)
	probed := cloneFx(&t.fx)
	t.fx.Reset()
	call(t.Plain, &t.fx)
	t.same(where, probed)
	fx.Messages = append(fx.Messages, t.fx.Messages...)
	fx.Decisions = append(fx.Decisions, t.fx.Decisions...)
	fx.Wakeups = append(fx.Wakeups, t.fx.Wakeups...)
}

// Start implements strategy.Strategy.
func (t *Twin) Start(now time.Duration, fx *strategy.Effects) {
	t.both(now, "Start", fx, func(s strategy.Strategy, fx *strategy.Effects) { s.Start(now, fx) })
}

// Request implements strategy.Strategy.
func (t *Twin) Request(now time.Duration, req strategy.Request, fx *strategy.Effects) (strategy.Decision, bool) {
	var ds [2]strategy.Decision
	var oks [2]bool
	i := 0
	t.both(now, fmt.Sprintf("Request %d", req.ID), fx, func(s strategy.Strategy, fx *strategy.Effects) {
		ds[i], oks[i] = s.Request(now, req, fx)
		i++
	})
	if ds[0] != ds[1] || oks[0] != oks[1] {
		t.fail("request %d at %v: decided %v/%v by the probed twin, %v/%v by the plain one", req.ID, now, ds[0], oks[0], ds[1], oks[1])
	}
	if len(t.keys) < 8 && !slices.Contains(t.keys, req.Key) {
		t.keys = append(t.keys, req.Key)
	}
	return ds[1], oks[1]
}

// Receive implements strategy.Strategy.
func (t *Twin) Receive(now time.Duration, from strategy.NodeID, payload []byte, fx *strategy.Effects) error {
	var errs [2]error
	i := 0
	t.both(now, "Receive from "+string(from), fx, func(s strategy.Strategy, fx *strategy.Effects) {
		errs[i] = s.Receive(now, from, payload, fx)
		i++
	})
	if (errs[0] == nil) != (errs[1] == nil) {
		t.fail("Receive from %s at %v: error %v from the probed twin, %v from the plain one", from, now, errs[0], errs[1])
	}
	if errs[1] == nil && len(t.seen) < 256 {
		t.seen = append(t.seen, bytes.Clone(payload))
	}
	return errs[1]
}

// Tick implements strategy.Strategy.
func (t *Twin) Tick(now time.Duration, fx *strategy.Effects) {
	t.both(now, "Tick", fx, func(s strategy.Strategy, fx *strategy.Effects) { s.Tick(now, fx) })
}

// SetMembers implements strategy.Strategy.
func (t *Twin) SetMembers(now time.Duration, members []strategy.NodeID, fx *strategy.Effects) {
	t.members = slices.Clone(members)
	t.both(now, "SetMembers", fx, func(s strategy.Strategy, fx *strategy.Effects) { s.SetMembers(now, slices.Clone(members), fx) })
}

// SetExpected implements strategy.Conserver, passing the call on to
// instances that implement it. A Twin thus always looks like a Conserver:
// run it under `partition: available` only, where a driver's
// CheckPartition does not ask.
func (t *Twin) SetExpected(now time.Duration, expected []strategy.NodeID, fx *strategy.Effects) {
	if _, ok := t.Plain.(strategy.Conserver); !ok {
		return
	}
	t.both(now, "SetExpected", fx, func(s strategy.Strategy, fx *strategy.Effects) {
		s.(strategy.Conserver).SetExpected(now, slices.Clone(expected), fx)
	})
}

// StateBytes implements strategy.Strategy.
func (t *Twin) StateBytes() int { return t.Plain.StateBytes() }
