package cluster

// Changing a running node's rules (rules reloaded on
// SIGHUP or on a change of the config file). Ours: tokenmesh's own
// operations feature, not from a source document.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/tokenmesh/tokenmesh/internal/minheap"
	"github.com/tokenmesh/tokenmesh/rendezvous"
	"github.com/tokenmesh/tokenmesh/rule"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/registry"
)

// ErrRuleRemoved is the error of a check of a rule that SetRules removed
// while the check waited (or between its validation and its decision).
var ErrRuleRemoved = errors.New("cluster: the rule was removed by a reload")

// ErrRuleChanged is the error of a check that was waiting for the network
// (owner forwarding to the key's owner, ...) when SetRules replaced its
// rule: its old strategy is gone; the caller may ask again.
var ErrRuleChanged = errors.New("cluster: the rule was changed by a reload while the check waited")

// RulesChange says what SetRules did, by rule name, each list in the
// order of the new rules (Removed: of the old ones).
type RulesChange struct {
	Added   []string // new names: a fresh strategy, full buckets
	Changed []string // same name, another rate, burst, strategy or params: a fresh strategy
	Removed []string // names no longer there: their state is dropped
	Kept    []string // identical rules: their strategy and state are kept as they are
}

// Empty reports whether the change did nothing (every rule kept).
func (c RulesChange) Empty() bool {
	return len(c.Added) == 0 && len(c.Changed) == 0 && len(c.Removed) == 0
}

// rulesUpdate is an evRules event's request and answer.
type rulesUpdate struct {
	rules  []rule.Rule
	change RulesChange
	err    error
}

// SameRule reports whether a and b are the same limit: same name, rate,
// burst, strategy, partition mode and parameters (in order). SetRules
// keeps the state of such a rule (comparing the new rule as New keeps
// it: a partition= parameter counted as Partition).
func SameRule(a, b rule.Rule) bool {
	return a.Name == b.Name && a.Rate == b.Rate && a.Burst == b.Burst && a.Strategy == b.Strategy &&
		a.Partition == b.Partition && slices.Equal(a.Params, b.Params)
}

// SetRules replaces the node's rules with rules, in the node's loop (one
// event, between two decisions):
//
//   - a rule identical to one the node has (SameRule) keeps its strategy,
//     so its token buckets, leases, shares and pending checks, unchanged;
//   - a new name starts a fresh strategy at the current time (full
//     buckets), with the current members;
//   - a rule whose rate, burst, strategy, partition or params changed gets a fresh
//     strategy (state of the old one dropped; checks it was still waiting
//     on fail with ErrRuleChanged, and its peer counters start again at 0);
//   - a removed rule is dropped (its waiting checks fail with
//     ErrRuleRemoved; peer frames for it are then counted as unknown-rule
//     frames, as from a node that does not have it yet);
//   - a derived rule (EnsureDerived, derived.go) is derived again by the
//     Deriver in force (SetDeriver it first when the reload changes what
//     names derive) and added after rules: kept, changed (and seeded) or
//     added as above; it is dropped when a rule of rules has its name, when
//     the Deriver no longer derives it, or when the derived rules would
//     make the update fail (then all are dropped and rules alone applied).
//
// Every node of a cluster must get the same rules (each reloads its own
// file); until all have, peers may drop each other's frames for a rule
// only one side has, as during a rolling restart.
//
// Errors, with nothing changed: no rules, an empty or repeated name, an
// unknown strategy, bad params or a rule the strategy refuses (naming the
// rule), ctx.Err(), ErrClosed.
func (n *Node) SetRules(ctx context.Context, rules []rule.Rule) (RulesChange, error) {
	if len(rules) == 0 {
		return RulesChange{}, errors.New("cluster: SetRules: no rules")
	}
	seen := map[string]bool{}
	for i, r := range rules {
		if r.Name == "" {
			return RulesChange{}, fmt.Errorf("cluster: rule %d: name is empty", i)
		}
		if seen[r.Name] {
			return RulesChange{}, fmt.Errorf("cluster: rule %q is defined twice", r.Name)
		}
		seen[r.Name] = true
	}
	u := &rulesUpdate{rules: slices.Clone(rules)}
	if err := n.call(ctx, event{kind: evRules, rules: u}); err != nil {
		return RulesChange{}, err
	}
	return u.change, u.err
}

// normalize checks r as New does and returns it as New keeps it (the
// partition mode taken from Params into Partition), with what its
// strategy is built from (loop goroutine or any: it reads no node state).
func normalize(r rule.Rule) (rule.Rule, registry.Info, strategy.Params, error) {
	info, err := registry.Lookup(r.Strategy)
	if err != nil {
		return r, info, strategy.Params{}, fmt.Errorf("cluster: rule %q: %w", r.Name, err)
	}
	params, err := strategy.ParseParams(r.Params)
	if err != nil {
		return r, info, params, fmt.Errorf("cluster: rule %q: %w", r.Name, err)
	}
	params, mode, err := strategy.TakePartition(params)
	if err != nil {
		return r, info, params, fmt.Errorf("cluster: rule %q: %w", r.Name, err)
	}
	if slices.ContainsFunc(r.Params, isPartitionParam) && r.Partition != strategy.PartitionAvailable && mode != r.Partition {
		return r, info, params, fmt.Errorf("cluster: rule %q: partition %s and parameter partition=%s disagree", r.Name, r.Partition, mode)
	}
	if mode == strategy.PartitionAvailable {
		mode = r.Partition
	}
	r.Partition = mode
	r.Params = slices.Clone(r.Params)
	return r, info, params, nil
}

// newRule builds the state of r (normalized) for New and SetRules (loop
// goroutine once the loop runs): its strategy, with the current members;
// the caller sets its idx.
func (n *Node) newRule(r rule.Rule, info registry.Info, params strategy.Params) (*ruleState, error) {
	cfg := strategy.Config{
		Self: n.self, Members: slices.Clone(n.members), Rate: r.Rate, Burst: r.Burst,
		Rand:   rand.New(rand.NewPCG(n.seed, rendezvous.HashString(string(n.self)+"\x00"+r.Name))),
		Params: params, LatencyHint: n.LatencyHint(), Partition: r.Partition,
		Added: n.h != nil, // the host exists once New made the node's own rules
	}
	if _, derived := n.derived[r.Name]; derived || n.deriver.Load() != nil {
		// A key's level carries over between the rules of a family
		// (derived.go): a node with derived rules seeds new buckets.
		cfg.Seed = n.seeder(r.Name)
	}
	s, err := info.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("cluster: rule %q (strategy %s): %w", r.Name, r.Strategy, err)
	}
	if err := strategy.CheckPartition(r.Strategy, s, r.Partition); err != nil {
		return nil, fmt.Errorf("cluster: rule %q: %w", r.Name, err)
	}
	_, ordered := s.(strategy.ArrivalOrderer)
	return &ruleState{rule: r, s: s, pending: map[uint64]pendingCheck{}, fast: newFastPath(s, n.clock), ordered: ordered}, nil
}

// setRules carries out u in the loop goroutine (see SetRules).
func (n *Node) setRules(now time.Duration, u *rulesUpdate) {
	order, fresh, ch, err := n.planRules(u.rules)
	if err != nil {
		u.err = err
		return // nothing changed yet
	}
	byName := make(map[string]*ruleState, len(order))
	for _, rs := range order {
		byName[rs.rule.Name] = rs
	}
	ch.Removed = n.failGoing(byName)
	// Wake-ups name rules by index: carry the kept rules' over to their
	// new index, drop the others'.
	oldOrder := n.order
	wakes := n.wakes.Items()
	strategies, from := make([]strategy.Strategy, len(order)), make([]int, len(order))
	for i, rs := range order {
		strategies[i], from[i] = rs.s, -1
		if slices.Contains(oldOrder, rs) {
			from[i] = rs.idx // kept: its wake-ups stay due
		}
	}
	if err := n.h.SetRules(strategies, from); err != nil {
		u.err = err // cannot happen: from is built above
		return
	}
	n.rulesMu.Lock()
	for i, rs := range order {
		rs.idx = i
	}
	n.rules, n.order = byName, order
	n.rulesView.Store(&byName)
	n.rulesMu.Unlock()
	n.wakes = minheap.New(wakeBefore)
	for _, w := range wakes {
		rs := oldOrder[w.rule]
		if byName[rs.rule.Name] != rs {
			continue
		}
		w.rule = rs.idx
		n.wakes.Push(w)
	}
	for _, rs := range fresh {
		n.h.Start(now, rs.idx)
		// The last agreed members, as the other rules were told
		// (SetExpected).
		n.h.SetExpected(now, rs.idx, n.expected)
	}
	u.change = ch
}

// planRules is the node's rules after a reload to rules, in their order:
// a rule the node has unchanged (SameRule) is kept, any other made anew
// (fresh, to start); ch says which were kept, changed and added. An error
// (a rule that does not normalize, or whose strategy refuses it) changes
// nothing.
func (n *Node) planRules(rules []rule.Rule) (order, fresh []*ruleState, ch RulesChange, err error) {
	order = make([]*ruleState, 0, len(rules))
	for _, r := range rules {
		r, info, params, err := normalize(r)
		if err != nil {
			return nil, nil, ch, err
		}
		old, ok := n.rules[r.Name]
		if ok && SameRule(old.rule, r) {
			order = append(order, old)
			ch.Kept = append(ch.Kept, r.Name)
			continue
		}
		rs, err := n.newRule(r, info, params)
		if err != nil {
			return nil, nil, ch, err
		}
		order = append(order, rs)
		fresh = append(fresh, rs)
		if ok {
			ch.Changed = append(ch.Changed, r.Name)
		} else {
			ch.Added = append(ch.Added, r.Name)
		}
	}
	return order, fresh, ch, nil
}

// failGoing fails what the node's rules that are not in byName (the new
// rules) still wait for: ErrRuleRemoved for a rule gone, ErrRuleChanged
// for one replaced. It returns the names of the rules gone.
func (n *Node) failGoing(byName map[string]*ruleState) (removed []string) {
	for _, rs := range n.order {
		if byName[rs.rule.Name] == rs {
			continue
		}
		err := ErrRuleChanged
		if byName[rs.rule.Name] == nil {
			err = ErrRuleRemoved
			removed = append(removed, rs.rule.Name)
		}
		for id, p := range rs.pending {
			p.answer(result{d: CheckResult{Remaining: -1}, err: err})
			delete(rs.pending, id)
			rs.c.pending.Add(-1)
		}
	}
	return removed
}

// current returns the rule state that now serves rs's rule (loop
// goroutine): rs itself, the state of its replacement when SetRules
// changed the rule since a check was validated against rs, or nil when the
// rule was removed.
func (n *Node) current(rs *ruleState) *ruleState {
	return n.rules[rs.rule.Name]
}
