// Package sim is the deterministic discrete-event simulator that drives
// strategy state machines through a request trace over a simulated network:
// virtual time, one event queue, seeded random sources, a network model with
// latency, loss, duplication and reordering (Network), and partitions and
// node crashes and restarts at given times (Scenario). The same trace,
// configuration and seed give the same Result, bit for bit.
//
// It plays the role of the thesis' test framework (the CRDT thesis §4.3.1): an
// injector assigns each recorded request to a node and records the node's
// decision; unlike the thesis' injector, which sleeps in real time and
// corrects for oversleeping, virtual time makes every run exact and fast.
//
// Config.Proxies puts a tier of Envoy proxies between the trace and the
// cluster (ProxyTier, proxy.go): RLQS proxies deciding from their quota
// assignments (rlqs/envoymodel), per-request RLS forwarding, or a strategy
// run at the proxies themselves.
//
// Run runs a whole trace; World is the same engine driven from outside:
// step it, run it until a time, inject faults between events, inspect the
// nodes and check invariants after every event (World.OnEvent), with
// random fault scenarios from a seed (RandomScenario) for swarm tests.
//
// Events at the same instant run in this order: message deliveries (peer
// messages, then messages between proxies and nodes), then membership
// changes and scenario events, then requests (in trace order), then the
// proxies' timers, then wake-ups. Strategies rely on deliveries coming before wake-ups (see
// strategy/owner); it is the driver's side of strategy/host's contract.
// Each node's strategy is called through a host.Host, the one interpreter
// of strategy.Effects (wake-ups de-duplicated per instant there); the
// simulator supplies virtual time, the network and the outcomes around it.
//
// # Faults and membership views
//
// The network and the failure detectors are modelled apart. A scenario
// event changes the network at once: a crashed node receives nothing, a
// message between two partition groups is dropped (also one already in
// flight when the cut comes), and a heal lets messages through again. Each
// node's member list, what its strategy is told with SetMembers, follows
// later and per node, as with memberlist's SWIM failure detector, where
// every member suspects, declares dead and hears of joins on its own
// schedule:
//
//   - crash, partition: node i's view becomes the live nodes of its
//     membership group after node i's own delay Detection + U[0,
//     DetectionJitter] (suspicion, then the failure declared); the two sides
//     of a partition each see only their side. With DetectionSpacing set
//     (per-peer detection), node i instead declares the peers it lost one
//     at a time, in an order drawn from the seed, the k-th (k = 1, 2, ...)
//     after Detection + (k-1) x DetectionSpacing + U[0, DetectionJitter]:
//     memberlist probes one member per probe interval, round-robin over a
//     shuffled list, and declares each failed a suspicion timeout after
//     its failed probe (see Scenario.DetectionSpacing). Until then node i
//     keeps the peers it has not yet declared in its view.
//   - restart: the restarted node knows the members of its group at once (it
//     joins through a push-pull); node i sees it after U[0, JoinDelay]
//     (gossip), or after the failure delay above when JoinDelay is 0.
//   - heal: the membership groups stay split until a reconnect attempt
//     succeeds. Every node tries one every ReconnectInterval from a phase
//     drawn per node from the seed (serf's reconnector, rebuilt in
//     cluster/membership); at the first attempt of any live node after the
//     heal the groups merge, and node i sees the merged view after its join
//     delay. A heal is thus seen within ReconnectInterval + JoinDelay (or +
//     Detection + DetectionJitter when JoinDelay is 0).
//
// Expected members (partition: conserve). Besides its view, every node has
// its expected members, the last agreed N that strategy.Conserver scales
// by: its view plus every node that left its view (a crash, or the far
// side of a partition: both are failures; the simulator has no leave)
// less than Scenario.ReconnectTimeout ago (0: for the whole run). A node
// that restarts starts with its view as its expected members. A strategy
// that implements strategy.Conserver is told with SetExpected right after
// SetMembers, whatever the rule's partition mode.
//
// When node i's delay expires its view becomes the whole truth at that
// time (the live nodes of its membership group), not only the one change
// that scheduled it: a detector that has caught up knows everything that
// happened before. Ours is this model; the mechanisms are memberlist's
// (SWIM: probe, suspicion, dissemination) and serf's (reconnect), each
// reduced to a delay (per peer with DetectionSpacing). What it leaves
// out: per-pair detection without DetectionSpacing (node i sees all
// changes of one event together), the gossip of a dead declaration from
// node to node (each node declares its peers on its own schedule, which at
// a partition is what happens: the far side's declarations cannot reach
// it, and on one side they arrive within the jitter), suspicion
// refutation, false positives under loss (the detectors do not see the
// message loss of Network), and a reconnect that picks a crashed member
// and fails.
package sim

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/internal/minheap"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/host"
	"github.com/tokenmesh/tokenmesh/topology"
	"github.com/tokenmesh/tokenmesh/workload"
)

// Factory builds one node's strategy instance.
type Factory func(cfg strategy.Config) (strategy.Strategy, error)

// Config is one simulation run.
type Config struct {
	Name   string  // the strategy's name, for errors
	New    Factory // builds each node's strategy
	Nodes  int     // cluster size, >= 1
	Rate   bucket.Rate
	Burst  int64
	Params strategy.Params // the strategy's own parameters (unprefixed)
	// Partition is the rule's split-brain rule. A "partition" entry in
	// Params (strategy.PartitionParam, e.g. from --param gdrl.partition=
	// conserve) sets it and is removed before the strategy sees Params.
	Partition strategy.PartitionMode
	Network   Network
	Scenario  *Scenario         // nil: nothing happens
	Assign    workload.Assigner // which node receives each request
	Seed      uint64
	// SampleEvery is the virtual-time interval at which node state sizes
	// are sampled (default 1 s).
	SampleEvery time.Duration
	// Drain bounds how long after the last request the run goes on to
	// collect pending decisions (default 60 s).
	Drain time.Duration
	// Progress, if set, is called now and then with requests injected so
	// far and the total.
	Progress func(done, total int)
	// MaxWait > 0 runs every request in waiting mode (SRTM §5.2) with
	// this max_wait, on strategies that implement strategy.Waiter; others
	// get plain requests. Outcome.Delay holds each admitted request's wait.
	MaxWait time.Duration
	// EdgeTimes, when not nil, holds each trace request's edge time (the
	// time it reached the client, before the client-to-node path delayed
	// it to its Arrival; len = the trace's): a strategy.ArrivalOrderer
	// (owner) is handed it as the request's arrival, clamped by
	// strategy.EdgeArrival, as the live runtime does with a check's
	// created_at_unix_ns. Other strategies, and nil, get Arrival.
	EdgeTimes []time.Duration
	// Charges, when not nil, marks each trace request that is a cost
	// already incurred (strategy.Request.Charge; len = the trace's): under
	// a rule with overdraft its tokens are taken whatever the key's level.
	// Nil: every request is a check.
	Charges []bool
	// Proxies puts a tier of Envoy proxies between the trace and the
	// cluster (ProxyTier); the zero value, no proxies, is the run as
	// before the tier existed, bit for bit.
	Proxies ProxyTier
	// Regions, when not empty, spreads the nodes over regions
	// (regions.go): their counts must sum to Nodes; node i is named
	// "<region>.n<i>" (topology.NodeID), so that a strategy can read a
	// peer's region from its name (topology.Of); a message between regions
	// takes Network's WAN latency and loss; scenario events may name
	// regions (cut, partition groups); a trace with Follow sends each
	// key's requests to the nodes of one region at a time; and every
	// outcome says whether its decision waited for a message that crossed
	// a WAN link (Outcome.WAN). Nil: one region, the run as before, bit
	// for bit. Not with Proxies.
	Regions []topology.Region
	// Observe, when set, is called at every state sample (every
	// SampleEvery of virtual time from 0, while requests remain to be
	// injected or decisions are pending) with the time and the live
	// nodes' strategies, in node order: a read-only look for a measure
	// (eval's JFI of gdrl's performance indicators). It must change
	// nothing: it is not part of the run, which takes the same decisions
	// with it or without it.
	Observe func(now time.Duration, live []strategy.Strategy)
	// Hold, when its Max is above 0, runs the trace as requests that hold
	// what they are granted for a service time: under a strategy that
	// hands out permits (strategy.Releaser: concurrency) the node that
	// received an admitted request releases its permit Hold later, a
	// duration drawn uniformly in [Min, Max] (seeded by Seed); the outcome
	// records when the permit was held (Outcome.HeldFrom, HeldUntil). The
	// zero value: no holds, the run as before, bit for bit. Ours (the
	// throttling article's "concurrency" limit, seed 003).
	Hold Hold
}

// Hold is a service-time distribution: uniform in [Min, Max].
type Hold struct{ Min, Max time.Duration }

// DrawHolds draws n service times from h with seed: the i-th is request
// i's (in trace order), whichever strategy runs and whatever it decides,
// so that every strategy and the exact reference of a concurrency limit
// (eval's semaphore) hold a request for the same time. nil when h.Max is
// not above 0.
func DrawHolds(h Hold, seed uint64, n int) []time.Duration {
	if h.Max <= 0 {
		return nil
	}
	rnd := rand.New(rand.NewPCG(seed, 0x686f6c64))
	out := make([]time.Duration, n)
	span := h.Max - h.Min
	for i := range out {
		out[i] = h.Min
		if span > 0 {
			out[i] += time.Duration(rnd.Int64N(int64(span) + 1))
		}
	}
	return out
}

// Outcome is what happened to one request.
type Outcome struct {
	Allowed bool
	Decided bool          // false: the node holding it crashed, or no node was up
	Latency time.Duration // decision time minus arrival
	// Delay is, in waiting mode (Config.MaxWait), the wait after arrival
	// the strategy gave an admitted request (strategy.Decision.Delay).
	Delay time.Duration
	// Local: decided without waiting for a peer, by the node that received
	// the request, at once (in Strategy.Request) or at one of its own
	// wake-ups (Tick: an ordering buffer, a timeout), not on a peer's
	// message (Receive) nor on a membership change. A forward answered by
	// its timeout (fail_open) counts as local: it waited for a peer but
	// the decision is the node's own.
	Local bool
	// WAN (with Config.Regions): not Local, and decided on the delivery of
	// a peer message that crossed between regions, or that a node sent
	// while handling such a message (the taint follows a chain of
	// messages sent from Receive calls; regions.go). A decision neither
	// Local nor WAN waited for messages within the region only.
	WAN bool
	// HeldFrom and HeldUntil are, with Config.Hold and a permit granted
	// (strategy.Decision.Permit), when the request held it: from its
	// decision to its release or its expiry, whichever came first
	// (virtual time). Both 0 otherwise.
	HeldFrom, HeldUntil time.Duration
	// Node is the node that decided the request, by its index in
	// Result.NodeNames: the node whose own call (a request, a wake-up, a
	// membership change) took the decision, or, for a decision taken on
	// the delivery of a peer's message, that message's sender, whose answer
	// the request waited for (an owner's verdict, a lease's grant). -1
	// for a decision at a proxy (Config.Proxies). Meaningful only when
	// Decided. The hot-server measure counts decisions by it (the
	// throttling article's "hot server"; eval.HotServer).
	Node int32
}

// Result is everything a run measured.
type Result struct {
	Outcomes []Outcome // by request index in the trace

	Messages       int64 // peer messages sent (including those the network lost)
	Bytes          int64 // their payload bytes (protobuf encoding, without transport framing)
	MessagesLost   int64 // lost by the network model, cut by a partition, or sent to a dead node
	ReceiveErrors  int64 // payloads a strategy refused; 0 unless something is wrong
	StateBytesPeak int   // the largest node state seen in any sample
	StateBytesMean float64
	Undecided      int
	Crashed        []string // nodes crashed by the scenario, in order
	End            time.Duration
	Events         int64 // events processed
	// WaitingMode: Config.MaxWait > 0 and the strategy implements
	// strategy.Waiter, so requests ran in waiting mode.
	WaitingMode bool
	// ProxyMessages and ProxyBytes are the messages between the proxies
	// and their nodes (Config.Proxies) and their protobuf bytes: RLQS
	// reports and assignments, or per-request RLS checks and answers
	// (ProxyTier). 0 without proxies.
	ProxyMessages int64
	ProxyBytes    int64
	// WANMessages and WANBytes are the peer messages (and their payload
	// bytes) sent between regions (Config.Regions); part of Messages and
	// Bytes. 0 without regions.
	WANMessages int64
	WANBytes    int64
	// NodeNames are the cluster's nodes by index (Outcome.Node).
	NodeNames []string
	// Received is, by request index in the trace, the node (index in
	// NodeNames) the request was handed to on its arrival; -1 for one
	// that reached no node (none was up) or went to a proxy
	// (Config.Proxies).
	Received []int32
}

const (
	prioDeliver = iota
	prioProxy   // a message between a proxy and its node arrives (proxy.go)
	prioMembership
	prioScenario
	prioReconnect  // the first reconnect attempt after a heal (Scenario.ReconnectInterval)
	prioRequest    // requests are injected from the trace, not queued; this is their place
	prioProxyTimer // a proxy's report timer, or a wake-up of a strategy at a proxy
	prioWake
	prioSample
	prioRelease // a request's hold ends: its node releases its permit (Config.Hold)
)

type event struct {
	at      time.Duration
	prio    int8
	pk      int8 // the proxy event's kind (prioProxy, prioProxyTimer)
	wan     bool // prioDeliver: the message crossed a WAN link, or was sent on one's delivery
	seq     uint64
	node    int32
	from    int32
	epoch   uint32 // node's incarnation (prioWake); the heal's generation (prioReconnect)
	scen    int32  // scenario event index
	payload []byte
	// payloadID is prioRelease's request index.
	payloadID uint64
}

// eventBefore orders the event queue by (time, priority, sequence).
func eventBefore(a, b event) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	if a.prio != b.prio {
		return a.prio < b.prio
	}
	return a.seq < b.seq
}

type node struct {
	id      strategy.NodeID
	s       strategy.Strategy // h's one rule (rule 0)
	h       *host.Host        // applies s's effects (simDriver)
	alive   bool
	epoch   uint32
	group   int // network partition group: messages flow within a group
	mgroup  int // membership group: what its failure detector can see as live
	view    []strategy.NodeID
	lost    map[strategy.NodeID]time.Duration // nodes that left view, and when: still expected until ReconnectTimeout
	expect  []strategy.NodeID                 // view plus lost: what SetExpected was last told
	phase   time.Duration                     // reconnect attempts at phase + k*ReconnectInterval
	started bool
	region  int // index in Config.Regions; 0 without regions
}

type runner struct {
	cfg              Config
	trace            *workload.Trace
	nodes            []*node
	byName           map[string]int
	alive            []int // indices of live nodes, ascending
	q                *minheap.Heap[event]
	seq              uint64
	now              time.Duration
	netRnd           *rand.Rand
	memRnd           *rand.Rand // detection delays and reconnect phases
	healGen          uint32     // bumped by every partition and heal; voids a stale reconnect
	res              *Result
	delays           []time.Duration
	pendingDecisions int
	receivedBy       []int32  // the node each request was injected into
	px               *proxies // the proxy tier; nil without one
	inCall           int8     // what the node is doing in the call whose effects apply carries out (prio*)
	statSamples      int
	stateSum         float64
	topo             *topo           // Config.Regions' links and assignment; nil without regions
	wanCall          bool            // the call in progress handles a WAN-tainted delivery (event.wan)
	fromCall         int32           // the sender of the message the call in progress handles (prioDeliver)
	holds            []time.Duration // Config.Hold's draws, one per request (DrawHolds); nil without holds
	permits          []uint64        // with Config.Hold: each request's permit (0: none)
}

// Run simulates cfg over trace: NewWorld, then World.Finish. Errors: an
// invalid configuration or scenario, or a strategy that cannot be built.
func Run(trace *workload.Trace, cfg Config) (*Result, error) {
	w, err := NewWorld(trace, cfg)
	if err != nil {
		return nil, err
	}
	return w.Finish(), nil
}

// newRunner builds the run's nodes and queues its scenario events and
// first sample; nothing has run yet.
func newRunner(trace *workload.Trace, cfg Config) (*runner, error) {
	if err := checkConfig(trace, cfg); err != nil {
		return nil, err
	}
	if err := cfg.complete(); err != nil {
		return nil, err
	}
	r := &runner{
		cfg: cfg, trace: trace, byName: map[string]int{}, q: minheap.New(eventBefore),
		netRnd:     rand.New(rand.NewPCG(cfg.Seed, 0x6e6574)),
		memRnd:     rand.New(rand.NewPCG(cfg.Seed, 0x6d656d)),
		res:        &Result{Outcomes: make([]Outcome, len(trace.Requests)), Received: make([]int32, len(trace.Requests))},
		receivedBy: make([]int32, len(trace.Requests)),
	}
	for i := range r.res.Received {
		r.res.Received[i] = -1
	}
	var err error
	if cfg.Hold.Max > 0 {
		r.holds = DrawHolds(cfg.Hold, cfg.Seed, len(trace.Requests))
		r.permits = make([]uint64, len(trace.Requests))
	}
	if r.topo, err = newTopo(cfg, trace); err != nil {
		return nil, err
	}
	if err := r.addNodes(); err != nil {
		return nil, err
	}
	if err := r.startNodes(); err != nil {
		return nil, err
	}
	if cfg.Proxies.Proxies > 0 {
		if err := r.newProxies(); err != nil {
			return nil, err
		}
	}
	r.queueScenario()
	if _, ok := r.nodes[0].s.(strategy.Waiter); ok && cfg.MaxWait > 0 {
		r.res.WaitingMode = true
	}
	r.push(event{at: 0, prio: prioSample})
	return r, nil
}

// checkConfig checks what newRunner needs of cfg before it changes it:
// nodes, a strategy factory and an assigner, valid proxies, and edge times
// and charge marks (if any) for every request of trace.
func checkConfig(trace *workload.Trace, cfg Config) error {
	if cfg.Nodes < 1 {
		return fmt.Errorf("sim: %d nodes; need at least 1", cfg.Nodes)
	}
	if cfg.Hold.Min < 0 || cfg.Hold.Max < cfg.Hold.Min {
		return fmt.Errorf("sim: hold [%v, %v]: want 0 <= min <= max", cfg.Hold.Min, cfg.Hold.Max)
	}
	if cfg.New == nil || cfg.Assign == nil {
		return fmt.Errorf("sim: config needs a strategy factory and an assigner")
	}
	if err := cfg.Proxies.Validate(); err != nil {
		return err
	}
	if cfg.EdgeTimes != nil && len(cfg.EdgeTimes) != len(trace.Requests) {
		return fmt.Errorf("sim: %d edge times for %d requests", len(cfg.EdgeTimes), len(trace.Requests))
	}
	if cfg.Charges != nil && len(cfg.Charges) != len(trace.Requests) {
		return fmt.Errorf("sim: %d charge marks for %d requests", len(cfg.Charges), len(trace.Requests))
	}
	return nil
}

// complete fills in cfg's defaults (sample interval, drain), takes the
// partition mode out of its parameters and applies its scenario's network
// settings, checking the network that results.
func (cfg *Config) complete() error {
	if cfg.SampleEvery <= 0 {
		cfg.SampleEvery = time.Second
	}
	if cfg.Drain <= 0 {
		cfg.Drain = time.Minute
	}
	params, mode, err := strategy.TakePartition(cfg.Params)
	if err != nil {
		return fmt.Errorf("sim: %s: %w", cfg.Name, err)
	}
	if mode != strategy.PartitionAvailable {
		cfg.Partition = mode
	}
	cfg.Params = params
	if err := cfg.Scenario.apply(&cfg.Network); err != nil {
		return err
	}
	return cfg.Network.Validate()
}

// addNodes names the run's nodes (by region with regions), checks that
// the scenario names only them, and adds them, alive, each with the whole
// membership as its view.
func (r *runner) addNodes() error {
	cfg := r.cfg
	members := make([]strategy.NodeID, cfg.Nodes)
	for i := range members {
		members[i] = strategy.NodeID(fmt.Sprintf("n%d", i))
		if r.topo != nil {
			members[i] = topology.NodeID(cfg.Regions[r.topo.region[i]].Name, i)
		}
		r.byName[string(members[i])] = i
		r.res.NodeNames = append(r.res.NodeNames, string(members[i]))
	}
	if err := cfg.Scenario.checkIn(r.byName, cfg.Regions); err != nil {
		return err
	}
	sorted := slices.Clone(members)
	slices.Sort(sorted)
	for i := range members {
		n := &node{id: members[i], alive: true, view: slices.Clone(sorted), expect: slices.Clone(sorted),
			lost: map[strategy.NodeID]time.Duration{}}
		if r.topo != nil {
			n.region = r.topo.region[i]
		}
		r.nodes = append(r.nodes, n)
		r.alive = append(r.alive, i)
	}
	return nil
}

// startNodes starts every node at time 0, checking after the first that
// the strategy supports the partition mode asked for.
func (r *runner) startNodes() error {
	for i := range r.nodes {
		if err := r.start(i, 0); err != nil {
			return err
		}
		if i == 0 {
			if err := strategy.CheckPartition(r.cfg.Name, r.nodes[0].s, r.cfg.Partition); err != nil {
				return fmt.Errorf("sim: %w", err)
			}
		}
	}
	return nil
}

// queueScenario draws each node's reconnect phase (when the scenario
// reconnects periodically) and queues the scenario's events.
func (r *runner) queueScenario() {
	sc := r.cfg.Scenario
	if sc != nil && sc.ReconnectInterval > 0 {
		for _, n := range r.nodes {
			n.phase = time.Duration(r.memRnd.Int64N(int64(sc.ReconnectInterval)))
		}
	}
	if sc != nil {
		for i, e := range sc.Events {
			r.push(event{at: e.At, prio: prioScenario, scen: int32(i)})
		}
	}
}

func (r *runner) push(e event) {
	r.seq++
	e.seq = r.seq
	r.q.Push(e)
}

// start builds node i's strategy (at startup, or on restart) and starts it.
func (r *runner) start(i int, now time.Duration) error {
	n := r.nodes[i]
	s, err := r.cfg.New(strategy.Config{
		Self:        n.id,
		Members:     slices.Clone(n.view),
		Rate:        r.cfg.Rate,
		Burst:       r.cfg.Burst,
		Rand:        rand.New(rand.NewPCG(r.cfg.Seed, uint64(i)<<32|uint64(n.epoch))),
		Params:      r.cfg.Params,
		LatencyHint: r.latencyHint(),
		Partition:   r.cfg.Partition,
	})
	if err != nil {
		return fmt.Errorf("%s on %s: %w", r.cfg.Name, n.id, err)
	}
	// A restart is a new Host: the old incarnation's wake-ups are void
	// (their events carry the old epoch). Request ids are the trace's.
	h, err := host.New(n.id, uint64(n.epoch), simDriver{r: r, i: i}, s)
	if err != nil {
		return fmt.Errorf("%s on %s: %w", r.cfg.Name, n.id, err)
	}
	n.s, n.h, n.started = s, h, true
	r.inCall = prioScenario
	h.Start(now, 0)
	return nil
}

// inject hands request i to the node the assigner picks among the live
// ones, or to a proxy (Config.Proxies).
func (r *runner) inject(i int, req *workload.Request) {
	r.res.Events++
	if r.px != nil {
		r.proxyRequest(i, req)
		return
	}
	if len(r.alive) == 0 {
		return // no node is up: the request fails (undecided)
	}
	if r.topo != nil && r.topo.follow > 0 {
		r.injectAt(i, r.followNode(i, req))
		return
	}
	r.injectAt(i, r.alive[r.cfg.Assign.Assign(req, i, len(r.alive))])
}

// injectAt hands request i to node ni now (its arrival there).
func (r *runner) injectAt(i, ni int) {
	req := &r.trace.Requests[i]
	n := r.nodes[ni]
	r.receivedBy[i] = int32(ni)
	r.res.Received[i] = int32(ni)
	r.inCall, r.wanCall = prioRequest, false
	sreq := strategy.Request{ID: uint64(i), Key: req.Key, Tokens: req.Tokens, Arrival: r.now}
	if r.cfg.Charges != nil {
		sreq.Charge = r.cfg.Charges[i]
	}
	if r.cfg.EdgeTimes != nil {
		if _, ok := n.s.(strategy.ArrivalOrderer); ok {
			sreq.Arrival = strategy.EdgeArrival(r.cfg.EdgeTimes[i], r.now)
		}
	}
	// The outcome is recorded before the request's effects are carried
	// out (then), as the decisions among them may be this one's.
	n.h.RequestThen(r.now, 0, sreq, r.cfg.MaxWait, func(_ strategy.Strategy, d strategy.Decision, ok bool, _ *strategy.Effects) {
		if ok {
			r.record(d, true, false, int32(ni))
		} else {
			r.pendingDecisions++
		}
	})
}

// record sets the outcome of request d.RequestID, decided now by node (its
// index; -1 at a proxy); local: by the node that received it without
// waiting for a peer, or at its proxy.
// Behind per-request RLS proxies the answer takes a hop back to the proxy
// (counted), and no decision is local (the proxy waited for its node).
func (r *runner) record(d strategy.Decision, local, wan bool, node int32) {
	lat := r.now - r.trace.Requests[d.RequestID].Arrival
	if r.px != nil && r.px.mode == proxyRLS {
		lat += r.px.cfg.Hop
		local = false
		r.res.ProxyMessages++
		r.res.ProxyBytes += r.px.rlsResp
	}
	r.res.Outcomes[d.RequestID] = Outcome{Allowed: d.Allowed, Decided: true, Latency: lat, Local: local, Delay: d.Delay,
		WAN: wan && !local, Node: node}
	if r.holds != nil && d.Allowed && d.Permit != 0 {
		hold := r.holds[d.RequestID]
		o := &r.res.Outcomes[d.RequestID]
		o.HeldFrom, o.HeldUntil = r.now, min(r.now+hold, d.Expires)
		r.permits[d.RequestID] = d.Permit
		r.push(event{at: r.now + hold, prio: prioRelease, node: r.receivedBy[d.RequestID], payloadID: d.RequestID})
	}
}

// release ends request id's hold: its node, if up, releases the permit
// (a node that crashed meanwhile takes its release with it: the permit
// lapses at its expiry).
func (r *runner) release(e event, id uint64) {
	n := r.nodes[e.node]
	rel, ok := n.s.(strategy.Releaser)
	if !n.alive || !ok {
		return
	}
	key := r.trace.Requests[id].Key
	permit := r.permits[id]
	r.inCall = prioRelease
	n.h.Do(r.now, 0, func(_ strategy.Strategy, fx *strategy.Effects) { rel.Release(r.now, key, permit, fx) })
}

// simDriver is node i's host.Driver: virtual time around the Host. The
// same-instant contract of package host holds by the event queue's order
// (prioDeliver before prioWake).
type simDriver struct {
	r *runner
	i int
}

// Decided records an asynchronous decision on a trace request; one
// decided already (or not a trace index) is ignored.
func (sd simDriver) Decided(_ int, d strategy.Decision) {
	r := sd.r
	if d.RequestID >= uint64(len(r.res.Outcomes)) {
		return
	}
	o := &r.res.Outcomes[d.RequestID]
	if o.Decided {
		return
	}
	local := (r.inCall == prioWake || r.inCall == prioRequest) && r.receivedBy[d.RequestID] == int32(sd.i)
	node := int32(sd.i)
	if r.inCall == prioDeliver {
		node = r.fromCall
	}
	r.record(d, local, r.inCall == prioDeliver && r.wanCall, node)
	r.pendingDecisions--
}

// Send puts a message on the simulated network.
func (sd simDriver) Send(_ int, to strategy.NodeID, payload []byte) {
	sd.r.send(sd.i, strategy.Message{To: to, Payload: payload})
}

// Schedule queues a wake-up of node i's current incarnation.
func (sd simDriver) Schedule(_ int, at time.Duration) {
	sd.r.push(event{at: at, prio: prioWake, node: int32(sd.i), epoch: sd.r.nodes[sd.i].epoch})
}

func (r *runner) send(from int, m strategy.Message) {
	r.res.Messages++
	r.res.Bytes += int64(len(m.Payload))
	to, ok := r.byName[string(m.To)]
	if !ok || r.nodes[from].group != r.nodes[to].group {
		r.res.MessagesLost++
		return
	}
	wan := false
	if r.topo == nil {
		r.delays = r.cfg.Network.deliveries(r.netRnd, r.delays)
	} else {
		a, b := r.nodes[from].region, r.nodes[to].region
		if wan = a != b; wan {
			r.res.WANMessages++
			r.res.WANBytes += int64(len(m.Payload))
		}
		r.delays = r.cfg.Network.deliveriesOn(r.netRnd, r.delays, r.topo.links[a][b])
	}
	if len(r.delays) == 0 {
		r.res.MessagesLost++
	}
	for _, d := range r.delays {
		r.push(event{at: r.now + d, prio: prioDeliver, node: int32(to), from: int32(from), payload: m.Payload,
			wan: wan || r.wanCall})
	}
}

func (r *runner) step(e event) {
	r.now = e.at
	r.res.Events++
	r.wanCall = e.prio == prioDeliver && e.wan
	switch e.prio {
	case prioDeliver:
		r.deliver(e)
	case prioProxy, prioProxyTimer:
		r.proxyEvent(e)
	case prioWake:
		n := r.nodes[e.node]
		if n.epoch != e.epoch || !n.alive {
			return
		}
		r.inCall = prioWake
		n.h.Tick(r.now, 0)
	case prioMembership:
		r.membership(e)
	case prioRelease:
		r.release(e, e.payloadID)
	case prioScenario:
		r.scenario(r.cfg.Scenario.Events[e.scen])
	case prioReconnect:
		if e.epoch == r.healGen {
			r.merge()
		}
	case prioSample:
		r.sample()
		if r.now < r.lastArrival() || r.pendingDecisions > 0 {
			r.push(event{at: r.now + r.cfg.SampleEvery, prio: prioSample})
		}
	}
}

// deliver hands a message to its node, or counts it lost when the node is
// down or a partition cut now lies between it and the sender.
func (r *runner) deliver(e event) {
	n := r.nodes[e.node]
	// A message crossing a partition cut after it was sent is lost too.
	if !n.alive || n.group != r.nodes[e.from].group {
		r.res.MessagesLost++
		return
	}
	r.inCall, r.fromCall = prioDeliver, e.from
	if err := n.h.Receive(r.now, 0, r.nodes[e.from].id, e.payload); err != nil {
		r.res.ReceiveErrors++
	}
}

func (r *runner) lastArrival() time.Duration {
	if len(r.trace.Requests) == 0 {
		return 0
	}
	return r.trace.Requests[len(r.trace.Requests)-1].Arrival
}

func (r *runner) sample() {
	if len(r.alive) == 0 {
		return
	}
	sum := 0
	for _, i := range r.alive {
		b := r.nodes[i].s.StateBytes()
		sum += b
		r.res.StateBytesPeak = max(r.res.StateBytesPeak, b)
	}
	r.stateSum += float64(sum) / float64(len(r.alive))
	r.statSamples++
	if r.cfg.Observe != nil {
		live := make([]strategy.Strategy, len(r.alive))
		for k, i := range r.alive {
			live[k] = r.nodes[i].s
		}
		r.cfg.Observe(r.now, live)
	}
}
