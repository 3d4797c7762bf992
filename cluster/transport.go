package cluster

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/topology"
)

// Frame is one peer message on the wire: a strategy's payload for one rule.
// From is set by the transport (the sending endpoint's node), never trusted
// from the sender's frame.
type Frame struct {
	Rule    string
	From    strategy.NodeID
	Payload []byte
}

// Transport carries frames between the nodes of a cluster. It is the seam
// for the gRPC peer transport (cluster/grpcpeer): an implementation owns its connections, and
// the node only sends frames and receives them through the callback it
// registered with Listen.
//
// Contract (MemNetwork, Faulty and grpcpeer.Transport all keep it):
//   - Send must not block for long: the node's event loop calls it. A
//     network implementation queues the frame for a per-peer sender
//     goroutine (or drops it when that queue is full) and returns.
//   - Send may lose a frame silently (that is what networks do); an error
//     means the frame certainly was not sent (unknown peer, closed
//     transport). Strategies recover from loss either way.
//   - The callback given to Listen may be called from any goroutine,
//     concurrently; it does not block (Node's callback queues or drops).
//     Frames received before Listen is called are dropped.
//   - Payload slices handed to the callback are not reused by the transport.
type Transport interface {
	Send(to strategy.NodeID, f Frame) error
	Listen(recv func(Frame))
	Close() error
}

// ErrTransportClosed is returned by Send on a closed transport.
var ErrTransportClosed = errors.New("cluster: transport is closed")

// MemNetwork connects in-process nodes by name: a frame sent to a peer is
// handed to the peer's callback at once, in the sender's goroutine. It is
// the transport of tests and of `tokenmesh replay` against one process; wrap
// its endpoints in Faulty to lose, delay or duplicate frames.
type MemNetwork struct {
	mu  sync.RWMutex
	eps map[strategy.NodeID]*memEndpoint
}

// NewMemNetwork returns an empty network.
func NewMemNetwork() *MemNetwork {
	return &MemNetwork{eps: map[strategy.NodeID]*memEndpoint{}}
}

// Endpoint attaches node id to the network. Errors: an empty id, or one
// already attached (and not closed).
func (m *MemNetwork) Endpoint(id strategy.NodeID) (Transport, error) {
	if id == "" {
		return nil, fmt.Errorf("cluster: mem network: node id is empty")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.eps[id]; ok {
		return nil, fmt.Errorf("cluster: mem network: node %q is already attached", id)
	}
	ep := &memEndpoint{net: m, self: id}
	m.eps[id] = ep
	return ep, nil
}

type memEndpoint struct {
	net  *MemNetwork
	self strategy.NodeID

	mu     sync.RWMutex
	recv   func(Frame)
	closed bool
}

func (e *memEndpoint) Send(to strategy.NodeID, f Frame) error {
	e.mu.RLock()
	closed := e.closed
	e.mu.RUnlock()
	if closed {
		return ErrTransportClosed
	}
	e.net.mu.RLock()
	peer := e.net.eps[to]
	e.net.mu.RUnlock()
	if peer == nil {
		return fmt.Errorf("cluster: mem network: peer %q is not attached", to)
	}
	peer.mu.RLock()
	recv := peer.recv
	peer.mu.RUnlock()
	if recv == nil {
		return nil // attached but not listening yet: lost, as on a network
	}
	recv(Frame{Rule: f.Rule, From: e.self, Payload: append([]byte(nil), f.Payload...)})
	return nil
}

func (e *memEndpoint) Listen(recv func(Frame)) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.closed {
		e.recv = recv
	}
}

// Close detaches the endpoint: frames to it fail with an error naming it,
// and its id may be attached again.
func (e *memEndpoint) Close() error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed, e.recv = true, nil
	e.mu.Unlock()
	e.net.mu.Lock()
	if e.net.eps[e.self] == e {
		delete(e.net.eps, e.self)
	}
	e.net.mu.Unlock()
	return nil
}

// MaxFaultDelay bounds each delay of FrameFaults (Delay, Jitter,
// WANDelay, WANJitter): one hour, far beyond any test's wish, so that a
// typo (a count of nanoseconds given as a duration) is refused.
const MaxFaultDelay = time.Hour

// FrameFaults are the network faults a Faulty transport injects into the
// frames it sends. The zero value injects none.
type FrameFaults struct {
	Drop      float64       // probability that a frame is lost, in [0, 1]
	Duplicate float64       // probability that a frame not lost is sent twice, in [0, 1]
	Delay     time.Duration // fixed extra delay of every frame, in [0, MaxFaultDelay]
	Jitter    time.Duration // extra delay drawn uniformly from [0, Jitter) per copy (reorders frames), in [0, MaxFaultDelay]
	// WANDelay is a fixed extra delay, in [0, MaxFaultDelay], of every
	// frame to a peer in another region than the sender's (regions read
	// from the node names with topology.Of: "eu.n0" is in eu, "n0" in the
	// region ""), added to Delay and Jitter: the wide-area link between
	// data centres, emulated in-process. Frames inside a region get none.
	WANDelay time.Duration
	// WANJitter is an extra delay of such a cross-region frame, drawn
	// uniformly from [0, WANJitter) per copy, in [0, MaxFaultDelay].
	WANJitter time.Duration
	// Blocked peers are cut off: frames to them are lost. A partition is
	// both sides blocking each other (see Partition).
	Blocked []strategy.NodeID
}

// Validate reports the first field out of range, naming it.
func (f FrameFaults) Validate() error {
	switch {
	case !(f.Drop >= 0 && f.Drop <= 1):
		return fmt.Errorf("faults: Drop %v is not a probability in [0, 1]", f.Drop)
	case !(f.Duplicate >= 0 && f.Duplicate <= 1):
		return fmt.Errorf("faults: Duplicate %v is not a probability in [0, 1]", f.Duplicate)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"Delay", f.Delay}, {"Jitter", f.Jitter}, {"WANDelay", f.WANDelay}, {"WANJitter", f.WANJitter}} {
		switch {
		case d.v < 0:
			return fmt.Errorf("faults: %s %v is negative", d.name, d.v)
		case d.v > MaxFaultDelay:
			return fmt.Errorf("faults: %s %v is more than %v", d.name, d.v, MaxFaultDelay)
		}
	}
	return nil
}

// FaultStats counts what a Faulty transport did to the frames sent through it.
type FaultStats struct {
	Sent       int64 // frames handed to Send
	Dropped    int64 // lost by Drop
	Blocked    int64 // lost to a blocked peer
	Duplicated int64 // sent twice
	Delayed    int64 // copies sent after a delay
	WANDelayed int64 // copies sent after a WAN delay (to a peer in another region; counted in Delayed too)
}

// Faulty wraps a Transport and injects faults into the frames sent through
// it (the kernel here has no tc netem, so faults are injected in-process).
// Its randomness is seeded: the same seed and the same sequence of Sends
// make the same choices. Faults apply to outgoing frames only; wrap every
// node's transport to fault every link.
type Faulty struct {
	inner  Transport
	region string // the sender's region (topology.Of of its name), for WANDelay

	mu      sync.Mutex
	rnd     *rand.Rand
	faults  FrameFaults
	blocked map[strategy.NodeID]bool
	stats   FaultStats
	closed  bool
}

// NewFaulty wraps inner with no faults yet (see SetFaults), for a sender
// without a name: its region is "" (see NewFaultyNode).
func NewFaulty(inner Transport, seed uint64) *Faulty {
	return NewFaultyNode(inner, "", seed)
}

// NewFaultyNode wraps the transport inner of the node named self with no
// faults yet (see SetFaults). The sender's region, topology.Of(self),
// decides which frames FrameFaults.WANDelay delays: those to peers of
// another region.
func NewFaultyNode(inner Transport, self strategy.NodeID, seed uint64) *Faulty {
	return &Faulty{inner: inner, region: topology.Of(self), rnd: rand.New(rand.NewPCG(seed, 0x6661756c74)), blocked: map[strategy.NodeID]bool{}}
}

// SetFaults replaces the faults injected from now on. Errors: a field out
// of range (the faults are then unchanged).
func (t *Faulty) SetFaults(f FrameFaults) error {
	if err := f.Validate(); err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.faults = f
	t.faults.Blocked = nil
	t.blocked = map[strategy.NodeID]bool{}
	for _, p := range f.Blocked {
		t.blocked[p] = true
	}
	return nil
}

// Stats returns the counts so far.
func (t *Faulty) Stats() FaultStats {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.stats
}

// Send applies the faults to f and sends what survives. Injected losses are
// silent (nil error), as on a real network.
func (t *Faulty) Send(to strategy.NodeID, f Frame) error {
	delays, err := t.plan(to)
	if err != nil || len(delays) == 0 {
		return err
	}
	f.Payload = append([]byte(nil), f.Payload...) // the caller may reuse its buffer once Send returns
	for _, d := range delays {
		if d <= 0 {
			if e := t.inner.Send(to, f); e != nil && err == nil {
				err = e
			}
			continue
		}
		time.AfterFunc(d, func() {
			t.mu.Lock()
			closed := t.closed
			t.mu.Unlock()
			if !closed {
				_ = t.inner.Send(to, f) // a delayed frame's error is a loss
			}
		})
	}
	return err
}

// plan draws the faults of one frame to to, counting them: the delay of
// each copy to send (none for a frame blocked or dropped; two for a
// duplicate), or ErrTransportClosed.
func (t *Faulty) plan(to strategy.NodeID) ([]time.Duration, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, ErrTransportClosed
	}
	t.stats.Sent++
	if t.blocked[to] {
		t.stats.Blocked++
		return nil, nil
	}
	fl := t.faults
	if fl.Drop > 0 && t.rnd.Float64() < fl.Drop {
		t.stats.Dropped++
		return nil, nil
	}
	copies := 1
	if fl.Duplicate > 0 && t.rnd.Float64() < fl.Duplicate {
		copies = 2
		t.stats.Duplicated++
	}
	wan := (fl.WANDelay > 0 || fl.WANJitter > 0) && topology.Of(to) != t.region
	delays := make([]time.Duration, copies)
	for i := range delays {
		delays[i] = t.delay(fl.Delay, fl.Jitter)
		if wan {
			if w := t.delay(fl.WANDelay, fl.WANJitter); w > 0 {
				delays[i] += w
				t.stats.WANDelayed++
			}
		}
		if delays[i] > 0 {
			t.stats.Delayed++
		}
	}
	return delays, nil
}

// delay is fixed plus a draw uniform in [0, jitter) (none when jitter is
// 0), for one copy of a frame. Called with t.mu held (t.rnd).
func (t *Faulty) delay(fixed, jitter time.Duration) time.Duration {
	if jitter > 0 {
		fixed += time.Duration(t.rnd.Int64N(int64(jitter)))
	}
	return fixed
}

// Listen registers recv with the wrapped transport.
func (t *Faulty) Listen(recv func(Frame)) { t.inner.Listen(recv) }

// Close closes the wrapped transport; delayed frames not yet sent are lost.
func (t *Faulty) Close() error {
	t.mu.Lock()
	t.closed = true
	t.mu.Unlock()
	return t.inner.Close()
}

// Partition cuts the links between groups of nodes: each transport blocks
// the peers outside its own group (other faults are kept). ts maps each
// node to its Faulty transport; a node in no group is cut off from all.
// Partition() with no groups heals every link.
func Partition(ts map[strategy.NodeID]*Faulty, groups ...[]strategy.NodeID) {
	group := map[strategy.NodeID]int{}
	for g, ids := range groups {
		for _, id := range ids {
			group[id] = g + 1
		}
	}
	for self, t := range ts {
		t.mu.Lock()
		t.blocked = map[strategy.NodeID]bool{}
		if len(groups) > 0 {
			for peer := range ts {
				if peer != self && (group[self] == 0 || group[peer] != group[self]) {
					t.blocked[peer] = true
				}
			}
		}
		t.mu.Unlock()
	}
}
