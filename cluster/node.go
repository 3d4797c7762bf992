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
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

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

// Rule is one limit the cluster enforces per key: a token bucket (Rate,
// Burst) coordinated by the named strategy. It is rule.Rule, the one rule
// type config, limiter and localcluster share; the node reads Name, Rate,
// Burst, Strategy, Params and Partition (not Key, which documents how the
// clients form keys).
type Rule = rule.Rule

// Config is one node.
type Config struct {
	Self    strategy.NodeID   // this node's id; required
	Members []strategy.NodeID // initial live members; Self is added if missing
	Rules   []Rule
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

// Decision is the answer to one Check.
type Decision struct {
	Allowed bool
	// Async is true when the strategy needed the network to decide (owner
	// forwarding to the key's owner).
	Async bool
	// Wait is the time from the node's loop taking the request to an
	// asynchronous decision; 0 for a synchronous one (decided at once).
	Wait time.Duration
	// Remaining is the whole tokens the deciding node's view of the key
	// held just after a synchronous decision (strategy.Remainer); -1 when
	// unknown: an asynchronous decision, or a strategy without a local
	// bucket. A decision on the fast path (an allowance, fastpath.go)
	// reports the bucket's tokens when the allowance was granted plus
	// those left in it: never more than the key holds, but without the
	// refill since the grant.
	Remaining int64
	// Delay is, for a check in waiting mode (CheckWait) admitted with a
	// reservation, how long after the check reached the node the caller
	// may proceed; 0 otherwise.
	Delay time.Duration
}

// BatchItem is one check of a CheckBatch: Tokens tokens of Key under the
// rule named Rule.
type BatchItem struct {
	Rule   string
	Key    string
	Tokens int64
	// MaxWait > 0 asks for waiting mode, as CheckWait (0 to MaxWait).
	MaxWait time.Duration
	// CreatedAtUnixNs, when not zero, is when the request reached the caller
	// (the edge), in wall-clock ns since the Unix epoch: a strategy.
	// ArrivalOrderer (owner) counts the item at that time, clamped to
	// [now - MaxCreatedAge, now] on this node's clock; others ignore it.
	CreatedAtUnixNs int64
	// Charge marks a cost already incurred (strategy.Request.Charge: an
	// Envoy apply_on_stream_done hit, limiter's Settle): under a rule with
	// overdraft its tokens are taken whatever the key's level (and
	// Allowed says whether they were there); otherwise it is a check. It
	// never waits (MaxWait is ignored for it under overdraft).
	Charge bool
}

// MaxCreatedAge bounds how far before the node's now a BatchItem's
// CreatedAtUnixNs counts (strategy.MaxCreatedAge, the simulator's bound too).
const MaxCreatedAge = strategy.MaxCreatedAge

// BatchResult is the outcome of one BatchItem: its Decision, or Err when
// it could not be decided (ErrClosed; the batch's ctx ended first).
type BatchResult struct {
	Decision
	Err error
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
	grants, granted, returned, lent          atomic.Int64 // the fast path's (fastpath.go)
}

type result struct {
	d   Decision
	err error
}

// pendingCheck is a request waiting for an asynchronous decision: a
// Check's (reply) or an item of a batch (batch, idx).
type pendingCheck struct {
	reply   chan result
	batch   *batch
	idx     int
	arrival time.Duration
}

// batch is a CheckBatch in the loop. The loop records results; the caller
// reads them after done is closed, or abandons the batch (ctx ended) and
// takes a copy under mu.
type batch struct {
	items []BatchItem
	rules []*ruleState
	first int           // the items before were decided on the fast path
	done  chan struct{} // closed when every item is decided

	mu        sync.Mutex
	results   []BatchResult
	decided   []bool
	left      int
	abandoned bool
}

// finish records item i's result (loop goroutine).
func (b *batch) finish(i int, r BatchResult) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.abandoned || b.decided[i] {
		return
	}
	b.results[i], b.decided[i] = r, true
	b.left--
	if b.left == 0 {
		close(b.done)
	}
}

// abandon stops recording and returns the results, with err for every
// item not decided yet.
func (b *batch) abandon(err error) []BatchResult {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.abandoned = true
	out := slices.Clone(b.results)
	for i, ok := range b.decided {
		if !ok {
			out[i] = BatchResult{Decision: Decision{Remaining: -1}, Err: err}
		}
	}
	return out
}

// answer completes p with r.
func (p pendingCheck) answer(r result) {
	if p.batch != nil {
		p.batch.finish(p.idx, BatchResult{Decision: r.d, Err: r.err})
		return
	}
	p.reply <- r
}

type ruleState struct {
	idx     int // the rule's index in order and in the Host
	rule    Rule
	s       strategy.Strategy
	pending map[uint64]pendingCheck
	c       ruleCounters
	fast    *fastPath // allowances (fastpath.go); nil when the strategy grants none
	ordered bool      // s is a strategy.ArrivalOrderer: a check's CreatedAtUnixNs is its arrival
}

type eventKind uint8

const (
	evRequest eventKind = iota
	evBatch
	evFrame
	evMembers
	evExpected
	evInspect
	evLeave
	evRules  // SetRules (reload.go)
	evHint   // SetLatencyHint (hint.go)
	evQuota  // QuotaUsage, QuotaDetach (quota.go)
	evRefund // Refund (refund.go)
	evDerive // EnsureDerived (derived.go)
)

type event struct {
	kind    eventKind
	rule    *ruleState
	key     string
	tokens  int64
	maxWait time.Duration // CheckWait: waiting mode's max wait; 0 for Check
	created int64         // BatchItem.CreatedAtUnixNs of a Check; 0 for none
	charge  bool          // BatchItem.Charge
	reply   chan result
	batch   *batch
	frame   Frame
	members []strategy.NodeID
	inspect func(now time.Duration, rule Rule, s strategy.Strategy)
	peek    bool  // evInspect: Peek (the lent buckets stay lent)
	left    *bool // evLeave's answer: every Leaver has left (set before done)
	done    chan struct{}
	rules   *rulesUpdate // evRules (reload.go)

	hint   time.Duration // evHint (hint.go)
	quota  *quotaCall    // evQuota (quota.go)
	derive *deriveCall   // evDerive (derived.go)
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
	if cfg.Self == "" {
		return nil, fmt.Errorf("cluster: config: Self is empty")
	}
	if cfg.Transport == nil {
		return nil, fmt.Errorf("cluster: config: Transport is nil")
	}
	if len(cfg.Rules) == 0 {
		return nil, fmt.Errorf("cluster: config: no rules")
	}
	if cfg.MaxTokens < 0 {
		return nil, fmt.Errorf("cluster: config: MaxTokens %d is negative", cfg.MaxTokens)
	}
	if cfg.MaxTokens == 0 {
		cfg.MaxTokens = DefaultMaxTokens
	}
	if cfg.Inbox <= 0 {
		cfg.Inbox = DefaultInbox
	}
	if cfg.MaxDerived < 0 || cfg.MaxDerived > MaxDerivedLimit || cfg.MaxDerivedPerBase < 0 || cfg.MaxDerivedPerBase > MaxDerivedLimit {
		return nil, fmt.Errorf("cluster: config: MaxDerived %d and MaxDerivedPerBase %d must be in [0, %d] (0: the default)",
			cfg.MaxDerived, cfg.MaxDerivedPerBase, MaxDerivedLimit)
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
	for i, r := range cfg.Rules {
		if r.Name == "" {
			return nil, fmt.Errorf("cluster: rule %d: name is empty", i)
		}
		if _, dup := n.rules[r.Name]; dup {
			return nil, fmt.Errorf("cluster: rule %q is defined twice", r.Name)
		}
		r, info, params, err := normalize(r)
		if err != nil {
			return nil, err
		}
		rs, err := n.newRule(r, info, params)
		if err != nil {
			return nil, err
		}
		rs.idx = i
		n.rules[r.Name] = rs
		n.order = append(n.order, rs)
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

// Incarnation identifies this run of the node: the wall-clock start time
// in nanoseconds since the Unix epoch (at least 1). Request ids handed to
// strategies are Incarnation+1, Incarnation+2, ...: a node that restarts
// starts its ids above every id of its previous life as long as that life
// issued fewer than one request per nanosecond of the time between the two
// starts (a node does not take 1e9 checks/s) and the wall clock did not
// step back across the restart. A peer that remembers (origin, id) from
// the previous life (owner's de-duplication of forwards, issue 12) thus
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

// Check asks for tokens of key under rule and blocks until the rule's
// strategy decides or ctx ends. Errors: an unknown rule, an empty,
// over-long or non-UTF-8 key, tokens <= 0 or above the node's MaxTokens (no state
// changes); ctx.Err() when ctx ends first (the strategy may still decide
// the request later: for owner, the owner's bucket has then been charged);
// ErrClosed when the node is or gets closed.
//
// A check the strategy can decide from local state (strategy.Allowancer:
// local, central, static, and owner for the keys this node owns) is
// usually decided in the caller's goroutine from the key's allowance,
// without the node's loop (fastpath.go).
func (n *Node) Check(ctx context.Context, rule, key string, tokens int64) (Decision, error) {
	return n.checkRule(ctx, (*n.rulesView.Load())[rule], rule, key, tokens, 0)
}

// CheckItem is Check of one BatchItem: in waiting mode when it.MaxWait >
// 0 (as CheckWait), counted at it.CreatedAtUnixNs when set (see BatchItem).
// Errors: CheckWait's, and a negative CreatedAtUnixNs (no state changes).
func (n *Node) CheckItem(ctx context.Context, it BatchItem) (Decision, error) {
	if it.CreatedAtUnixNs < 0 {
		return Decision{}, fmt.Errorf("cluster: rule %q: created at %d ns is negative", it.Rule, it.CreatedAtUnixNs)
	}
	if it.MaxWait == 0 && !it.Charge {
		return n.checkRule(ctx, (*n.rulesView.Load())[it.Rule], it.Rule, it.Key, it.Tokens, it.CreatedAtUnixNs)
	}
	if it.MaxWait < 0 || it.MaxWait > MaxWait {
		return Decision{}, fmt.Errorf("cluster: rule %q: max wait %v outside [0, %v]", it.Rule, it.MaxWait, MaxWait)
	}
	rs, err := n.validate(it.Rule, it.Key, it.Tokens)
	if err != nil {
		return Decision{}, err
	}
	if it.Charge {
		// A charge covered by the key's allowance is admitted and taken
		// there (its tokens are there), as a check; otherwise the loop.
		if rs.fast != nil && it.MaxWait == 0 && ctx.Err() == nil {
			if d, ok := rs.fast.takeCovered(it.Key, it.Tokens); ok {
				return d, nil
			}
		}
	}
	return n.check(ctx, event{kind: evRequest, rule: rs, key: it.Key, tokens: it.Tokens, maxWait: it.MaxWait, created: it.CreatedAtUnixNs, charge: it.Charge})
}

// checkRule is Check with the rule looked up already (rs; nil when the
// node has no such rule) and a BatchItem.CreatedAtUnixNs (0 for none).
func (n *Node) checkRule(ctx context.Context, rs *ruleState, rule, key string, tokens, created int64) (Decision, error) {
	// The fast path: tokens of the key's allowance, in this goroutine. A
	// key found in the allowances was validated when the loop granted
	// them (an empty, over-long or non-UTF-8 key never is), so only the
	// tokens are checked before.
	if rs != nil && rs.fast != nil && tokens > 0 && tokens <= n.maxTokens && ctx.Err() == nil {
		if d, ok := rs.fast.take(key, tokens); ok {
			return d, nil
		}
	}
	rs, err := n.validate(rule, key, tokens)
	if err != nil {
		return Decision{}, err
	}
	return n.check(ctx, event{kind: evRequest, rule: rs, key: key, tokens: tokens, created: created})
}

// check hands the validated request ev to the loop and waits for its
// decision (Check, CheckWait).
func (n *Node) check(ctx context.Context, ev event) (Decision, error) {
	if err := ctx.Err(); err != nil {
		return Decision{}, err
	}
	reply := make(chan result, 1) // buffered: the loop never blocks on an abandoned check
	ev.reply = reply
	select {
	case n.events <- ev:
	case <-n.done:
		return Decision{}, ErrClosed
	case <-ctx.Done():
		return Decision{}, ctx.Err()
	}
	select {
	case r := <-reply:
		return r.d, r.err
	case <-ctx.Done():
		return Decision{}, ctx.Err()
	case <-n.stopped:
		select {
		case r := <-reply:
			return r.d, r.err
		default:
			return Decision{}, ErrClosed
		}
	}
}

// validate checks one request's input and returns its rule.
func (n *Node) validate(rule, key string, tokens int64) (*ruleState, error) {
	rs, ok := (*n.rulesView.Load())[rule]
	switch {
	case !ok:
		return nil, fmt.Errorf("cluster: rule %q is not defined on node %s", rule, n.self)
	case key == "":
		return nil, fmt.Errorf("cluster: rule %q: key is empty", rule)
	case len(key) > MaxKeyBytes:
		return nil, fmt.Errorf("cluster: rule %q: key is %d bytes, above the limit of %d", rule, len(key), MaxKeyBytes)
	case !utf8.ValidString(key):
		return nil, fmt.Errorf("cluster: rule %q: key is not valid UTF-8 (peer messages carry keys as protobuf strings)", rule)
	case tokens <= 0:
		return nil, fmt.Errorf("cluster: rule %q: tokens %d must be positive", rule, tokens)
	case tokens > n.maxTokens:
		return nil, fmt.Errorf("cluster: rule %q: tokens %d is above the limit of %d per request", rule, tokens, n.maxTokens)
	}
	return rs, nil
}

// CheckBatch decides items in order, as one event of the node's loop (so
// a batch costs one hand-over instead of one per item, and two items of
// one key see each other), and blocks until every item is decided or ctx
// ends. The input is validated as a whole first: an invalid item (see
// Check) fails the call with an error naming its index ("item 3: ...")
// and nothing is decided. Once the batch is handed over, each item gets
// its own result: a Decision, or Err = ctx.Err() for items still
// undecided when ctx ended (they may still be decided later), or
// ErrClosed. A call error is returned only for invalid input, an empty
// batch, or ctx or the node ending before the hand-over.
//
// Items a key's allowance covers (the fast path, as in Check) are decided
// in the caller's goroutine, in order, up to the first one it does not
// cover; that one and every later item go to the loop as one event.
func (n *Node) CheckBatch(ctx context.Context, items []BatchItem) ([]BatchResult, error) {
	if len(items) == 0 {
		return nil, errors.New("cluster: CheckBatch: no items")
	}
	b := &batch{items: items, rules: make([]*ruleState, len(items)), results: make([]BatchResult, len(items)),
		decided: make([]bool, len(items)), left: len(items), done: make(chan struct{})}
	for i, it := range items {
		rs, err := n.validate(it.Rule, it.Key, it.Tokens)
		if err != nil {
			return nil, fmt.Errorf("item %d: %w", i, err)
		}
		if it.MaxWait < 0 || it.MaxWait > MaxWait {
			return nil, fmt.Errorf("item %d: rule %q: max wait %v outside [0, %v]", i, it.Rule, it.MaxWait, MaxWait)
		}
		if it.CreatedAtUnixNs < 0 {
			return nil, fmt.Errorf("item %d: rule %q: created at %d ns is negative", i, it.Rule, it.CreatedAtUnixNs)
		}
		b.rules[i] = rs
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	// The fast path, in order: the items up to the first one an allowance
	// cannot cover are decided here; that one and the rest go to the loop
	// (so the batch is still decided in order).
	for ; b.first < len(items); b.first++ {
		it, rs := items[b.first], b.rules[b.first]
		if rs.fast == nil || it.MaxWait > 0 {
			break
		}
		var d Decision
		var ok bool
		if it.Charge {
			d, ok = rs.fast.takeCovered(it.Key, it.Tokens) // a charge is not refused: only what the allowance covers
		} else {
			d, ok = rs.fast.take(it.Key, it.Tokens)
		}
		if !ok {
			break
		}
		b.results[b.first], b.decided[b.first] = BatchResult{Decision: d}, true
		b.left--
	}
	if b.left == 0 {
		return b.results, nil
	}
	select {
	case n.events <- event{kind: evBatch, batch: b}:
	case <-n.done:
		return nil, ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	select {
	case <-b.done:
		return b.results, nil
	case <-ctx.Done():
		return b.abandon(ctx.Err()), nil
	case <-n.stopped:
		select {
		case <-b.done:
			return b.results, nil
		default:
			return b.abandon(ErrClosed), nil
		}
	}
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
func (n *Node) Inspect(ctx context.Context, f func(now time.Duration, rule Rule, s strategy.Strategy)) error {
	return n.call(ctx, event{kind: evInspect, inspect: f})
}

// Peek is Inspect without taking the lent buckets back first: in f's
// view a key whose bucket is lent to the fast path holds no token (every
// one counts as spent, strategy.BucketLender). For reads that need no
// key's level (memory, readiness, shares), at no cost to the fast path.
// Errors: ctx.Err(), ErrClosed.
func (n *Node) Peek(ctx context.Context, f func(now time.Duration, rule Rule, s strategy.Strategy)) error {
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
			Requests: c.requests.Load(), Pending: c.pending.Load(),
			AllowanceGrants: c.grants.Load(), AllowanceTokens: c.granted.Load(), AllowanceReturned: c.returned.Load(),
			BucketsLent: c.lent.Load(),
		}
	}
	return st
}

// deliver is the transport's receive callback: it queues the frame for the
// loop, or drops it (counted) when the node is closed or its inbox is full.
func (n *Node) deliver(f Frame) {
	select {
	case <-n.done:
		return
	default:
	}
	if f.From == "" || !utf8.ValidString(string(f.From)) {
		// Not a node name (names are UTF-8: they travel in protobuf
		// strings); a strategy could not even encode a reply to it.
		n.badSender.Add(1)
		return
	}
	select {
	case n.events <- event{kind: evFrame, frame: f}:
	default:
		n.inboxDropped.Add(1)
	}
}

func (n *Node) signalWake() {
	select {
	case n.wake <- struct{}{}:
	default:
	}
}

// now is the time handed to strategies: monotonic, never decreasing.
func (n *Node) now() time.Duration {
	t := n.clock()
	if t < n.last {
		t = n.last
	}
	n.last = t
	return t
}

// clock is the node's time since its epoch, on the monotonic clock: now
// without the loop's bookkeeping, safe for concurrent use (the fast path's
// refills of lent buckets read it in the checks' goroutines).
func (n *Node) clock() time.Duration {
	if n.testClock != nil {
		return n.testClock()
	}
	return n.offset + time.Since(n.start)
}

// maxTurnEvents bounds the events one turn of the loop takes before it
// runs the wake-ups due and hands the turn's frames to the transport.
const maxTurnEvents = 64

// loop is the node's goroutine. A turn takes one event (or a timer
// expiry), then up to maxTurnEvents-1 more that are already queued, then
// runs the wake-ups due and sends the turn's frames (flushOut). Under load
// a turn thus decides the checks and frames that queued up meanwhile
// together: the owner's verdicts for a batch of forwards leave as one
// batch, and a forwarder's forwards likewise. Each event is still handled
// at its own time (n.now) and before the wake-ups due, as the Host's
// same-instant contract asks.
func (n *Node) loop() {
	defer n.shutdown()
	for {
		select {
		case <-n.done:
			return
		case ev := <-n.events:
			n.inTurn = true
			n.handle(ev)
			n.drain()
			if len(n.events) == 0 {
				// Let the goroutines that are ready to run (API calls,
				// peer receivers) queue their events first, then take
				// them in this turn: under load a turn then decides more
				// at once and its frames leave together. Gosched
				// returns at once when nothing else is ready.
				runtime.Gosched()
				n.drain()
			}
		case <-n.timer.C:
			n.inTurn = true
			n.armed = -1
		case <-n.wake:
			n.inTurn = true
		}
		n.runDue()
		n.fastTick()
		n.flushOut()
	}
}

// drain handles the events already queued, up to maxTurnEvents-1, without
// waiting (loop goroutine).
func (n *Node) drain() {
	for range maxTurnEvents - 1 {
		select {
		case ev := <-n.events:
			n.handle(ev)
		default:
			return
		}
	}
}

// flushOut ends a turn: the frames of the turn go to the transport, per
// peer in the order they were sent (loop goroutine).
func (n *Node) flushOut() {
	n.inTurn = false
	for _, to := range n.outPeer {
		frames := n.outbox[to]
		for i, o := range frames {
			if err := n.transport.Send(to, o.f); err != nil {
				o.rs.c.sendErrs.Add(1)
			}
			frames[i] = outFrame{} // let the payload go
		}
		n.outbox[to] = frames[:0]
	}
	n.outPeer = n.outPeer[:0]
}

// outFrame is a frame waiting in the outbox, with the rule it counts
// against.
type outFrame struct {
	rs *ruleState
	f  Frame
}

func (n *Node) handle(ev event) {
	now := n.now()
	switch ev.kind {
	case evRequest:
		n.request(now, ev.rule, ev.key, ev.tokens, ev.maxWait, ev.created, ev.charge, pendingCheck{reply: ev.reply})
	case evBatch:
		// One instant for the whole batch (its items arrive together),
		// unless an item closed a plain allowance, which moves the
		// loop's time on (fastCloseEntry).
		for i, it := range ev.batch.items {
			if i < ev.batch.first {
				continue // decided on the fast path
			}
			now = n.request(now, ev.batch.rules[i], it.Key, it.Tokens, it.MaxWait, it.CreatedAtUnixNs, it.Charge, pendingCheck{batch: ev.batch, idx: i})
		}
	case evFrame:
		rs, ok := n.rules[ev.frame.Rule]
		if !ok {
			// A derived rule this node does not have yet (derived.go).
			if rs = n.deriveFrame(now, ev.frame.Rule); rs == nil {
				n.unknownRule.Add(1)
				return
			}
			now = n.last // deriving closed the allowances first, which may move the loop's time on (fastCloseEntry)
		}
		rs.c.msgsRecv.Add(1)
		rs.c.bytesRecv.Add(int64(len(ev.frame.Payload)))
		if err := n.h.Receive(now, rs.idx, ev.frame.From, ev.frame.Payload); err != nil {
			rs.c.recvErrs.Add(1)
			n.logRefused(ev.frame, err)
		}
	case evMembers:
		if !slices.Equal(ev.members, n.members) {
			now = n.fastCloseAll(now, true) // allowances are given back before a re-split
			n.members = ev.members
			for _, rs := range n.order {
				n.h.SetMembers(now, rs.idx, ev.members)
			}
		}
		close(ev.done)
	case evRules:
		now = n.fastCloseAll(now, true) // kept rules get their tokens back; the others' go with them
		n.setRulesDerived(now, ev.rules)
		close(ev.done)
	case evDerive:
		ev.derive.err = n.derive(now, ev.derive.d, true)
		close(ev.done)
	case evHint:
		n.setHint(now, ev.hint)
		close(ev.done)
	case evQuota:
		n.handleQuota(now, ev)
		close(ev.done)
	case evRefund:
		n.handleRefund(now, ev)
		close(ev.done)
	case evExpected:
		if !slices.Equal(ev.members, n.expected) {
			now = n.fastCloseAll(now, true)
			n.expected = ev.members
			for _, rs := range n.order {
				n.h.SetExpected(now, rs.idx, ev.members)
			}
		}
		close(ev.done)
	case evLeave, evInspect:
		if ev.kind == evLeave {
			// Leaving: the allowances go back and no new ones are granted,
			// so every decision from now on is the strategy's own.
			now = n.fastCloseAll(now, true)
			n.leaving = true
		}
		if ev.inspect != nil && !ev.peek {
			now = n.fastReclaimAll(now) // f reads exact levels
		}
		for _, rs := range n.order {
			if ev.inspect != nil {
				ev.inspect(now, rs.rule, rs.s)
			}
			if ev.kind == evLeave {
				n.h.Leave(now, rs.idx)
			}
		}
		if ev.left != nil {
			*ev.left = n.h.Left()
		}
		close(ev.done)
	}
}

// request hands one request to rs's strategy: a synchronous decision
// answers p at once, otherwise p waits in rs.pending. maxWait > 0 asks a
// strategy.Waiter for waiting mode (others decide a plain request);
// created (BatchItem.CreatedAtUnixNs, 0 for none) is its arrival for a
// strategy.ArrivalOrderer (arrivalAt); charge marks a cost already
// incurred (BatchItem.Charge). It returns the time the request was
// handed to the strategy at: now, or later when the key's allowance was
// closed first (fastCloseEntry); the loop's next calls are made at it.
func (n *Node) request(now time.Duration, rs *ruleState, key string, tokens int64, maxWait time.Duration, created int64, charge bool, p pendingCheck) time.Duration {
	if rs = n.current(rs); rs == nil { // the rule was removed since validate
		p.answer(result{d: Decision{Remaining: -1}, err: ErrRuleRemoved})
		return now
	}
	if rs.fast != nil {
		if maxWait == 0 && !charge {
			// A check that came to the loop while the key's allowance
			// was being opened again (by a check queued before it):
			// decided there, as the caller's goroutine would have.
			if d, ok := rs.fast.take(key, tokens); ok {
				p.answer(result{d: d})
				return now
			}
		}
		// The strategy decides on the exact level: the key's allowance
		// (empty, or too small for this request) goes back first.
		now = n.fastClose(now, rs, key, true)
	}
	id := n.h.NextRequestID()
	rs.c.requests.Add(1)
	req := strategy.Request{ID: id, Key: key, Tokens: tokens, Arrival: now, Charge: charge}
	if created != 0 && rs.ordered {
		req.Arrival = n.arrivalAt(created, now)
	}
	// The check is answered, or waits in pending, before the request's
	// effects are carried out: they may hold its own decision.
	n.h.RequestThen(now, rs.idx, req, maxWait, func(_ strategy.Strategy, d strategy.Decision, ok bool, fx *strategy.Effects) {
		if !ok {
			p.arrival = now
			rs.pending[id] = p
			rs.c.pending.Add(1)
			return
		}
		var granted, left int64
		lent := false
		if rs.fast != nil && d.Delay == 0 && (d.Allowed || rs.fast.l != nil) {
			// A lent bucket serves refusals too (a key over its limit is
			// refused in the caller's goroutine); an allowance needs
			// tokens.
			granted, left, lent = n.fastGrant(now, rs, key, fx)
		}
		rem := int64(-1)
		if v, known := n.h.Remaining(now, rs.idx, key); known {
			rem = v + granted // the allowance's tokens are the caller's too
			if lent {
				rem = left + granted // the strategy holds none of the key's tokens: the lent bucket has them
			}
		}
		p.answer(result{d: Decision{Allowed: d.Allowed, Remaining: rem, Delay: d.Delay}})
	})
	return now
}

// loopDriver is the node's host.Driver: the wall clock, the transport and
// the pending checks around the Host (loop goroutine). The Host's
// same-instant contract holds because the loop handles each event (a
// frame) before it runs the wake-ups due (runDue).
type loopDriver struct{ n *Node }

// Decided answers a pending check; an id not pending (decided already,
// or not this node's) is ignored. The time is that of the Host call
// (n.last: every call is made at the time n.now last returned).
func (ld loopDriver) Decided(rule int, d strategy.Decision) {
	n := ld.n
	rs := n.order[rule]
	p, ok := rs.pending[d.RequestID]
	if !ok {
		return
	}
	now := n.last
	delete(rs.pending, d.RequestID)
	rs.c.pending.Add(-1)
	p.answer(result{d: Decision{Allowed: d.Allowed, Async: true, Wait: now - p.arrival, Remaining: -1, Delay: max(d.Delay-(now-p.arrival), 0)}})
}

// Send hands a frame of rule to the transport, counted: at the end of the
// loop's turn (flushOut), or at once outside a turn.
func (ld loopDriver) Send(rule int, to strategy.NodeID, payload []byte) {
	n := ld.n
	rs := n.order[rule]
	rs.c.msgsSent.Add(1)
	rs.c.bytesSent.Add(int64(len(payload)))
	f := Frame{Rule: rs.rule.Name, From: n.self, Payload: payload}
	if !n.inTurn {
		if err := n.transport.Send(to, f); err != nil {
			rs.c.sendErrs.Add(1)
		}
		return
	}
	if n.outbox == nil {
		n.outbox = map[strategy.NodeID][]outFrame{}
	}
	q := n.outbox[to]
	if len(q) == 0 {
		n.outPeer = append(n.outPeer, to)
	}
	n.outbox[to] = append(q, outFrame{rs: rs, f: f})
}

// Schedule queues a wake-up for runDue's timer.
func (ld loopDriver) Schedule(rule int, at time.Duration) {
	ld.n.wakes.Push(wakeEntry{at: at, rule: rule})
}

// runDue ticks every rule with a wake-up due (once per rule), then sets
// the timer for the earliest one left.
func (n *Node) runDue() {
	for n.wakes.Len() > 0 {
		now := n.now()
		if next := n.wakes.Peek().at; next > now {
			if next != n.armed {
				n.armed = next
				n.timer.Reset(next - now)
			}
			return
		}
		var due []int
		for n.wakes.Len() > 0 && n.wakes.Peek().at <= now {
			w := n.wakes.Pop()
			if !slices.Contains(due, w.rule) {
				due = append(due, w.rule)
			}
		}
		slices.Sort(due)
		for _, i := range due {
			n.h.Tick(now, i)
		}
	}
}

// shutdown runs when the loop exits: it fails every pending check.
func (n *Node) shutdown() {
	n.timer.Stop()
	n.fastTimer.Stop()
	n.fastCloseAll(n.last, false) // dropped: a Check from now on goes to the closed loop
	for _, rs := range n.order {
		for id, p := range rs.pending {
			p.answer(result{d: Decision{Remaining: -1}, err: ErrClosed})
			delete(rs.pending, id)
			rs.c.pending.Add(-1)
		}
	}
	close(n.stopped)
	// Checks queued but never taken: their callers see n.stopped.
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

type wakeEntry struct {
	at   time.Duration
	rule int
}

// wakeBefore orders wake-ups by time, then rule (so rules due together
// are ticked in configuration order).
func wakeBefore(a, b wakeEntry) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	return a.rule < b.rule
}
