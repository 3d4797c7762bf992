package sim

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/workload"
)

// World is one simulation run that its caller drives: step it event by
// event or run it up to a time, inject crashes, restarts, partitions and
// heals from outside (besides those of Config.Scenario), look at every
// node's strategy between events, and check invariants after every event
// with a hook (OnEvent). Run is NewWorld followed by Finish, so a World
// stepped to the end with Step and then finished gives Run's Result bit
// for bit.
//
// Events run in Run's order (see the package documentation): queued
// events (deliveries, membership changes, scenario events, wake-ups,
// samples) and the trace's requests interleaved by (time, priority). A
// World is not safe for concurrent use. Ours: the engine of Run, opened
// for swarm tests (RandomScenario) and drivers that need to act between
// events.
type World struct {
	r        *runner
	next     int // the next trace request to inject
	hook     func(*World, Event) error
	err      error // the hook's error: the world stops
	finished bool
}

// EventKind is what a processed event was.
type EventKind int8

const (
	EventDeliver    EventKind = iota // a peer message reached Event.Node (or was lost at it)
	EventMembership                  // Event.Node's failure detector caught up (its view may change)
	EventScenario                    // a Config.Scenario event took effect
	EventReconnect                   // a reconnect attempt merged the membership after a heal
	EventRequest                     // the trace's request Event.Request reached Event.Node
	EventWake                        // Event.Node's wake-up (Tick)
	EventSample                      // the state sizes were sampled
	EventInjected                    // a fault injected with Crash, Restart, Partition or Heal
	EventProxy                       // a message between proxy Event.Node and its node arrived, or the proxy's timer fired (Config.Proxies)
	EventRelease                     // Event.Node released the permit of request Event.Request at the end of its hold (Config.Hold)
)

var eventKindNames = [...]string{"deliver", "membership", "scenario", "reconnect", "request", "wake", "sample", "injected", "proxy", "release"}

func (k EventKind) String() string {
	if k < 0 || int(k) >= len(eventKindNames) {
		return fmt.Sprintf("EventKind(%d)", int8(k))
	}
	return eventKindNames[k]
}

// Event is the event a World just processed, as its OnEvent hook sees it.
type Event struct {
	At   time.Duration // virtual time
	Kind EventKind
	// Node is the node concerned (deliver, membership, request, wake), or
	// the proxy (proxy; a request that reached a proxy), "" for
	// cluster-wide events.
	Node strategy.NodeID
	// Request is the trace index of an EventRequest, -1 otherwise.
	Request int
	// Fault describes an EventScenario or EventInjected (e.g. "crash n1").
	Fault string
}

// ErrStopped is wrapped by World.Err when the OnEvent hook stopped the
// world.
var ErrStopped = errors.New("sim: stopped by the OnEvent hook")

// NewWorld builds the run cfg describes over trace, at time 0 with no
// event processed yet. Errors: as Run's.
func NewWorld(trace *workload.Trace, cfg Config) (*World, error) {
	r, err := newRunner(trace, cfg)
	if err != nil {
		return nil, err
	}
	return &World{r: r}, nil
}

// OnEvent sets the hook called after every processed event (nil: none),
// e.g. an invariant check over the nodes' strategies. An error from it
// stops the world: Step and RunUntil return false from then on, Err
// returns it (wrapping ErrStopped) and Finish returns what was measured so
// far.
func (w *World) OnEvent(hook func(*World, Event) error) { w.hook = hook }

// Err is the hook's error that stopped the world, or nil.
func (w *World) Err() error { return w.err }

// Now is the virtual time of the last processed event.
func (w *World) Now() time.Duration { return w.r.now }

// Step processes the next event in Run's order and reports whether there
// was one: while the trace has requests left, the earlier of the next
// queued event and the next request; after the trace, queued events only
// while decisions are pending and within Config.Drain of the last arrival
// (Run's rule: periodic wake-ups never end by themselves). False also once
// the world is stopped or finished.
func (w *World) Step() bool {
	if w.err != nil || w.finished {
		return false
	}
	r := w.r
	reqs := r.trace.Requests
	if w.next < len(reqs) {
		req := &reqs[w.next]
		if r.q.Len() > 0 && eventBefore(r.q.Peek(), event{at: req.Arrival, prio: prioRequest}) {
			w.stepQueued()
			return true
		}
		i := w.next
		w.next++
		r.now = req.Arrival
		r.inject(i, req)
		if r.cfg.Progress != nil && i&0x3fff == 0 {
			r.cfg.Progress(i, len(reqs))
		}
		node := strategy.NodeID("")
		switch {
		case r.px != nil:
			node = r.px.all[r.px.received].name
		case len(r.alive) > 0:
			node = r.nodes[r.receivedBy[i]].id
		}
		w.after(Event{At: r.now, Kind: EventRequest, Node: node, Request: i})
		return true
	}
	if r.q.Len() > 0 && r.pendingDecisions > 0 && r.q.Peek().at <= r.lastArrival()+r.cfg.Drain {
		w.stepQueued()
		return true
	}
	return false
}

// RunUntil processes every event (queued or request) at or before t, in
// Run's order, also after the trace and with no decision pending (unlike
// Step: a test lets a heal settle), then sets the clock to t. It reports
// false if the world stopped (Err) or was finished.
func (w *World) RunUntil(t time.Duration) bool {
	if w.err != nil || w.finished {
		return false
	}
	r := w.r
	reqs := r.trace.Requests
	for w.err == nil {
		qNext := r.q.Len() > 0 && r.q.Peek().at <= t
		rNext := w.next < len(reqs) && reqs[w.next].Arrival <= t
		if !qNext && !rNext {
			break
		}
		if rNext && (!qNext || !eventBefore(r.q.Peek(), event{at: reqs[w.next].Arrival, prio: prioRequest})) {
			w.Step() // the request comes first
			continue
		}
		w.stepQueued()
	}
	if w.err != nil {
		return false
	}
	r.now = max(r.now, t)
	return true
}

// Finish runs the world to its end as Run does (Step until it returns
// false) and returns the Result. Calling it again returns the same
// Result; a stopped world returns what was measured until the hook's
// error.
func (w *World) Finish() *Result {
	r := w.r
	if w.finished {
		return r.res
	}
	for w.Step() {
	}
	w.finished = true
	total := len(r.trace.Requests)
	if r.cfg.Progress != nil {
		r.cfg.Progress(total, total)
	}
	for i := range r.res.Outcomes {
		if !r.res.Outcomes[i].Decided {
			r.res.Undecided++
		}
	}
	if r.statSamples > 0 {
		r.res.StateBytesMean = r.stateSum / float64(r.statSamples)
	}
	r.res.End = r.now
	return r.res
}

// Outcomes are the requests' outcomes so far, by trace index (read only;
// the slice is the World's own).
func (w *World) Outcomes() []Outcome { return w.r.res.Outcomes }

// Nodes are the node names, n0, n1, ..., in index order (with regions
// "<region>.n<i>": topology.NodeID).
func (w *World) Nodes() []strategy.NodeID {
	out := make([]strategy.NodeID, len(w.r.nodes))
	for i, n := range w.r.nodes {
		out[i] = n.id
	}
	return out
}

// Alive reports whether node is up (not crashed).
func (w *World) Alive(node strategy.NodeID) bool {
	i, ok := w.r.byName[string(node)]
	return ok && w.r.nodes[i].alive
}

// Strategy is node's current strategy instance (a restart builds a new
// one), for inspection between events; nil for an unknown node. The
// caller must not call its methods that take Effects: that would bypass
// the network.
func (w *World) Strategy(node strategy.NodeID) strategy.Strategy {
	i, ok := w.r.byName[string(node)]
	if !ok {
		return nil
	}
	return w.r.nodes[i].s
}

// View is node's member list as its strategy was last told (SetMembers).
func (w *World) View(node strategy.NodeID) []strategy.NodeID {
	i, ok := w.r.byName[string(node)]
	if !ok {
		return nil
	}
	return slices.Clone(w.r.nodes[i].view)
}

// Crash crashes nodes now, as a scenario `crash` event would. Errors:
// an unknown node name, a stopped or finished world.
func (w *World) Crash(nodes ...string) error {
	return w.inject(ScenarioEvent{Crash: nodes})
}

// Restart restarts crashed nodes now (a live one is left alone), as a
// scenario `restart` event would.
func (w *World) Restart(nodes ...string) error {
	return w.inject(ScenarioEvent{Restart: nodes})
}

// Partition cuts the network into groups now (nodes in no group form one
// more group together), as a scenario `partition` event would. Errors
// also for a node in two groups.
func (w *World) Partition(groups ...[]string) error {
	return w.inject(ScenarioEvent{Partition: groups})
}

// Cut isolates regions now (Config.Regions), as a scenario `cut` event
// would: each region listed on its own side, the others together. Errors
// also for an unknown region or a run without regions.
func (w *World) Cut(regions ...string) error {
	return w.inject(ScenarioEvent{Cut: regions})
}

// Heal ends a partition now, as a scenario `heal` event would: messages
// flow at once; views merge after the first reconnect attempt if the
// scenario models reconnects.
func (w *World) Heal() error {
	return w.inject(ScenarioEvent{Heal: true})
}

// inject carries out e at the current time with the membership model of
// Config.Scenario (without one, DefaultDetection and nothing else), then
// calls the hook.
func (w *World) inject(e ScenarioEvent) error {
	if w.err != nil {
		return w.err
	}
	if w.finished {
		return errors.New("sim: the world is finished")
	}
	r := w.r
	e.At = r.now
	if err := (&Scenario{Events: []ScenarioEvent{e}}).checkIn(r.byName, r.cfg.Regions); err != nil {
		return fmt.Errorf("sim: inject %s: %w", e.Action(), err)
	}
	if r.cfg.Scenario == nil {
		// No scenario: the default failure detector, nothing else. Set
		// only now, so that runs without faults are unchanged.
		r.cfg.Scenario = &Scenario{Detection: DefaultDetection}
	}
	r.res.Events++
	r.wanCall = false
	r.scenario(e)
	w.after(Event{At: r.now, Kind: EventInjected, Request: -1, Fault: e.Action()})
	return w.err
}

// stepQueued processes the next queued event and calls the hook.
func (w *World) stepQueued() {
	r := w.r
	e := r.q.Pop()
	r.step(e)
	ev := Event{At: e.at, Request: -1}
	switch e.prio {
	case prioDeliver:
		ev.Kind, ev.Node = EventDeliver, r.nodes[e.node].id
	case prioMembership:
		ev.Kind, ev.Node = EventMembership, r.nodes[e.node].id
	case prioScenario:
		ev.Kind, ev.Fault = EventScenario, r.cfg.Scenario.Events[e.scen].Action()
	case prioReconnect:
		ev.Kind = EventReconnect
	case prioWake:
		ev.Kind, ev.Node = EventWake, r.nodes[e.node].id
	case prioSample:
		ev.Kind = EventSample
	case prioProxy, prioProxyTimer:
		ev.Kind, ev.Node = EventProxy, r.px.all[e.node].name
	case prioRelease:
		ev.Kind, ev.Node, ev.Request = EventRelease, r.nodes[e.node].id, int(e.payloadID)
	}
	w.after(ev)
}

func (w *World) after(ev Event) {
	if w.hook == nil {
		return
	}
	if err := w.hook(w, ev); err != nil {
		w.err = fmt.Errorf("%w at %v after %s event: %w", ErrStopped, ev.At, ev.Kind, err)
	}
}
