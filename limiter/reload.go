package limiter

import (
	"context"
	"fmt"

	"github.com/tokenmesh/tokenmesh/cluster"
	"github.com/tokenmesh/tokenmesh/rule"
)

// SetRules replaces the running node's rules with rules (a reload: serve
// calls it on SIGHUP and when its config file changes). Rules identical to
// the node's (cluster.SameRule) keep their state: token buckets, leases,
// shares. New rules start with full buckets; a rule whose rate, burst,
// strategy or params changed starts afresh; removed rules are dropped
// (cluster.Node.SetRules has the details). With Config.StateDir, the
// following snapshots hold the new rules.
//
// A Limiter taken before the reload keeps the rate and burst it reported
// (Limit, Burst); its checks go to the rule's current strategy, and fail
// (wrapping cluster.ErrRuleRemoved) once the rule is removed.
//
// Errors, with nothing changed: those of cluster.Node.SetRules (no rules,
// an empty or repeated name, an unknown strategy, bad params or a rule the
// strategy refuses), a strategy that needs a single node (central) on a
// node with peers (networked, or in-process with more than one member:
// the check Start makes), ctx.Err(), a closed node. Ours (an operations feature,
// as cluster.Node.SetRules).
func (n *Node) SetRules(ctx context.Context, rules []rule.Rule) (cluster.RulesChange, error) {
	rules = withDefaults(rules)
	if err := checkCentral(rules, n.multi); err != nil {
		return cluster.RulesChange{}, err
	}
	ch, err := n.node.SetRules(ctx, rules)
	if err != nil {
		return ch, fmt.Errorf("limiter: %w", err)
	}
	byName := make(map[string]rule.Rule, len(rules))
	for _, r := range rules {
		byName[r.Name] = r
	}
	n.rulesMu.Lock()
	n.rules = byName
	n.rulesMu.Unlock()
	return ch, nil
}
