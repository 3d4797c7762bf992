// Package gdrlexp reproduces the evaluation of GDRL (§III of the
// paper, Figs. 3-7) with the gdrl strategy: the ring of 10 nodes with
// Poisson demand (gdrl-ring), demands that change abruptly and linearly
// (gdrl-dynamic) and random d-regular graphs of 10 to 1000 nodes
// (gdrl-scale).
//
// The experiments drive the gdrl nodes directly, like the strategy's own
// convergence test, instead of through sim.Run: the paper's setup is one
// demand sample per node and update interval (its time slot), and what it
// plots is every node's indicator q_i(t) after every interval, which needs
// the node objects between intervals. sim.Run replays a request trace and
// returns only decisions and message counts. The driver here is a small
// deterministic discrete-event loop: fixed 1 ms one-way latency, no loss,
// no crashes, static membership, and one request per node per interval (at
// the middle of the interval) for that interval's demand in tokens.
package gdrlexp

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/internal/minheap"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/gdrl"
	"github.com/tokenmesh/tokenmesh/strategy/host"
)

// dt is the update interval (gdrl's default), one time slot of the paper.
const dt = 100 * time.Millisecond

// latency is the one-way peer latency of the driver's network.
const latency = time.Millisecond

// key is the one rule key all demand is for.
const key = "k"

type event struct {
	at      time.Duration
	seq     uint64
	wake    bool
	to      int
	from    int
	payload []byte
}

// eventBefore orders events by time, then by the order they were queued.
func eventBefore(a, b event) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	return a.seq < b.seq
}

// cluster is N gdrl nodes on a lossless network with fixed latency.
type cluster struct {
	nodes    []*gdrl.GDRL // for inspection; every call goes through hosts
	hosts    []*host.Host
	ids      []strategy.NodeID
	index    map[strategy.NodeID]int
	q        *minheap.Heap[event]
	seq      uint64
	now      time.Duration
	reqID    uint64
	messages int64
	bytes    int64
}

// newCluster starts n founding members at time 0 with the rule (rate
// tokens/s, burst) and the gdrl parameters params ("name=value").
func newCluster(n int, seed uint64, rate float64, burst int64, params []string) (*cluster, error) {
	r, err := bucket.PerSecond(rate)
	if err != nil {
		return nil, err
	}
	p, err := strategy.ParseParams(params)
	if err != nil {
		return nil, err
	}
	c := &cluster{ids: nodeIDs(n), index: map[strategy.NodeID]int{}, q: minheap.New(eventBefore)}
	for i, id := range c.ids {
		c.index[id] = i
	}
	for i := range n {
		g, err := gdrl.New(strategy.Config{Self: c.ids[i], Members: append([]strategy.NodeID(nil), c.ids...), Rate: r, Burst: burst,
			Rand: rand.New(rand.NewPCG(seed, uint64(i))), Params: p, LatencyHint: latency})
		if err != nil {
			return nil, err
		}
		h, err := host.New(c.ids[i], 0, expDriver{c: c, i: i}, g)
		if err != nil {
			return nil, err
		}
		c.nodes, c.hosts = append(c.nodes, g), append(c.hosts, h)
	}
	for _, h := range c.hosts {
		h.Start(0, 0)
	}
	return c, nil
}

func (c *cluster) push(e event) {
	c.seq++
	e.seq = c.seq
	c.q.Push(e)
}

// expDriver is node i's host.Driver: a fixed latency, no loss. The
// same-instant contract of package host holds only as far as the queue's
// order of pushing puts a delivery first; gdrl does not rely on it.
type expDriver struct {
	c *cluster
	i int
}

// Decided ignores decisions: the experiments measure indicators, not
// verdicts.
func (expDriver) Decided(int, strategy.Decision) {}

// Send counts the message and delivers it after the latency (a message to
// an unknown node is counted and dropped).
func (d expDriver) Send(_ int, to strategy.NodeID, payload []byte) {
	c := d.c
	c.messages++
	c.bytes += int64(len(payload))
	j, ok := c.index[to]
	if !ok {
		return
	}
	c.push(event{at: c.now + latency, to: j, from: d.i, payload: payload})
}

// Schedule queues a wake-up.
func (d expDriver) Schedule(_ int, at time.Duration) {
	d.c.push(event{at: at, wake: true, to: d.i})
}

// runUntil handles every event up to time t.
func (c *cluster) runUntil(t time.Duration) error {
	for c.q.Len() > 0 && c.q.Peek().at <= t {
		e := c.q.Pop()
		c.now = e.at
		if e.wake {
			c.hosts[e.to].Tick(c.now, 0)
		} else if err := c.hosts[e.to].Receive(c.now, 0, c.ids[e.from], e.payload); err != nil {
			return fmt.Errorf("%s refused a message from %s: %w", c.ids[e.to], c.ids[e.from], err)
		}
	}
	c.now = max(c.now, t)
	return nil
}

// request asks node i for tokens of the key now.
func (c *cluster) request(i int, tokens int64) {
	c.reqID++
	c.hosts[i].Request(c.now, 0, strategy.Request{ID: c.reqID, Key: key, Tokens: tokens, Arrival: c.now}, 0)
}

// interval runs update interval k (1-based): the events of its first half,
// one request per node for demand[i] tokens (none for 0), the second half.
func (c *cluster) interval(k int, demand []int64) error {
	start := time.Duration(k-1) * dt
	if err := c.runUntil(start + dt/2); err != nil {
		return err
	}
	for i, d := range demand {
		if d > 0 {
			c.request(i, d)
		}
	}
	return c.runUntil(start + dt)
}

// spare returns the indicators the nodes equalise (q-hat_i = lambda-hat_i -
// C_i, from the nodes' estimates) and the true spare bandwidth lambda_i - C_i
// for the true rates lambda (tokens/s), both in tokens/s.
func (c *cluster) spare(lambda []float64, est, truth []float64) {
	for i, g := range c.nodes {
		est[i] = g.Indicator(key) / gdrl.UnitsPerToken
		truth[i] = lambda[i] - float64(g.CapacityShare(key))/gdrl.UnitsPerToken
	}
}

// nodeIDs names n nodes n0, n1, ... zero-padded to a common width, so that
// NodeID order is index order.
func nodeIDs(n int) []strategy.NodeID {
	ids := make([]strategy.NodeID, n)
	width := len(fmt.Sprint(n - 1))
	for i := range ids {
		ids[i] = strategy.NodeID(fmt.Sprintf("n%0*d", width, i))
	}
	return ids
}

// sum is the sum of xs.
func sum(xs []float64) float64 {
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s
}
