package server

// Prometheus metrics of a Server, on its own registry (Server.Registry),
// served at GET /metrics. The names are fixed: dashboards and tools parse
// them.
//
// Counted by Check, per item of a valid batch:
//
//	tokenmesh_decisions_total{rule,strategy,result}  counter; result is allowed, refused
//	                                                 (hits above the burst included) or
//	                                                 error (the item was not decided)
//	tokenmesh_decision_seconds{rule}                 histogram of the time a check waited for
//	                                                 its decision at this node: from the call
//	                                                 to its batch's answer (queueing in the
//	                                                 node's loop and owner's forward included),
//	                                                 50us to 1s
//	tokenmesh_edge_lateness_seconds{rule}            histogram, for checks carrying an edge time
//	                                                 (created_at_unix_ns), of the wall time from it
//	                                                 to the node taking the call (0 when the
//	                                                 caller's clock is ahead), 50us to 1s: the
//	                                                 network from the edge to the nodes, which an
//	                                                 owner rule's hold should cover
//	tokenmesh_invalid_requests_total                 counter of calls refused as invalid
//	                                                 (INVALID_ARGUMENT; nothing per item)
//
// Counted by Envoy's RLS (RegisterRLS: only with an Envoy config), whose
// checks also count in the three above under the derived rule names:
//
//	tokenmesh_rls_global_shadow_mode_total           counter of responses over a limit that the
//	                                                 global shadow mode answered OK
//	tokenmesh_rls_overrides_refused_total            counter of descriptors whose limit override the
//	                                                 node's bound on override rules refused
//	tokenmesh_rls_override_rules                     gauge of the rules the node holds for limit
//	                                                 overrides (its own and those peers forwarded)
//
// Read from the node at scrape time (cluster.Node.Stats):
//
//	tokenmesh_peer_messages_total{rule,direction}    counter; direction sent or received
//	tokenmesh_peer_bytes_total{rule,direction}       counter of peer payload bytes
//	tokenmesh_peer_send_errors_total{rule}           counter of frames the transport refused
//	tokenmesh_peer_receive_errors_total{rule}        counter of payloads the strategy refused
//	tokenmesh_pending_checks{rule}                   gauge of checks waiting for the network
//	tokenmesh_deferred_checks_total{rule}            counter of checks the strategy did not decide at
//	                                                 once (forwarded, or held for an ordering buffer
//	                                                 or a lease): the rest were decided on the node
//	tokenmesh_refusal_window_checks_total{rule}      counter of checks refused on the fast path in a
//	                                                 refusal window (lease, regionlease on a dry hint;
//	                                                 adaptive, gdrl on an empty share)
//	tokenmesh_inbox_dropped_total                    counter of peer frames dropped (inbox full)
//	tokenmesh_peer_unknown_rule_frames_total         counter of peer frames for a rule not here
//	tokenmesh_peer_bad_sender_frames_total           counter of peer frames from an empty/non-UTF-8 id
//	tokenmesh_members                                gauge of live members (1 without gossip)
//	tokenmesh_peer_wire_version                      gauge: the highest peer wire version every live
//	                                                 member speaks (absent without gossip)
//	tokenmesh_peer_links_total{version}              counter of peer links dialled, by the wire version
//	                                                 chosen (the highest both ends speak)
//	tokenmesh_peer_refused_frames_total{reason}      counter of peer frames (and streams) refused:
//	                                                 bad_mac (no or a wrong MAC: a sender without
//	                                                 the secret key), replay (a frame seen before, or
//	                                                 an old incarnation's), unknown_sender (not a
//	                                                 member), bad_certificate (mTLS), oversize (a
//	                                                 message above 4 MiB), not_member (a keyed frame
//	                                                 from a node not in the view yet),
//	                                                 unknown_version (a frame of a wire version
//	                                                 this build does not speak), old_version (a
//	                                                 version 1 frame from a member that speaks 2),
//	                                                 stale_incarnation (a v2 frame addressed to
//	                                                 this node before its restart), out_of_bounds
//	                                                 (a payload its strategy refused: a value out of
//	                                                 bounds, or one that does not decode; the sum of
//	                                                 tokenmesh_peer_receive_errors_total)
//
// Read in the node's loop at scrape time (cluster.Node.Inspect, 200ms at
// most; when the node does not answer in time, the values last read):
//
//	tokenmesh_state_bytes{rule}                      gauge of the heap the strategy's state takes, bytes
//	                                                 (strategy.MemoryReporter, kept incrementally: local,
//	                                                 central, static, owner, gcounter, tbqueue, gdrl,
//	                                                 adaptive, fixed_window, grd, fps); lease, regionlease
//	                                                 and quota: the size of its wire encoding
//	                                                 (StateBytes, a walk of its keys)
//	tokenmesh_keys{rule}                             gauge of keys holding a capacity share
//	tokenmesh_capacity_share_ratio{rule}             gauge of this node's mean share of a key's
//	                                                 rate (0..1); only for strategies that split
//	                                                 the rate (strategy.ShareReporter), and not
//	                                                 while keys is 0
//
// Set once by serve (Server.SetBuildInfo):
//
//	tokenmesh_build_info{version,revision,goversion} gauge, always 1: the binary's build
//
// Registered on the same registry by the daemon (package daemon), from
// the node (limiter.Node.RegisterHintMetrics):
//
//	tokenmesh_latency_hint_seconds                   gauge of the latency hint the strategies have
//	tokenmesh_peer_latency_seconds{peer}             gauge of a peer's one-way latency; only with
//	                                                 node.latency_hint: auto on a node with peers
//
// and, only with an Envoy config, by the RLQS service (package rlqs):
//
//	tokenmesh_rlqs_streams                           gauge of open RLQS streams
//	tokenmesh_rlqs_buckets                           gauge of buckets the open streams subscribed
//	tokenmesh_rlqs_reports_total                     counter of bucket usage reports received
//	tokenmesh_rlqs_assignments_total{kind}           counter of bucket actions sent: token_bucket,
//	                                                 allow_all or expire
//	tokenmesh_rlqs_buckets_unserved_total            counter of reports for buckets of a non-quota rule
//	tokenmesh_rlqs_refused_total{code}               counter of streams ended for bad input (by gRPC
//	                                                 code) and reports skipped (empty_bucket_id)
//
// Plus the standard go_* and process_* collectors. docs/API.md
// ("Metrics") is the catalogue for operators; internal/archtest holds this
// list, that catalogue and a running node's registry to the same names and
// labels.

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/tokenmesh/tokenmesh/cluster"
	"github.com/tokenmesh/tokenmesh/cluster/grpcpeer"
	"github.com/tokenmesh/tokenmesh/limiter"
	"github.com/tokenmesh/tokenmesh/rule"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// InspectTimeout bounds how long a scrape waits for the node's loop to
// report its strategies' state.
const InspectTimeout = 200 * time.Millisecond

// decisionBuckets are tokenmesh_decision_seconds's upper bounds, in
// seconds: 16 round values from 50us to 1s.
var decisionBuckets = []float64{50e-6, 100e-6, 200e-6, 300e-6, 500e-6, 1e-3, 2e-3, 3e-3, 5e-3, 10e-3,
	20e-3, 50e-3, 100e-3, 200e-3, 500e-3, 1}

// metrics is a Server's instrumentation.
type metrics struct {
	reg       *prometheus.Registry
	invalid   prometheus.Counter
	decisions *prometheus.CounterVec
	wait      *prometheus.HistogramVec
	edge      *prometheus.HistogramVec
}

// ruleMetrics are one rule's pre-resolved series, so counting a decision
// builds no labels.
type ruleMetrics struct {
	allowed, refused, errored prometheus.Counter
	wait                      prometheus.Observer
	edge                      prometheus.Observer
}

// newMetrics registers the metrics of a server of node (nil: none); a
// rule's series are resolved later, by forRule (SetRules).
func newMetrics(node nodeView) *metrics {
	reg := prometheus.NewRegistry()
	decisions := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tokenmesh_decisions_total",
		Help: "Checks decided by this node's API, by rule, strategy and result (allowed, refused, error: not decided).",
	}, []string{"rule", "strategy", "result"})
	wait := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "tokenmesh_decision_seconds",
		Help:    "Time a check waited for its decision at this node, from the API call to its batch's answer (queueing and owner forwards included), seconds.",
		Buckets: decisionBuckets,
	}, []string{"rule"})
	edge := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "tokenmesh_edge_lateness_seconds",
		Help:    "For checks carrying an edge time (created_at_unix_ns): wall time from it to this node taking the call (0 when the caller's clock is ahead), seconds. An owner rule's hold should cover it.",
		Buckets: decisionBuckets,
	}, []string{"rule"})
	m := &metrics{reg: reg, decisions: decisions, wait: wait, edge: edge, invalid: prometheus.NewCounter(prometheus.CounterOpts{
		Name: "tokenmesh_invalid_requests_total",
		Help: "Check calls refused as invalid (INVALID_ARGUMENT); their items are not counted.",
	})}
	reg.MustRegister(decisions, wait, edge, m.invalid,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if node != nil {
		reg.MustRegister(&nodeCollector{node: node})
	}
	return m
}

// forRule returns r's series (created at zero on first use).
func (m *metrics) forRule(r rule.Rule) *ruleMetrics {
	return &ruleMetrics{
		allowed: m.decisions.WithLabelValues(r.Name, r.Strategy, "allowed"),
		refused: m.decisions.WithLabelValues(r.Name, r.Strategy, "refused"),
		errored: m.decisions.WithLabelValues(r.Name, r.Strategy, "error"),
		wait:    m.wait.WithLabelValues(r.Name),
		edge:    m.edge.WithLabelValues(r.Name),
	}
}

// dropRule deletes the series of a rule the server no longer serves
// (SetRules), so a removed rule leaves /metrics.
func (m *metrics) dropRule(r rule.Rule) {
	for _, res := range []string{"allowed", "refused", "error"} {
		m.decisions.DeleteLabelValues(r.Name, r.Strategy, res)
	}
	m.wait.DeleteLabelValues(r.Name)
	m.edge.DeleteLabelValues(r.Name)
}

// edgeLateness records the time from an item's edge time (createdAt, ns
// since 1970; 0: none, not counted) to took (nil rm: not counted).
func (rm *ruleMetrics) edgeLateness(createdAt int64, took time.Time) {
	if rm == nil || createdAt <= 0 {
		return
	}
	rm.edge.Observe(max(float64(took.UnixNano()-createdAt), 0) / 1e9)
}

// count records one item's outcome: its cluster result r, answered as
// allowed or not (nil rm: not counted).
func (rm *ruleMetrics) count(r cluster.BatchResult, allowed bool, waited time.Duration) {
	if rm == nil {
		return
	}
	switch {
	case r.Err != nil:
		rm.errored.Inc()
		return
	case allowed:
		rm.allowed.Inc()
	default:
		rm.refused.Inc()
	}
	rm.wait.Observe(waited.Seconds())
}

// nodeView is what the scrape-time collector reads of a node
// (*cluster.Node plus the member count; a fake in tests).
type nodeView interface {
	Stats() cluster.Stats
	Inspect(ctx context.Context, f func(now time.Duration, rule rule.Rule, s strategy.Strategy)) error
	Members() int
}

// limiterView is what the metrics read of a limiter.Node.
type limiterView struct{ n *limiter.Node }

func (v limiterView) Stats() cluster.Stats { return v.n.Cluster().Stats() }

// Inspect is the cluster node's Peek: the metrics read memory and shares,
// no key's level, so the buckets lent to the fast path stay lent.
func (v limiterView) Inspect(ctx context.Context, f func(time.Duration, rule.Rule, strategy.Strategy)) error {
	return v.n.Cluster().Peek(ctx, f)
}

// PeerRefusals is the peer transport's refusals by reason (nil without one).
func (v limiterView) PeerRefusals() map[string]int64 {
	st, ok := v.n.PeerStats()
	if !ok {
		return nil
	}
	return st.Refusals
}

// PeerLinks is the peer links dialled by wire version (nil without a
// transport).
func (v limiterView) PeerLinks() map[int]int64 {
	st, ok := v.n.PeerStats()
	if !ok {
		return nil
	}
	return st.Links
}

// WireVersion is the cluster's peer wire version (0 without gossip).
func (v limiterView) WireVersion() uint32 { return v.n.WireVersion() }

// wireVersioner is a nodeView that also reports the highest peer wire
// version all live members speak.
type wireVersioner interface {
	WireVersion() uint32
}

// peerLinks is a nodeView that also reports its peer links by wire
// version (grpcpeer.Stats.Links).
type peerLinks interface {
	PeerLinks() map[int]int64
}

// peerRefusals is a nodeView that also reports its peer transport's
// refused frames by reason (grpcpeer.Stats.Refusals).
type peerRefusals interface {
	PeerRefusals() map[string]int64
}

// RefusedOutOfBounds is the reason label of peer payloads a strategy
// refused (tokenmesh_peer_refused_frames_total).
const RefusedOutOfBounds = "out_of_bounds"

// Members is the live members gossip reported; 1 (this node) without gossip.
func (v limiterView) Members() int { return max(len(v.n.Members()), 1) }

var (
	descPeerMessages = prometheus.NewDesc("tokenmesh_peer_messages_total",
		"Peer messages of a rule's strategy, by direction (sent, received).", []string{"rule", "direction"}, nil)
	descPeerBytes = prometheus.NewDesc("tokenmesh_peer_bytes_total",
		"Peer payload bytes of a rule's strategy, by direction (sent, received).", []string{"rule", "direction"}, nil)
	descSendErrors = prometheus.NewDesc("tokenmesh_peer_send_errors_total",
		"Peer frames of a rule the transport refused (unknown or closed peer).", []string{"rule"}, nil)
	descReceiveErrors = prometheus.NewDesc("tokenmesh_peer_receive_errors_total",
		"Peer payloads of a rule its strategy refused.", []string{"rule"}, nil)
	descPending = prometheus.NewDesc("tokenmesh_pending_checks",
		"Checks of a rule waiting for an asynchronous (network) decision.", []string{"rule"}, nil)
	descDeferred = prometheus.NewDesc("tokenmesh_deferred_checks_total",
		"Checks of a rule its strategy did not decide at once on this node (forwarded to an owner or regional owner, or held for an ordering buffer or a lease); the others were decided on the node.", []string{"rule"}, nil)
	descWindowRefused = prometheus.NewDesc("tokenmesh_refusal_window_checks_total",
		"Checks of a rule refused on the fast path in a refusal window (the strategy said the key is refused until a time: lease at a holder while the owner's dry hint lasts, regionlease at a node on its regional owner's, adaptive and gdrl until the node's share holds a token), counted when the strategy hears of them; these never reached the strategy one by one.", []string{"rule"}, nil)
	descInboxDropped = prometheus.NewDesc("tokenmesh_inbox_dropped_total",
		"Peer frames dropped because the node's event inbox was full.", nil, nil)
	descUnknownRule = prometheus.NewDesc("tokenmesh_peer_unknown_rule_frames_total",
		"Peer frames for a rule this node does not have (dropped).", nil, nil)
	descBadSender = prometheus.NewDesc("tokenmesh_peer_bad_sender_frames_total",
		"Peer frames whose sender id is empty or not UTF-8 (dropped).", nil, nil)
	descWireVersion = prometheus.NewDesc("tokenmesh_peer_wire_version",
		"The highest peer wire version every live member speaks, as gossip reports it (1 while a node of the build before wire versions is a member; absent without gossip).", nil, nil)
	descLinks = prometheus.NewDesc("tokenmesh_peer_links_total",
		"Peer links (streams) dialled, by the wire version chosen for them: the highest both ends speak (Hello; 1 with a node of the build before wire versions).", []string{"version"}, nil)
	descRefused = prometheus.NewDesc("tokenmesh_peer_refused_frames_total",
		"Peer frames (and streams) refused, by reason: bad_mac, replay, unknown_sender, bad_certificate, oversize, not_member, unknown_version, old_version, stale_incarnation (transport), out_of_bounds (strategy).", []string{"reason"}, nil)
	descMembers = prometheus.NewDesc("tokenmesh_members",
		"Live members of the cluster as this node sees them, itself included.", nil, nil)
	descStateBytes = prometheus.NewDesc("tokenmesh_state_bytes",
		"Heap a rule's strategy state takes at this node, bytes (estimated with Go's map and allocation overheads; strategies without an estimate report their wire encoding's size).", []string{"rule"}, nil)
	descShare = prometheus.NewDesc("tokenmesh_capacity_share_ratio",
		"This node's mean capacity share of a key's rate (0..1), over the keys it holds (strategies that split the rate).", []string{"rule"}, nil)
	descKeys = prometheus.NewDesc("tokenmesh_keys",
		"Keys of a rule holding a capacity share at this node (strategies that split the rate).", []string{"rule"}, nil)
)

// nodeCollector exports a node's counters and state, read at scrape time.
type nodeCollector struct {
	node nodeView

	mu   sync.Mutex
	last map[string]ruleState // each rule's latest Inspect row, also from a call that came after its scrape gave up
}

func (c *nodeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descPeerMessages, descPeerBytes, descSendErrors, descReceiveErrors,
		descPending, descDeferred, descWindowRefused, descInboxDropped, descUnknownRule, descBadSender, descRefused, descLinks, descWireVersion, descMembers, descStateBytes, descShare, descKeys} {
		ch <- d
	}
}

// ruleState is what one Inspect call reports of a rule.
type ruleState struct {
	rule       string
	stateBytes int
	shares     bool // the strategy is a strategy.ShareReporter
	shareSum   float64
	keys       int
}

func (c *nodeCollector) Collect(ch chan<- prometheus.Metric) {
	counter := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	st := c.node.Stats()
	for rule, rs := range st.Rules {
		counter(descPeerMessages, rs.MessagesSent, rule, "sent")
		counter(descPeerMessages, rs.MessagesReceived, rule, "received")
		counter(descPeerBytes, rs.BytesSent, rule, "sent")
		counter(descPeerBytes, rs.BytesReceived, rule, "received")
		counter(descSendErrors, rs.SendErrors, rule)
		counter(descReceiveErrors, rs.ReceiveErrors, rule)
		gauge(descPending, float64(rs.Pending), rule)
		counter(descDeferred, rs.Deferred, rule)
		counter(descWindowRefused, rs.RefusedInWindows, rule)
	}
	counter(descInboxDropped, st.InboxDropped)
	counter(descUnknownRule, st.UnknownRuleFrames)
	counter(descBadSender, st.BadSender)
	var outOfBounds int64
	for _, rs := range st.Rules {
		outOfBounds += rs.ReceiveErrors
	}
	counter(descRefused, outOfBounds, RefusedOutOfBounds)
	var byReason map[string]int64
	if pr, ok := c.node.(peerRefusals); ok {
		byReason = pr.PeerRefusals()
	}
	for _, reason := range []string{grpcpeer.ReasonBadMAC, grpcpeer.ReasonReplay, grpcpeer.ReasonUnknownSender, grpcpeer.ReasonBadCertificate,
		grpcpeer.ReasonOversize, grpcpeer.ReasonNotMember, grpcpeer.ReasonUnknownVersion, grpcpeer.ReasonOldVersion,
		grpcpeer.ReasonStaleIncarnation} {
		counter(descRefused, byReason[reason], reason)
	}
	if pl, ok := c.node.(peerLinks); ok {
		if links := pl.PeerLinks(); links != nil {
			for _, v := range []int{grpcpeer.WireV1, grpcpeer.WireV2} {
				counter(descLinks, links[v], strconv.Itoa(v))
			}
		}
	}
	if wv, ok := c.node.(wireVersioner); ok {
		if v := wv.WireVersion(); v > 0 {
			gauge(descWireVersion, float64(v))
		}
	}
	gauge(descMembers, float64(c.node.Members()))

	for _, r := range c.inspect() {
		gauge(descStateBytes, float64(r.stateBytes), r.rule)
		if !r.shares {
			continue
		}
		gauge(descKeys, float64(r.keys), r.rule)
		if r.keys > 0 {
			gauge(descShare, r.shareSum/float64(r.keys), r.rule)
		}
	}
}

// inspect reads every rule's strategy state in the node's loop. When the
// node does not answer within InspectTimeout it returns the rows last
// read (from an earlier scrape, or from this one's call had it come late
// before), so that the gauges do not vanish from a scrape of a busy node;
// nil before any was read.
func (c *nodeCollector) inspect() []ruleState {
	ctx, cancel := context.WithTimeout(context.Background(), InspectTimeout)
	defer cancel()
	var (
		mu        sync.Mutex
		rows      []ruleState
		abandoned bool // the scrape stopped waiting: a late call updates c.last only
	)
	err := c.node.Inspect(ctx, func(_ time.Duration, rule rule.Rule, s strategy.Strategy) {
		row := ruleState{rule: rule.Name}
		if mr, ok := s.(strategy.MemoryReporter); ok {
			row.stateBytes = mr.MemoryBytes() // kept incrementally: no key walked
		} else {
			row.stateBytes = s.StateBytes() // may walk every key (the strategies without an estimate)
		}
		if sr, ok := s.(strategy.ShareReporter); ok {
			row.shares = true
			row.shareSum, row.keys = sr.CapacityShares()
		}
		mu.Lock()
		if !abandoned {
			rows = append(rows, row)
		}
		mu.Unlock()
		c.mu.Lock()
		if c.last == nil {
			c.last = map[string]ruleState{}
		}
		c.last[row.rule] = row
		c.mu.Unlock()
	})
	mu.Lock()
	abandoned = true
	mu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	if err == nil {
		c.last = make(map[string]ruleState, len(rows)) // rules removed since drop out
		for _, r := range rows {
			c.last[r.rule] = r
		}
		return rows
	}
	out := make([]ruleState, 0, len(c.last))
	for _, name := range slices.Sorted(maps.Keys(c.last)) {
		out = append(out, c.last[name])
	}
	return out
}
