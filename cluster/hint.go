package cluster

// The live latency hint : strategies derive timers from
// strategy.Config.LatencyHint, the expected one-way peer latency (owner's
// ordering buffer `hold` and forward `timeout`, lease's, adaptive's
// `raise_after`, fixedwindow's `timeout`). The simulator passes its network
// model's value; here LatencyEstimator measures it from the round trips of
// memberlist's own probes (membership.Config.OnRTT, memberlist's
// PingDelegate: every member is probed already, one direct UDP ping per
// probe interval) and Node.SetLatencyHint hands a new value to every rule's
// strategy.LatencyHinter from the node's loop. Ours: the estimator (a
// windowed p90 of RTT/2 with a floor), the hysteresis and the bounds; the
// RTT samples are memberlist's.

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	iquantile "github.com/tokenmesh/tokenmesh/internal/quantile"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// Bounds and defaults of the measured latency hint.
const (
	// DefaultHintFloor is the least hint the estimator reports once a peer
	// has been measured (0 before): part of what a ping does not see of a
	// forward's one-way delay (its wait in the sender's and the receiver's
	// event loops and gRPC goroutines; docs/OPERATIONS.md, "Latency hint",
	// has the measurement: p90 0.39 ms, p99 2.3 ms under load). It is
	// owner's and lease's hold, paid by every check of their keys: 1 ms
	// covers about 97% of forwards for 1 ms of added latency; 5 ms (99.8%)
	// cost 5 ms on every check and bought no measurable accuracy in
	// `tokenmesh replay`, where the reordering happens before the nodes.
	DefaultHintFloor = time.Millisecond
	// MaxLatencyHint bounds a hint, measured or given (SetLatencyHint): a
	// peer that delays its acks on purpose can stretch the hint, and with it
	// owner's hold, to this at most.
	MaxLatencyHint = 500 * time.Millisecond
	// MaxRTTSample clamps one round-trip sample (2*MaxLatencyHint).
	MaxRTTSample = 2 * MaxLatencyHint
	// HintWindow is how long a round-trip sample counts.
	HintWindow = time.Minute
	// HintSamplesPerPeer bounds the samples kept per peer (the newest).
	HintSamplesPerPeer = 64
	// HintMaxPeers bounds the peers tracked; a new peer beyond it replaces
	// the one heard from least recently.
	HintMaxPeers = 1024
	// HintFactor is the hysteresis: a measured hint reaches the strategies
	// only when it is above HintFactor times, or below 1/HintFactor of, the
	// hint they have.
	HintFactor = 1.5
	// HintQuantile is the quantile of one-way delays (RTT/2) over every
	// peer's samples in the window that makes the hint. Not 0.99: with a
	// probe per peer every second or two, a minute holds 30-60 samples per
	// peer and the p99 is their maximum, one stalled probe on a loaded
	// machine (measured: one 139 ms probe RTT set a node's hint to 69 ms,
	// and owner's hold with it, while 99.9% of its forwards took under
	// 8 ms). The floor covers the loaded-machine tail (DefaultHintFloor).
	HintQuantile = 0.9
)

// rttSample is one probe's round trip.
type rttSample struct {
	at  time.Time
	rtt time.Duration
}

type peerRTT struct {
	samples []rttSample // ring of at most HintSamplesPerPeer
	next    int         // where the next sample goes once full
	last    time.Time   // the newest sample's time
}

// LatencyEstimator keeps a bounded, windowed sample of round-trip times per
// peer and derives the cluster-wide latency hint from it: the HintQuantile
// of RTT/2 over every sample of the last HintWindow, at least the floor and
// at most MaxLatencyHint; 0 while no peer has been measured in the window
// (a node alone has no one to wait for: owner then decides at once and
// reports remaining). Safe for concurrent use. Attach makes it hand every
// hint that moved by more than HintFactor to a node.
type LatencyEstimator struct {
	mu     sync.Mutex
	floor  time.Duration
	peers  map[strategy.NodeID]*peerRTT
	node   *Node
	pushed time.Duration // the hint the node's strategies have (or are being given)
	target time.Duration // the hint decided last, to give them
	busy   bool          // a goroutine is handing target to the node
}

// NewLatencyEstimator returns an estimator with the given floor (clamped
// to [0, MaxLatencyHint]). Its hint is 0 until a peer is measured, and so
// is the hint the node's strategies are assumed to start with
// (cluster.Config.LatencyHint 0).
func NewLatencyEstimator(floor time.Duration) *LatencyEstimator {
	floor = min(max(floor, 0), MaxLatencyHint)
	return &LatencyEstimator{floor: floor, peers: map[strategy.NodeID]*peerRTT{}}
}

// Observe records one round trip to peer, measured at at. A negative rtt is
// ignored; one above MaxRTTSample counts as MaxRTTSample. When a node is
// attached and the hint moved by more than HintFactor from the node's, the
// new hint is handed to it (asynchronously: Observe does not block).
func (e *LatencyEstimator) Observe(peer strategy.NodeID, rtt time.Duration, at time.Time) {
	if rtt < 0 || peer == "" {
		return
	}
	rtt = min(rtt, MaxRTTSample)
	e.mu.Lock()
	defer e.mu.Unlock()
	p := e.peers[peer]
	if p == nil {
		if len(e.peers) >= HintMaxPeers {
			e.evictLocked()
		}
		p = &peerRTT{}
		e.peers[peer] = p
	}
	if len(p.samples) < HintSamplesPerPeer {
		p.samples = append(p.samples, rttSample{at, rtt})
	} else {
		p.samples[p.next] = rttSample{at, rtt}
		p.next = (p.next + 1) % HintSamplesPerPeer
	}
	if at.After(p.last) {
		p.last = at
	}
	if e.node == nil {
		return
	}
	// The hysteresis is against the hint last decided (target: the node
	// has it or is being given it), not the one the node had last: a
	// sample taken while the first hint was on its way replaced it
	// though it was within HintFactor (TestEstimatorAttach, ~1 run in 30
	// under load). A hand that failed is retried at the next sample.
	if h := e.hintLocked(at); HintMoved(e.target, h) {
		e.target = h
	}
	if e.busy || e.target == e.pushed {
		return
	}
	e.busy = true
	go e.hand()
}

// evictLocked drops the peer heard from least recently.
func (e *LatencyEstimator) evictLocked() {
	var oldest strategy.NodeID
	var at time.Time
	for id, p := range e.peers {
		if oldest == "" || p.last.Before(at) || (p.last.Equal(at) && id < oldest) {
			oldest, at = id, p.last
		}
	}
	delete(e.peers, oldest)
}

// Forget drops peer's samples (a member that left).
func (e *LatencyEstimator) Forget(peer strategy.NodeID) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.peers, peer)
}

// Hint is the measured one-way latency at at: the HintQuantile of RTT/2
// over every peer's samples taken in (at-HintWindow, at], at least the
// floor, at most MaxLatencyHint; 0 when there are none.
func (e *LatencyEstimator) Hint(at time.Time) time.Duration {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.hintLocked(at)
}

func (e *LatencyEstimator) hintLocked(at time.Time) time.Duration {
	var all []time.Duration
	for _, p := range e.peers {
		all = appendRecent(all, p, at)
	}
	if len(all) == 0 {
		return 0
	}
	return min(max(quantile(all, HintQuantile)/2, e.floor), MaxLatencyHint)
}

// PeerLatency is each peer's one-way latency at at: the HintQuantile of
// RTT/2 over its samples in the window (peers without one are left out),
// unfloored. For the metric.
func (e *LatencyEstimator) PeerLatency(at time.Time) map[strategy.NodeID]time.Duration {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := map[strategy.NodeID]time.Duration{}
	var buf []time.Duration
	for id, p := range e.peers {
		if buf = appendRecent(buf[:0], p, at); len(buf) > 0 {
			out[id] = quantile(buf, HintQuantile) / 2
		}
	}
	return out
}

// Applied is the hint last handed to the node (0 before any).
func (e *LatencyEstimator) Applied() time.Duration {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.pushed
}

// appendRecent appends p's samples taken in (at-HintWindow, at].
func appendRecent(dst []time.Duration, p *peerRTT, at time.Time) []time.Duration {
	from := at.Add(-HintWindow)
	for _, s := range p.samples {
		if s.at.After(from) && !s.at.After(at) {
			dst = append(dst, s.rtt)
		}
	}
	return dst
}

// quantile is the q-quantile of ds (nearest rank, quantile.NearestRank; 0 for
// none). It sorts ds.
func quantile(ds []time.Duration, q float64) time.Duration {
	slices.Sort(ds)
	return iquantile.NearestRank(ds, q)
}

// HintMoved reports whether a measured latency hint differs from the
// applied one (both one-way latencies) by more than HintFactor, either
// way: the hysteresis that keeps the strategies' timers from following
// every sample.
func HintMoved(applied, measured time.Duration) bool {
	return float64(measured) > HintFactor*float64(applied) || float64(measured)*HintFactor < float64(applied)
}

// Attach makes e hand its hint to n whenever it moves by more than
// HintFactor from the one n's strategies have, which is assumed to be 0
// (n built with Config.LatencyHint 0). The node logs each change
// (SetLatencyHint).
func (e *LatencyEstimator) Attach(n *Node) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.node = n
}

// hand gives e.target to the node until the node has the latest target
// (one goroutine at a time: e.busy).
func (e *LatencyEstimator) hand() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for e.target != e.pushed {
		h, n := e.target, e.node
		e.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := n.SetLatencyHint(ctx, h)
		cancel()
		e.mu.Lock()
		if err != nil {
			break // closed, or its loop stuck: the next sample tries again
		}
		e.pushed = h
	}
	e.busy = false
}

// Describe and Collect make e a prometheus.Collector:
//
//	tokenmesh_peer_latency_seconds{peer}  gauge: a peer's one-way latency, the
//	                                      p90 of RTT/2 over the last minute of
//	                                      gossip probes
//
// (The hint the strategies have is Node.LatencyHint; serve exports it as
// tokenmesh_latency_hint_seconds.)
func (e *LatencyEstimator) Describe(ch chan<- *prometheus.Desc) {
	ch <- descPeerLatency
}

// Collect: see Describe.
func (e *LatencyEstimator) Collect(ch chan<- prometheus.Metric) {
	for id, d := range e.PeerLatency(time.Now()) {
		ch <- prometheus.MustNewConstMetric(descPeerLatency, prometheus.GaugeValue, d.Seconds(), string(id))
	}
}

var descPeerLatency = prometheus.NewDesc("tokenmesh_peer_latency_seconds",
	"One-way latency to a peer: the p90 of half the round trip of the gossip probes of the last minute, seconds.", []string{"peer"}, nil)

// SetLatencyHint hands hint (a one-way peer latency, in [0,
// MaxLatencyHint]) to every rule's strategy that is a
// strategy.LatencyHinter, from the node's loop, and keeps it for rules
// added later (SetRules); logged at Info with the old and the new value.
// It returns once the strategies have it. Errors: a hint out of bounds,
// ErrClosed, ctx.Err(). Ours.
func (n *Node) SetLatencyHint(ctx context.Context, hint time.Duration) error {
	if hint < 0 || hint > MaxLatencyHint {
		return fmt.Errorf("cluster: SetLatencyHint: %v outside [0, %v]", hint, MaxLatencyHint)
	}
	return n.call(ctx, event{kind: evHint, hint: hint})
}

// LatencyHint is the hint the node's strategies have.
func (n *Node) LatencyHint() time.Duration { return time.Duration(n.hint.Load()) }

// setHint carries out SetLatencyHint in the loop goroutine.
func (n *Node) setHint(now time.Duration, hint time.Duration) {
	old := time.Duration(n.hint.Swap(int64(hint)))
	if hint == old {
		return
	}
	slog.Info("cluster: latency hint changed", "node", string(n.self), "old", old, "new", hint)
	for _, rs := range n.order {
		n.h.SetLatencyHint(now, rs.idx, hint)
	}
}
