package strattest

import (
	"slices"
	"time"

	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/host"
)

// Relay runs one strategy instance per node behind strategy/host (the
// effects interpreter the simulator and the live runtime use) with a
// network of zero latency: a message is delivered in the order sent, at
// the instant it was sent, and a node's wake-up that falls due meanwhile
// is run at once. For strategies' unit tests that drive a few nodes by
// hand; sim.World is the driver with a network model, loss and faults.
// A failure names the node and the message (the methods call no
// t.Helper: it would point at the test, not at the message).
type Relay struct {
	t     Fataler
	hosts map[strategy.NodeID]*host.Host
	order []strategy.NodeID
	wakes map[strategy.NodeID][]time.Duration
	queue []envelope // in the order sent
	// Down lists nodes whose messages, in and out, are lost (as are
	// messages to a node the relay does not run).
	Down map[strategy.NodeID]bool
	// Dup delivers every message twice (the second a duplicate).
	Dup bool
	// Got holds every decision made, by request ID.
	Got map[uint64]strategy.Decision
}

type envelope struct {
	from, to strategy.NodeID
	payload  []byte
}

// NewRelay returns a relay of nodes (in the given order: Tick runs them in
// it), each already built; none is started (Start).
func NewRelay(t Fataler, nodes []strategy.NodeID, strategies []strategy.Strategy) *Relay {
	t.Helper()
	r := &Relay{t: t, hosts: map[strategy.NodeID]*host.Host{}, order: slices.Clone(nodes), wakes: map[strategy.NodeID][]time.Duration{},
		Down: map[strategy.NodeID]bool{}, Got: map[uint64]strategy.Decision{}}
	for i, id := range nodes {
		h, err := host.New(id, 0, relayDriver{r, id}, strategies[i])
		if err != nil {
			t.Fatal(err)
		}
		r.hosts[id] = h
	}
	return r
}

// relayDriver is one node's host.Driver.
type relayDriver struct {
	r  *Relay
	id strategy.NodeID
}

func (d relayDriver) Decided(_ int, dec strategy.Decision) { d.r.Got[dec.RequestID] = dec }

func (d relayDriver) Send(_ int, to strategy.NodeID, payload []byte) {
	d.r.queue = append(d.r.queue, envelope{d.id, to, payload})
}

func (d relayDriver) Schedule(_ int, at time.Duration) { d.r.wakes[d.id] = append(d.r.wakes[d.id], at) }

// Start starts every node at now and delivers what that sends.
func (r *Relay) Start(now time.Duration) {
	for _, id := range r.order {
		r.hosts[id].Start(now, 0)
	}
	r.settle(now)
}

// Request hands req to node at now and delivers everything it causes; the
// decision, at once or later, lands in Got. It returns the decision and
// true when node took it at once, from its own state.
func (r *Relay) Request(now time.Duration, node strategy.NodeID, req strategy.Request) (strategy.Decision, bool) {
	d, ok := r.hosts[node].Request(now, 0, req, 0)
	if ok {
		r.Got[req.ID] = d
	}
	r.settle(now)
	return d, ok
}

// Do runs f on node's strategy at now, with the host applying the effects
// f leaves in fx (a call the Host has no method for: SetMembers with a
// view the test chooses, a forged Receive), then delivers what they cause.
func (r *Relay) Do(now time.Duration, node strategy.NodeID, f func(s strategy.Strategy, fx *strategy.Effects)) {
	r.hosts[node].Do(now, 0, f)
	r.settle(now)
}

// Tick ticks, in node order, every node up (not Down) at now (a strategy
// takes a tick before its wake-up as a no-op), and delivers what that
// causes.
func (r *Relay) Tick(now time.Duration) {
	for _, id := range r.order {
		if !r.Down[id] {
			r.due(id, now)
			r.hosts[id].Tick(now, 0)
			r.settle(now)
		}
	}
}

// due reports (and forgets) whether id asked to be woken at or before now.
func (r *Relay) due(id strategy.NodeID, now time.Duration) bool {
	w := r.wakes[id]
	due := false
	r.wakes[id] = slices.DeleteFunc(w, func(at time.Duration) bool {
		if at <= now {
			due = true
			return true
		}
		return false
	})
	return due
}

// settle delivers the queued messages, and what they cause, at now; a
// Receive error fails the test.
func (r *Relay) settle(now time.Duration) {
	for len(r.queue) > 0 {
		e := r.queue[0]
		r.queue = r.queue[1:]
		h := r.hosts[e.to]
		if r.Down[e.from] || r.Down[e.to] || h == nil {
			continue // lost: a node down, or one the relay does not run
		}
		copies := 1
		if r.Dup {
			copies = 2
		}
		for range copies {
			if err := h.Receive(now, 0, e.from, e.payload); err != nil {
				r.t.Fatal("Receive on ", e.to, " from ", e.from, ": ", err)
			}
			if r.due(e.to, now) {
				h.Tick(now, 0) // the driver's wake-up, at once
			}
		}
	}
}

// Allowed counts, of the requests ids, those decided and those allowed.
func (r *Relay) Allowed(ids ...uint64) (allowed, decided int) {
	for _, id := range ids {
		if d, ok := r.Got[id]; ok {
			decided++
			if d.Allowed {
				allowed++
			}
		}
	}
	return allowed, decided
}
