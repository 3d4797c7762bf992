package gdrl_test

import (
	"container/heap"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"pgregory.net/rapid"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/gdrl"
	"github.com/tokenmesh/tokenmesh/strategy/host"
)

// harness drives N gdrl nodes, each in a strategy/host Host (the one
// interpreter of Effects: wake-up de-duplication and the order of
// effects are the simulator's and the live runtime's), over a simulated
// network with latency, loss, duplication and reordering, and crashes,
// restarts and membership updates after a detection delay. It is
// deterministic for a seed.
type harness struct {
	fail      func(format string, args ...any)
	nodes     []*hnode
	q         hqueue
	seq       uint64
	now       time.Duration
	rnd       *rand.Rand
	seed      uint64
	net       hnet
	params    []string
	rate      bucket.Rate
	burst     int64
	detection time.Duration
	messages  int64
	bytes     int64
	// afterEvent, if set, runs after every event.
	afterEvent func()
	// drop, if set, loses the messages from node index from to node index
	// to for which it returns true (a targeted loss, for fixed scenarios).
	drop func(from, to int) bool
	// dropMsg, if set, loses the messages from node index from to node
	// index to whose payload it returns true for (a loss by message kind).
	dropMsg func(from, to int, payload []byte) bool
	// pairDetect, if set, makes failure detection asymmetric: after a
	// crash, restart, partition or heal, node i re-evaluates whether node j
	// is reachable after pairDetect(i, j) (each ordered pair on its own),
	// instead of every view following at once after detection.
	pairDetect func(i, j int) time.Duration
	// wrap, if set, is the strategy node i's host drives for its new
	// incarnation g (fastpath_test.go: the live driver's fast path
	// emulated around it); g stays the node's g for inspection.
	wrap func(i int, g *gdrl.GDRL) strategy.Strategy
	// decided, if set, is told every request a host decided at once.
	decided func(i int, key string, tokens int64, allowed bool)
}

type hnet struct {
	loss, dup, reorder float64
	minDelay, maxDelay time.Duration
}

// drawNet draws a harness network's loss (up to maxLoss), duplication,
// reordering (up to 0.2 each) and minimum delay (0-2 ms), in that order;
// the caller draws maxDelay (a jitter over minDelay) where its run does.
func drawNet(t *rapid.T, maxLoss float64) hnet {
	return hnet{
		loss:     rapid.Float64Range(0, maxLoss).Draw(t, "loss"),
		dup:      rapid.Float64Range(0, 0.2).Draw(t, "dup"),
		reorder:  rapid.Float64Range(0, 0.2).Draw(t, "reorder"),
		minDelay: time.Duration(rapid.IntRange(0, 2).Draw(t, "minDelayMs")) * time.Millisecond,
	}
}

type hnode struct {
	id    strategy.NodeID
	g     *gdrl.GDRL // the strategy in host, for inspection
	host  *host.Host // every call that takes Effects goes through it
	alive bool
	epoch uint64
	view  []strategy.NodeID
	group int // partition group: messages cross no group boundary
}

// hdriver carries out node i's effects in the harness (host.Driver): its
// messages go onto the simulated network, its wake-ups into the event
// queue for its current incarnation (epoch). gdrl decides every request
// synchronously, so there is no later decision to complete.
type hdriver struct {
	h *harness
	i int
}

func (d hdriver) Decided(int, strategy.Decision) {}

func (d hdriver) Send(_ int, to strategy.NodeID, payload []byte) {
	d.h.send(d.i, strategy.Message{To: to, Payload: payload})
}

func (d hdriver) Schedule(_ int, at time.Duration) {
	d.h.push(hevent{at: at, kind: evWake, to: d.i, epoch: d.h.nodes[d.i].epoch})
}

const (
	evDeliver = iota
	evView
	evRequest
	evWake
	evPeer // node to re-evaluates whether node from is reachable
)

type hevent struct {
	at      time.Duration
	kind    int
	seq     uint64
	to      int
	from    int
	epoch   uint64
	payload []byte
	key     string
	tokens  int64
	fn      func()
}

type hqueue []hevent

func (q hqueue) Len() int { return len(q) }
func (q hqueue) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	if q[i].kind != q[j].kind {
		return q[i].kind < q[j].kind
	}
	return q[i].seq < q[j].seq
}
func (q hqueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *hqueue) Push(x any)   { *q = append(*q, x.(hevent)) }
func (q *hqueue) Pop() any {
	old := *q
	x := old[len(old)-1]
	*q = old[:len(old)-1]
	return x
}

// newHarness is a harness of n founding members; opts set it up before
// they start (the nodes exist, none is started).
func newHarness(n int, seed uint64, net hnet, rate bucket.Rate, burst int64, params []string, fail func(string, ...any), opts ...func(*harness)) *harness {
	h := &harness{fail: fail, rnd: rand.New(rand.NewPCG(seed, 0x68617273)), seed: seed, net: net, params: params,
		rate: rate, burst: burst, detection: 300 * time.Millisecond}
	for i := 0; i < n; i++ {
		h.nodes = append(h.nodes, &hnode{id: strategy.NodeID(fmt.Sprintf("n%d", i)), alive: true})
	}
	for _, o := range opts {
		o(h)
	}
	all := h.aliveSet()
	for i := range h.nodes {
		h.nodes[i].view = slices.Clone(all)
		h.start(i)
	}
	return h
}

func (h *harness) push(e hevent) {
	h.seq++
	e.seq = h.seq
	heap.Push(&h.q, e)
}

func (h *harness) aliveSet() []strategy.NodeID { return h.reachable(0) }

// reachable is the sorted live nodes of partition group grp.
func (h *harness) reachable(grp int) []strategy.NodeID {
	var out []strategy.NodeID
	for _, n := range h.nodes {
		if n.alive && n.group == grp {
			out = append(out, n.id)
		}
	}
	slices.Sort(out)
	return out
}

// partition puts the listed nodes in group 1 (the others stay in 0); heal
// puts everyone back in 0. Views follow after the detection delay.
func (h *harness) partition(nodes ...int) {
	for _, i := range nodes {
		h.nodes[i].group = 1
	}
	h.detect()
}

func (h *harness) heal() {
	for _, n := range h.nodes {
		n.group = 0
	}
	h.detect()
}

// split puts node i in partition group groups[i] (messages cross no group
// boundary); views follow as after partition.
func (h *harness) split(groups []int) {
	for i, g := range groups {
		h.nodes[i].group = g
	}
	h.detect()
}

// detect schedules the views' update after a change of who can reach
// whom: at once after the detection delay, or pair by pair (pairDetect).
func (h *harness) detect() {
	if h.pairDetect == nil {
		h.push(hevent{at: h.now + h.detection, kind: evView})
		return
	}
	for i := range h.nodes {
		for j := range h.nodes {
			if i != j {
				h.push(hevent{at: h.now + h.pairDetect(i, j), kind: evPeer, to: i, from: j})
			}
		}
	}
}

// viewsSettled reports whether every live node's view is the live nodes of
// its partition group.
func (h *harness) viewsSettled() bool {
	for _, n := range h.nodes {
		if n.alive && !slices.Equal(n.view, h.reachable(n.group)) {
			return false
		}
	}
	return true
}

func (h *harness) index(id strategy.NodeID) int {
	return slices.IndexFunc(h.nodes, func(n *hnode) bool { return n.id == id })
}

func (h *harness) start(i int) {
	n := h.nodes[i]
	p, err := strategy.ParseParams(h.params)
	if err != nil {
		h.fail("params: %v", err)
		return
	}
	p, mode, err := strategy.TakePartition(p) // as the drivers do
	if err != nil {
		h.fail("params: %v", err)
		return
	}
	g, err := gdrl.New(strategy.Config{Self: n.id, Members: slices.Clone(n.view), Rate: h.rate, Burst: h.burst,
		Rand: rand.New(rand.NewPCG(h.seed, uint64(i)<<32|n.epoch)), Params: p, LatencyHint: h.net.maxDelay, Partition: mode})
	if err != nil {
		h.fail("New: %v", err)
		return
	}
	var s strategy.Strategy = g
	if h.wrap != nil {
		s = h.wrap(i, g)
	}
	hs, err := host.New(n.id, 0, hdriver{h, i}, s)
	if err != nil {
		h.fail("host.New: %v", err)
		return
	}
	n.g, n.host = g, hs
	hs.Start(h.now, 0)
}

func (h *harness) send(from int, m strategy.Message) {
	h.messages++
	h.bytes += int64(len(m.Payload))
	to := h.index(m.To)
	if to < 0 {
		h.fail("message to unknown node %q", m.To)
		return
	}
	if h.nodes[to].group != h.nodes[from].group || h.rnd.Float64() < h.net.loss {
		return
	}
	if h.drop != nil && h.drop(from, to) {
		return
	}
	if h.dropMsg != nil && h.dropMsg(from, to, m.Payload) {
		return
	}
	copies := 1
	if h.rnd.Float64() < h.net.dup {
		copies = 2
	}
	for range copies {
		d := h.net.minDelay
		if span := h.net.maxDelay - h.net.minDelay; span > 0 {
			d += time.Duration(h.rnd.Int64N(int64(span) + 1))
		}
		if h.rnd.Float64() < h.net.reorder {
			d += time.Duration(h.rnd.Int64N(5*int64(h.net.maxDelay) + 1))
		}
		h.push(hevent{at: h.now + d, kind: evDeliver, to: to, from: from, payload: m.Payload})
	}
}

// step runs the next event; false when there is none.
func (h *harness) step() bool {
	if len(h.q) == 0 {
		return false
	}
	e := heap.Pop(&h.q).(hevent)
	h.now = e.at
	switch e.kind {
	case evDeliver:
		n := h.nodes[e.to]
		if !n.alive || n.group != h.nodes[e.from].group {
			break
		}
		if err := n.host.Receive(h.now, 0, h.nodes[e.from].id, e.payload); err != nil {
			h.fail("%s refused a peer message: %v", n.id, err)
		}
	case evWake:
		n := h.nodes[e.to]
		if !n.alive || n.epoch != e.epoch {
			break
		}
		n.host.Tick(h.now, 0)
	case evRequest:
		if e.fn != nil {
			e.fn()
			break
		}
		n := h.nodes[e.to]
		if !n.alive {
			break
		}
		d, ok := n.host.Request(h.now, 0, strategy.Request{ID: e.seq, Key: e.key, Tokens: e.tokens, Arrival: h.now}, 0)
		if ok && h.decided != nil {
			h.decided(e.to, e.key, e.tokens, d.Allowed)
		}
	case evView:
		h.updateViews()
	case evPeer:
		h.updatePeer(e.to, e.from)
	}
	if h.afterEvent != nil {
		h.afterEvent()
	}
	return true
}

// runUntil runs every event up to time t.
func (h *harness) runUntil(t time.Duration) {
	for len(h.q) > 0 && h.q[0].at <= t {
		h.step()
	}
	h.now = max(h.now, t)
}

// at schedules fn at time t (among the requests of that instant).
func (h *harness) at(t time.Duration, fn func()) {
	h.push(hevent{at: t, kind: evRequest, fn: fn})
}

func (h *harness) crash(i int) {
	n := h.nodes[i]
	if !n.alive {
		return
	}
	n.alive = false
	n.epoch++
	h.detect()
}

func (h *harness) restart(i int) {
	n := h.nodes[i]
	if n.alive {
		return
	}
	n.alive = true
	n.epoch++
	n.view = h.reachable(n.group)
	h.start(i)
	h.detect()
}

// updatePeer is node i's failure detector about node j: j enters or
// leaves i's view if it became reachable or unreachable.
func (h *harness) updatePeer(i, j int) {
	n, m := h.nodes[i], h.nodes[j]
	if !n.alive {
		return
	}
	reach := m.alive && m.group == n.group
	k, in := slices.BinarySearch(n.view, m.id)
	switch {
	case reach && !in:
		n.view = slices.Insert(slices.Clone(n.view), k, m.id)
	case !reach && in:
		n.view = slices.Delete(slices.Clone(n.view), k, k+1)
	default:
		return
	}
	n.host.SetMembers(h.now, 0, n.view)
}

func (h *harness) updateViews() {
	for _, n := range h.nodes {
		v := h.reachable(n.group)
		if !n.alive || slices.Equal(n.view, v) {
			continue
		}
		n.view = slices.Clone(v)
		n.host.SetMembers(h.now, 0, v)
	}
}

// poisson schedules requests of key at node i at rate per second with the
// given tokens each, from now until end.
func (h *harness) poisson(i int, key string, perSec float64, tokens int64, end time.Duration) {
	var next func(t time.Duration)
	next = func(t time.Duration) {
		t += time.Duration(h.rnd.ExpFloat64() / perSec * float64(time.Second))
		if t >= end {
			return
		}
		h.at(t, func() {
			h.push(hevent{at: t, kind: evRequest, to: i, key: key, tokens: tokens})
			next(t)
		})
	}
	next(h.now)
}

// audit sums key's shares over the live nodes, and the capacity in
// transfers that no live node has credited (each transfer once, however
// many outboxes hold it).
func (h *harness) audit(key string) (held, heldB, inflight, inflightB int64, pending int) {
	seen := map[gdrl.TransferID]bool{}
	for _, n := range h.nodes {
		if !n.alive {
			continue
		}
		held += n.g.CapacityShare(key)
		heldB += n.g.BurstShare(key)
	}
	for _, n := range h.nodes {
		if !n.alive {
			continue
		}
		for _, p := range n.g.Pending(key) {
			pending++
			if seen[p.ID] {
				continue
			}
			seen[p.ID] = true
			applied := false
			for _, m := range h.nodes {
				if m.alive && m.g.Applied(p.ID) {
					applied = true
					break
				}
			}
			if !applied {
				inflight += p.Capacity
				inflightB += p.Burst
			}
		}
	}
	return
}

func (h *harness) anyPending(keys []string) bool {
	for _, n := range h.nodes {
		if !n.alive {
			continue
		}
		for _, k := range keys {
			if len(n.g.Pending(k)) > 0 {
				return true
			}
		}
	}
	return false
}

func (h *harness) describe(key string) string {
	var b strings.Builder
	for _, n := range h.nodes {
		if !n.alive {
			fmt.Fprintf(&b, "%s dead; ", n.id)
			continue
		}
		fmt.Fprintf(&b, "%s inc=%d C=%d B=%d buddy=%s pending=%v; ", n.id, n.g.Incarnation(), n.g.CapacityShare(key), n.g.BurstShare(key), n.g.Buddy(), n.g.Pending(key))
	}
	return b.String()
}

// request schedules one request of key for tokens at node i at time t.
func (h *harness) request(i int, key string, tokens int64, t time.Duration) {
	h.push(hevent{at: t, kind: evRequest, to: i, key: key, tokens: tokens})
}
