// Package host is the one interpreter of strategy.Effects: it holds one
// node's strategy instances (one per rule; the simulator has one rule),
// makes every call on them, and carries out what they ask for in their
// Effects through a small Driver interface: decisions on pending requests
// (Driver.Decided), peer messages (Driver.Send) and wake-ups
// (Driver.Schedule), in that order. It de-duplicates wake-ups per (rule,
// time), numbers requests above the node's incarnation, and forwards the
// optional interfaces (Waiter, Conserver, Leaver, Remainer, ShareReporter,
// LatencyHinter) so that every driver calls them the same way.
//
// A Host is deterministic: it never reads a clock, starts goroutines or
// touches the network. The simulator (package sim) wraps it in virtual
// time and a simulated network; the live runtime (package cluster) in the
// wall clock, a goroutine and a transport. This is the shape of etcd's
// raft package, where a Node is driven by its caller's Ready loop
// (docs/ARCHITECTURE.md, "The contract"); the package is ours .
//
// # The driver's contract
//
// Time is the strategy's (a time.Duration since the driver's epoch) and
// must not decrease between calls on one Host.
//
// Same-instant ordering: when a peer message is due at the same instant as
// a wake-up of the same node, the driver delivers the message (Receive)
// before it ticks (Tick). Strategies rely on it: owner's hold releases a
// buffer at a wake-up and must see the requests forwarded to arrive by
// then (strategy/owner). The simulator's event queue orders deliveries
// before membership changes, requests and wake-ups at one instant; the
// live runtime handles each event before it runs the wake-ups due.
//
// Wake-ups: for every wake-up time a strategy asks for (WakeAt), the Host
// raises a time in the past to now and calls Driver.Schedule once per
// distinct (rule, time) not yet ticked; the driver must call Tick(now,
// rule) at or after that time. Tick forgets every wake-up of the rule at
// or before now before it ticks the strategy, so a strategy that asks
// again for now during Tick is scheduled again.
package host

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/tokenmesh/tokenmesh/internal/minheap"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// Driver carries out a Host's effects. Its methods are called during a
// Host call, in the order the strategy asked: every decision, then every
// message, then (to the optional QuotaDriver and RefusalDriver) every
// quota assignment and every refusal window ended, then every new
// wake-up. They must not call back into the Host.
type Driver interface {
	// Decided completes request d.RequestID of rule asynchronously (a
	// decision the strategy took in a later call than Request). The Host
	// passes every decision on; the driver ignores ids it does not wait
	// for (decided already, or not its own).
	Decided(rule int, d strategy.Decision)
	// Send carries payload from rule's strategy to peer to (the driver
	// may lose, delay or duplicate it; it must not change it).
	Send(rule int, to strategy.NodeID, payload []byte)
	// Schedule asks for Tick(at', rule) at some at' >= at. It is called
	// once per distinct (rule, at) until a Tick of rule at or after at.
	Schedule(rule int, at time.Duration)
}

// QuotaDriver is implemented by a driver whose node has quota clients
// (strategy.Quoter): Assigned is called with every assignment a rule's
// strategy asks to push, after the rule's messages.
type QuotaDriver interface {
	Assigned(rule int, a strategy.QuotaAssignment)
}

// RefusalDriver is implemented by a driver that takes refusals itself
// (strategy.Refuser): RefusalEnded is called with every key whose refusal
// window a rule's strategy ends (strategy.Effects.EndRefusal), after the
// rule's quota assignments. It must not call back into the Host.
type RefusalDriver interface {
	RefusalEnded(rule int, key string)
}

// Host is one node's strategy instances, rule by rule. Not safe for
// concurrent use: its driver makes every call from one goroutine (or one
// simulated node).
type Host struct {
	self   strategy.NodeID
	d      Driver
	rules  []*rule
	fx     strategy.Effects
	nextID uint64
}

type rule struct {
	s     strategy.Strategy
	wakes map[time.Duration]bool // scheduled, not ticked yet
	heap  *minheap.Heap[time.Duration]
}

func newRule(s strategy.Strategy) *rule {
	return &rule{s: s, wakes: map[time.Duration]bool{}, heap: minheap.New(func(a, b time.Duration) bool { return a < b })}
}

// New returns a Host for node self with one strategy per rule (rule i is
// strategies[i]), none of them started yet. Request ids from
// NextRequestID are incarnation+1, incarnation+2, ... (cluster.Node's
// Incarnation: its wall-clock start, so that ids stay unique across the
// node's restarts). Errors: no driver, or a nil strategy.
func New(self strategy.NodeID, incarnation uint64, d Driver, strategies ...strategy.Strategy) (*Host, error) {
	if d == nil {
		return nil, fmt.Errorf("host %s: driver is nil", self)
	}
	h := &Host{self: self, d: d, nextID: incarnation}
	for i, s := range strategies {
		if s == nil {
			return nil, fmt.Errorf("host %s: rule %d: strategy is nil", self, i)
		}
		h.rules = append(h.rules, newRule(s))
	}
	return h, nil
}

// Self is the node the Host runs.
func (h *Host) Self() strategy.NodeID { return h.self }

// Rules is the number of rules.
func (h *Host) Rules() int { return len(h.rules) }

// Strategy is rule's strategy instance, for inspection (its methods that
// take Effects must go through the Host).
func (h *Host) Strategy(rule int) strategy.Strategy { return h.rules[rule].s }

// NextRequestID is a fresh request id: the incarnation given to New plus
// the number of ids handed out so far, this one included.
func (h *Host) NextRequestID() uint64 {
	h.nextID++
	return h.nextID
}

// SetRules replaces the rules (a configuration reload): rule i becomes
// strategies[i], and from[i] is the old index whose wake-ups it keeps (a
// rule kept with its strategy), or -1 for a new rule (started by the
// caller with Start). Wake-ups of old rules that no new rule keeps are
// dropped. Errors: from and strategies of different lengths, an old index
// out of range or kept twice, a nil strategy; then nothing changes.
func (h *Host) SetRules(strategies []strategy.Strategy, from []int) error {
	if len(from) != len(strategies) {
		return fmt.Errorf("host %s: SetRules: %d strategies but %d old indices", h.self, len(strategies), len(from))
	}
	kept := map[int]bool{}
	for i, o := range from {
		if strategies[i] == nil {
			return fmt.Errorf("host %s: SetRules: rule %d: strategy is nil", h.self, i)
		}
		if o < 0 {
			continue
		}
		if o >= len(h.rules) || kept[o] {
			return fmt.Errorf("host %s: SetRules: rule %d: old index %d out of range or kept twice", h.self, i, o)
		}
		kept[o] = true
	}
	rules := make([]*rule, len(strategies))
	for i, o := range from {
		if o >= 0 {
			rules[i] = h.rules[o]
			rules[i].s = strategies[i]
		} else {
			rules[i] = newRule(strategies[i])
		}
	}
	h.rules = rules
	return nil
}

// Start starts rule's strategy at now (strategy.Strategy.Start).
func (h *Host) Start(now time.Duration, rule int) {
	h.fx.Reset()
	h.rules[rule].s.Start(now, &h.fx)
	h.apply(now, rule)
}

// Request hands req to rule's strategy at now; maxWait > 0 asks a
// strategy.Waiter for waiting mode (SRTM §5.2), others decide a plain
// request. It returns the decision when the strategy decided at once;
// otherwise decided is false and the decision comes later through
// Driver.Decided. The caller picks req.ID (NextRequestID, or its own
// numbering, such as the simulator's trace index).
func (h *Host) Request(now time.Duration, rule int, req strategy.Request, maxWait time.Duration) (d strategy.Decision, decided bool) {
	return h.RequestThen(now, rule, req, maxWait, nil)
}

// RequestThen is Request with then called after the strategy's call and
// before its effects are carried out, with the decision and the call's
// Effects, so that the driver may make a further call on the same
// strategy that adds to them (the live runtime grants an allowance after
// a synchronous decision: strategy.Allowancer). then may be nil.
func (h *Host) RequestThen(now time.Duration, rule int, req strategy.Request, maxWait time.Duration,
	then func(s strategy.Strategy, d strategy.Decision, decided bool, fx *strategy.Effects)) (d strategy.Decision, decided bool) {
	h.fx.Reset()
	s := h.rules[rule].s
	if w, ok := s.(strategy.Waiter); ok && maxWait > 0 {
		d, decided = w.RequestWait(now, req, maxWait, &h.fx)
	} else {
		d, decided = s.Request(now, req, &h.fx)
	}
	if then != nil {
		then(s, d, decided, &h.fx)
	}
	h.apply(now, rule)
	return d, decided
}

// Receive hands a peer's message for rule to its strategy; the strategy's
// error (a payload that does not decode or is out of bounds) is returned.
func (h *Host) Receive(now time.Duration, rule int, from strategy.NodeID, payload []byte) error {
	h.fx.Reset()
	err := h.rules[rule].s.Receive(now, from, payload, &h.fx)
	h.apply(now, rule)
	return err
}

// Tick forgets rule's wake-ups at or before now and ticks its strategy.
func (h *Host) Tick(now time.Duration, rule int) {
	r := h.rules[rule]
	for r.heap.Len() > 0 && r.heap.Peek() <= now {
		delete(r.wakes, r.heap.Pop())
	}
	h.fx.Reset()
	r.s.Tick(now, &h.fx)
	h.apply(now, rule)
}

// SetMembers tells rule's strategy the live members (sorted, self
// included); it gets its own copy.
func (h *Host) SetMembers(now time.Duration, rule int, members []strategy.NodeID) {
	h.fx.Reset()
	h.rules[rule].s.SetMembers(now, slices.Clone(members), &h.fx)
	h.apply(now, rule)
}

// SetExpected tells rule's strategy the last agreed members when it is a
// strategy.Conserver, and reports whether it is.
func (h *Host) SetExpected(now time.Duration, rule int, expected []strategy.NodeID) bool {
	c, ok := h.rules[rule].s.(strategy.Conserver)
	if !ok {
		return false
	}
	h.fx.Reset()
	c.SetExpected(now, slices.Clone(expected), &h.fx)
	h.apply(now, rule)
	return true
}

// SetLatencyHint tells rule's strategy the one-way peer latency when it is
// a strategy.LatencyHinter, and reports whether it is.
func (h *Host) SetLatencyHint(now time.Duration, rule int, hint time.Duration) bool {
	l, ok := h.rules[rule].s.(strategy.LatencyHinter)
	if !ok {
		return false
	}
	h.fx.Reset()
	l.SetLatencyHint(now, hint, &h.fx)
	h.apply(now, rule)
	return true
}

// Leave starts rule's hand-over when its strategy is a strategy.Leaver,
// and reports whether it is.
func (h *Host) Leave(now time.Duration, rule int) bool {
	l, ok := h.rules[rule].s.(strategy.Leaver)
	if !ok {
		return false
	}
	h.fx.Reset()
	l.Leave(now, &h.fx)
	h.apply(now, rule)
	return true
}

// Left reports whether every rule whose strategy is a strategy.Leaver has
// completed its hand-over (true when none is).
func (h *Host) Left() bool {
	for _, r := range h.rules {
		if l, ok := r.s.(strategy.Leaver); ok && !l.Left() {
			return false
		}
	}
	return true
}

// Remaining is rule's strategy's whole tokens of key at now
// (strategy.Remainer), false when unknown (no Remainer, or no view).
func (h *Host) Remaining(now time.Duration, rule int, key string) (int64, bool) {
	if r, ok := h.rules[rule].s.(strategy.Remainer); ok {
		return r.Remaining(now, key)
	}
	return 0, false
}

// CapacityShares is rule's strategy's strategy.ShareReporter figures, and
// false when it reports none.
func (h *Host) CapacityShares(rule int) (sum float64, keys int, ok bool) {
	if r, isR := h.rules[rule].s.(strategy.ShareReporter); isR {
		sum, keys = r.CapacityShares()
		return sum, keys, true
	}
	return 0, 0, false
}

// Usage hands a quota client's report to rule's strategy when it is a
// strategy.Quoter. Errors: the strategy is not one, or the report is bad
// (it changes nothing).
func (h *Host) Usage(now time.Duration, rule int, u strategy.QuotaUsage) error {
	q, ok := h.rules[rule].s.(strategy.Quoter)
	if !ok {
		return fmt.Errorf("rule %d: %w", rule, ErrNotQuoter)
	}
	h.fx.Reset()
	err := q.Usage(now, u, &h.fx)
	h.apply(now, rule)
	return err
}

// Detach tells rule's strategy, when it is a strategy.Quoter, that a quota
// client's stream ended (key "") or it abandoned key.
func (h *Host) Detach(now time.Duration, rule int, c strategy.QuotaClient, key string) {
	if q, ok := h.rules[rule].s.(strategy.Quoter); ok {
		h.fx.Reset()
		q.Detach(now, c, key, &h.fx)
		h.apply(now, rule)
	}
}

// Delivered tells rule's strategy, when it is a strategy.Quoter, that
// assignment a reached its client's stream.
func (h *Host) Delivered(now time.Duration, rule int, a strategy.QuotaAssignment) {
	if q, ok := h.rules[rule].s.(strategy.Quoter); ok {
		h.fx.Reset()
		q.Delivered(now, a, &h.fx)
		h.apply(now, rule)
	}
}

// ErrNotQuoter is returned by Usage for a rule whose strategy hands out no
// quota assignments.
var ErrNotQuoter = errors.New("the rule's strategy does not serve quota clients (use strategy quota)")

// Do makes a call f on rule's strategy that takes Effects and is none of
// the above (an Allowancer's Grant or Return) and carries out its effects.
func (h *Host) Do(now time.Duration, rule int, f func(s strategy.Strategy, fx *strategy.Effects)) {
	h.fx.Reset()
	f(h.rules[rule].s, &h.fx)
	h.apply(now, rule)
}

// apply is the effects loop: the only one in the code base.
func (h *Host) apply(now time.Duration, rule int) {
	for _, d := range h.fx.Decisions {
		h.d.Decided(rule, d)
	}
	for _, m := range h.fx.Messages {
		h.d.Send(rule, m.To, m.Payload)
	}
	if len(h.fx.Quotas) > 0 {
		if qd, ok := h.d.(QuotaDriver); ok {
			for _, a := range h.fx.Quotas {
				qd.Assigned(rule, a)
			}
		}
	}
	if len(h.fx.RefusalsEnded) > 0 {
		if rd, ok := h.d.(RefusalDriver); ok {
			for _, k := range h.fx.RefusalsEnded {
				rd.RefusalEnded(rule, k)
			}
		}
	}
	r := h.rules[rule]
	for _, at := range h.fx.Wakeups {
		at = max(at, now)
		if !r.wakes[at] {
			r.wakes[at] = true
			r.heap.Push(at)
			h.d.Schedule(rule, at)
		}
	}
}
