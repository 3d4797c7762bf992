package server

import "github.com/tokenmesh/tokenmesh/rule"

// ruleTable is the rules a Server serves; replaced whole by SetRules, read
// without locks (one table per call).
type ruleTable struct {
	rules  []rule.Rule
	byName map[string]ruleInfo
}

// SetRules sets the rules the server serves (New calls it; serve calls it
// again after a reload changed the node's rules with
// limiter.Node.SetRules): rules the node has, in order, a repeated name or
// a rule the node lacks left out. A rule kept with the same name and
// strategy keeps its metric series; the series of rules no longer served
// are deleted. Calls in flight finish with the table they started with.
func (s *Server) SetRules(rules []rule.Rule) {
	s.rulesMu.Lock()
	defer s.rulesMu.Unlock()
	t := &ruleTable{byName: map[string]ruleInfo{}}
	if s.node != nil {
		for _, r := range rules {
			if _, dup := t.byName[r.Name]; dup {
				continue
			}
			if _, err := s.node.Limiter(r.Name); err != nil {
				continue
			}
			t.byName[r.Name] = ruleInfo{rule: r, perSec: r.Rate.PerSec(), rateZero: r.Rate.Tokens == 0, m: s.metrics.forRule(r)}
			t.rules = append(t.rules, r)
		}
	}
	if old := s.tbl.Load(); old != nil {
		for _, r := range old.rules {
			if ri, ok := t.byName[r.Name]; !ok || ri.rule.Strategy != r.Strategy {
				s.metrics.dropRule(r)
			}
		}
	}
	// Derived rules the node no longer has (or has with another strategy,
	// or now as a configured rule): their series go.
	for name, ds := range s.derived {
		ri, static := t.byName[name]
		r, ok := s.clusterRule(name)
		if !static && ok && r.Strategy == ds.strategy {
			continue // still the node's derived rule
		}
		if !static || ri.rule.Strategy != ds.strategy { // a configured rule of the same series keeps them
			s.metrics.dropRule(rule.Rule{Name: name, Strategy: ds.strategy})
		}
		delete(s.derived, name)
	}
	s.tbl.Store(t)
}

// clusterRule is the node's rule of that name, configured or derived.
func (s *Server) clusterRule(name string) (rule.Rule, bool) {
	if s.node == nil {
		return rule.Rule{}, false
	}
	return s.node.Cluster().Rule(name)
}

// derivedMetrics returns the series of a rule the table lacks: a derived
// rule of the node (an Envoy limit override's), made on first use; nil
// for a rule the node does not have either (not counted).
func (s *Server) derivedMetrics(name string) *ruleMetrics {
	s.rulesMu.Lock()
	defer s.rulesMu.Unlock()
	if ds, ok := s.derived[name]; ok {
		return ds.m
	}
	r, ok := s.clusterRule(name)
	if !ok {
		return nil
	}
	if s.derived == nil {
		s.derived = map[string]derivedSeries{}
	}
	ds := derivedSeries{strategy: r.Strategy, m: s.metrics.forRule(r)}
	s.derived[name] = ds
	return ds.m
}
