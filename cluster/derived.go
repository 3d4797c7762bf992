package cluster

// Derived rules: rules a node creates on demand, by name, instead of from
// its configuration (Envoy's per-request limit override,
// package envoyrls, makes one rule per descriptor and override). Ours.
//
// Every node derives the same rule from the same name (its Deriver is a
// pure function of the name and of the configuration every node loads),
// so a peer frame that names a derived rule a node does not have yet
// creates it there (the key's owner gets the forwarded check of an
// override it never saw), and the rule is decided alike everywhere.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/bits"
	"slices"
	"time"

	"github.com/tokenmesh/tokenmesh/rule"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// Bounds on derived rules (Config.MaxDerived, Config.MaxDerivedPerBase).
const (
	// DefaultMaxDerived is the default number of derived rules a node
	// holds at most.
	DefaultMaxDerived = 1024
	// DefaultMaxDerivedPerBase is the default number of derived rules of
	// one Base that EnsureDerived creates at most.
	DefaultMaxDerivedPerBase = 16
	// MaxDerivedLimit bounds both settings (a rule costs a strategy
	// instance and its metric series).
	MaxDerivedLimit = 1 << 20
)

// ErrDerivedLimit is the error (wrapped) of EnsureDerived when the node
// holds Config.MaxDerived derived rules, or Config.MaxDerivedPerBase of the
// rule's Base, already: nothing was created.
var ErrDerivedLimit = errors.New("cluster: too many derived rules")

// ErrNotDerived is what a Deriver returns (wrapped or not) for a name that
// names no derived rule.
var ErrNotDerived = errors.New("cluster: the name names no derived rule")

// Derived is a rule created on demand (EnsureDerived, or a peer frame
// naming it: Deriver).
type Derived struct {
	// Rule is the rule. Its Name is the name every node derives it from
	// (Deriver(Rule.Name) returns this Derived).
	Rule rule.Rule
	// Base groups the derived rules of one origin (for envoyrls, one
	// descriptor of the Envoy config): EnsureDerived creates at most
	// Config.MaxDerivedPerBase rules of one Base. Not empty.
	Base string
	// Seed names the rule whose bucket levels the new rule's buckets start
	// from (with the derived rules of the same Base; see EnsureDerived);
	// "" for none.
	Seed string
}

// Deriver returns the derived rule named name, or an error wrapping
// ErrNotDerived when the name names none (or another error saying why the
// rule cannot be derived). It is called in the node's goroutine for peer
// frames of a rule the node lacks and for every derived rule at SetRules:
// it must be a pure, fast function of name and of the configuration (the
// same on every node), must not block and must not call the Node.
type Deriver func(name string) (Derived, error)

// deriveCall is an evDerive event's request and answer.
type deriveCall struct {
	d   Derived
	err error
}

// SetDeriver sets the Deriver of peer frames and of SetRules (nil: none;
// a peer frame for a rule the node lacks is then dropped, and SetRules
// drops every derived rule). Set it before SetRules when a reload changes
// what names derive (package daemon does). Safe at any time.
func (n *Node) SetDeriver(d Deriver) {
	if d == nil {
		n.deriver.Store(nil)
		return
	}
	n.deriver.Store(&d)
}

// EnsureDerived makes sure the node has the rule d.Rule: nothing when it
// has a rule of that name (configured or derived), else it creates it in
// the node's loop, as SetRules adds a rule (a fresh strategy at the
// current time, with the current members), and returns once the rule can
// be checked.
//
// The rules of one family (d.Seed's rule and the derived rules of d.Base)
// carry a key's level over: when one of them creates a key's bucket at
// this node (its first use of the key here, or again once the bucket was
// dropped as full), the bucket starts from the lowest level in tokens the
// others hold for the key at this node, capped at its burst, instead of
// full (strategy.Config.Seed; between strategies that keep a bucket per
// key, strategy.KeyLeveler: owner, local, static). So a key whose limit
// changes keeps what it spent; with other strategies, and for keys no
// other rule of the family holds, buckets start full.
//
// Errors, with nothing created: an empty name or Base, ErrDerivedLimit
// (wrapped, naming the bound) when the node holds Config.MaxDerived
// derived rules, or Config.MaxDerivedPerBase of d.Base, already; a rule
// the strategy refuses (naming it); ctx.Err(); ErrClosed.
func (n *Node) EnsureDerived(ctx context.Context, d Derived) error {
	if _, ok := (*n.rulesView.Load())[d.Rule.Name]; ok {
		return nil
	}
	if d.Rule.Name == "" {
		return errors.New("cluster: EnsureDerived: the rule's name is empty")
	}
	if d.Base == "" {
		return fmt.Errorf("cluster: EnsureDerived: rule %q: Base is empty", d.Rule.Name)
	}
	dc := &deriveCall{d: d}
	if err := n.call(ctx, event{kind: evDerive, derive: dc}); err != nil {
		return err
	}
	return dc.err
}

// DerivedRules is the number of derived rules the node holds.
func (n *Node) DerivedRules() int {
	n.rulesMu.RLock()
	defer n.rulesMu.RUnlock()
	return len(n.derived)
}

// Rule returns the node's rule named name (configured or derived) and
// whether it has one.
func (n *Node) Rule(name string) (rule.Rule, bool) {
	rs, ok := (*n.rulesView.Load())[name]
	if !ok {
		return rule.Rule{}, false
	}
	return rs.rule, true
}

// derive creates d's rule (loop goroutine; see EnsureDerived). perBase
// applies Config.MaxDerivedPerBase (EnsureDerived); a peer frame's
// derivation is bounded by Config.MaxDerived only.
func (n *Node) derive(now time.Duration, d Derived, perBase bool) error {
	name := d.Rule.Name
	if _, ok := n.rules[name]; ok {
		return nil
	}
	if len(n.derived) >= n.maxDerived {
		n.derivedRefused.Add(1)
		return fmt.Errorf("%w: rule %q: this node holds %d derived rules, its bound (Config.MaxDerived)", ErrDerivedLimit, name, n.maxDerived)
	}
	if perBase {
		if same := len(n.family[d.Base]); same >= n.maxDerivedPerBase {
			n.derivedRefused.Add(1)
			return fmt.Errorf("%w: rule %q: this node holds %d derived rules of %q, its bound (Config.MaxDerivedPerBase)", ErrDerivedLimit, name, same, d.Base)
		}
	}
	rules := make([]rule.Rule, 0, len(n.order)+1)
	for _, rs := range n.order {
		rules = append(rules, rs.rule)
	}
	u := &rulesUpdate{rules: append(rules, d.Rule)}
	// Known as derived before its strategy is built (newRule gives it its
	// KeySeeder), forgotten again if it cannot be.
	oldDerived, oldOrder := n.derived, n.derivedOrder
	derived := maps.Clone(n.derived)
	derived[name] = d
	n.setDerived(derived, append(slices.Clone(n.derivedOrder), name))
	now = n.fastCloseAll(now, true) // as SetRules
	n.setRules(now, u)
	if u.err != nil {
		n.setDerived(oldDerived, oldOrder)
		return u.err
	}
	return nil
}

// setDerived replaces the derived rules held and their indexes (loop
// goroutine, under rulesMu for the readers outside it).
func (n *Node) setDerived(derived map[string]Derived, order []string) {
	family, baseOf := map[string][]string{}, map[string]string{}
	for _, name := range order {
		d := derived[name]
		family[d.Base] = append(family[d.Base], name)
		if d.Seed != "" {
			baseOf[d.Seed] = d.Base
		}
	}
	n.rulesMu.Lock()
	n.derived, n.derivedOrder, n.family, n.baseOfSeed = derived, order, family, baseOf
	n.rulesMu.Unlock()
}

// deriveFrame creates the derived rule a peer frame names, when the
// Deriver knows it and the bound allows (loop goroutine); nil otherwise.
func (n *Node) deriveFrame(now time.Duration, name string) *ruleState {
	der := n.deriver.Load()
	if der == nil {
		return nil
	}
	d, err := (*der)(name)
	if err != nil || d.Rule.Name != name || d.Base == "" {
		return nil
	}
	if n.derive(now, d, false) != nil {
		return nil
	}
	return n.rules[name]
}

// setRulesDerived is SetRules in the loop: u's rules, then the derived
// rules the Deriver in force still derives (those a rule of u names, or
// the Deriver no longer knows, are dropped). When the derived rules make
// the update fail, it is applied without them (all dropped): a derived
// rule never makes a reload fail.
func (n *Node) setRulesDerived(now time.Duration, u *rulesUpdate) {
	static := len(u.rules)
	names := make(map[string]bool, static)
	for _, r := range u.rules {
		names[r.Name] = true
	}
	derived, order := map[string]Derived{}, []string(nil)
	if der := n.deriver.Load(); der != nil {
		for _, name := range n.derivedOrder {
			if names[name] {
				continue
			}
			d, err := (*der)(name)
			if err != nil || d.Rule.Name != name || d.Base == "" {
				continue
			}
			derived[name], order = d, append(order, name)
			u.rules = append(u.rules, d.Rule)
		}
	}
	oldDerived, oldOrder := n.derived, n.derivedOrder
	n.setDerived(derived, order) // before the strategies are built (newRule)
	n.setRules(now, u)
	if u.err != nil && len(order) > 0 {
		u.rules, u.err = u.rules[:static], nil
		n.setDerived(map[string]Derived{}, nil)
		n.setRules(now, u)
	}
	if u.err != nil {
		n.setDerived(oldDerived, oldOrder) // nothing changed
	}
}

// seeder is the strategy.KeySeeder of the rule named self (newRule): a
// key's new bucket starts from the lowest level, in tokens, that the
// node's other rules of its family hold for the key (strategy.KeyLeveler).
// A derived rule's family is its Seed rule and the derived rules of its
// Base; a configured rule's, the derived rules whose Seed it is. It reads
// the node's rules when called (loop goroutine: inside a strategy call).
func (n *Node) seeder(self string) strategy.KeySeeder {
	return func(now time.Duration, key string) (strategy.KeyState, bool) {
		var base, seed string
		if d, ok := n.derived[self]; ok {
			base, seed = d.Base, d.Seed
		} else if base = n.baseOfSeed[self]; base == "" {
			return strategy.KeyState{}, false
		}
		var low strategy.KeyState
		found := false
		take := func(name string) {
			if name == self || name == "" {
				return
			}
			rs := n.rules[name]
			if rs == nil {
				return
			}
			if st, ok, lent := rs.lentKeyState(now, key); lent {
				// The bucket is lent to the fast path: its strategy's
				// copy holds nothing, the lent one is the key's level.
				if ok && (!found || fewerTokens(st, low)) {
					low, found = st, true
				}
				return
			}
			kl, ok := rs.s.(strategy.KeyLeveler)
			if !ok {
				return
			}
			if st, ok := kl.KeyLevel(now, key); ok && (!found || fewerTokens(st, low)) {
				low, found = st, true
			}
		}
		take(seed)
		for _, name := range n.family[base] {
			take(name)
		}
		return low, found
	}
}

// fewerTokens reports whether a holds fewer tokens than b (levels >= 0
// and ticks per token > 0, as Snapshot emits them): a.Level/a.TicksPerToken
// < b.Level/b.TicksPerToken, compared exactly in 128 bits.
func fewerTokens(a, b strategy.KeyState) bool {
	ah, al := bits.Mul64(uint64(max(a.Level, 0)), uint64(b.TicksPerToken))
	bh, bl := bits.Mul64(uint64(max(b.Level, 0)), uint64(a.TicksPerToken))
	return ah < bh || ah == bh && al < bl
}
