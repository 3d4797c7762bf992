// Package cluster is the live runtime: it drives the same strategy state
// machines as the simulator (package sim), with the wall clock and a real
// peer transport (docs/ARCHITECTURE.md, "Two drivers").
//
// A Node runs one strategy instance per rule. One goroutine per node owns
// every strategy call (strategies are not thread-safe); it is fed by one
// channel of events: requests from Check, frames from peers, membership
// changes, and a single timer set to the earliest wake-up any rule asked
// for. Every strategy call goes through a host.Host (package strategy/host,
// the one interpreter of strategy.Effects, shared with the simulator): the
// node supplies the wall clock, the goroutine, the transport and the
// pending checks around it. Peers are reached through a Transport (MemNetwork in process;
// cluster/grpcpeer over the network), and membership comes from whoever
// calls SetMembers (a test; limiter, from cluster/membership's gossip).
package cluster

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tokenmesh/tokenmesh/internal/logthrottle"
	"github.com/tokenmesh/tokenmesh/internal/minheap"
	"github.com/tokenmesh/tokenmesh/rule"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/host"
)

// Limits on a Check's input.
const (
	// DefaultMaxTokens bounds the tokens of one Check (2^40 tokens) unless
	// Config.MaxTokens says otherwise.
	DefaultMaxTokens = int64(1) << 40
	// MaxKeyBytes bounds the length of a key, in bytes.
	MaxKeyBytes = 4096
	// DefaultInbox is the default capacity of a node's event channel, in
	// events (requests, peer frames, membership changes).
	DefaultInbox = 4096
)

// ErrClosed is the error of a Check or SetMembers on a closed node, and of
// the checks still pending when it was closed.
var ErrClosed = errors.New("cluster: node is closed")

// Config is one node.
type Config struct {
	Self    strategy.NodeID   // this node's id; required
	Members []strategy.NodeID // initial live members; Self is added if missing
	// Rules are the limits the node enforces per key; it reads a rule's
	// Name, Rate, Burst, Strategy, Params and Partition (not Key, which
	// documents how the clients form keys).
	Rules []rule.Rule
	// Transport reaches the peers. The node takes it over: it registers its
	// receive callback and closes it in Close.
	Transport Transport
	// Seed seeds each rule's strategy randomness (mixed with Self and the
	// rule name, so nodes sharing a seed still differ).
	Seed uint64
	// Epoch is the cluster's time base: strategies see time as the
	// duration since Epoch. Strategies that carry times between nodes
	// (owner forwards a request's arrival) need every node on the same
	// base: in one process share one time.Time; across processes use a
	// fixed wall-clock instant (then the nodes' clock skew adds to their
	// error). The node reads Epoch once at start and runs on the monotonic
	// clock from then on. Zero: the node's own start.
	Epoch time.Time
	// Join is false for the founding members of a cluster: their strategies
	// are started at time 0, which strategies read as "the cluster begins"
	// (gdrl gives founding members their 1/N share and joiners none). A node
	// that joins a running cluster, or restarts, sets Join: its strategies
	// start at the current time.
	Join bool
	// LatencyHint is the expected one-way peer latency, passed to
	// strategies (owner's default hold and timeout).
	LatencyHint time.Duration
	// MaxTokens bounds the tokens of one Check (default DefaultMaxTokens).
	MaxTokens int64
	// Inbox is the capacity of the event channel (default DefaultInbox).
	// Peer frames that find it full are dropped and counted.
	Inbox int
	// Restore holds saved bucket states by rule name, with At in
	// wall-clock nanoseconds since the Unix epoch (as in Node.Snapshot's
	// RuleSnapshot.States; package statestore keeps them). New hands each rule's
	// states to its strategy, when it is a strategy.Snapshotter, right
	// after Start and before any event, refilled for the wall time since
	// they were taken; other rules' states are ignored (Node.Restored).
	// A state the strategy refuses fails New.
	Restore map[string][]strategy.KeyState
	// Derive, when set, derives the rules peer frames name that the node
	// lacks (derived.go; SetDeriver changes it).
	Derive Deriver
	// MaxDerived bounds the derived rules the node holds (default
	// DefaultMaxDerived, at most MaxDerivedLimit); MaxDerivedPerBase those
	// of one Derived.Base that EnsureDerived creates (default
	// DefaultMaxDerivedPerBase, at most MaxDerivedLimit).
	MaxDerived        int
	MaxDerivedPerBase int

	// testClock, set by this package's tests only, replaces the node's
	// monotonic clock (Node.clock): safe for concurrent use, never going
	// back.
	testClock func() time.Duration
}

// RuleStats counts one rule's peer traffic at one node. Bytes are payload
// bytes (the strategy's protobuf encoding, as the simulator counts them).
type RuleStats struct {
	MessagesSent     int64
	BytesSent        int64
	MessagesReceived int64
	BytesReceived    int64
	SendErrors       int64 // frames the transport refused (unknown or closed peer)
	ReceiveErrors    int64 // payloads the strategy refused
	Requests         int64 // checks handed to the strategy (not those decided on the fast path)
	Pending          int64 // checks waiting for an async decision now
	// Deferred counts the checks the strategy did not decide at once
	// (of Requests): forwarded to another node (an owner, a regional
	// owner) or held (an ordering buffer, a lease on its way), each
	// counted once when it starts to wait. Requests - Deferred were
	// decided on the node at once.
	Deferred int64
	// The fast path (strategy.Allowancer): allowances granted by the
	// loop (buckets lent included), their tokens, and the tokens given
	// back unused. Tokens granted less returned (less those in allowances
	// still open) were admitted on the fast path, without the strategy's
	// loop; so were, under a strategy.BucketLender, the checks decided
	// from the lent buckets, which are not counted (a counter there would
	// be memory every core writes on every check).
	AllowanceGrants   int64
	AllowanceTokens   int64
	AllowanceReturned int64
	// BucketsLent is how many times the loop lent a key's whole bucket
	// to the fast path (strategy.BucketLender: local, central, static).
	BucketsLent int64
	// RefusalWindows is how many refusal windows the loop opened
	// (strategy.Refuser: lease at a holder on the owner's dry hint), and
	// RefusedInWindows the checks refused in them on the fast path,
	// counted when the strategy was told (fastpath.go).
	RefusalWindows   int64
	RefusedInWindows int64
}

// Stats is a snapshot of a node's counters.
type Stats struct {
	Rules             map[string]RuleStats
	UnknownRuleFrames int64 // frames for a rule this node does not have (dropped)
	DerivedRules      int   // derived rules held (derived.go)
	DerivedRefused    int64 // derived rules not created: the node's bound was reached
	InboxDropped      int64 // frames dropped because the event channel was full
	BadSender         int64 // frames dropped because From is empty or not UTF-8
}

type ruleCounters struct {
	msgsSent, bytesSent, msgsRecv, bytesRecv atomic.Int64
	sendErrs, recvErrs, requests, pending    atomic.Int64
	deferred                                 atomic.Int64
	grants, granted, returned, lent          atomic.Int64 // the fast path's (fastpath.go)
	windows, refusedFast                     atomic.Int64 // refusal windows opened, checks refused in them (reported)
}

type result struct {
	d   CheckResult
	err error
}

type ruleState struct {
	idx     int // the rule's index in order and in the Host
	rule    rule.Rule
	s       strategy.Strategy
	pending map[uint64]pendingCheck
	c       ruleCounters
	fast    *fastPath // allowances (fastpath.go); nil when the strategy grants none
	ordered bool      // s is a strategy.ArrivalOrderer: a check's CreatedAtUnixNs is its arrival
}

// Node is one member of a cluster. Its methods are safe for concurrent use.
type Node struct {
	quotaState // quota clients (quota.go)

	self    strategy.NodeID
	rules   map[string]*ruleState
	order   []*ruleState
	rulesMu sync.RWMutex // rules and order: replaced by the loop only (SetRules), read elsewhere under RLock
	// rulesView is rules as Check reads it, without a lock: the map is
	// never changed once stored (SetRules stores a new one).
	rulesView atomic.Pointer[map[string]*ruleState]
	seed      uint64 // Config.Seed, for rules added by SetRules
	// hint is the latency hint the strategies have, a time.Duration
	// (Config.LatencyHint, for rules added by SetRules too): written by
	// SetLatencyHint's event only (hint.go), read by LatencyHint.
	hint      atomic.Int64
	transport Transport
	maxTokens int64

	start     time.Time
	offset    time.Duration
	testClock func() time.Duration // Config.testClock: nil but in tests
	last      time.Duration        // loop goroutine only: the last time handed to strategies

	events chan event
	wake   chan struct{}
	timer  *time.Timer // the strategies' wake-ups: the loop selects on its channel
	// inTurn and outbox (loop goroutine only): during a turn of the loop
	// the frames the strategies send wait in outbox, per peer in order,
	// and go to the transport together at the turn's end (flushOut), so
	// that a turn's frames to one peer reach its sender goroutine at once
	// and leave as one batch (cluster/grpcpeer) instead of waking it once
	// per frame. Outside a turn (New) frames are sent at once.
	inTurn  bool
	outbox  map[strategy.NodeID][]outFrame
	outPeer []strategy.NodeID        // the peers with frames in outbox, in the order first sent to
	wakes   *minheap.Heap[wakeEntry] // by (at, rule); one entry per (rule, at): the Host de-duplicates
	armed   time.Duration            // the wake-up the timer is set for; -1: none
	// h makes every call on the rules' strategies and carries out their
	// effects (loopDriver); its request ids start at the node's
	// incarnation (see Incarnation), so ids are unique across the node's
	// restarts as well as within one run.
	h        *host.Host
	members  []strategy.NodeID
	expected []strategy.NodeID // the last agreed members (SetExpected)

	closeOnce sync.Once
	done      chan struct{} // closed by Close
	stopped   chan struct{} // closed when the loop has exited and failed pending checks

	restored map[string]int // Config.Restore's states per rule; fixed after New

	// Derived rules (derived.go): the Deriver, the bounds, and the derived
	// rules held by name and in creation order (written by the loop under
	// rulesMu).
	deriver           atomic.Pointer[Deriver]
	maxDerived        int
	maxDerivedPerBase int
	derived           map[string]Derived
	derivedOrder      []string
	family            map[string][]string // Derived.Base -> the derived rules of that base, in order
	baseOfSeed        map[string]string   // Derived.Seed -> its derived rules' Base
	derivedRefused    atomic.Int64

	unknownRule  atomic.Int64
	inboxDropped atomic.Int64
	badSender    atomic.Int64

	// refusedLog limits logRefused to one line per RefusedLogEvery.
	refusedLog logthrottle.Throttle

	// The fast path's sweep timer and state (fastpath.go).
	fastTimer *time.Timer
	fastDue   atomic.Bool // the timer fired: sweep at the next loop turn
	fastArmed bool        // loop only: the timer is set
	leaving   bool        // loop only: Leave was called: no more allowances
	fastSeen  bool        // loop only: a key was recorded in a seen filter this period
	// fastMaxKeys is the constant fastMaxKeys (a test may lower it before
	// the first check).
	fastMaxKeys int
}

// RefusedLogEvery is the least time between two log lines about peer
// payloads a strategy refused (each is counted in
// RuleStats.ReceiveErrors; the lines in between are summed up in the next
// one).
const RefusedLogEvery = 10 * time.Second

// logRefused logs a payload a strategy refused (a value out of bounds, or
// one that does not decode) at WARN on slog.Default, at most once per
// RefusedLogEvery (loop goroutine).
func (n *Node) logRefused(f Frame, err error) {
	suppressed, ok := n.refusedLog.Allow("")
	if !ok {
		return
	}
	slog.Warn("cluster: refused a peer payload", "reason", "out_of_bounds", "node", string(n.self), "from", string(f.From),
		"rule", f.Rule, "error", err.Error(), "suppressed_since_last_line", suppressed)
}

// New builds a node and starts its goroutine. Errors: an empty Self, no
// Transport, no rules, a rule with an empty or repeated name, an unknown
// strategy, a strategy that refuses the rule (bad rate, burst or params),
// or an Epoch after now.
func New(cfg Config) (*Node, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	members, err := normMembers(cfg.Self, cfg.Members)
	if err != nil {
		return nil, fmt.Errorf("cluster: config: %w", err)
	}
	n := &Node{
		self: cfg.Self, rules: map[string]*ruleState{}, transport: cfg.Transport, maxTokens: cfg.MaxTokens,
		events: make(chan event, cfg.Inbox), wake: make(chan struct{}, 1), wakes: minheap.New(wakeBefore),
		members: members, expected: slices.Clone(members), done: make(chan struct{}), stopped: make(chan struct{}),
		refusedLog: logthrottle.Throttle{Every: RefusedLogEvery},
	}
	n.seed = cfg.Seed
	n.maxDerived, n.maxDerivedPerBase = cmp.Or(cfg.MaxDerived, DefaultMaxDerived), cmp.Or(cfg.MaxDerivedPerBase, DefaultMaxDerivedPerBase)
	n.derived = map[string]Derived{}
	n.SetDeriver(cfg.Derive)
	n.hint.Store(int64(cfg.LatencyHint))
	n.start, n.testClock = time.Now(), cfg.testClock
	if !cfg.Epoch.IsZero() {
		n.offset = n.start.Sub(cfg.Epoch)
		if n.offset < 0 {
			return nil, fmt.Errorf("cluster: config: Epoch %v is after now", cfg.Epoch)
		}
	}
	now := n.now()
	startAt := time.Duration(0)
	if cfg.Join {
		startAt = now
	}
	if err := n.addRules(cfg.Rules); err != nil {
		return nil, err
	}
	// A channel timer the loop selects on (no goroutine per expiry, as
	// time.AfterFunc would start).
	n.timer = time.NewTimer(time.Hour)
	n.timer.Stop()
	n.fastTimer = time.AfterFunc(time.Hour, n.fastTimerFired)
	n.fastTimer.Stop()
	n.fastMaxKeys = fastMaxKeys
	rules := n.rules
	n.rulesView.Store(&rules)
	n.armed = -1
	strategies := make([]strategy.Strategy, len(n.order))
	for i, rs := range n.order {
		strategies[i] = rs.s
	}
	if n.h, err = host.New(n.self, n.Incarnation(), loopDriver{n}, strategies...); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	// Start every strategy before the first event can reach it.
	for _, rs := range n.order {
		n.h.Start(startAt, rs.idx)
	}
	if err := n.restore(now, cfg.Restore); err != nil {
		return nil, err
	}
	n.last = now
	n.transport.Listen(n.deliver)
	go n.loop()
	return n, nil
}

// withDefaults checks cfg's required fields and bounds and fills in the
// defaults of MaxTokens, Inbox (errors name the field).
func (cfg Config) withDefaults() (Config, error) {
	switch {
	case cfg.Self == "":
		return cfg, fmt.Errorf("cluster: config: Self is empty")
	case cfg.Transport == nil:
		return cfg, fmt.Errorf("cluster: config: Transport is nil")
	case len(cfg.Rules) == 0:
		return cfg, fmt.Errorf("cluster: config: no rules")
	case cfg.MaxTokens < 0:
		return cfg, fmt.Errorf("cluster: config: MaxTokens %d is negative", cfg.MaxTokens)
	case cfg.MaxDerived < 0 || cfg.MaxDerived > MaxDerivedLimit || cfg.MaxDerivedPerBase < 0 || cfg.MaxDerivedPerBase > MaxDerivedLimit:
		return cfg, fmt.Errorf("cluster: config: MaxDerived %d and MaxDerivedPerBase %d must be in [0, %d] (0: the default)",
			cfg.MaxDerived, cfg.MaxDerivedPerBase, MaxDerivedLimit)
	}
	if cfg.MaxTokens == 0 {
		cfg.MaxTokens = DefaultMaxTokens
	}
	if cfg.Inbox <= 0 {
		cfg.Inbox = DefaultInbox
	}
	return cfg, nil
}

// addRules makes the state of each of rules (named, once each,
// normalized), in order: their index is their position.
func (n *Node) addRules(rules []rule.Rule) error {
	for i, r := range rules {
		if r.Name == "" {
			return fmt.Errorf("cluster: rule %d: name is empty", i)
		}
		if _, dup := n.rules[r.Name]; dup {
			return fmt.Errorf("cluster: rule %q is defined twice", r.Name)
		}
		r, info, params, err := normalize(r)
		if err != nil {
			return err
		}
		rs, err := n.newRule(r, info, params)
		if err != nil {
			return err
		}
		rs.idx = i
		n.rules[r.Name] = rs
		n.order = append(n.order, rs)
	}
	return nil
}

// Incarnation identifies this run of the node: the wall-clock start time
// in nanoseconds since the Unix epoch (at least 1). Request ids handed to
// strategies are Incarnation+1, Incarnation+2, ...: a node that restarts
// starts its ids above every id of its previous life as long as that life
// issued fewer than one request per nanosecond of the time between the two
// starts (a node does not take 1e9 checks/s) and the wall clock did not
// step back across the restart. A peer that remembers (origin, id) from
// the previous life (owner's de-duplication of forwards) thus
// never mistakes a new request for an old one. Ours.
func (n *Node) Incarnation() uint64 { return max(uint64(n.start.UnixNano()), 1) }

// Self is the node's id.
func (n *Node) Self() strategy.NodeID { return n.self }

// Rules returns the names of the node's rules, in configuration order.
func (n *Node) Rules() []string {
	n.rulesMu.RLock()
	defer n.rulesMu.RUnlock()
	out := make([]string, len(n.order))
	for i, rs := range n.order {
		out[i] = rs.rule.Name
	}
	return out
}

// SetMembers tells every rule's strategy the current live members (as the
// failure detector sees them; Self is added if missing, duplicates are
// removed, the order does not matter). It returns once the strategies
// have been told. Errors: an empty member name, ErrClosed.
func (n *Node) SetMembers(members []strategy.NodeID) error {
	m, err := normMembers(n.self, members)
	if err != nil {
		return fmt.Errorf("cluster: SetMembers: %w", err)
	}
	return n.call(context.Background(), event{kind: evMembers, members: m})
}

// SetExpected tells every rule's strategy that implements
// strategy.Conserver the last agreed members: the live ones plus those
// that failed (not left) less than reconnect_timeout ago
// (membership.Membership.Expected). Self is added if missing, duplicates
// are removed, the order does not matter. It returns once the strategies
// have been told. Errors: an empty member name, ErrClosed. Ours (the
// split-brain rule partition: conserve is not from a source document).
func (n *Node) SetExpected(expected []strategy.NodeID) error {
	m, err := normMembers(n.self, expected)
	if err != nil {
		return fmt.Errorf("cluster: SetExpected: %w", err)
	}
	return n.call(context.Background(), event{kind: evExpected, members: m})
}

// isPartitionParam reports whether a "name=value" parameter is the generic
// partition parameter.
func isPartitionParam(p string) bool {
	name, _, _ := strings.Cut(p, "=")
	return strings.TrimSpace(name) == strategy.PartitionParam
}

// call hands ev to the loop and waits until the loop has handled it (it
// sets ev.done). Errors: ErrClosed, ctx.Err().
func (n *Node) call(ctx context.Context, ev event) error {
	ev.done = make(chan struct{})
	select {
	case n.events <- ev:
	case <-n.done:
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-ev.done:
		return nil
	case <-n.stopped:
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Inspect calls f in the node's goroutine once per rule, in configuration
// order, with the rule and its strategy, and returns when done. f may read
// the strategy (StateBytes, a strategy.ShareReporter...) but must not
// change it or keep it. The buckets lent to the fast path
// (strategy.BucketLender) go back to their strategies first, so f reads
// every key's exact level (a key's next check lends its bucket again,
// through the loop); Peek does not take them back. Errors: ctx.Err(),
// ErrClosed.
func (n *Node) Inspect(ctx context.Context, f func(now time.Duration, rule rule.Rule, s strategy.Strategy)) error {
	return n.call(ctx, event{kind: evInspect, inspect: f})
}

// Peek is Inspect without taking the lent buckets back first: in f's
// view a key whose bucket is lent to the fast path holds no token (every
// one counts as spent, strategy.BucketLender). For reads that need no
// key's level (memory, readiness, shares), at no cost to the fast path.
// Errors: ctx.Err(), ErrClosed.
func (n *Node) Peek(ctx context.Context, f func(now time.Duration, rule rule.Rule, s strategy.Strategy)) error {
	return n.call(ctx, event{kind: evInspect, inspect: f, peek: true})
}

// LeavePoll is how often Leave asks the strategies whether their
// hand-over is complete.
const LeavePoll = 10 * time.Millisecond

// Leave hands this node's state to its peers before it leaves the
// cluster on purpose: it calls Leave on every rule's strategy that is a
// strategy.Leaver (gdrl passes its capacity shares to its buddy), then
// keeps the node running until every one reports Left or ctx ends. The
// node keeps answering checks meanwhile. Call it before Close (limiter's
// Close does). Errors: ctx.Err() when the hand-over did not complete in
// time, ErrClosed.
func (n *Node) Leave(ctx context.Context) error {
	for first := true; ; first = false {
		var left bool
		ev := event{kind: evInspect, left: &left}
		if first {
			ev.kind = evLeave
		}
		if err := n.call(ctx, ev); err != nil {
			return err
		}
		if left {
			return nil
		}
		t := time.NewTimer(LeavePoll)
		select {
		case <-t.C:
		case <-n.done:
			t.Stop()
			return ErrClosed
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
}

// Close stops the node's goroutine, fails its pending checks with
// ErrClosed and closes its transport. It is idempotent and returns once the
// goroutine has stopped.
func (n *Node) Close() error {
	var err error
	n.closeOnce.Do(func() {
		close(n.done)
		<-n.stopped
		err = n.transport.Close()
	})
	<-n.stopped
	return err
}

// Stats returns a snapshot of the node's counters.
func (n *Node) Stats() Stats {
	st := Stats{Rules: map[string]RuleStats{}, UnknownRuleFrames: n.unknownRule.Load(), InboxDropped: n.inboxDropped.Load(), BadSender: n.badSender.Load(),
		DerivedRefused: n.derivedRefused.Load()}
	n.rulesMu.RLock()
	defer n.rulesMu.RUnlock()
	st.DerivedRules = len(n.derived)
	for _, rs := range n.order {
		c := &rs.c
		st.Rules[rs.rule.Name] = RuleStats{
			MessagesSent: c.msgsSent.Load(), BytesSent: c.bytesSent.Load(),
			MessagesReceived: c.msgsRecv.Load(), BytesReceived: c.bytesRecv.Load(),
			SendErrors: c.sendErrs.Load(), ReceiveErrors: c.recvErrs.Load(),
			Requests: c.requests.Load(), Pending: c.pending.Load(), Deferred: c.deferred.Load(),
			AllowanceGrants: c.grants.Load(), AllowanceTokens: c.granted.Load(), AllowanceReturned: c.returned.Load(),
			BucketsLent: c.lent.Load(), RefusalWindows: c.windows.Load(), RefusedInWindows: c.refusedFast.Load(),
		}
	}
	return st
}

func normMembers(self strategy.NodeID, members []strategy.NodeID) ([]strategy.NodeID, error) {
	out := make([]strategy.NodeID, 0, len(members)+1)
	for _, m := range members {
		if m == "" {
			return nil, fmt.Errorf("member list has an empty node name")
		}
		out = append(out, m)
	}
	if !slices.Contains(out, self) {
		out = append(out, self)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}
