package server

import (
	"github.com/tokenmesh/tokenmesh/cluster"
)

// ruleTable is the rules a Server serves; replaced whole by SetRules, read
// without locks (one table per call).
type ruleTable struct {
	rules  []cluster.Rule
	byName map[string]ruleInfo
}

// SetRules sets the rules the server serves (New calls it; serve calls it
// again after a reload changed the node's rules with
// limiter.Node.SetRules): rules the node has, in order, a repeated name or
// a rule the node lacks left out. A rule kept with the same name and
// strategy keeps its metric series; the series of rules no longer served
// are deleted. Calls in flight finish with the table they started with.
func (s *Server) SetRules(rules []cluster.Rule) {
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
	s.tbl.Store(t)
}
